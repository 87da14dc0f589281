"""The closure rows on FRESH operands, one tree per process: ``python benchmarks/closure_fresh.py <tree> <out.json>``
with ``PYTHONPATH=<tree>`` (``<tree>`` a checkout whose ``structmat`` is timed, e.g. main against this branch, run
alternately). It uses this directory's ``sizes_ops.closure`` (a :class:`sizes_ops.Cycle` over pre-built operand pairs,
each used at most once per round) for the classes of ``benchmarks/results/closure_s9.json``."""

import json
import sys
from pathlib import Path

import torch

torch.set_num_threads(1)
import structmat as sm  # noqa: E402  (the tree's, before sizes_ops puts this checkout on the path)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sizes_ops as so  # noqa: E402

assert sm.__file__.startswith(sys.argv[1]), sm.__file__
so.CLASSES = ("OneSS", "SSS(4)", "SSS(4, dense A)", "Toeplitz", "LowRank")
rows = so.closure(lambda *a, **k: so.local_compare(*a, **k, rounds=5))
Path(sys.argv[2]).write_text(json.dumps(rows))
for r in rows:
    print(r)
