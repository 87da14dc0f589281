"""Toeplitz and circulant masks on the CPU against scipy, side by side.

Run by hand: ``python benchmarks/bench_toeplitz.py``; writes ``benchmarks/results/bench_toeplitz.json``.
Targets (issue "Toeplitz, Fourier, DFT and Quasiseparable"): matvec at T = 1e5 >= 0.67x
``matmul_toeplitz``'s speed; causal solve at T = 1e4 >= 10x ``solve_toeplitz``; general solve with
16 right-hand sides at T = 1e4 >= 5x; circulant solve at T = 1e6 >= 1x ``solve_circulant``.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as sl
import torch
from _report import median_ms, table, write

import structmat as sm

torch.set_num_threads(2)


def case(name, peer, ours_fn, peer_fn, check, target, repeat=5, fresh_fn=None):
    """One row; with ``fresh_fn`` (the matrix built inside the call) the headline is the fresh matrix, as scipy's
    call starts from the arrays, and ``ours_ms`` the same matrix solved again (its kept forms, a reused mask)."""
    check()
    with torch.no_grad():
        ours = median_ms(ours_fn, repeat=repeat)
        fresh = None if fresh_fn is None else median_ms(fresh_fn, repeat=repeat)
    theirs = median_ms(peer_fn, repeat=repeat)
    row = {"case": name, "peer": peer, "ours_ms": round(ours, 3), "peer_ms": round(theirs, 3),
           "speedup": round(theirs / ours, 2), "target": target}
    if fresh is not None:
        row.update(fresh_ms=round(fresh, 3), speedup_fresh=round(theirs / fresh, 2))
    return row


def main():
    rng = np.random.default_rng(0)
    rows = []

    T = 100_000
    c, r, x = rng.standard_normal(T), rng.standard_normal(T), rng.standard_normal(T)
    M = sm.Toeplitz(torch.from_numpy(c), torch.from_numpy(r))
    xt = torch.from_numpy(x)
    rows.append(case(f"Toeplitz matvec, T={T}", "scipy.linalg.matmul_toeplitz", lambda: M @ xt,
                     lambda: sl.matmul_toeplitz((c, r), x),
                     lambda: np.testing.assert_allclose((M @ xt).numpy(), sl.matmul_toeplitz((c, r), x), rtol=1e-8, atol=1e-6),
                     ">= 0.67x"))

    T = 10_000
    cc = rng.standard_normal(T) / T
    cc[0] = 2.0
    y = rng.standard_normal(T)
    L = sm.Toeplitz.causal(torch.from_numpy(cc))
    yt = torch.from_numpy(y)
    zeros = np.zeros(T)
    zeros[0] = cc[0]
    rows.append(case(f"causal Toeplitz solve, T={T}", "scipy.linalg.solve_toeplitz", lambda: L.solve(yt),
                     lambda: sl.solve_toeplitz((cc, zeros), y),
                     lambda: np.testing.assert_allclose(L.solve(yt).numpy(), sl.solve_toeplitz((cc, zeros), y), rtol=1e-7, atol=1e-9),
                     ">= 10x", repeat=3, fresh_fn=lambda: sm.Toeplitz.causal(torch.from_numpy(cc)).solve(yt)))

    cg, rg = rng.standard_normal(T) / np.sqrt(T), rng.standard_normal(T) / np.sqrt(T)
    cg[0] = rg[0] = 3.0
    Y = rng.standard_normal((T, 16))
    G = sm.Toeplitz(torch.from_numpy(cg), torch.from_numpy(rg))
    Yt = torch.from_numpy(Y)
    rows.append(case(f"Toeplitz solve, 16 right-hand sides, T={T}", "scipy.linalg.solve_toeplitz", lambda: G.solve(Yt),
                     lambda: sl.solve_toeplitz((cg, rg), Y),
                     lambda: np.testing.assert_allclose(G.solve(Yt).numpy(), sl.solve_toeplitz((cg, rg), Y), rtol=1e-7, atol=1e-9),
                     ">= 5x", repeat=3, fresh_fn=lambda: sm.Toeplitz(torch.from_numpy(cg), torch.from_numpy(rg)).solve(Yt)))

    T = 1_000_000
    k = rng.standard_normal(T) / T
    k[0] = 2.0
    b = rng.standard_normal(T)
    F = sm.Fourier.from_kernel(torch.from_numpy(k))
    bt = torch.from_numpy(b)
    rows.append(case(f"circulant solve, T={T}", "scipy.linalg.solve_circulant", lambda: F.solve(bt),
                     lambda: sl.solve_circulant(k, b),
                     lambda: np.testing.assert_allclose(F.solve(bt).numpy(), sl.solve_circulant(k, b), rtol=1e-7, atol=1e-9),
                     ">= 1x", repeat=3, fresh_fn=lambda: sm.Fourier.from_kernel(torch.from_numpy(k)).solve(bt)))
    print(table(rows, ["case", "peer", "fresh_ms", "ours_ms", "peer_ms", "speedup_fresh", "speedup", "target"]))
    print("wrote", write("bench_toeplitz", {"cases": rows}))


if __name__ == "__main__":
    main()
