"""Fresh against reused operands for SSS / OneSS sums and products: ``python benchmarks/closure_fresh_vs_same.py
<tree>`` with ``PYTHONPATH=<tree>`` and ``OMP_NUM_THREADS=1`` (a closure result must not be faster only because
the same operands came before)."""

import gc
import sys
import time
from pathlib import Path

import torch

torch.set_num_threads(1)
import structmat as sm  # noqa: E402  (the tree's, before sizes_ops puts this checkout on the path)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sizes_ops import _operands  # noqa: E402

assert sm.__file__.startswith(sys.argv[1]), sm.__file__
out = {}
for name in ("OneSS", "SSS(4)", "SSS(4, dense A)"):
    for T in (16, 256):
        for op in ("+", "@"):
            g = torch.Generator().manual_seed(0)
            pairs = [_operands(name, T, g) for _ in range(200)]
            f = (lambda a, b: a + b) if op == "+" else (lambda a, b: a @ b)
            best_fresh = best_same = 1e9
            for rnd in range(5):
                gc.disable()
                t0 = time.perf_counter()
                for a, b in pairs[rnd * 40:(rnd + 1) * 40]:
                    f(a, b)
                best_fresh = min(best_fresh, (time.perf_counter() - t0) / 40)
                a, b = pairs[0]
                t0 = time.perf_counter()
                for _ in range(40):
                    f(a, b)
                best_same = min(best_same, (time.perf_counter() - t0) / 40)
                gc.enable()
            out[(name, T, op)] = (best_fresh * 1e6, best_same * 1e6)
for k, v in out.items():
    print(f"{k[0]:16s} T={k[1]:4d} {k[2]}  fresh {v[0]:7.1f} us   same operands {v[1]:7.1f} us")
