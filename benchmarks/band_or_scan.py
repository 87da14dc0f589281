"""SSS products with many columns: LAPACK's band against the torch scans, and the rule that picks (CPU).

Run by hand: ``python benchmarks/band_or_scan.py``; prints a table and writes ``benchmarks/results/band_or_scan.json``
and ``.png``. One thread, float32, lower SSS with diagonal or dense transitions. Per case three calls, timed
interleaved (round after round, the best round of each kept): ``fresh`` (the band built in the call, as for a matrix
made anew), ``kept`` (the band built once, as for a matrix used again) and ``scan`` (:meth:`Generators.matmat`, all
columns in each step); ``choice`` is what :func:`structmat.linalg.banded.scans_win` picks, and its regret the picked
path's time over the faster one's (fresh band and kept band separately).
"""

from __future__ import annotations

import statistics
import time

import torch
from _report import table, write

import structmat as sm
from structmat.linalg import banded

ORDERS = {"diag": (1, 2, 4, 8), "dense": (2, 4, 8)}
LENGTHS = (256, 1024, 4096, 16384, 65536)
COLUMNS = (4, 8, 16, 32, 64, 128, 256)
MAX_WORK = 1 << 24  # T * K * N of the largest case (about half a second a call)
ROUNDS = 3


def _generators(kind: str, N: int, T: int):
    g = torch.Generator().manual_seed(N * T)
    A = 0.2 * torch.randn(T, N, N, generator=g) / N**0.5 if kind == "dense" else 0.5 + 0.5 * torch.rand(T, N, generator=g)
    M = sm.SSS(A, torch.randn(T, N, generator=g) / 2, torch.randn(T, N, generator=g) / 2, D=2 + torch.rand(T, generator=g))
    return M.generators


def _best(fns: dict) -> dict:
    best = {name: float("inf") for name in fns}
    for _ in range(ROUNDS):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t)
    return {name: round(1e3 * v, 3) for name, v in best.items()}


def main() -> None:
    torch.set_num_threads(1)
    rows = []
    with torch.no_grad():
        for kind, orders in ORDERS.items():
            for N in orders:
                for T in LENGTHS:
                    G = _generators(kind, N, T)
                    band = banded.band(G, solve=False)
                    for K in COLUMNS:
                        if T * K * N > MAX_WORK:
                            continue
                        X = torch.randn(T, K, generator=torch.Generator().manual_seed(K))
                        times = _best({"fresh": lambda: banded.sss_matmat(G, X), "kept": lambda: banded.sss_matmat(G, X, False, band),
                                       "scan": lambda: G.matmat(X)[0]})
                        scans = banded.scans_win(G, K)
                        row = {"kind": kind, "N": N, "T": T, "K": K, **times, "choice": "scan" if scans else "band",
                               "scan / kept": round(times["scan"] / times["kept"], 2)}
                        for band_time in ("fresh", "kept"):
                            picked = times["scan"] if scans else times[band_time]
                            row[f"regret ({band_time})"] = round(picked / min(times["scan"], times[band_time]), 2)
                        rows.append(row)
                        print(table([row], list(row)), flush=True)
    summary = {key: {"median": statistics.median(r[key] for r in rows), "worst": max(r[key] for r in rows)}
               for key in ("regret (fresh)", "regret (kept)")}
    print("\n" + table(rows, list(rows[0])))
    print(summary)
    path = write("band_or_scan", {"orders": ORDERS, "lengths": LENGTHS, "columns": COLUMNS, "rounds": ROUNDS,
                                  "rules": {"min_columns": banded.SCAN_MIN_COLUMNS,
                                            "dense_min_columns_N": banded.SCAN_DENSE_MIN_COLUMNS_N,
                                            "min_work": banded.SCAN_MIN_WORK, "max_work": banded.SCAN_MAX_WORK},
                                  "summary": summary, "rows": rows})
    _plot(rows, path.with_suffix(".png"))
    print(f"\nwrote {path} and {path.with_suffix('.png').name}")


def _plot(rows: list[dict], path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, kind in zip(axes, ORDERS):
        for T in LENGTHS:
            sel = [r for r in rows if r["kind"] == kind and r["T"] == T]
            ax.scatter([r["T"] * r["K"] * r["N"] for r in sel], [r["scan / kept"] for r in sel], s=[8 * r["N"] for r in sel],
                       marker="o", label=f"T = {T}", alpha=0.8)
            chosen = [r for r in sel if r["choice"] == "scan"]
            ax.scatter([r["T"] * r["K"] * r["N"] for r in chosen], [r["scan / kept"] for r in chosen], s=80,
                       facecolors="none", edgecolors="k", lw=0.6)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set(xscale="log", yscale="log", title=f"{kind} transitions (circled: the scans are picked; size ~ N)",
               xlabel="T x columns x N")
        ax.title.set_fontsize(9)
    axes[0].set_ylabel("scan time / kept band's time")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    main()
