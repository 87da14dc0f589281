"""``python -m structmat tour``: build every mask class, apply every closure op, check it against
the dense computation and print a table (class, op, result type, order, max error, time)."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

import structmat as sm

F64 = torch.float64


def _examples(T: int, g: torch.Generator) -> dict[str, sm.StructuredMatrix]:
    r = lambda *s: torch.rand(*s, generator=g, dtype=F64)  # noqa: E731
    n = lambda *s: torch.randn(*s, generator=g, dtype=F64)  # noqa: E731
    return {
        "OneSS": sm.OneSS.from_decays(r(T), b=1 + r(T), c=1 + r(T)),
        "OneSS.decay": sm.OneSS.decay(0.9, T).to(F64),
        "SSS(diag A, N=4)": sm.SSS(r(T, 4), n(T, 4), n(T, 4), D=3 + r(T)),
        "SSS(dense A, N=3)": sm.SSS(r(T, 3, 3) / 3, n(T, 3), n(T, 3)),
        "SSS upper": sm.SSS(r(T, 2), n(T, 2), n(T, 2), D=3 + r(T), lower=False),
        "Bidiagonal": sm.Bidiagonal(2 + r(T), n(T - 1)),
        "Diagonal": sm.Diagonal(1 + r(T)),
        "LowRank(r=2)": sm.LowRank(n(T, 2), n(T, 2)),
        "Dense": sm.Dense(n(T, T) / T + 3 * torch.eye(T, dtype=F64)),
    }


def _ops(M: sm.StructuredMatrix, other: sm.StructuredMatrix) -> dict[str, tuple[Callable, Callable]]:
    d, o = M.to_dense(), other.to_dense()
    ops = {
        "M @ X": (lambda: M @ torch.ones(M.shape[-1], 3, dtype=F64), lambda: d @ torch.ones(M.shape[-1], 3, dtype=F64)),
        "M.T": (lambda: M.T, lambda: d.T),
        "M + M2": (lambda: M + other, lambda: d + o),
        "M @ M2": (lambda: M @ other, lambda: d @ o),
        "M + Diagonal": (lambda: M + sm.Diagonal(torch.ones(M.shape[-1], dtype=F64)), lambda: d + torch.eye(M.shape[-1], dtype=F64)),
        "3 * M": (lambda: 3 * M, lambda: 3 * d),
    }
    if not isinstance(M, sm.LowRank):
        ops["M.inv()"] = (lambda: M.inv(), lambda: torch.linalg.inv(d))
    if isinstance(M, (sm.SSS, sm.Diagonal, sm.Dense)):
        ops["M.hadamard(M2)"] = (lambda: M.hadamard(other), lambda: d * o)
    if isinstance(M, sm.SSS):
        ops["(M + M).compress()"] = (lambda: (M + M).compress(), lambda: 2 * d)
    return ops


def _result_row(name: str, op: str, run: Callable, want: Callable) -> tuple:
    t0 = time.perf_counter()
    out = run()
    elapsed = time.perf_counter() - t0
    dense = out.to_dense() if isinstance(out, sm.StructuredMatrix) else out
    err = (dense - want()).abs().max().item()
    kind = type(out).__name__ if isinstance(out, sm.StructuredMatrix) else "Tensor"
    order = getattr(out, "order", None)
    return name, op, kind, "-" if order is None else str(order), err, elapsed


def run_tour(T: int = 64, seed: int = 0) -> list[tuple]:
    """Return the tour table rows; every result is compared with dense float64 algebra."""
    g = torch.Generator().manual_seed(seed)
    mats = _examples(T, g)
    partner = {k: (mats["OneSS"] if isinstance(v, sm.SSS) and v.lower else v) for k, v in mats.items()}
    rows = []
    for name, M in mats.items():
        for op, (run, want) in _ops(M, partner[name]).items():
            rows.append(_result_row(name, op, run, want))
    return rows


def main(T: int = 64) -> int:
    rows = run_tour(T)
    head = ("class", "op", "result", "order", "max error", "time")
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(4)]
    line = "  ".join(h.ljust(w) for h, w in zip(head[:4], widths)) + "  max error    time"
    print(f"structmat {sm.__version__} tour: T = {T}, float64, every result checked against dense algebra\n")
    print(line)
    print("-" * len(line))
    worst = 0.0
    for r in rows:
        cells = "  ".join(str(c).ljust(w) for c, w in zip(r[:4], widths))
        print(f"{cells}  {r[4]:9.1e}  {r[5] * 1e3:6.2f} ms")
        worst = max(worst, r[4])
    ok = worst < 1e-8
    print(f"\n{len(rows)} operations, worst error {worst:.1e}: {'all match the dense computation' if ok else 'MISMATCH'}")
    return 0 if ok else 1
