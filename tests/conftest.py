"""What every test shares: the environment, hypothesis profiles, references, tolerances, random inputs.

Tests import the helpers with ``from conftest import ...`` (``tests`` is on the path). The
references here are independent of the package: dense matrices built entry by entry from the
definitions (numpy), plain Python recurrences.
"""

import os

import numpy as np
import torch

if not torch.cuda.is_available():  # Triton kernels run under the interpreter (set before triton is imported)
    os.environ.setdefault("TRITON_INTERPRET", "1")

from hypothesis import settings  # noqa: E402

# The tests' tensors are small: a second intra-op thread only adds stalls when a neighbour holds the
# other core (CI has two), slowing small-op paths by an order of magnitude.
torch.set_num_threads(1)

settings.register_profile("ci", max_examples=25, deadline=None)
settings.register_profile("long", max_examples=500, deadline=None)
settings.load_profile(os.environ.get("STRUCTMAT_TEST_PROFILE", "ci"))

F64, C128 = torch.float64, torch.complex128
DEV = "cuda" if torch.cuda.is_available() else "cpu"
LONG = os.environ.get("STRUCTMAT_TEST_PROFILE") == "long"


# --- comparisons --------------------------------------------------------------------------------


def as_numpy(x) -> np.ndarray:
    return x.detach().cpu().resolve_conj().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def close(got, want, rtol: float = 1e-9, atol: float = 1e-13) -> None:
    """Max-norm error relative to the largest entry of ``want``."""
    got, want = as_numpy(got), as_numpy(want)
    assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
    assert np.isfinite(got).all(), "non-finite entries"
    scale = max(np.abs(want).max(initial=0.0), 1e-30)
    err = np.abs(got - want).max(initial=0.0)
    assert err <= rtol * scale + atol, f"max error {err:.3e} > {rtol:.1e} * {scale:.3e}"


def rel(a, b) -> float:
    """Relative L2 error of ``a`` against ``b``, in float64 on the CPU."""
    a, b = (torch.as_tensor(t).detach().cpu().to(torch.complex128 if torch.as_tensor(t).is_complex() else F64)
            for t in (a, b))
    return ((a - b).norm() / b.norm().clamp_min(1e-300)).item()


# --- random inputs ------------------------------------------------------------------------------


def randn(*shape, seed: int = 0, dtype=F64, device="cpu") -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if dtype.is_complex:
        real = dtype.to_real()
        return torch.complex(torch.randn(*shape, generator=g, dtype=real), torch.randn(*shape, generator=g, dtype=real)).to(device)
    return torch.randn(*shape, generator=g, dtype=F64).to(device=device, dtype=dtype)


def rand(*shape, seed: int = 0, dtype=F64, device="cpu") -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(*shape, generator=g, dtype=F64).to(device=device, dtype=dtype)


# --- references -----------------------------------------------------------------------------------


def sss_dense(A, B, C, D, kind: str, lower: bool = True) -> np.ndarray:
    """``M[j,i] = C_j^T A_j ... A_{i+1} B_i`` by explicit loops, for one (unbatched) SSS."""
    A, B, C = as_numpy(A), as_numpy(B), as_numpy(C)
    D = None if D is None else as_numpy(D)
    T, N = B.shape
    M = np.zeros((T, T), dtype=np.result_type(A, B, C, 1.0))

    def trans(k):
        return {"log": lambda: np.exp(A[k]) * np.eye(N), "scalar": lambda: A[k] * np.eye(N),
                "diag": lambda: np.diag(A[k]), "dense": lambda: A[k]}[kind]()

    for i in range(T):
        v = B[i].copy()
        M[i, i] = C[i] @ B[i] if D is None else D[i]
        for j in range(i + 1, T):
            v = trans(j) @ v
            M[j, i] = C[j] @ v
    return M if lower else M.T


def dense_of(M) -> np.ndarray:
    """Reference dense array for an unbatched SSS/OneSS from its parameters."""
    return sss_dense(M.transitions.values, M.B, M.C, M.D, M.transitions.kind, M.lower)


def sequential_one_ss(a: np.ndarray, b: np.ndarray, c: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``h_t = a_t h_{t-1} + b_t x_t``, ``y_t = c_t h_t`` as a Python loop in float64."""
    h = np.zeros_like(x[0])
    y = np.empty_like(x)
    for t in range(len(x)):
        h = (a[t] * h if t else 0 * h) + b[t] * x[t]
        y[t] = c[t] * h
    return y


def reversal(T: int) -> torch.Tensor:
    """The reversal matrix ``J``."""
    return torch.eye(T, dtype=F64).flip(0)
