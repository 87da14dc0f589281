"""Hypothesis strategies for every structured matrix class, and ``assert_matches_dense``.

Users can property-test their own code on the same random structured matrices the project uses::

    from hypothesis import given
    import structmat.testing as smt

    @given(smt.one_ss())
    def test_mine(M):
        smt.assert_matches_dense(M)

Decays are drawn to include the edge cases that break naive code: exact zeros, exact ones and
tiny values (``1e-30``). Every matrix strategy takes ``T``, ``batch`` and ``dtype`` so that draws can be
combined (:func:`decays` takes a whole ``shape``); :func:`matrices_of` maps a class to its strategy.
"""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import strategies as st

from structmat.core.base import StructuredMatrix
from structmat.core.dtypes import real_dtype
from structmat.matrices import DFT, SSS, Bidiagonal, Dense, Diagonal, Fourier, LowRank, OneSS, Quasiseparable, Toeplitz

__all__ = [
    "decays", "one_ss", "sss", "diagonals", "bidiagonals", "lowranks", "denses", "toeplitzes", "fouriers", "dfts",
    "quasiseparables", "matrices_of", "structured_matrices", "assert_matches_dense", "tolerance",
]

_EDGE_DECAYS = (0.0, 1.0, 1e-30, 1.0 - 1e-7)


_TOLERANCES = {torch.float64: 1e-9, torch.complex128: 1e-9, torch.float32: 1e-4, torch.complex64: 1e-4,
               torch.bfloat16: 3e-2, torch.float16: 5e-3}


def tolerance(dtype: torch.dtype) -> float:
    """Documented relative tolerance of structured results against dense float64, per dtype."""
    if not isinstance(dtype, torch.dtype):  # (numpy dtypes and their scalar types, as torch names them)
        try:
            dtype = torch.from_numpy(np.empty(0, dtype=dtype)).dtype
        except (TypeError, ValueError):
            pass
    if dtype not in _TOLERANCES:
        raise ValueError(f"dtype must be one of {list(_TOLERANCES)}; got {dtype!r}")
    return _TOLERANCES[dtype]


@st.composite
def _tensor(draw, shape, *, low=-1.0, high=1.0, dtype=torch.float64):
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    if dtype.is_complex:
        real = real_dtype(dtype)
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


def _sizes(draw, T, batch, high, dtype=torch.float64):
    _check_sizes(T, batch)
    if not (isinstance(dtype, torch.dtype) and (dtype.is_floating_point or dtype.is_complex)):
        raise TypeError(f"dtype must be a floating-point or complex torch.dtype; got {dtype!r}")
    return (draw(st.integers(1, high)) if T is None else T), (draw(_batches) if batch is None else tuple(batch))


def _check_sizes(T, batch) -> None:
    """``T`` None or a non-negative int, ``batch`` None or a tuple of non-negative ints (named errors at the call)."""
    if T is not None and (isinstance(T, bool) or not isinstance(T, int) or T < 0):
        raise ValueError(f"T must be a non-negative int or None; got {T!r}")
    if batch is not None and not (isinstance(batch, (tuple, list, torch.Size))
                                  and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in batch)):
        raise ValueError(f"batch must be a tuple of non-negative ints or None; got {batch!r}")


def _at_least(n, name: str, low: int) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < low:
        raise ValueError(f"{name} must be an int >= {low} or None; got {n!r}")
    return n


def _oriented(draw, M):
    return M if draw(st.booleans()) else M.T


@st.composite
def one_ss(draw, *, T=None, batch=None, dtype=torch.float64, scaled=None):
    """Random :class:`OneSS` (decays with edge cases; optional ``b``, ``c``; lower or upper)."""
    T, batch = _sizes(draw, T, batch, 80, dtype)
    a = draw(decays((*batch, T), dtype=real_dtype(dtype)))
    b = c = None
    if draw(st.booleans()) if scaled is None else scaled:
        b = draw(_tensor((*batch, T), dtype=dtype))
        c = draw(_tensor((*batch, T), dtype=dtype))
    elif dtype.is_complex:  # (real decays alone would make a real matrix)
        b = torch.ones((*batch, T), dtype=dtype)
    return _oriented(draw, OneSS.from_decays(a, b=b, c=c))


@st.composite
def sss(draw, *, T=None, N=None, batch=None, dtype=torch.float64, kind=None, explicit_d=None, lower=None):
    """Random :class:`SSS` with scalar, diagonal or dense ``A``, optional ``D``, lower or upper."""
    T, batch = _sizes(draw, T, batch, 70, dtype)
    N = draw(st.integers(1, 4)) if N is None else _at_least(N, "N", 1)
    if kind not in (None, "scalar", "diag", "dense"):
        raise ValueError(f"kind must be 'scalar', 'diag', 'dense' or None; got {kind!r}")
    kind = draw(st.sampled_from(["scalar", "diag", "dense"])) if kind is None else kind
    shape = {"scalar": (*batch, T), "diag": (*batch, T, N), "dense": (*batch, T, N, N)}[kind]
    A = draw(_tensor(shape, dtype=dtype))
    if kind == "dense":
        A = A / N  # spectral radius below one so that long products stay bounded
    B = draw(_tensor((*batch, T, N), dtype=dtype))
    C = draw(_tensor((*batch, T, N), dtype=dtype))
    D = 2.0 + draw(_tensor((*batch, T), dtype=dtype)) if (draw(st.booleans()) if explicit_d is None else explicit_d) else None
    M = SSS(A, B, C, D)
    if lower is not None:
        return M if lower else M.T
    return _oriented(draw, M)


@st.composite
def diagonals(draw, *, T=None, batch=None, dtype=torch.float64):
    """Random :class:`Diagonal`: ``1.5`` plus entries in ``[-1, 1)`` (invertible)."""
    T, batch = _sizes(draw, T, batch, 60, dtype)
    return Diagonal(1.5 + draw(_tensor((*batch, T), dtype=dtype)))


@st.composite
def bidiagonals(draw, *, T=None, batch=None, dtype=torch.float64):
    """Random :class:`Bidiagonal`, lower or upper, with a dominant diagonal (well conditioned)."""
    T, batch = _sizes(draw, T, batch, 60, dtype)
    M = Bidiagonal(1.5 + draw(_tensor((*batch, T), dtype=dtype)), draw(_tensor((*batch, max(T - 1, 0)), dtype=dtype)))
    return _oriented(draw, M)


@st.composite
def lowranks(draw, *, T=None, r=None, batch=None, dtype=torch.float64):
    """Random :class:`LowRank` ``U V^T`` of rank ``r`` (drawn from 1 to 3 where None)."""
    T, batch = _sizes(draw, T, batch, 40, dtype)
    r = draw(st.integers(1, 3)) if r is None else _at_least(r, "r", 0)
    return LowRank(draw(_tensor((*batch, T, r), dtype=dtype)), draw(_tensor((*batch, T, r), dtype=dtype)))


@st.composite
def denses(draw, *, T=None, batch=None, dtype=torch.float64):
    """Random :class:`Dense` ``3 I + E / T`` with entries of ``E`` in ``[-1, 1)`` (well conditioned)."""
    T, batch = _sizes(draw, T, batch, 30, dtype)
    eye = torch.eye(T, dtype=dtype)
    return Dense(3 * eye + draw(_tensor((*batch, T, T), dtype=dtype)) / max(T, 1))


@st.composite
def toeplitzes(draw, *, T=None, batch=None, dtype=torch.float64, causal=None):
    """Random :class:`Toeplitz`, general or causal, with a dominant diagonal (well conditioned)."""
    T, batch = _sizes(draw, T, batch, 60, dtype)
    c = draw(_tensor((*batch, T), dtype=dtype)) / max(T, 1)
    c[..., :1] += 3.0  # (a slice: T may be 0)
    if draw(st.booleans()) if causal is None else causal:
        return Toeplitz.causal(c)
    return Toeplitz(c, draw(_tensor((*batch, T), dtype=dtype)) / max(T, 1))


@st.composite
def fouriers(draw, *, T=None, batch=None, dtype=torch.float64):
    """Random circulant (:class:`Fourier`) with a dominant diagonal (no eigenvalue near 0)."""
    T, batch = _sizes(draw, T, batch, 60, dtype)
    c = draw(_tensor((*batch, T), dtype=dtype)) / max(T, 1)
    c[..., :1] += 3.0  # (a slice: T may be 0)
    return Fourier.from_kernel(c)


@st.composite
def dfts(draw, *, T=None, batch=(), dtype=torch.complex128):
    """A :class:`DFT` mask (forward or inverse, scaled); ``batch`` must be ``()`` (a DFT has no batch)."""
    if tuple(batch or ()) != ():
        raise ValueError(f"a DFT has no batch: batch must be (); got {batch!r}")
    T, _ = _sizes(draw, T, (), 40, dtype)
    complex_dtype = dtype if dtype.is_complex else torch.promote_types(dtype, torch.complex64)
    return DFT(T, draw(st.booleans()), scale=draw(st.sampled_from([1.0, 0.5, 2.0])) / max(T, 1) ** 0.5,
               dtype=complex_dtype)


@st.composite
def quasiseparables(draw, *, T=None, batch=None, dtype=torch.float64):
    """Random :class:`Quasiseparable`: SSS or OneSS parts on both sides, a dominant free diagonal."""
    T, batch = _sizes(draw, T, batch, 40, dtype)
    part = lambda: st.one_of(one_ss(T=T, batch=batch, dtype=dtype), sss(T=T, batch=batch, dtype=dtype, N=2))  # noqa: E731
    lo, up = draw(part()), draw(part())
    lo = lo if lo.lower else lo.T
    up = up if not up.lower else up.T
    return Quasiseparable(lo, up, 4.0 + draw(_tensor((*batch, T), dtype=dtype)))


_STRATEGIES = {
    OneSS: one_ss, SSS: sss, Diagonal: diagonals, Bidiagonal: bidiagonals, LowRank: lowranks, Dense: denses,
    Toeplitz: toeplitzes, Fourier: fouriers, DFT: dfts, Quasiseparable: quasiseparables,
}


def matrices_of(cls: type, *, T: int, batch=(), dtype=torch.float64) -> st.SearchStrategy:
    """A strategy for matrices of ``cls`` (or of any built-in subclass of it, ``StructuredMatrix`` for all; no DFT
    where ``batch`` is set: a DFT has no batch)."""
    if not isinstance(cls, type):
        raise TypeError(f"cls must be a class (a StructuredMatrix subclass); got {cls!r}")
    _check_sizes(T, batch)
    choices = [s for c, s in _STRATEGIES.items() if issubclass(c, cls) and (c is not DFT or tuple(batch) == ())]
    if not choices:
        raise TypeError(f"no strategy for {cls.__name__}" + (f" with batch {tuple(batch)}" if cls is DFT else ""))
    return st.one_of(*(s(T=T, batch=tuple(batch), dtype=dtype) for s in choices))


def structured_matrices(*, T: int, batch=(), dtype=torch.float64) -> st.SearchStrategy:
    """Any built-in class at a fixed ``T`` (so results can be combined); no DFT when ``batch`` is set."""
    classes = [c for c in _STRATEGIES if c is not DFT or tuple(batch) == ()]
    return st.one_of(*(matrices_of(c, T=T, batch=batch, dtype=dtype) for c in classes))


def assert_matches_dense(M: StructuredMatrix, *, rtol: float | None = None, K: int = 3, seed: int = 0) -> None:
    """Check that ``M @ X`` (contiguous, and a time-last view as the SMA linear order passes), ``M @ x`` (1-D),
    ``M.T @ Y`` and ``M.T.to_dense()`` agree with ``M.to_dense()``.

    The reference is the dense matrix of ``M``'s parameters in float64 (complex128); errors are relative to the
    largest entry of the dense result, with :func:`tolerance` by default.
    """
    wide = torch.complex128 if M.dtype.is_complex else torch.float64
    dense = M.to(wide).to_dense()  # the exact matrix of M's parameters (tolerance() is against float64)
    rtol = tolerance(M.dtype) if rtol is None else rtol
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(*M.batch_shape, M.shape[-1], K, generator=g, dtype=torch.float64).to(M.dtype)
    Y = torch.randn(*M.batch_shape, M.shape[-2], K, generator=g, dtype=torch.float64).to(M.dtype)
    Xw, Yw = X.to(wide), Y.to(wide)
    checks = {
        "M @ X": (M @ X, dense @ Xw),
        "M @ X (time-last view)": (M @ X.mT.contiguous().mT, dense @ Xw),
        "M.T @ Y": (M.T @ Y, dense.transpose(-1, -2) @ Yw),
        "M.T.to_dense()": (M.T.to_dense(), dense.transpose(-1, -2)),
    }
    if K and M.batch_shape.numel():  # (a 1-D operand of the first batch entry, where there is one)
        first = (0,) * len(M.batch_shape)
        got = (M @ X[first][:, 0]).expand(*M.batch_shape, M.shape[-2])[first]
        checks["M @ x (1-D)"] = (got, dense[first] @ Xw[first][:, 0])
    for name, (got, want) in checks.items():
        err = (got.to(wide) - want).abs().max().item() if got.numel() else 0.0
        scale = max(want.abs().max().item() if want.numel() else 0.0, 1e-30)
        assert err <= rtol * scale + 1e-300, f"{type(M).__name__} {name}: max error {err:.3e} > {rtol:.1e} * {scale:.3e}"
        assert torch.isfinite(got).all(), f"{type(M).__name__} {name}: non-finite entries"
