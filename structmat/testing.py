"""Hypothesis strategies for structured matrices, and ``assert_matches_dense``.

Users can property-test their own code on the same random structured matrices the project uses::

    from hypothesis import given
    import structmat.testing as smt

    @given(smt.one_ss())
    def test_mine(M):
        smt.assert_matches_dense(M)

Decays are drawn to include the edge cases that break naive code: exact zeros, exact ones and
tiny values (``1e-30``).
"""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from structmat.base import StructuredMatrix
from structmat.bidiagonal import Bidiagonal
from structmat.dense import Dense
from structmat.diagonal import Diagonal
from structmat.lowrank import LowRank
from structmat.one_ss import OneSS
from structmat.sss import SSS

__all__ = [
    "decays",
    "one_ss",
    "sss",
    "diagonals",
    "bidiagonals",
    "lowranks",
    "denses",
    "structured_matrices",
    "assert_matches_dense",
    "tolerance",
]

_EDGE_DECAYS = (0.0, 1.0, 1e-30, 1.0 - 1e-7)


def tolerance(dtype: torch.dtype) -> float:
    """Documented relative tolerance of structured results against dense float64, per dtype."""
    return {
        torch.float64: 1e-9,
        torch.complex128: 1e-9,
        torch.float32: 1e-4,
        torch.complex64: 1e-4,
        torch.bfloat16: 3e-2,
        torch.float16: 5e-3,
    }[dtype]


@st.composite
def _tensor(draw, shape, *, low=-1.0, high=1.0, dtype=torch.float64):
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    if dtype.is_complex:
        real = dtype.to_real()
        z = torch.complex(torch.rand(shape, generator=g, dtype=real), torch.rand(shape, generator=g, dtype=real))
        return (low + (high - low) * z).to(dtype)
    return low + (high - low) * torch.rand(shape, generator=g, dtype=dtype)


@st.composite
def decays(draw, shape, *, dtype=torch.float64):
    """Decays in ``[0, 1]`` of ``shape``, with edge values (0, 1, 1e-30, 1 - 1e-7) mixed in."""
    a = draw(_tensor(shape, low=0.0, high=1.0, dtype=dtype))
    n_edges = draw(st.integers(0, min(3, a.numel())))
    flat = a.reshape(-1).clone()
    for _ in range(n_edges):
        flat[draw(st.integers(0, flat.numel() - 1))] = draw(st.sampled_from(_EDGE_DECAYS))
    return flat.reshape(shape)


_batches = st.sampled_from([(), (2,), (2, 1)])


@st.composite
def one_ss(draw, *, T=None, batch=None, dtype=torch.float64, scaled=None):
    """Random :class:`OneSS` (decays with edge cases; optional ``b``, ``c``; lower or upper)."""
    T = draw(st.integers(1, 80)) if T is None else T
    batch = draw(_batches) if batch is None else batch
    a = draw(decays((*batch, T), dtype=dtype.to_real() if dtype.is_complex else dtype))
    scaled = draw(st.booleans()) if scaled is None else scaled
    b = c = None
    if scaled:
        b = draw(_tensor((*batch, T), dtype=dtype))
        c = draw(_tensor((*batch, T), dtype=dtype))
    M = OneSS.from_decays(a, b=b, c=c)
    return M if draw(st.booleans()) else M.T


@st.composite
def sss(draw, *, T=None, N=None, batch=None, dtype=torch.float64, kind=None, explicit_d=None):
    """Random :class:`SSS` with scalar, diagonal or dense ``A``, optional ``D``, lower or upper."""
    T = draw(st.integers(1, 70)) if T is None else T
    N = draw(st.integers(1, 4)) if N is None else N
    batch = draw(_batches) if batch is None else batch
    kind = draw(st.sampled_from(["scalar", "diag", "dense"])) if kind is None else kind
    shape = {"scalar": (*batch, T), "diag": (*batch, T, N), "dense": (*batch, T, N, N)}[kind]
    A = draw(_tensor(shape, dtype=dtype))
    if kind == "dense":
        A = A / N  # spectral radius below one so that long products stay bounded
    B = draw(_tensor((*batch, T, N), dtype=dtype))
    C = draw(_tensor((*batch, T, N), dtype=dtype))
    D = None
    if draw(st.booleans()) if explicit_d is None else explicit_d:
        D = 2.0 + draw(_tensor((*batch, T), dtype=dtype))
    M = SSS(A, B, C, D)
    return M if draw(st.booleans()) else M.T


@st.composite
def diagonals(draw, *, T=None, batch=None, dtype=torch.float64):
    T = draw(st.integers(1, 60)) if T is None else T
    batch = draw(_batches) if batch is None else batch
    return Diagonal(1.5 + draw(_tensor((*batch, T), dtype=dtype)))


@st.composite
def bidiagonals(draw, *, T=None, batch=None, dtype=torch.float64):
    T = draw(st.integers(1, 60)) if T is None else T
    batch = draw(_batches) if batch is None else batch
    return Bidiagonal(1.5 + draw(_tensor((*batch, T), dtype=dtype)), draw(_tensor((*batch, T - 1), dtype=dtype)))


@st.composite
def lowranks(draw, *, T=None, r=None, batch=None, dtype=torch.float64):
    T = draw(st.integers(1, 40)) if T is None else T
    r = draw(st.integers(1, 3)) if r is None else r
    batch = draw(_batches) if batch is None else batch
    return LowRank(draw(_tensor((*batch, T, r), dtype=dtype)), draw(_tensor((*batch, T, r), dtype=dtype)))


@st.composite
def denses(draw, *, T=None, batch=None, dtype=torch.float64):
    T = draw(st.integers(1, 30)) if T is None else T
    batch = draw(_batches) if batch is None else batch
    eye = torch.eye(T, dtype=dtype)
    return Dense(3 * eye + draw(_tensor((*batch, T, T), dtype=dtype)) / max(T, 1))


def structured_matrices(*, T: int, batch=(), dtype=torch.float64):
    """Any of the strategies above at a fixed ``T`` (so results can be combined)."""
    kw = dict(T=T, batch=batch, dtype=dtype)
    return st.one_of(one_ss(**kw), sss(**kw), diagonals(**kw), bidiagonals(**kw), lowranks(**kw), denses(**kw))


def assert_matches_dense(M: StructuredMatrix, *, rtol: float | None = None, K: int = 3, seed: int = 0) -> None:
    """Check that ``M @ X``, ``M @ x`` (1-D), ``X^T @ M`` and ``M.T`` agree with ``M.to_dense()``.

    Errors are relative to the norm of the dense result, with :func:`tolerance` by default.
    """
    dense = M.to_dense()
    rtol = tolerance(M.dtype) if rtol is None else rtol
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(*M.batch_shape, M.shape[-1], K, generator=g, dtype=torch.float64).to(M.dtype)
    Y = torch.randn(*M.batch_shape, M.shape[-2], K, generator=g, dtype=torch.float64).to(M.dtype)
    first = (0,) * len(M.batch_shape)
    checks = {
        "M @ X": (M @ X, dense @ X),
        "M @ x (1-D)": ((M @ X[first][:, 0]).expand(*M.batch_shape, M.shape[-2])[first], dense[first] @ X[first][:, 0]),
        "M.T @ Y": (M.T @ Y, dense.transpose(-1, -2) @ Y),
        "M.T.to_dense()": (M.T.to_dense(), dense.transpose(-1, -2)),
    }
    for name, (got, want) in checks.items():
        err = (got - want).abs().max().item()
        scale = max(want.abs().max().item(), 1e-30)
        assert err <= rtol * scale + 1e-300, f"{type(M).__name__} {name}: max error {err:.3e} > {rtol:.1e} * {scale:.3e}"
        assert torch.isfinite(got).all(), f"{type(M).__name__} {name}: non-finite entries"
