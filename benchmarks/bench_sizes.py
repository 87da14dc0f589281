"""Small and mid sizes on the CPU: structured calls against the obvious dense call, one thread (issue 15).

Run by hand: ``python benchmarks/bench_sizes.py [--quick] [--sections matvec,solve]``; prints one table per
section and writes ``benchmarks/results/bench_sizes.json`` and ``bench_sizes.png`` (ratio against ``T`` per
class). Every row times ``ours`` and ``dense`` interleaved in one process (round after round, best round of
each kept) and reports ``ratio = ours_us / dense_us`` (below 1: structmat is faster).

Sections (``SECTIONS``; each ``fn(compare) -> list[dict]``):

* ``matvec``: ``M @ x`` for ``x (T, 1)`` and ``(T, 64)`` against the precomputed dense matrix times ``x``.
  Targets: ratio <= 2 at ``T = 256``, <= 1 from ``T = 1024``.
* ``solve``: the lower-triangular classes against ``torch.linalg.solve_triangular`` on the dense matrix, the
  quasiseparable one against dense LU (``torch.linalg.solve``). Targets: <= 2 at 256, < 1 from 1024.
* ``transpose``: transposes and upper matrices against their lower counterparts on the reversed problem
  (``J L J x`` with the same result). Target: about 1.
* ``overhead``: one call at ``T = 16`` (target: ``ours_us <= 30``), and ``Dense + Dense`` at ``T = 1024``.
* ``scaling``: ``T = 1e4 .. 1e6`` against ``torch.cumsum`` (the cheapest linear pass); the rows of a case
  carry the fitted exponent of ``ours_us`` in ``T`` (target <= 1.1).
* ``issue11``: the three speed bullets of issue 11 (the dense column holds the peer named in the case).
* ``closure``, ``sma``, ``planner``: closure operations, ``sma`` at small ``T`` and the planner's regret, from
  ``sizes_ops.py`` (its docstring gives their targets).
"""

from __future__ import annotations

import argparse
import gc
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.linalg
import scipy.signal
import torch
from _report import table, write
from sizes_ops import SECTIONS as OPS_SECTIONS

import structmat as sm


@dataclass(frozen=True)
class Grid:
    """Sizes and timing effort of one run."""

    Ts: tuple[int, ...]
    wide_max: int  # largest T timed with 64 columns (the dense side costs T^2 * 64)
    scaling_Ts: tuple[int, ...]
    lfilter_Ts: tuple[int, ...]  # issue 11: OneSS.decay against lfilter
    sss_T: int  # issue 11: SSS(16).inv() @ Y against M.solve(Y)
    toeplitz_T: int  # issue 11: causal Toeplitz solve against solve_toeplitz
    rounds: int
    round_s: float  # wall time of one round of one side


FULL = Grid((16, 64, 256, 1024, 4096), 1024, (10_000, 100_000, 1_000_000), (100_000, 1_000_000), 4096, 10_000, 7, 0.02)
QUICK = Grid((16, 256, 1024), 256, (10_000, 100_000), (100_000,), 4096, 10_000, 5, 0.005)
TINY = Grid((16, 48), 48, (200, 400), (300,), 64, 300, 1, 0.0)  # for the test: checks results, times nothing seriously
GRID = FULL


def _per_call(fn: Callable[[], object], n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


def compare(case: str, T: int, ours: Callable[[], object], dense: Callable[[], object], *, cls: str,
            rounds: int | None = None) -> dict:
    """Time ``ours()`` and ``dense()`` interleaved: per round, a batch of calls of each (sized to about
    ``GRID.round_s``); the best round of each counts. Returns ``{"case", "class", "T", "ours_us", "dense_us",
    "ratio"}`` with ``ratio = ours_us / dense_us``."""
    rounds = GRID.rounds if rounds is None else rounds
    counts = []
    for fn in (ours, dense):
        if _per_call(fn, 1) > GRID.round_s:  # warm-up (kept forms are built here); a slow call: one per round
            counts.append(1)
            continue
        once = _per_call(fn, 3)  # the call count of a round
        cap = len(fn) if hasattr(fn, "__len__") else 10_000  # (a pool of fresh operands: each used once a round)
        counts.append(max(1, min(3, cap), min(cap, 10_000, int(GRID.round_s / max(once, 1e-7)))))
    best = [math.inf, math.inf]
    gc.disable()  # (no gc.collect() per row: a full collection costs more than a quick run's rows)
    try:
        for _ in range(rounds):
            for i, fn in enumerate((ours, dense)):
                best[i] = min(best[i], _per_call(fn, counts[i]))
    finally:
        gc.enable()
    return {"case": case, "class": cls, "T": T, "ours_us": round(1e6 * best[0], 2), "dense_us": round(1e6 * best[1], 2),
            "ratio": round(best[0] / best[1], 3)}


# --- the matrices ------------------------------------------------------------------------------------
def _rand(*shape, seed=0):
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _sss(T, N=4, dense_A=False, lower=True):
    A = _randn(T, N, N, seed=1) / (2 * math.sqrt(N)) if dense_A else 0.5 + 0.5 * _rand(T, N, seed=1)
    return sm.SSS(A, _randn(T, N, seed=2) / 4, _randn(T, N, seed=3) / 4, D=2 + _rand(T, seed=4), lower=lower)


def _oness(T):
    return sm.OneSS.from_decays(0.5 + 0.5 * _rand(T, seed=5))


def _bidiagonal(T):
    return sm.Bidiagonal(1 + _rand(T, seed=6), _randn(max(T - 1, 0), seed=7) / 2)


def _causal_c(T):
    c = _randn(T, seed=8) / max(T, 1)
    c[0] = 2.0
    return c


def _quasiseparable(T):
    fwd = sm.SSS(0.5 + 0.5 * _rand(T, 2, seed=9), _randn(T, 2, seed=10) / 4, _randn(T, 2, seed=11) / 4)
    bwd = sm.SSS(0.5 + 0.5 * _rand(T, 2, seed=12), _randn(T, 2, seed=13) / 4, _randn(T, 2, seed=14) / 4)
    return sm.Quasiseparable.bidirectional(fwd, bwd, 3 + _rand(T, seed=15))


MATVEC = {
    "OneSS": _oness,
    "SSS(4, diag A)": _sss,
    "SSS(4, dense A)": lambda T: _sss(T, dense_A=True),
    "Bidiagonal": _bidiagonal,
    "Diagonal": lambda T: sm.Diagonal(_randn(T, seed=16)),
    "Toeplitz": lambda T: sm.Toeplitz(_randn(T, seed=17), _randn(T, seed=18)),
    "Toeplitz.causal": lambda T: sm.Toeplitz.causal(_causal_c(T)),
    "Fourier": lambda T: sm.Fourier.from_kernel(_randn(T, seed=19)),
    "Quasiseparable": _quasiseparable,
    "Quasiseparable.lion": lambda T: sm.Quasiseparable.lion(0.5 + 0.5 * _rand(T, seed=20)),
    "LowRank(4)": lambda T: sm.LowRank(_randn(T, 4, seed=21), _randn(T, 4, seed=22)),
    "Dense": lambda T: sm.Dense(_randn(T, T, seed=23)),
}

LOWER = {"OneSS": _oness, "SSS(4, diag A)": _sss, "SSS(4, dense A)": lambda T: _sss(T, dense_A=True),
         "Bidiagonal": _bidiagonal, "Toeplitz.causal": lambda T: sm.Toeplitz.causal(_causal_c(T))}


# --- the sections ---------------------------------------------------------------------------------------
def matvec(compare) -> list[dict]:
    rows = []
    for T in GRID.Ts:
        for name, make in MATVEC.items():
            M = make(T)
            D = M.to_dense()
            for K in (1, 64) if T <= GRID.wide_max else (1,):
                x = _randn(T, K, seed=24)
                rows.append(compare(f"matvec K={K}", T, lambda M=M, x=x: M @ x, lambda D=D, x=x: D @ x, cls=name))
    return rows


def solve(compare) -> list[dict]:
    rows = []
    for T in GRID.Ts:
        for K in (1, 64) if T <= GRID.wide_max else (1,):
            y = _randn(T, K, seed=25)
            for name, make in LOWER.items():
                M = make(T)
                D = M.to_dense()
                rows.append(compare(f"solve K={K}", T, lambda M=M, y=y: M.solve(y),
                                    lambda D=D, y=y: torch.linalg.solve_triangular(D, y, upper=False), cls=name))
            M = _quasiseparable(T)
            D = M.to_dense()
            rows.append(compare(f"solve K={K} (vs LU)", T, lambda M=M, y=y: M.solve(y),
                                lambda D=D, y=y: torch.linalg.solve(D, y), cls="Quasiseparable"))
    return rows


def _flip(x):
    return torch.flip(x, (-2,))


def transpose(compare) -> list[dict]:
    """Upper matrices against the lower matrix ``F = J U J`` on the reversed problem: ``U x = J F J x``."""
    rows = []
    for T in GRID.Ts[-2:]:
        x = _randn(T, 1, seed=26)
        B = _bidiagonal(T)
        F = sm.Bidiagonal(torch.flip(B.diag, (-1,)), torch.flip(B.sub, (-1,)))  # J B^T J
        rows.append(compare("M.T @ x", T, lambda: B.T @ x, lambda F=F: _flip(F @ _flip(x)), cls="Bidiagonal"))
        for name, make in (("OneSS", _oness), ("SSS(4, diag A)", _sss)):
            M = make(T)
            F = M.T.reverse()  # lower
            rows.append(compare("M.T @ x", T, lambda M=M: M.T @ x, lambda F=F: _flip(F @ _flip(x)), cls=name))
            rows.append(compare("M.T.solve(x)", T, lambda M=M: M.T.solve(x), lambda F=F: _flip(F.solve(_flip(x))),
                                cls=name))
        L = sm.Toeplitz.causal(_causal_c(T))  # J L^T J = L
        rows.append(compare("M.T.solve(x)", T, lambda L=L: L.T.solve(x), lambda L=L: _flip(L.solve(_flip(x))),
                            cls="Toeplitz.causal"))
        rows.append(compare("M.T @ x", T, lambda L=L: L.T @ x, lambda L=L: _flip(L @ _flip(x)), cls="Toeplitz.causal"))
    return rows


def overhead(compare) -> list[dict]:
    T = 16
    rows = []
    for name, make in MATVEC.items():
        M = make(T)
        D, x = M.to_dense(), _randn(T, 1, seed=27)
        rows.append(compare("matvec, one call", T, lambda M=M, x=x: M @ x, lambda D=D, x=x: D @ x, cls=name))
    for name, make in LOWER.items():
        M = make(T)
        D, y = M.to_dense(), _randn(T, 1, seed=28)
        rows.append(compare("solve, one call", T, lambda M=M, y=y: M.solve(y),
                            lambda D=D, y=y: torch.linalg.solve_triangular(D, y, upper=False), cls=name))
    T = max(GRID.Ts)
    A, B = sm.Dense(_randn(T, T, seed=29)), sm.Dense(_randn(T, T, seed=30))
    rows.append(compare("Dense + Dense", T, lambda: A + B, lambda: A.M + B.M, cls="Dense"))
    return rows


SCALING_MATVEC = [k for k in MATVEC if k != "Dense"]
SCALING_SOLVE = {**LOWER, "Quasiseparable": _quasiseparable,
                 "Fourier": lambda T: sm.Fourier.from_kernel(torch.cat([torch.tensor([4.0], dtype=torch.float64),
                                                                       _randn(T - 1, seed=31) / T]))}


def scaling(compare) -> list[dict]:
    rows = []
    for what, classes in (("matvec", {k: MATVEC[k] for k in SCALING_MATVEC}), ("solve", SCALING_SOLVE)):
        for name, make in classes.items():
            points = []
            for T in GRID.scaling_Ts:
                M, x = make(T), _randn(T, 1, seed=32)
                ours = (lambda M=M, x=x: M @ x) if what == "matvec" else (lambda M=M, x=x: M.solve(x))
                points.append(compare(f"{what} K=1 (vs cumsum)", T, ours, lambda x=x: torch.cumsum(x, -2), cls=name,
                                      rounds=max(1, GRID.rounds // 2)))
            slope = float(np.polyfit(np.log([p["T"] for p in points]), np.log([p["ours_us"] for p in points]), 1)[0])
            rows += [{**p, "exponent": round(slope, 3)} for p in points]
    return rows


def issue11(compare) -> list[dict]:
    rows = []
    for T in GRID.lfilter_Ts:
        M, x = sm.OneSS.decay(0.99, T), _randn(T, seed=33)
        xn = x.numpy()
        rows.append(compare("OneSS.decay(0.99, T) @ x float64 (dense: lfilter; target ratio <= 3)", T,
                            lambda M=M, x=x: M @ x, lambda xn=xn: scipy.signal.lfilter([1.0], [1.0, -0.99], xn),
                            cls="OneSS"))
    T, N = GRID.sss_T, 16
    M = sm.SSS(_rand(T, N, seed=34), _randn(T, N, seed=35) / 4, _randn(T, N, seed=36) / 4, D=2 + _rand(T, seed=37))
    Y = _randn(T, 64, seed=38)
    rows.append(compare("SSS(N=16).inv() @ Y, 64 columns (dense: M.solve(Y); target ratio <= 1.5)", T,
                        lambda: M.inv() @ Y, lambda: M.solve(Y), cls="SSS(16, diag A)"))
    T = GRID.toeplitz_T
    c = _causal_c(T)
    L, y = sm.Toeplitz.causal(c), _randn(T, seed=39)
    cn, zero, yn = c.numpy(), np.r_[c[0].item(), np.zeros(T - 1)], y.numpy()
    rows.append(compare("Toeplitz.causal(c).solve(y) (dense: scipy solve_toeplitz; target ratio <= 0.1)", T,
                        lambda: L.solve(y), lambda: scipy.linalg.solve_toeplitz((cn, zero), yn), cls="Toeplitz.causal"))
    return rows


SECTIONS = {"matvec": matvec, "solve": solve, "transpose": transpose, "overhead": overhead, "scaling": scaling,
            "issue11": issue11, **OPS_SECTIONS}


def plot(results: dict, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(s, c) for s in ("matvec", "solve") for c in sorted({r["case"] for r in results.get(s, [])})]
    if not panels:
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 4), squeeze=False)
    for ax, (section, case) in zip(axes[0], panels):
        rows = [r for r in results[section] if r["case"] == case]
        for cls in dict.fromkeys(r["class"] for r in rows):
            pts = [(r["T"], r["ratio"]) for r in rows if r["class"] == cls]
            ax.loglog(*zip(*pts), marker="o", label=cls)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.axhline(2.0, color="k", lw=0.8, ls="--")
        ax.set(title=case, xlabel="T", ylabel="time / dense time")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main() -> None:
    global GRID
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer sizes and rounds (a fast check)")
    parser.add_argument("--sections", default=",".join(SECTIONS), help="comma-separated names of SECTIONS")
    args = parser.parse_args()
    GRID = QUICK if args.quick else FULL
    torch.set_num_threads(1)
    results = {}
    for name in args.sections.split(","):
        results[name] = SECTIONS[name](compare)
        extra = ["exponent"] if name == "scaling" else []
        print(f"\n== {name}\n" + table(results[name], ["case", "class", "T", "ours_us", "dense_us", "ratio", *extra]),
              flush=True)
    path = write("bench_sizes" + ("_quick" if args.quick else ""), {"grid": GRID.__dict__, "sections": results})
    plot(results, path.with_suffix(".png"))
    print(f"\nwrote {path} and {path.with_suffix('.png').name}")


if __name__ == "__main__":
    main()
