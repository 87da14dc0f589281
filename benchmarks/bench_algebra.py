"""Semiseparable algebra on the CPU against what scipy/numpy/Python give today.

Run by hand: ``python benchmarks/bench_algebra.py``; prints a table and writes
``benchmarks/results/bench_algebra.json``. Targets (issue "Foundation"): OneSS matvec >= 10x a
Python loop and within 3x of ``scipy.signal.lfilter``; SSS inverse applied to 64 columns >= 100x
``numpy.linalg.inv``; SSS matvec time linear in T (fitted exponent <= 1.1).
"""

from __future__ import annotations

import numpy as np
import scipy.signal
import torch
from _report import median_ms, table, write

import structmat as sm

torch.set_num_threads(2)


def python_loop(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The loop a user writes over the arrays (the ANCHORS baseline)."""
    h, out = 0.0, np.empty_like(x)
    for t in range(len(x)):
        h = a[t] * h + x[t]
        out[t] = h
    return out


def python_list_loop(a: list, x: list) -> list:
    """The fastest pure-Python loop (floats from lists), reported for reference."""
    h, out = 0.0, []
    for at, xt in zip(a, x):
        h = at * h + xt
        out.append(h)
    return out


def oness_vs_loop(T: int = 100_000) -> dict:
    rng = np.random.default_rng(0)
    a, x = rng.random(T), rng.standard_normal(T)
    M = sm.OneSS.from_decays(torch.from_numpy(a))
    xt = torch.from_numpy(x)
    ref = python_loop(a, x)
    assert np.allclose((M @ xt).numpy(), ref, rtol=1e-9, atol=1e-9)
    with torch.no_grad():
        ours = median_ms(lambda: M @ xt, repeat=41, warmup=5)
    loop = median_ms(lambda: python_loop(a, x), repeat=3)
    lists = median_ms(lambda: python_list_loop(a.tolist(), x.tolist()), repeat=3)
    return [{"case": f"OneSS matvec, time-varying decay, T={T}", "peer": "python loop over the arrays", "ours_ms": ours,
             "peer_ms": loop, "speedup": loop / ours, "target": ">= 10x"},
            {"case": f"OneSS matvec, time-varying decay, T={T}", "peer": "python loop over lists (fastest loop)",
             "ours_ms": ours, "peer_ms": lists, "speedup": lists / ours, "target": "(reference)"}]


def oness_vs_lfilter(T: int) -> dict:
    rng = np.random.default_rng(1)
    x = rng.standard_normal(T)
    M = sm.OneSS.decay(torch.tensor(0.99, dtype=torch.float64), T)
    xt = torch.from_numpy(x)
    ref = scipy.signal.lfilter([1.0], [1.0, -0.99], x)
    assert np.allclose((M @ xt).numpy(), ref, rtol=1e-8, atol=1e-8)
    with torch.no_grad():
        ours = median_ms(lambda: M @ xt, repeat=41, warmup=5)
    peer = median_ms(lambda: scipy.signal.lfilter([1.0], [1.0, -0.99], x))
    return {"case": f"OneSS matvec, constant decay, T={T}", "peer": "scipy.signal.lfilter", "ours_ms": ours,
            "peer_ms": peer, "speedup": peer / ours, "target": ">= 0.33x (within 3x)"}


def sss_inverse_vs_numpy(T: int = 4096, N: int = 16, K: int = 64) -> dict:
    g = torch.Generator().manual_seed(2)
    M = sm.SSS(torch.rand(T, N, generator=g, dtype=torch.float64), torch.randn(T, N, generator=g, dtype=torch.float64) / 4,
               torch.randn(T, N, generator=g, dtype=torch.float64) / 4, D=2 + torch.rand(T, generator=g, dtype=torch.float64))
    Y = torch.randn(T, K, generator=g, dtype=torch.float64)
    dense = M.to_dense().numpy()
    Yn = Y.numpy()
    with torch.no_grad():
        for X in (M.solve(Y), M.inv() @ Y):
            assert np.allclose(dense @ X.numpy(), Yn, atol=1e-8)
        ours = median_ms(lambda: M.solve(Y), repeat=5, warmup=10)  # (past the calls that pay for its chunked form)
        realization = median_ms(lambda: M.inv() @ Y, repeat=5)
        A, B, C, D = M.transitions.values, M.B, M.C, M.D
        fresh = median_ms(lambda: sm.SSS(A, B, C, D=D).solve(Y), repeat=5)  # (numpy starts from the array: no kept form)
    peer = median_ms(lambda: np.linalg.inv(dense) @ Yn, repeat=3, warmup=0)
    return [{"case": f"SSS(N={N}, diag A) inverse on {K} columns (M.solve, a fresh matrix), T={T}",
             "peer": "numpy.linalg.inv", "ours_ms": fresh, "peer_ms": peer, "speedup": peer / fresh, "target": ">= 100x"},
            {"case": f"same, the same matrix solved again (its chunked form kept), T={T}", "peer": "numpy.linalg.inv",
             "ours_ms": ours, "peer_ms": peer, "speedup": peer / ours, "target": "(reference)"},
            {"case": f"same through the inverse realization (M.inv() @ Y), T={T}", "peer": "numpy.linalg.inv",
             "ours_ms": realization, "peer_ms": peer, "speedup": peer / realization, "target": "(reference)"}]


def sss_scaling(Ts=(1_000, 10_000, 100_000, 1_000_000), N: int = 16) -> dict:
    rows = []
    for T in Ts:
        g = torch.Generator().manual_seed(T)
        M = sm.SSS(torch.rand(T, N, generator=g), torch.randn(T, N, generator=g), torch.randn(T, N, generator=g))
        x = torch.randn(T, generator=g)
        with torch.no_grad():
            rows.append({"T": T, "ms": median_ms(lambda: M @ x, repeat=5)})
    logT, logt = np.log([r["T"] for r in rows]), np.log([r["ms"] for r in rows])
    return {"points": rows, "fitted_exponent": float(np.polyfit(logT, logt, 1)[0]),
            "fitted_exponent_T_ge_1e4": float(np.polyfit(logT[1:], logt[1:], 1)[0]), "target": "<= 1.1 (T from 1e3 to 1e6)"}


def main() -> None:
    cases = [*oness_vs_loop(), oness_vs_lfilter(100_000), oness_vs_lfilter(1_000_000), *sss_inverse_vs_numpy()]
    scaling = sss_scaling()
    for c in cases:
        c["ours_ms"], c["peer_ms"], c["speedup"] = round(c["ours_ms"], 3), round(c["peer_ms"], 3), round(c["speedup"], 2)
    print(table(cases, ["case", "peer", "ours_ms", "peer_ms", "speedup", "target"]))
    print("\nSSS(N=16, diagonal A) matvec, float32:")
    print(table([{"T": p["T"], "ms": round(p["ms"], 3)} for p in scaling["points"]], ["T", "ms"]))
    print(f"fitted exponent, T from 1e3 to 1e6: {scaling['fitted_exponent']:.3f} (target <= 1.1); "
          f"T >= 1e4 only: {scaling['fitted_exponent_T_ge_1e4']:.3f}")
    path = write("bench_algebra", {"cases": cases, "sss_matvec_scaling": scaling})
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
