"""SSS products and solves of larger orders with and without the kept chunked form, against the dense calls (CPU).

Run by hand: ``python benchmarks/chunk_form_orders.py``; prints a table and writes
``benchmarks/results/chunk_form_orders.json`` and ``.png``. One thread, float64, diagonal transitions. Per case, three
calls timed interleaved (round after round, the best round of each kept): ``form`` (the matrix after enough columns
to keep its form, :mod:`structmat.linalg.chunk_form`), ``without`` (a copy of the matrix that never builds one: the
paths it replaces, the blocked scans and block forward substitution, since the band stops at order 8) and ``dense``
(the precomputed dense matrix: ``D @ X`` or ``solve_triangular``); and ``build``, the time to build the form once.
"""

from __future__ import annotations

import time

import torch
from _report import table, write

import structmat as sm
from structmat.linalg import chunk_form

CASES = [(16, 1024), (16, 4096), (32, 1024), (32, 2048), (64, 512)]
ROUNDS = 5
ROUND_S = 0.05


def _matrix(N: int, T: int) -> sm.SSS:
    g = torch.Generator().manual_seed(N * T)
    r = lambda *s: torch.rand(*s, generator=g, dtype=torch.float64)  # noqa: E731
    n = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    return sm.SSS(0.5 + 0.5 * r(T, N), n(T, N) / N, n(T, N) / N, D=2 + r(T))


def _best(fns: dict, rounds: int = ROUNDS) -> dict:
    counts = {}
    for name, fn in fns.items():
        fn()  # warm-up: a kept form is built here
        t = time.perf_counter()
        fn()
        counts[name] = max(1, int(ROUND_S / max(time.perf_counter() - t, 1e-7)))
    best = {name: float("inf") for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t = time.perf_counter()
            for _ in range(counts[name]):
                fn()
            best[name] = min(best[name], (time.perf_counter() - t) / counts[name])
    return {name: round(1e6 * v, 1) for name, v in best.items()}


def main() -> None:
    torch.set_num_threads(1)
    rows = []
    for N, T in CASES:
        M = _matrix(N, T)
        D = M.to_dense()
        plain = sm.SSS(M.A, M.B, M.C, D=M.D)  # the same matrix, timed with the form switched off
        for K in (1, 64):
            X = torch.randn(T, K, generator=torch.Generator().manual_seed(K), dtype=torch.float64)
            for op, ours, dense in (("product", lambda A, X=X: A @ X, lambda X=X: D @ X),
                                    ("solve", lambda A, X=X: A.solve(X),
                                     lambda X=X: torch.linalg.solve_triangular(D, X, upper=False))):
                ours(M)
                ours(M)  # (two calls of 64 columns, or the warm-up's: the form is kept after the first 64 columns)
                applies, chunk_form.applies = chunk_form.applies, lambda *args: False
                try:
                    times = _best({"without": lambda: ours(plain)})
                finally:
                    chunk_form.applies = applies
                for _ in range(chunk_form.after_columns(T, N)):
                    ours(M)
                times.update(_best({"form": lambda: ours(M), "dense": dense}))
                build = chunk_form.lower_form if op == "product" else chunk_form.lower_inverse_form
                times["build"] = _best({"build": lambda: build(M.generators)}, rounds=1)["build"]
                rows.append({"N": N, "T": T, "K": K, "op": op, "L": chunk_form.chunk_length(T, N), **times,
                             "without / form": round(times["without"] / times["form"], 1),
                             "form / dense": round(times["form"] / times["dense"], 3)})
                print(table(rows[-1:], list(rows[-1])), flush=True)
    print("\n" + table(rows, list(rows[0])))
    path = write("chunk_form_orders", {"cases": CASES, "rounds": ROUNDS, "rows": rows})
    _plot(rows, path.with_suffix(".png"))
    print(f"\nwrote {path} and {path.with_suffix('.png').name}")


def _plot(rows: list[dict], path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, op in zip(axes, ("product", "solve")):
        for K, marker in ((1, "o"), (64, "s")):
            sel = [r for r in rows if r["op"] == op and r["K"] == K]
            labels = [f"N={r['N']}\nT={r['T']}" for r in sel]
            ax.semilogy(labels, [r["without"] / r["dense"] for r in sel], marker=marker, ls="--", label=f"without, K={K}")
            ax.semilogy(labels, [r["form"] / r["dense"] for r in sel], marker=marker, label=f"form, K={K}")
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set(title=op, ylabel="time / dense time")
        ax.tick_params(labelsize=7)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    main()
