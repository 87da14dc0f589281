"""SSS products and solves (and bidiagonal solves) as banded triangular systems, in compiled code (LAPACK
``dtbtrs``) on the CPU.

Stack per step ``t`` the output and the state, ``z_t = (y_t, h_t)`` (``m = N + 1`` unknowns). The product
``y = M x`` of a lower SSS is the unit lower-triangular system

    y_t - C_t^T A_t h_{t-1} = D_t x_t,        h_t - A_t h_{t-1} = B_t x_t,

and the solve ``M x = y`` (unknowns ``z_t = (x_t, h_t)``) the lower-triangular system

    D_t x_t + C_t^T A_t h_{t-1} = y_t,        h_t - A_t h_{t-1} - B_t x_t = 0.

Both are banded: ``T m`` unknowns, ``kd = N + 1`` sub-diagonals for scalar or diagonal transitions and
``2N`` for dense ones, so LAPACK runs the recurrence step for step with the loop's arithmetic in
``O(T m kd K)`` (no Python step per time index; ``a_t = 0`` stays an exact zero). The upper mirror is the
transpose: ``M^T x`` and ``M^{-T} y`` are the transposed systems (``trans='T'``), no reversal of time.

Long lower sequences run in time blocks of :data:`BLOCK_ENTRIES` band entries, each built when it is solved
(a band kept for the whole sequence would cost memory in proportion to ``T``): a block's system starts with a
pinned copy of the step before it, whose unknowns are the known state carried in, so the state flows on as in
one system.

Real data only, computed in float64 (float32 results are rounded once at the end); not differentiated
(callers take the torch scans where a gradient is wanted).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import scipy.linalg.lapack
import torch

from structmat.core.host import host
from structmat.core.validation import SingularMatrixError, broadcast_shapes, overflow_checks_enabled
from structmat.linalg.semiseparable import Generators

__all__ = ["applies", "band", "band_entries", "sss_matmat", "sss_solve", "Band", "MAX_ORDER", "MAX_ROWS",
           "SCAN_MIN_COLUMNS", "SCAN_DENSE_MIN_COLUMNS_N", "SCAN_MIN_WORK", "SCAN_MAX_WORK", "scans_win",
           "KEEP_MAX_ENTRIES", "KEEP_PER_PARAMETER_BYTE", "BLOCK_ENTRIES", "keeps", "bidiagonal_applies",
           "bidiagonal_band", "bidiagonal_solve"]

#: Largest state size taken through the band: its width grows as ``N`` (``2N`` for dense transitions), so the
#: work per step as ``N^2``; the blocked solve and scan, ``O(N)`` per step for diagonal transitions, win above.
#: Measured (one thread, T = 4096, 64 columns, diagonal A): N = 8 banded 0.5x the blocked solve's time, N = 16 1.8x.
MAX_ORDER = 8

#: Most systems (batch entries of the matrix times those of the operand) solved one LAPACK call each; a
#: larger batch takes the vectorised torch scans, which treat the whole batch in each step.
MAX_ROWS = 64

#: Fewest columns (every system's counted) with which a product takes the torch scans instead of the band, for scalar
#: and diagonal transitions: LAPACK runs the columns one after another, the scans run them all in each step. Dense
#: transitions need :data:`SCAN_DENSE_MIN_COLUMNS_N` columns times ``N`` (a scan step costs ``N^2`` per column there).
#: Fitted to two runs of ``benchmarks/band_or_scan.py`` (one thread, float32, ``T = 256 ... 65536``, ``N = 1 ... 8``;
#: ``benchmarks/NOTES_sizes.md``, session 16): of the rules near the best summed log regret, the one whose choices of
#: the scans cost at most 1.16x the band built in the call (1.48x a kept band); 8 columns fitted slightly better
#: but lost up to 1.44x (2.2x) at ``N = 2 ... 8``, ``T = 1024 ... 4096``.
SCAN_MIN_COLUMNS = 16

#: Fewest columns times ``N`` with which a product of dense transitions takes the scans (:data:`SCAN_MIN_COLUMNS`):
#: at ``N = 4`` the scans cost 2-4x the band with 16 columns, 0.7-1.4x with 32, 0.55-0.9x with 64.
SCAN_DENSE_MIN_COLUMNS_N = 256

#: Fewest entries ``T * columns * N`` of a product taken through the scans (their fixed cost, about 1 ms, is shared
#: by the columns): below, the band wins whatever the columns.
SCAN_MIN_WORK = {"diag": 1 << 16, "dense": 1 << 17}

#: Most entries ``T * columns * N`` of a product taken through the scans. Dense transitions: above, the scans'
#: ``(T, columns, N)`` temporaries leave the cache and the band is as fast or faster (the scans 0.6-1.7x its time at
#: ``2^23`` to ``2^24`` entries, three runs). Scalar and diagonal ones: 0.2-0.95x there at ``N = 1, 2``, 0.4-1.3x at
#: ``N = 4, 8`` (the paths trade places from run to run), so the bound is the largest measured size.
SCAN_MAX_WORK = {"diag": 1 << 24, "dense": 1 << 22}

#: Largest band (entries, batch included) kept with the matrix for its next products whatever its parameters
#: (building it costs about as much as the solve at T = 1024): 16 MiB.
KEEP_MAX_ENTRIES = 2**21

#: A larger band is kept where its bytes are at most this many times those of the matrix's parameters (1.8x for
#: float64 SSS(4) with dense transitions, 2.7x diagonal, 3.5x scalar): a cache in proportion to the matrix, as its
#: dense form is for small ones. Building a band costs 2-5x its solve (measured, one thread, T = 1e5, SSS(4)),
#: so a fresh one per call made long products and solves super-linear (exponent 1.2-1.4 from T = 1e4 to 1e6).
#: Parameters broadcast over a batch (a band much larger than them) take fresh time blocks instead.
KEEP_PER_PARAMETER_BYTE = 4

#: Band entries of one time block of a longer lower sequence (4 MiB: the block's band and right-hand side stay
#: in cache between their build and their solve). Measured (one thread, SSS(4), T = 1e6, K = 1): blocks of
#: 2^17 to 2^21 entries within 10%; the torch scans they replace cost 2x (diagonal A) to 7x (dense A).
BLOCK_ENTRIES = 2**19

_REAL = (torch.float32, torch.float64)


class Band(NamedTuple):
    """The banded system of generators: ``ab (*b, T, m, kd + 1)`` float64, entry ``[t, c, d]`` the system's entry in
    row ``t m + c + d``, column ``t m + c`` (per batch entry, the transpose of LAPACK's lower band storage);
    ``kd``; the diagonal ``D (*b, T)`` and input maps ``Bt (*b, N, T)`` (time last) in float64."""

    ab: np.ndarray
    kd: int
    D: np.ndarray
    Bt: np.ndarray


def applies(G: Generators, X: torch.Tensor, solve: bool = False, transpose: bool = False,
            batch: torch.Size | None = None) -> bool:
    """Whether the banded path runs ``G`` with ``X (*, T, K)``: real CPU data, ``N <= MAX_ORDER``, at most
    :data:`MAX_ROWS` systems, no gradient wanted, not while ``torch.compile`` traces; for products, fewer columns
    than the scans need to win (:func:`scans_win`) and, for those of the transpose (no time blocks), a band that is
    kept (:func:`keeps`; a solve takes the band at any length: the blocked solve costs ~10x more per step).
    ``batch``: ``G``'s batch shape where the caller knows it."""
    values, B = G.A.values, G.B
    if X.device.type != "cpu" or B.shape[-1] > MAX_ORDER or B.shape[-2] == 0 or X.shape[-1] == 0:
        return False
    if X.dtype not in _REAL or B.dtype not in _REAL or values.dtype not in _REAL or torch.compiler.is_compiling():
        return False  # (B, C and D share the matrix's dtype)
    if torch.is_grad_enabled() and (values.requires_grad or B.requires_grad or G.C.requires_grad or X.requires_grad
                                    or (G.D is not None and G.D.requires_grad)):
        return False
    batch = G.batch_shape if batch is None else batch
    rows = batch.numel() if X.dim() == 2 else broadcast_shapes(batch, X.shape[:-2]).numel()
    if not 0 < rows <= MAX_ROWS:
        return False
    return solve or (not scans_win(G, rows * X.shape[-1]) and (not transpose or keeps(G, batch)))


def scans_win(G: Generators, columns: int) -> bool:
    """Whether the torch scans multiply ``G``'s matrix with ``columns`` columns (all systems together) faster than
    the band: :data:`SCAN_MIN_COLUMNS`, :data:`SCAN_DENSE_MIN_COLUMNS_N`, :data:`SCAN_MIN_WORK`,
    :data:`SCAN_MAX_WORK`."""
    N = G.B.shape[-1]
    kind = "dense" if G.A.kind == "dense" else "diag"
    wide = columns * N >= SCAN_DENSE_MIN_COLUMNS_N if kind == "dense" else columns >= SCAN_MIN_COLUMNS
    return wide and SCAN_MIN_WORK[kind] <= G.B.shape[-2] * columns * N <= SCAN_MAX_WORK[kind]


def _np(t: torch.Tensor) -> np.ndarray:
    return host(t if t.dtype == torch.float64 else t.to(torch.float64))


def _width(G: Generators) -> int:
    """``kd``: sub-diagonals of the system."""
    return 2 * G.order if G.A.kind == "dense" else G.order + 1


def band_entries(G: Generators, batch: torch.Size | None = None) -> int:
    """Entries of :func:`band`'s array for ``G`` (``batch``: its batch shape where the caller knows it)."""
    return (G.batch_shape if batch is None else batch).numel() * G.length * (G.order + 1) * (1 + _width(G))


class _Parts(NamedTuple):
    """The generators over the whole sequence as float64 arrays with time last (batch expanded; every slice of a
    block is then one long strided loop, where a time-first layout gave loops of ``N`` entries): transitions ``A``
    ``(*b, N, T)`` (scalar and diagonal kinds) or ``(*b, N, N, T)``, ``CA (*b, N, T)`` (``C_t^T A_t``),
    ``Bt (*b, N, T)``, the diagonal ``D (*b, T)``, and ``kd``."""

    A: np.ndarray
    CA: np.ndarray
    Bt: np.ndarray
    D: np.ndarray
    kd: int


def _parts(G: Generators) -> _Parts:
    N, T, batch = G.order, G.length, tuple(G.batch_shape)
    f64 = lambda t: t.detach().to(torch.float64)  # noqa: E731
    Bt, Ct = (f64(t).expand(*batch, T, N).mT.contiguous() for t in (G.B, G.C))
    if G.A.kind == "dense":
        A = f64(G.A.values).expand(*batch, T, N, N).movedim(-3, -1).contiguous()
        CA = (Ct[..., :, None, :] * A).sum(-3)
    else:
        A = G.A.actual()[..., None].expand(*batch, T, N) if G.A.kind in ("log", "scalar") else G.A.values
        A = f64(A).expand(*batch, T, N).mT.contiguous()
        CA = Ct * A
    D = f64(G.diagonal()).expand(*batch, T).contiguous()
    return _Parts(host(A), host(CA), host(Bt), host(D), _width(G))


def _fill(ab: np.ndarray, P: _Parts, lo: int, solve: bool, fresh: bool) -> None:
    """Write the band of steps ``lo .. lo + len`` into ``ab (*b, len, m, kd + 1)``: every entry that depends on
    the generators, and (``fresh``: a new zero buffer) the constant ones; the structural zeros are left as they
    are (a buffer is reused by the next time block). One strided slice over time per entry: fancy indexing, or
    slices with ``N`` entries innermost, cost more than the solve."""
    N, L = P.Bt.shape[-2], ab.shape[-3]
    into = slice(lo + 1, lo + L)  # the transitions into steps lo+1 .., read by the rows of the next step
    for i in range(N):
        if P.A.ndim == P.Bt.ndim + 1:  # dense: entry (i, j) of A_t at h-row i, column j, diagonal N+1+i-j
            for j in range(N):
                np.negative(P.A[..., i, j, into], out=ab[..., :-1, 1 + j, N + 1 + i - j])
        else:
            np.negative(P.A[..., i, into], out=ab[..., :-1, 1 + i, N + 1])
        # the output row of step t reads h_{t-1}
        np.multiply(P.CA[..., i, into], 1.0 if solve else -1.0, out=ab[..., :-1, 1 + i, N - i])
        if solve:
            np.negative(P.Bt[..., i, lo:lo + L], out=ab[..., :, 0, 1 + i])
    if solve:
        ab[..., :, 0, 0] = P.D[..., lo:lo + L]
    if fresh:
        ab[..., :, 1 if solve else 0:, 0] = 1.0


def keeps(G: Generators, batch: torch.Size) -> bool:
    """Whether a matrix with generators ``G`` (batch shape ``batch``) keeps its band: :data:`KEEP_MAX_ENTRIES`,
    :data:`KEEP_PER_PARAMETER_BYTE`."""
    entries = band_entries(G, batch)
    if entries <= KEEP_MAX_ENTRIES:
        return True
    params = sum(_stored(t) * t.element_size() for t in (G.A.values, G.B, G.C, G.D) if t is not None)
    return 8 * entries <= KEEP_PER_PARAMETER_BYTE * params


def _stored(t: torch.Tensor) -> int:
    """Entries that ``t`` holds (an expanded dimension, of stride 0, holds one)."""
    return math.prod(size for size, stride in zip(t.shape, t.stride()) if stride)


def band(G: Generators, solve: bool) -> Band:
    """The :class:`Band` of ``G``, for its product (``solve=False``, unit diagonal) or its solve."""
    P = _parts(G)
    ab = np.zeros((*P.D.shape, G.order + 1, P.kd + 1))
    _fill(ab, P, 0, solve, True)
    return Band(ab, P.kd, P.D, P.Bt)


def _run(ab: np.ndarray, kd: int, rhs: np.ndarray, transpose: bool, unit: bool,
         singular: str = "SSS is singular: a diagonal entry is zero") -> np.ndarray:
    """Solve in place every system of ``rhs (*, K, T, m)`` (C-ordered float64: each system's ``(T m, K)`` block is
    Fortran-ordered, as LAPACK takes it) with its band: one ``dtbtrs`` each. Returns ``rhs``; ``singular`` is the
    message of a zero diagonal entry."""
    if not rhs.flags.c_contiguous:
        raise ValueError("_run solves a C-ordered right-hand side in place")
    K, T, m = rhs.shape[-3:]
    n, bbatch = T * m, ab.shape[:-3]
    bands = ab.reshape(-1, n, ab.shape[-1])
    if rhs.ndim == 3:  # one system (the common case, without the index arithmetic)
        which, systems = (0,), rhs.reshape(1, K, n)
    else:
        which = np.broadcast_to(np.arange(bands.shape[0]).reshape(bbatch), rhs.shape[:-3]).ravel()
        systems = rhs.reshape(-1, K, n)
    trans, diag = "T" if transpose else "N", "U" if unit else "N"
    for r in range(systems.shape[0]):
        b = systems[r].T
        x, info = scipy.linalg.lapack.dtbtrs(bands[which[r]].T, b, uplo="L", trans=trans, diag=diag, overwrite_b=1)
        if info > 0:
            raise SingularMatrixError(singular)
        if info < 0:
            raise RuntimeError(f"LAPACK dtbtrs failed with info = {info}")
        if x.ctypes.data != b.ctypes.data:  # (solved in place where LAPACK could take b as it is)
            b[...] = x
    return rhs


def _rhs(bd: Band, X: torch.Tensor, solve: bool, transpose: bool) -> np.ndarray:
    """The right-hand side ``(*batch, K, T, m)`` of the system for ``X (*, T, K)``: ``(D x_t, B_t x_t)`` for a
    product, ``(x_t, 0)`` for a solve or a transposed product."""
    XT = _np(X).swapaxes(-1, -2)  # (*, K, T)
    batch = XT.shape[:-2] if bd.D.ndim == 1 else np.broadcast_shapes(bd.D.shape[:-1], XT.shape[:-2])
    K, T, N = XT.shape[-2], XT.shape[-1], bd.Bt.shape[-2]
    rhs = np.empty((*batch, K, T, N + 1)) if not (solve or transpose) else np.zeros((*batch, K, T, N + 1))
    if solve or transpose:
        rhs[..., 0] = XT
        return rhs
    np.multiply(XT, bd.D[..., None, :], out=rhs[..., 0])
    for i in range(N):
        np.multiply(XT, bd.Bt[..., i, None, :], out=rhs[..., 1 + i])
    return rhs


def _out(Y: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    """``Y (*, K, T)`` as a tensor ``(*, T, K)`` in ``like``'s dtype."""
    Y = torch.from_numpy(np.ascontiguousarray(Y.swapaxes(-1, -2)))
    return Y if like.dtype == torch.float64 else Y.to(like.dtype)


def _blocks(G: Generators, X: torch.Tensor, solve: bool) -> torch.Tensor:
    """The product (or solve) of the lower ``G`` with ``X (*, T, K)`` in time blocks (module docstring): each block
    system starts with the step before it, pinned to the state carried in. One band buffer serves every block."""
    T, m = G.length, G.order + 1
    P = _parts(G)
    steps = max(2, BLOCK_ENTRIES // (P.D[..., 0].size * m * (P.kd + 1)))
    buffer = np.zeros((*P.D.shape[:-1], min(steps + 1, T), m, P.kd + 1))
    buffer[..., :, 1 if solve else 0:, 0] = 1.0  # the constant entries (see _fill)
    out, h = [], None
    for t0 in range(0, T, steps):
        lo, t1 = max(t0 - 1, 0), min(t0 + steps, T)
        ab = buffer[..., :t1 - lo, :, :]
        _fill(ab, P, lo, solve, False)
        rhs = _rhs(Band(ab, P.kd, P.D[..., lo:t1], P.Bt[..., lo:t1]), X[..., lo:t1, :], solve, False)
        if t0:  # the pinned step: identity rows, right-hand side (0, h_{t0-1})
            ab[..., 0, :, 0] = 1.0
            ab[..., 0, 0, 1:] = 0.0
            rhs = np.broadcast_to(rhs, np.broadcast_shapes(rhs.shape, h.shape[:-2] + rhs.shape[-3:])).copy()
            rhs[..., 0, 0] = 0.0
            rhs[..., 0, 1:] = h
        z = _run(ab, P.kd, rhs, False, not solve)
        out.append(z[..., t0 - lo:, 0])
        h = z[..., -1, 1:m]
    return _out(np.concatenate(out, axis=-1), X)


def sss_matmat(G: Generators, X: torch.Tensor, transpose: bool = False, banded: Band | None = None) -> torch.Tensor:
    """``M X`` (or ``M^T X``) for the lower SSS ``M`` with generators ``G`` and ``X (*, T, K)``. ``banded``: the
    :func:`band` of ``G`` (``solve=False``) where kept; without it a lower product longer than
    :data:`KEEP_MAX_ENTRIES` runs in time blocks.

    Examples
    --------
    >>> from structmat.core.transitions import Transitions
    >>> G = Generators(Transitions(torch.full((3,), 0.5, dtype=torch.float64), "scalar"),
    ...                torch.ones(3, 1, dtype=torch.float64), torch.ones(3, 1, dtype=torch.float64))
    >>> sss_matmat(G, torch.ones(3, 1, dtype=torch.float64))[:, 0].tolist()  # 1, 1 + 0.5, 1 + 0.5 + 0.25
    [1.0, 1.5, 1.75]
    """
    if banded is None and not transpose and band_entries(G) > KEEP_MAX_ENTRIES:  # (a band not kept)
        return _blocks(G, X, False)
    bd = band(G, solve=False) if banded is None else banded
    z = _run(bd.ab, bd.kd, _rhs(bd, X, False, transpose), transpose, True)
    if not transpose:
        return _out(z[..., 0], X)
    Y = bd.D[..., None, :] * z[..., 0]  # y = D x + B^T h one state at a time: a (K, T, N) temporary and its sum
    # took 508 against 380 us (SSS(4), T = 4096, one column)
    for i in range(bd.Bt.shape[-2]):
        Y += bd.Bt[..., i, None, :] * z[..., 1 + i]
    return _out(Y, X)


def sss_solve(G: Generators, Y: torch.Tensor, transpose: bool = False, banded: Band | None = None) -> torch.Tensor:
    """``M^{-1} Y`` (or ``M^{-T} Y``) for the lower SSS ``M`` with generators ``G`` and ``Y (*, T, K)``;
    :class:`~structmat.SingularMatrixError` for a zero diagonal entry. ``banded``: :func:`band` of ``G``
    (``solve=True``) where kept; without it a lower solve longer than :data:`KEEP_MAX_ENTRIES` runs in time blocks."""
    if banded is None and not transpose and band_entries(G) > KEEP_MAX_ENTRIES:
        return _blocks(G, Y, True)
    bd = band(G, solve=True) if banded is None else banded
    return _out(_run(bd.ab, bd.kd, _rhs(bd, Y, True, transpose), transpose, False)[..., 0], Y)


def bidiagonal_applies(diag: torch.Tensor, sub: torch.Tensor, Y: torch.Tensor) -> bool:
    """Whether :func:`bidiagonal_solve` runs ``diag (*, T)``, ``sub (*, T - 1)`` with ``Y (*, T, K)``: the conditions
    of :func:`applies` (real CPU data, at most :data:`MAX_ROWS` systems, no gradient, no tracing)."""
    if Y.device.type != "cpu" or Y.shape[-1] == 0 or Y.shape[-2] == 0 or torch.compiler.is_compiling():
        return False
    if Y.dtype not in _REAL or diag.dtype not in _REAL:
        return False
    if torch.is_grad_enabled() and (diag.requires_grad or sub.requires_grad or Y.requires_grad):
        return False
    batch = diag.shape[:-1] if diag.shape[:-1] == sub.shape[:-1] else broadcast_shapes(diag.shape[:-1], sub.shape[:-1])
    return 0 < broadcast_shapes(batch, Y.shape[:-2]).numel() <= MAX_ROWS


def bidiagonal_band(diag: torch.Tensor, sub: torch.Tensor) -> np.ndarray:
    """The band ``(*b, T, 1, 2)`` of the lower bidiagonal matrix (``[t, 0, 0] = diag[t]``, ``[t, 0, 1] = sub[t]``)."""
    T = diag.shape[-1]
    batch = broadcast_shapes(diag.shape[:-1], sub.shape[:-1])
    ab = np.zeros((*batch, T, 1, 2))
    ab[..., 0, 0] = _np(diag)
    ab[..., :-1, 0, 1] = _np(sub)
    return ab


def bidiagonal_solve(ab: np.ndarray, Y: torch.Tensor, transpose: bool) -> torch.Tensor:
    """``M^{-1} Y`` (or ``M^{-T} Y``) for the lower bidiagonal ``M`` of band ``ab`` (:func:`bidiagonal_band`) and
    ``Y (*, T, K)``, by ``dtbtrs``: :class:`~structmat.SingularMatrixError` for a zero diagonal entry, and for a
    solution that overflows from a finite ``Y`` (a reduction sees any inf or NaN)."""
    XT = _np(Y).swapaxes(-1, -2)
    batch = np.broadcast_shapes(ab.shape[:-3], XT.shape[:-2])
    rhs = np.array(np.broadcast_to(XT[..., None], (*batch, *XT.shape[-2:], 1)), order="C")
    x = _run(ab, 1, rhs, transpose, False, "Bidiagonal is singular: a diagonal entry is zero")[..., 0]
    with np.errstate(over="ignore", invalid="ignore"):  # (inf - inf in the sum: the exact check follows)
        finite = math.isfinite(x.sum())
    if overflow_checks_enabled() and not finite and np.isfinite(XT).all() and not np.isfinite(x).all():
        raise SingularMatrixError(f"Bidiagonal.solve: the solution overflows {str(Y.dtype).replace('torch.', '')} "
                                  "(the matrix is singular or too close to singular in this dtype)")
    return _out(x, Y)
