"""SSS products and solves as banded triangular systems, in compiled code (LAPACK ``dtbtrs``) on the CPU.

Stack per step ``t`` the output and the state, ``z_t = (y_t, h_t)`` (``m = N + 1`` unknowns). The product
``y = M x`` of a lower SSS is the unit lower-triangular system

    y_t - C_t^T A_t h_{t-1} = D_t x_t,        h_t - A_t h_{t-1} = B_t x_t,

and the solve ``M x = y`` (unknowns ``z_t = (x_t, h_t)``) the lower-triangular system

    D_t x_t + C_t^T A_t h_{t-1} = y_t,        h_t - A_t h_{t-1} - B_t x_t = 0.

Both are banded: ``T m`` unknowns, ``kd = N + 1`` sub-diagonals for scalar or diagonal transitions and
``2N`` for dense ones, so LAPACK runs the recurrence step for step with the loop's arithmetic in
``O(T m kd K)`` (no Python step per time index; ``a_t = 0`` stays an exact zero). The upper mirror is the
transpose: ``M^T x`` and ``M^{-T} y`` are the transposed systems (``trans='T'``), no reversal of time.

Real data only, computed in float64 (float32 results are rounded once at the end); not differentiated
(callers take the torch scans where a gradient is wanted).
"""

from __future__ import annotations

import numpy as np
import scipy.linalg.lapack
import torch

from structmat.core.validation import SingularMatrixError, broadcast_shapes
from structmat.linalg.semiseparable import Generators

__all__ = ["applies", "band", "band_entries", "sss_matmat", "sss_solve", "MAX_ORDER", "MAX_ROWS", "KEEP_MAX_ENTRIES"]

#: Largest state size taken through the band: its width grows as ``N`` (``2N`` for dense transitions), so the
#: work per step as ``N^2``; the blocked solve and scan, ``O(N)`` per step for diagonal transitions, win above.
#: Measured (one thread, T = 4096, 64 columns, diagonal A): N = 8 banded 0.5x the blocked solve's time, N = 16 1.8x.
MAX_ORDER = 8

#: Most systems (batch entries of the matrix times those of the operand) solved one LAPACK call each; a
#: larger batch takes the vectorised torch scans, which treat the whole batch in each step.
MAX_ROWS = 64


#: Largest band (entries, batch included) taken: 16 MiB, kept with the matrix for its next products (building
#: it costs about as much as the solve at T = 1024). Longer sequences take the blocked torch scan and solve,
#: whose Python steps are amortised there: a fresh band of 36 MiB (T = 1e5, N = 4, dense A) cost more in page
#: faults and fancy indexing than the whole blocked scan (measured 150 ms against 40 ms, one thread).
KEEP_MAX_ENTRIES = 2**21


def applies(G: Generators, X: torch.Tensor, solve: bool = False) -> bool:
    """Whether the banded path runs ``G`` with ``X (*, T, K)``: real CPU data, ``N <= MAX_ORDER``, at most
    :data:`MAX_ROWS` systems and (products only: a solve takes the band at any length, the blocked solve costs
    ~10x more per step) :data:`KEEP_MAX_ENTRIES` band entries, no gradient wanted, not while ``torch.compile``
    traces."""
    if X.device.type != "cpu" or G.order > MAX_ORDER or G.length == 0 or X.shape[-1] == 0:
        return False
    if X.dtype not in _REAL or G.B.dtype not in _REAL or G.A.values.dtype not in _REAL or torch.compiler.is_compiling():
        return False  # (B, C and D share the matrix's dtype)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (G.A.values, G.B, G.C, G.D, X)):
        return False
    rows = broadcast_shapes(G.batch_shape, X.shape[:-2]).numel()
    return 0 < rows <= MAX_ROWS and (solve or band_entries(G) <= KEEP_MAX_ENTRIES)


_REAL = (torch.float32, torch.float64)


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().to(torch.float64).numpy()


def band_entries(G: Generators) -> int:
    """Entries of :func:`band`'s array for ``G``."""
    N = G.order
    return G.batch_shape.numel() * G.length * (N + 1) * (1 + (2 * N if G.A.kind == "dense" else N + 1))


def band(G: Generators, solve: bool) -> tuple[np.ndarray, int]:
    """``(*b, T, m, kd + 1)`` float64: entry ``[t, c, d]`` is the system's entry in row ``t m + c + d``,
    column ``t m + c`` (per batch entry, the transpose of LAPACK's lower band storage); and ``kd``."""
    N, T = G.order, G.length
    dense = G.A.kind == "dense"
    kd = 2 * N if dense else N + 1
    batch = tuple(G.batch_shape)
    band = np.zeros((*batch, T, N + 1, kd + 1))
    band[..., 0] = 1.0
    ar = np.arange(N)
    B, C = (_np(t.expand(*batch, T, N)) for t in (G.B, G.C))
    if dense:
        A = _np(G.A.values.expand(*batch, T, N, N))
        CA = np.einsum("...tn,...tnk->...tk", C[..., 1:, :], A[..., 1:, :, :])
        ii, jj = np.divmod(np.arange(N * N), N)
        band[..., :-1, 1 + jj, N + 1 + ii - jj] = -A[..., 1:, ii, jj]
    else:
        A = _np(G.A.actual()[..., None].expand(*batch, T, N) if G.A.kind in ("log", "scalar")
                else G.A.values.expand(*batch, T, N))
        CA = C[..., 1:, :] * A[..., 1:, :]
        band[..., :-1, 1 + ar, N + 1] = -A[..., 1:, :]
    band[..., :-1, 1 + ar, N - ar] = CA if solve else -CA  # the output row of step t reads h_{t-1}
    if solve:
        band[..., :, 0, 1 + ar] = -B
        band[..., :, 0, 0] = _np(G.diagonal().expand(*batch, T))
    return band, kd


def _run(band: np.ndarray, kd: int, rhs: torch.Tensor, transpose: bool, unit: bool) -> np.ndarray:
    """Solve every system of ``rhs (*, T, m, K)`` with its band (batch shapes broadcast): one ``dtbtrs`` each."""
    T, m, K = rhs.shape[-3:]
    bbatch = band.shape[:-3]
    batch = broadcast_shapes(bbatch, rhs.shape[:-3])
    n = T * m
    bands = band.reshape(-1, n, kd + 1)
    which = np.broadcast_to(np.arange(bands.shape[0]).reshape(bbatch), batch).ravel()
    rhs = _np(rhs if rhs.shape[:-3] == batch else rhs.expand(*batch, T, m, K))
    out = np.ascontiguousarray(rhs.reshape(-1, n, K).transpose(0, 2, 1))
    for r in range(out.shape[0]):  # out[r].T: (n, K) in Fortran order, solved in place
        _, info = scipy.linalg.lapack.dtbtrs(bands[which[r]].T, out[r].T, uplo="L", trans="T" if transpose else "N",
                                             diag="U" if unit else "N", overwrite_b=1)
        if info > 0:
            raise SingularMatrixError("SSS is singular: a diagonal entry is zero")
        if info < 0:
            raise RuntimeError(f"LAPACK dtbtrs failed with info = {info}")
    return out.transpose(0, 2, 1).reshape(*batch, T, m, K)


def sss_matmat(G: Generators, X: torch.Tensor, transpose: bool = False, banded=None) -> torch.Tensor:
    """``M X`` (or ``M^T X``) for the lower SSS ``M`` with generators ``G`` and ``X (*, T, K)``.

    Examples
    --------
    >>> from structmat.core.transitions import Transitions
    >>> G = Generators(Transitions(torch.full((3,), 0.5, dtype=torch.float64), "scalar"),
    ...                torch.ones(3, 1, dtype=torch.float64), torch.ones(3, 1, dtype=torch.float64))
    >>> sss_matmat(G, torch.ones(3, 1, dtype=torch.float64))[:, 0].tolist()  # 1, 1 + 0.5, 1 + 0.5 + 0.25
    [1.0, 1.5, 1.75]
    """
    ab, kd = band(G, solve=False) if banded is None else banded
    D, B = G.diagonal()[..., :, None, None], G.B[..., :, :, None]
    if not transpose:
        rhs = torch.cat([D * X[..., :, None, :], B * X[..., :, None, :]], dim=-2)
        return torch.from_numpy(_run(ab, kd, rhs, False, True)[..., 0, :]).to(X.dtype)
    rhs = torch.nn.functional.pad(X[..., :, None, :], (0, 0, 0, G.order))
    z = torch.from_numpy(_run(ab, kd, rhs, True, True)).to(X.dtype)
    return D[..., 0] * z[..., 0, :] + (B * z[..., 1:, :]).sum(-2)


def sss_solve(G: Generators, Y: torch.Tensor, transpose: bool = False, banded=None) -> torch.Tensor:
    """``M^{-1} Y`` (or ``M^{-T} Y``) for the lower SSS ``M`` with generators ``G`` and ``Y (*, T, K)``;
    :class:`~structmat.SingularMatrixError` for a zero diagonal entry. ``banded``: :func:`band` of ``G``
    (``solve=True``) where already built; likewise for :func:`sss_matmat` (``solve=False``)."""
    ab, kd = band(G, solve=True) if banded is None else banded
    rhs = torch.nn.functional.pad(Y[..., :, None, :], (0, 0, 0, G.order))
    return torch.from_numpy(_run(ab, kd, rhs, transpose, False)[..., 0, :]).to(Y.dtype)
