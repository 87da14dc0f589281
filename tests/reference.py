"""Independent dense references built entry by entry from the definitions (numpy, float64/complex128)."""

from __future__ import annotations

import numpy as np


def _np(t):
    return None if t is None else t.detach().cpu().resolve_conj().numpy()


def sss_dense(A, B, C, D, kind: str, lower: bool = True) -> np.ndarray:
    """``M[j,i] = C_j^T A_j ... A_{i+1} B_i`` by explicit loops, for one (unbatched) SSS."""
    A, B, C, D = _np(A), _np(B), _np(C), _np(D)
    T, N = B.shape
    M = np.zeros((T, T), dtype=np.result_type(A, B, C, 1.0))

    def trans(k):
        if kind == "log":
            return np.exp(A[k]) * np.eye(N)
        if kind == "scalar":
            return A[k] * np.eye(N)
        if kind == "diag":
            return np.diag(A[k])
        return A[k]

    for i in range(T):
        v = B[i].copy()
        M[i, i] = C[i] @ B[i] if D is None else D[i]
        for j in range(i + 1, T):
            v = trans(j) @ v
            M[j, i] = C[j] @ v
    return M if lower else M.T


def dense_of(M) -> np.ndarray:
    """Reference dense array for an unbatched SSS/OneSS from its parameters."""
    return sss_dense(M._A, M.B, M.C, M.D, M.kind, M.lower)


def sequential_one_ss(a: np.ndarray, b: np.ndarray, c: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``h_t = a_t h_{t-1} + b_t x_t``, ``y_t = c_t h_t`` as a Python loop in float64."""
    h = np.zeros_like(x[0])
    y = np.empty_like(x)
    for t in range(len(x)):
        h = (a[t] * h if t else 0 * h) + b[t] * x[t]
        y[t] = c[t] * h
    return y
