"""benchmarks/bench_sizes.py on tiny sizes: every row's two calls compute the same thing (timings unchecked)."""

import sys
from pathlib import Path

import numpy as np
import torch
from conftest import close

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
import bench_sizes  # noqa: E402
import sizes_ops  # noqa: E402


def _array(x) -> np.ndarray:
    x = x.to_dense() if hasattr(x, "to_dense") else x
    return x.detach().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def checking_compare(case, T, ours, dense, *, cls, rounds=None):
    got = ours()
    if "vs cumsum" not in case:  # the scaling rows time a linear pass beside ours, not the same result
        close(_array(got), _array(dense()), rtol=1e-5)  # OneSS.decay(0.99) is float32 (as in the issue)
    return {"case": case, "class": cls, "T": T, "ours_us": 1.0, "dense_us": 1.0, "ratio": 1.0}


def test_every_section_agrees_with_its_dense_call(monkeypatch):
    monkeypatch.setattr(bench_sizes, "GRID", bench_sizes.TINY)
    monkeypatch.setattr(sizes_ops, "GRID", sizes_ops.TINY)
    for name, section in bench_sizes.SECTIONS.items():
        rows = section(checking_compare)
        assert rows and all({"case", "class", "T", "ours_us", "dense_us", "ratio"} <= set(r) for r in rows), name
    rows = bench_sizes.SECTIONS["matvec"](bench_sizes.compare)  # the timing compare itself, once
    assert all(r["ours_us"] > 0 and r["dense_us"] > 0 for r in rows)
