"""``SSS.compress`` and ``semiseparable_rank`` at T = 64 ... 4096 (issue 15: the algorithms that stepped through T one
row at a time in Python). One thread, a fresh ``M + M`` per call (``M`` an SSS(4) with diagonal transitions: order
8, minimal order 4), best of 5 calls (2 at T = 4096). ``python benchmarks/row_loops.py [T,T,...]`` prints one line per
algorithm and length."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import structmat as sm  # noqa: E402

LENGTHS = (64, 256, 1024, 4096)


def _operand(T: int, seed: int) -> sm.SSS:
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.rand(*s, generator=g, dtype=torch.float64)  # noqa: E731
    n = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    M = sm.SSS(0.5 + 0.5 * r(T, 4), n(T, 4), n(T, 4), D=2 + r(T))
    return M + M


def main(argv: list[str]) -> None:
    torch.set_num_threads(1)
    lengths = tuple(int(T) for T in argv[0].split(",")) if argv else LENGTHS
    ops = {"compress": lambda M: M.compress().order, "semiseparable_rank": sm.semiseparable_rank}
    for T in lengths:
        for name, op in ops.items():
            best = float("inf")
            for seed in range(5 if T < 4096 else 2):
                M = _operand(T, seed)
                t0 = time.perf_counter()
                result = op(M)
                best = min(best, time.perf_counter() - t0)
            print(f"{name:20s} T={T:5d} {best * 1e3:9.2f} ms  (result {result})", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
