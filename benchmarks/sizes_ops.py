"""Closure operations, SMA and the SMA planner at every size, against the dense torch call.

``SECTIONS`` maps a section name to ``fn(compare) -> list[dict]``; ``compare(case, T, ours, dense, *, cls)``
times ``ours()`` against ``dense()`` (interleaved, one thread, best of rounds) and returns
``{"case", "class", "T", "ours_us", "dense_us", "ratio"}``. ``benchmarks/bench_sizes.py`` owns the
shared ``compare``, the JSON / PNG output and ``main``; ``python benchmarks/sizes_ops.py [section ...]``
runs these sections alone with a local ``compare`` and prints a table.

Targets (issue 15): closure ops at most 20x the dense op at T = 16 and 2x at T = 256; ``sma`` at most
1.5x ``((q k^T) * L) @ v`` (with ``L = mask.to_dense()`` built inside the timed call) for T <= 256; the
planner's regret (auto, planning included, over the best order) median <= 1.05, max <= 1.5.
"""

from __future__ import annotations

import dataclasses
import gc
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import structmat as sm  # noqa: E402


@dataclass(frozen=True)
class Sizes:
    """What the sections time: ``T`` of the closure and ``sma`` sections (with ``sma``'s ``B, H, N = P``), and the
    planner's grid (every ``B, H, (N, P), T`` with at most ``planner_elements`` entries in ``q``, ``k`` or ``v``)."""

    closure_T: tuple[int, ...]
    sma_T: tuple[int, ...]
    sma_BHN: tuple[int, int, int]
    planner_T: tuple[int, ...]
    planner_B: tuple[int, ...]
    planner_H: tuple[int, ...]
    planner_NP: tuple[tuple[int, int], ...]
    planner_elements: int
    planner_masks: tuple[str, ...]
    planner_extra: tuple[tuple[int, int, int, int, int, tuple[str, ...]], ...]  # (B, H, N, P, T, masks): issue 11's shapes


FULL = Sizes((16, 64, 256, 1024), (16, 64, 256), (2, 8, 64), (64, 256, 1024, 4096, 16384), (1, 4), (4, 16),
             ((16, 16), (64, 64), (16, 64)), 1 << 21,
             ("OneSS", "SSS(4)", "SSS(4, dense A)", "Quasiseparable", "causal Toeplitz", "Toeplitz", "Fourier",
              "DFT (real part)", "Bidiagonal", "Diagonal", "LowRank", "Dense"),
             ((2, 8, 64, 64, 2048, ("Fourier", "SSS(4, dense A)")),))
TINY = Sizes((16,), (16,), (1, 2, 4), (16,), (1,), (2,), ((4, 4),), 1 << 12, ("OneSS", "Quasiseparable"), ())
#: The sizes of a run (``benchmarks/bench_sizes.py`` may set ``TINY`` for a test of the sections).
GRID = FULL


def _operands(name: str, T: int, g: torch.Generator):
    """Two well-conditioned matrices of class ``name`` (invertible: diagonals away from zero)."""
    r = lambda *s: torch.rand(*s, generator=g)  # noqa: E731
    n = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    make = {
        "OneSS": lambda: sm.OneSS.from_decays(0.5 + 0.5 * r(T), b=1 + r(T), c=1 + r(T)),
        "SSS(4)": lambda: sm.SSS(0.5 + 0.5 * r(T, 4), n(T, 4) / 2, n(T, 4) / 2, D=2 + r(T)),
        "SSS(4, dense A)": lambda: sm.SSS(0.2 * n(T, 4, 4), n(T, 4) / 2, n(T, 4) / 2, D=2 + r(T)),
        "Bidiagonal": lambda: sm.Bidiagonal(1 + r(T), n(max(T - 1, 0))),
        "Diagonal": lambda: sm.Diagonal(1 + r(T)),
        "causal Toeplitz": lambda: sm.Toeplitz.causal(torch.cat([2 + r(1), 0.5 ** torch.arange(1.0, T) * n(T - 1)])),
        "Toeplitz": lambda: sm.Toeplitz(torch.cat([T + r(1), n(T - 1)]), torch.cat([r(1), n(T - 1)])),
        "Fourier": lambda: sm.Fourier.from_kernel(torch.cat([2 + r(1), n(T - 1) / T])),
        "Quasiseparable": lambda: sm.Quasiseparable.bidirectional(
            sm.OneSS.from_decays(0.5 + 0.5 * r(T)), sm.OneSS.from_decays(0.5 + 0.5 * r(T)), 3 + r(T)),
        "LowRank": lambda: sm.LowRank(n(T, 4), n(T, 4)),
    }[name]
    return make(), make()


#: ``class -> closure ops with a structured rule`` (``+``, ``@`` and ``inv`` of the rule table, ``sm.rules()``).
CLOSURE_OPS = {
    "OneSS": ("+", "@", "inv"),
    "SSS(4)": ("+", "@", "inv"),
    "SSS(4, dense A)": ("+", "@", "inv"),
    "Bidiagonal": ("+", "inv"),
    "Diagonal": ("+", "@", "inv"),
    "causal Toeplitz": ("+", "@", "inv"),
    "Toeplitz": ("+", "inv"),
    "Fourier": ("+", "@", "inv"),
    "Quasiseparable": ("+", "@", "inv"),
    "LowRank": ("+", "@"),
}

_OPS = {"+": (lambda a, b: a + b), "@": (lambda a, b: a @ b), "inv": (lambda a, b: a.inv())}
_DENSE_OPS = {"+": (lambda a, b: a + b), "@": (lambda a, b: a @ b), "inv": (lambda a, b: torch.linalg.inv(a))}


#: The classes the closure and planner sections time (all where empty); ``--classes 'OneSS;SSS(4)'`` sets it.
CLASSES: tuple[str, ...] = ()


class Cycle:
    """``op`` on the next of ``pairs`` at each call: fresh operands, as a user's new masks of each step (a value an
    operand keeps, :func:`structmat.core.small.keep`, would make a repeated pair faster). ``len()`` is the pool's
    size: a ``compare`` runs at most that many calls per round, so no pair repeats within a round."""

    def __init__(self, op: Callable, pairs: list[tuple]) -> None:
        self.op, self.pairs, self.i = op, pairs, 0

    def __len__(self) -> int:
        return len(self.pairs)

    def __call__(self) -> object:
        a, b = self.pairs[self.i]
        self.i = (self.i + 1) % len(self.pairs)
        return self.op(a, b)


#: Most pairs of each pool, and the bytes of the dense pool's matrices (T = 1024: 16 float32 pairs).
POOL_PAIRS = 400
DENSE_POOL_BYTES = 2**27


def closure(compare) -> list[dict]:
    """``+``, ``@`` and ``inv`` of every class of the closure table against the same op on the dense matrices, on
    FRESH operands: ``ours`` cycles through up to :data:`POOL_PAIRS` pre-built pairs, the dense op through dense
    forms of them (up to :data:`DENSE_POOL_BYTES`, copies of the first pairs' dense forms beyond ``POOL_PAIRS``),
    each a :class:`Cycle` whose length caps the calls of a round: each pair is used at most once per round."""
    rows = []
    for T in GRID.closure_T:
        for cls, ops in CLOSURE_OPS.items():
            if CLASSES and cls not in CLASSES:
                continue
            g = torch.Generator().manual_seed(T)
            pairs = [_operands(cls, T, g) for _ in range(POOL_PAIRS)]
            first = [(a.to_dense().clone(), b.to_dense().clone()) for a, b in pairs[:8]]
            n_dense = max(4, min(10 * POOL_PAIRS, DENSE_POOL_BYTES // (2 * first[0][0].element_size() * max(T, 1) ** 2)))
            dense_pairs = [(a.to_dense().clone(), b.to_dense().clone()) for a, b in pairs[:n_dense]]
            dense_pairs += [(first[i % 8][0].clone(), first[i % 8][1].clone()) for i in range(len(dense_pairs), n_dense)]
            for op in ops:
                ours, dense = Cycle(_OPS[op], pairs), Cycle(_DENSE_OPS[op], dense_pairs)
                rows.append(compare(f"closure {op}", T, ours, dense, cls=cls))
    return rows


def _mask(name: str, T: int, H: int):
    """An SMA mask of class ``name``, one per head where the class is usually per head (decays)."""
    g = torch.Generator().manual_seed(T)
    r = lambda *s: torch.rand(*s, generator=g)  # noqa: E731
    n = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    make = {
        "OneSS": lambda: sm.OneSS.from_decays(0.9 + 0.1 * r(H, T)),
        "SSS(4)": lambda: sm.SSS(0.9 + 0.1 * r(H, T, 4), n(H, T, 4) / 2, n(H, T, 4) / 2),
        "SSS(4, dense A)": lambda: sm.SSS(0.2 * n(H, T, 4, 4), n(H, T, 4) / 2, n(H, T, 4) / 2),
        "Quasiseparable": lambda: sm.Quasiseparable.bidirectional(sm.OneSS.from_decays(0.9 + 0.1 * r(H, T)),
                                                                  sm.OneSS.from_decays(0.9 + 0.1 * r(H, T))),
        "causal Toeplitz": lambda: sm.Toeplitz.causal(0.99 ** torch.arange(T, dtype=torch.float32)),
        "Toeplitz": lambda: sm.Toeplitz(0.99 ** torch.arange(T, dtype=torch.float32), 0.9 ** torch.arange(T, dtype=torch.float32)),
        "Fourier": lambda: sm.Fourier.from_kernel(n(T) / T),
        "DFT (real part)": lambda: sm.DFT(T).real,
        "Bidiagonal": lambda: sm.Bidiagonal(1 + r(H, T), n(H, max(T - 1, 0))),
        "Diagonal": lambda: sm.Diagonal(1 + r(H, T)),
        "LowRank": lambda: sm.LowRank(n(H, T, 4), n(H, T, 4)),
        "Dense": lambda: sm.Dense(n(H, T, T) / T),
    }[name]
    return make()


SMA_MASKS = ("OneSS", "SSS(4)", "SSS(4, dense A)", "Quasiseparable", "causal Toeplitz", "Toeplitz", "Fourier", "DFT (real part)",
             "Bidiagonal", "Diagonal", "LowRank", "Dense")


def dense_sma(q, k, v, mask) -> torch.Tensor:
    """The dense torch form ``((q k^T) * L) @ v`` per batch and head, ``L = mask.to_dense()`` built in the call."""
    L = mask.to_dense()
    return torch.einsum("bhts,bshp->bthp", torch.einsum("bthn,bshn->bhts", q, k) * L, v)


def sma(compare) -> list[dict]:
    """``sm.sma(q, k, v, mask)`` (order ``auto``) against :func:`dense_sma` for every mask class."""
    B, H, N = GRID.sma_BHN
    rows = []
    for T in GRID.sma_T:
        g = torch.Generator().manual_seed(T)
        q, k, v = (torch.randn(B, T, H, N, generator=g) for _ in range(3))
        for name in SMA_MASKS:
            mask = _mask(name, T, H)
            rows.append(compare(f"sma B={B} H={H} N=P={N}", T, lambda: sm.sma(q, k, v, mask), lambda: dense_sma(q, k, v, mask),
                                cls=name))
    return rows


def _planner_points():
    """``(B, H, N, P, T, masks)`` of the planner's grid within ``GRID.planner_elements`` entries per tensor, then the
    extra points."""
    for T in GRID.planner_T:
        for B in GRID.planner_B:
            for H in GRID.planner_H:
                for N, P in GRID.planner_NP:
                    if B * H * T * max(N, P) <= GRID.planner_elements:
                        yield B, H, N, P, T, GRID.planner_masks
    yield from GRID.planner_extra


#: Longest sequence of the planner's dense masks: ``H T^2`` entries (256 MB at T = 4096, H = 4) are built per point.
DENSE_MASK_MAX_T = 1024


def _runs(order: str, B: int, H: int, T: int) -> bool:
    """The quadratic order's ``B H T^2`` scores fit (a few hundred MB); the others always run."""
    return order != "quadratic" or B * H * T * T <= (1 << 26)


def planner(compare) -> list[dict]:
    """Regret of ``order="auto"`` (planning included: each call plans, from the kept plans after the first) against
    the fastest admissible order, per grid point and mask class. One row per point: ``ours_us`` the auto call,
    ``dense_us`` the fastest order (named in ``best``), ``ratio`` the regret; ``order`` is the plan's choice and
    ``times`` every order's time (us; what ``benchmarks/calibrate_plan.py`` fits)."""
    rows = []
    for B, H, N, P, T, masks in _planner_points():
        g = torch.Generator().manual_seed(T)
        q, k = (torch.randn(B, T, H, N, generator=g) / N**0.5 for _ in range(2))
        v = torch.randn(B, T, H, P, generator=g)
        for name in masks:
            if (CLASSES and name not in CLASSES) or (name == "Dense" and T > DENSE_MASK_MAX_T):
                continue
            mask = _mask(name, T, H)
            auto = lambda: sm.sma(q, k, v, mask)  # noqa: E731
            timed = {order: compare(f"planner {order}", T, auto, lambda o=order: sm.sma(q, k, v, mask, order=o), cls=name)
                     for order in sm.attention.admissible(mask) if _runs(order, B, H, T)}
            best = min(timed, key=lambda o: timed[o]["dense_us"])
            ours = min(r["ours_us"] for r in timed.values())
            rows.append({"case": f"planner B={B} H={H} N={N} P={P}", "class": name, "T": T, "ours_us": ours,
                         "dense_us": timed[best]["dense_us"], "ratio": round(ours / timed[best]["dense_us"], 3),
                         "order": sm.sma_plan(q, k, v, mask).order, "best": best, "B": B, "H": H, "N": N, "P": P,
                         "times": {o: r["dense_us"] for o, r in timed.items()}})
    return rows


SECTIONS = {"closure": closure, "sma": sma, "planner": planner}


def _per_call(fn: Callable[[], object], n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


def _calls(fn: Callable[[], object], budget: float) -> int:
    """How many calls of ``fn`` fill about ``budget`` seconds (at most ``len(fn)`` where it has one: a
    :class:`Cycle`'s pool)."""
    once = _per_call(fn, 1)
    return max(1, min(len(fn) if isinstance(fn, Cycle) else 10000, int(budget / max(once, 1e-7))))


def local_compare(case: str, T: int, ours: Callable[[], object], dense: Callable[[], object], *, cls: str,
                  rounds: int = 15, budget: float = 0.01) -> dict:
    """``compare`` for running this file alone: ``ours`` and ``dense`` alternate, best per-call time of ``rounds`` (15:
    this machine's neighbours stall it for seconds at a time, and with 5 rounds the ratios of one row spread 1.5-2x
    between runs in session 14)."""
    with torch.no_grad():
        ours(), dense()
        n_ours, n_dense = _calls(ours, budget), _calls(dense, budget)
        gc.collect()
        gc.disable()
        try:
            best_ours = best_dense = float("inf")
            for _ in range(rounds):
                best_ours = min(best_ours, _per_call(ours, n_ours))
                best_dense = min(best_dense, _per_call(dense, n_dense))
        finally:
            gc.enable()
    return {"case": case, "class": cls, "T": T, "ours_us": round(1e6 * best_ours, 2), "dense_us": round(1e6 * best_dense, 2),
            "ratio": round(best_ours / best_dense, 3)}


def main(argv: list[str]) -> None:
    """``python benchmarks/sizes_ops.py [section ...] [--T 16,256] [--classes 'OneSS;SSS(4)']``: each section's table,
    and its rows in ``benchmarks/results/sizes_ops_<section>_cpu.json``; ``--T`` restricts the closure and ``sma``
    sizes, ``--classes`` the closure and planner sections' classes (for quick runs)."""
    from _report import table, write

    global GRID, CLASSES
    sections = []
    args = iter(argv)
    for arg in args:
        if arg == "--T":
            sizes = tuple(int(T) for T in next(args).split(","))
            GRID = dataclasses.replace(GRID, closure_T=sizes, sma_T=sizes)
        elif arg == "--classes":
            CLASSES = tuple(next(args).split(";"))
        else:
            sections.append(arg)
    torch.set_num_threads(1)
    for name in sections or list(SECTIONS):
        rows = SECTIONS[name](local_compare)
        print(table(rows, ["case", "class", "T", "ours_us", "dense_us", "ratio", "order", "best"]), flush=True)
        print("wrote", write(f"sizes_ops_{name}_cpu", {"section": name, "threads": 1, "rows": rows}))


if __name__ == "__main__":
    main(sys.argv[1:])
