"""Quasiseparable solves as one banded system with partial pivoting, in compiled code (LAPACK ``dgbsv``) on the CPU.

With the forward state ``s_t`` of the strictly-lower part and the backward state ``u_t`` of the strictly-upper part
(``upper`` holds the generators of its transpose, ``M[i, j] = Bu_i^T Au_{i+1}^T ... Au_j^T Cu_j`` for ``i < j``),
``M x = y`` is, per step ``t`` with the unknowns ``z_t = (x_t, s_t, u_t)`` (``m = 1 + n_l + n_u``)::

    d_t x_t + C_t^T A_t s_{t-1} + (Au_{t+1} Bu_t)^T u_{t+1} = y_t
    s_t - A_t s_{t-1} - B_t x_t = 0                              (s_{-1} = 0)
    u_t - Au_{t+1}^T u_{t+1} - Cu_t x_t = 0                      (u_T = 0)

a band of ``kl = m + n_l - 1`` sub- and ``ku = 2m - 1`` super-diagonals. Eliminating the states (identities on
their diagonal blocks, triangular recurrences) gives back ``M``, so the system is singular exactly when ``M`` is.
LAPACK's banded LU with partial pivoting costs ``O(T m kl (kl + ku))``, linear in ``T`` with no Python step per
time index (the chunked eliminations of :mod:`structmat.linalg.quasiseparable_solve` cost 5-10x more per step
and grew faster than ``T``: measured 80 ms at T = 1e4, 1.1 s at 1e5, one thread, orders 2 + 2).

Real data only, computed in float64; not differentiated (callers take the chunked solves where a gradient is
wanted).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.linalg.lapack
import torch

from structmat.core.host import host
from structmat.core.validation import SingularMatrixError, broadcast_shapes, overflow_checks_enabled
from structmat.linalg.banded import MAX_ORDER, MAX_ROWS
from structmat.linalg.semiseparable import Generators

__all__ = ["applies", "quasiseparable_banded_solve", "BUILD_STEPS"]

_REAL = (torch.float32, torch.float64)

#: Steps of the band written at once: each entry is a strided slice over the steps, so a whole long band swept
#: once per entry (20 sweeps of 112 MB at T = 1e5, orders 2 + 2) cost more than its LU; a block stays in cache.
BUILD_STEPS = 4096


def applies(lower: Generators, upper: Generators, d: torch.Tensor, Y: torch.Tensor) -> bool:
    """Real CPU data, orders up to :data:`~structmat.linalg.banded.MAX_ORDER` each, at most
    :data:`~structmat.linalg.banded.MAX_ROWS` systems, no gradient wanted, not while ``torch.compile`` traces."""
    if Y.device.type != "cpu" or Y.shape[-1] == 0 or Y.shape[-2] == 0 or torch.compiler.is_compiling():
        return False
    if max(lower.order, upper.order) > MAX_ORDER or Y.dtype not in _REAL or d.dtype not in _REAL:
        return False
    tensors = (lower.A.values, lower.B, lower.C, upper.A.values, upper.B, upper.C, d, Y)
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return False
    batch = broadcast_shapes(lower.batch_shape, upper.batch_shape, d.shape[:-1], Y.shape[:-2])
    return 0 < batch.numel() <= MAX_ROWS


def _np(t: torch.Tensor, shape) -> np.ndarray:
    return host(t.to(torch.float64).expand(*shape))


def _band(lower: Generators, upper: Generators, d: torch.Tensor, batch) -> tuple[np.ndarray, int, int]:
    """``(ab (*b, 2 kl + ku + 1, T m), kl, ku)``: the system in LAPACK's banded LU storage (``A[i, j]`` at row
    ``kl + ku + i - j``, column ``j``), built in time blocks of :data:`BUILD_STEPS`."""
    T, nl, nu = d.shape[-1], lower.order, upper.order
    m = 1 + nl + nu
    kl, ku = m + nl - 1, 2 * m - 1
    A = _np(lower.A.matrices(nl), (*batch, T, nl, nl))
    Au = _np(upper.A.matrices(nu), (*batch, T, nu, nu))[..., 1:, :, :]  # Au_{t+1}, for t < T - 1
    B, C = _np(lower.B, (*batch, T, nl)), _np(lower.C, (*batch, T, nl))
    Bu, Cu = _np(upper.B, (*batch, T, nu)), _np(upper.C, (*batch, T, nu))
    entries = [(0, 0, 0, _np(d, (*batch, T)))]  # (row offset, column offset, step distance, values by step)
    CA, AuB = (C[..., :, :, None] * A).sum(-2), (Au * Bu[..., :-1, None, :]).sum(-1)  # C_t^T A_t, Au_{t+1} Bu_t
    for i in range(nl):
        entries += [(0, 1 + i, -1, CA[..., i]), (1 + i, 1 + i, 0, 1.0), (1 + i, 0, 0, -B[..., i])]
        entries += [(1 + i, 1 + j, -1, -A[..., i, j]) for j in range(nl)]
    for k in range(nu):
        entries += [(0, 1 + nl + k, 1, AuB[..., k]), (1 + nl + k, 1 + nl + k, 0, 1.0), (1 + nl + k, 0, 0, -Cu[..., k])]
        entries += [(1 + nl + k, 1 + nl + j, 1, -Au[..., j, k]) for j in range(nu)]
    ab = np.zeros((*batch, T * m, 2 * kl + ku + 1)).swapaxes(-1, -2)  # per system Fortran-ordered
    for t0 in range(0, T, BUILD_STEPS):
        for r, c, delta, values in entries:  # one band row, every m-th column: a strided slice
            lo, hi = max(t0, -delta), min(t0 + BUILD_STEPS, T - max(delta, 0))
            start = (lo + delta) * m + c
            part = values if isinstance(values, float) else values[..., lo:hi]
            ab[..., kl + ku + r - c - delta * m, start:start + (hi - lo - 1) * m + 1:m] = part
    return ab, kl, ku


def quasiseparable_banded_solve(lower: Generators, upper: Generators, d: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """Solve ``M X = Y`` for ``M = strict(lower) + diag(d) + strict(upper)^T`` and ``Y (*, T, K)`` (batch dims
    broadcast; see the module docstring). :class:`~structmat.SingularMatrixError` when ``M`` is singular, and for
    a solution that overflows from a finite ``Y``."""
    T, K = Y.shape[-2:]
    m = 1 + lower.order + upper.order
    mbatch = broadcast_shapes(lower.batch_shape, upper.batch_shape, d.shape[:-1])
    batch = tuple(broadcast_shapes(mbatch, Y.shape[:-2]))
    ab, kl, ku = _band(lower, upper, d, batch)  # (built at the full batch: dgbsv overwrites it)
    YT = _np(Y, (*batch, T, K)).swapaxes(-1, -2)
    rhs = np.zeros((*batch, K, T, m))
    rhs[..., 0] = YT
    bands, systems = ab.reshape(-1, *ab.shape[-2:]), rhs.reshape(-1, K, T * m)
    for r in range(systems.shape[0]):
        b = systems[r].T
        _, _, x, info = scipy.linalg.lapack.dgbsv(kl, ku, bands[r], b, overwrite_ab=1, overwrite_b=1)
        if info > 0:
            raise SingularMatrixError("Quasiseparable matrix is singular: a zero pivot in its LU factorisation")
        if info < 0:
            raise RuntimeError(f"LAPACK dgbsv failed with info = {info}")
        if x.ctypes.data != b.ctypes.data:  # (solved in place where LAPACK could take b as it is)
            b[...] = x
    X = rhs[..., 0]
    with np.errstate(over="ignore", invalid="ignore"):  # (inf - inf in the sum: the exact check follows)
        finite = math.isfinite(X.sum())
    if overflow_checks_enabled() and not finite and np.isfinite(YT).all() and not np.isfinite(X).all():
        raise SingularMatrixError(f"Quasiseparable.solve: the solution overflows {str(Y.dtype).replace('torch.', '')} "
                                  "(the matrix is singular or too close to singular in this dtype)")
    return torch.from_numpy(np.ascontiguousarray(X.swapaxes(-1, -2))).to(Y.dtype)
