"""Closure rules of the elementary classes: diagonal, dense, low-rank and bidiagonal matrices,
and the exact inverses that turn 1-SS matrices into bidiagonal ones and back."""

from __future__ import annotations

import math

import torch

from structmat.algebra.semiseparable import batch_of, fit, sss_add, sss_matmul
from structmat.core.base import StructuredMatrix
from structmat.core.dtypes import compute_dtype, real_dtype
from structmat.core.lazy import Inverse, Sum, Transpose
from structmat.core.validation import SingularMatrixError, check_overflow, overflow_checks_enabled
from structmat.matrices.bidiagonal import Bidiagonal
from structmat.matrices.dense import Dense
from structmat.matrices.diagonal import Diagonal
from structmat.matrices.lowrank import LowRank
from structmat.matrices.one_ss import OneSS, safe_log
from structmat.matrices.sss import SSS

__all__ = [
    "diagonal_add", "diagonal_matmul", "diagonal_inverse", "diagonal_hadamard", "dense_add", "dense_matmul",
    "dense_inverse", "dense_hadamard", "lowrank_add", "lowrank_matmul", "matmul_lowrank", "lowrank_inverse",
    "bidiagonal_add", "diagonal_matmul_bidiagonal", "bidiagonal_matmul_diagonal", "bidiagonal_inverse",
    "bidiagonal_sss_add", "bidiagonal_sss_matmul", "sss_bidiagonal_matmul", "oness_inverse", "has_diagonal",
]


def diagonal_add(a: Diagonal, b: Diagonal) -> Diagonal:
    return Diagonal._of(a.d + b.d)


def diagonal_matmul(a: Diagonal, b: Diagonal) -> Diagonal:
    return Diagonal._of(a.d * b.d)


def diagonal_inverse(a: Diagonal) -> Diagonal:
    if bool((a.d == 0).any()):
        raise SingularMatrixError("Diagonal has a zero entry")
    return Diagonal._of(check_overflow(1.0 / a.d, "Diagonal.inv()"))


def has_diagonal(d: Diagonal, m: StructuredMatrix) -> bool:
    """The other operand of a Hadamard product with a diagonal has a structured ``diagonal()`` (a lazy sum or
    transpose has one where every matrix it holds has one)."""
    if isinstance(m, Sum):
        return all(has_diagonal(d, t) for t in m.terms)
    if isinstance(m, Transpose):
        return has_diagonal(d, m.M)
    return type(m).diagonal is not StructuredMatrix.diagonal


def diagonal_hadamard(d: Diagonal, m: StructuredMatrix) -> Diagonal:
    """Only the diagonal survives: ``diag(d * diag(m))``."""
    return Diagonal._of(d.d * m.diagonal())


def bidiagonal_hadamard(a: Bidiagonal, b: Bidiagonal) -> Bidiagonal | Diagonal:
    """The diagonals multiply, and the off-diagonals where both lie on the same side (a lower and an upper meet on
    the diagonal only). ``O(T)``."""
    if a.lower == b.lower:
        return Bidiagonal._of(a.diag * b.diag, a.sub * b.sub, a.lower)
    return Diagonal._of(a.diag * b.diag)


def lowrank_hadamard(a: LowRank, b: LowRank) -> LowRank:
    """Ranks multiply: ``(U1 V1^T) * (U2 V2^T) = (U1 . U2)(V1 . V2)^T`` with ``.`` the rows' Kronecker product
    (``(U1 . U2)[i] = U1[i] (x) U2[i]``). ``O(T r1 r2)``."""
    U = (a.U[..., :, None] * b.U[..., None, :]).flatten(-2)
    V = (a.V[..., :, None] * b.V[..., None, :]).flatten(-2)
    return LowRank._of(U, V)


def dense_add(a: Dense, b: StructuredMatrix) -> Dense:
    """Dense plus a diagonal or dense matrix (both ``O(T S)`` already)."""
    return Dense(a.to_dense() + b.to_dense())


def dense_matmul(a: Dense, b: Dense) -> Dense:
    return Dense(a.M @ b.M)


def dense_inverse(a: Dense) -> Dense:
    inverse, info = torch.linalg.inv_ex(a.M.to(compute_dtype(a.dtype)))  # (half precisions in float32)
    if bool((info != 0).any()):
        raise SingularMatrixError("Dense matrix is singular")
    return Dense(check_overflow(inverse, "Dense.inv()").to(a.dtype))


def dense_hadamard(a: Dense, m: StructuredMatrix) -> Dense:
    """Only reached with a Dense operand, which is ``O(T S)`` already: densifying ``m`` costs no more."""
    return Dense(a.M * m.to_dense())


def lowrank_add(a: LowRank, b: LowRank) -> LowRank:
    """Ranks add: ``[U1 U2] [V1 V2]^T``."""
    U1, U2, V1, V2 = a.U, b.U, a.V, b.V
    if not U1.shape[:-2] == U2.shape[:-2] == V1.shape[:-2] == V2.shape[:-2]:  # (each expand costs microseconds)
        batch = batch_of(a, b)
        U1, U2, V1, V2 = (t.expand(*batch, *t.shape[-2:]) for t in (U1, U2, V1, V2))
    return LowRank._of(torch.cat([U1, U2], -1), torch.cat([V1, V2], -1))


def lowrank_matmul(a: LowRank, m: StructuredMatrix) -> LowRank:
    """``U V^T M = U (M^T V)^T``: one transposed matvec with ``r`` columns."""
    return LowRank._of(a.U, m.T.matmul(a.V))


def matmul_lowrank(m: StructuredMatrix, b: LowRank) -> LowRank:
    """``M U V^T = (M U) V^T``: one matvec with ``r`` columns."""
    return LowRank._of(m.matmul(b.U), b.V)


def lowrank_inverse(a: LowRank) -> Inverse:
    """Singular below full rank; at full rank a lazy inverse (``solve`` factors the small dense form)."""
    if a.order < a.shape[-1]:
        raise SingularMatrixError(f"LowRank of rank {a.order} < {a.shape[-1]} is singular")
    return Inverse(a)


def bidiagonal_add(a: Bidiagonal, b: Bidiagonal | Diagonal) -> Bidiagonal:
    sub = a.sub + b.sub if isinstance(b, Bidiagonal) else a.sub
    return Bidiagonal._of(a.diag + (b.diag if isinstance(b, Bidiagonal) else b.d), sub, a.lower)


def diagonal_matmul_bidiagonal(d: Diagonal, m: Bidiagonal) -> Bidiagonal:
    dd = d.d
    return Bidiagonal._of(dd * m.diag, (dd[..., 1:] if m.lower else dd[..., :-1]) * m.sub, m.lower)


def bidiagonal_matmul_diagonal(m: Bidiagonal, d: Diagonal) -> Bidiagonal:
    dd = d.d
    return Bidiagonal._of(m.diag * dd, m.sub * (dd[..., :-1] if m.lower else dd[..., 1:]), m.lower)


def bidiagonal_sss_add(a: Bidiagonal, m: SSS) -> SSS:
    """Through the order-2 SSS of the bidiagonal matrix."""
    return sss_add(a.to_sss(), m)


def bidiagonal_sss_matmul(a: Bidiagonal, m: SSS) -> SSS:
    return sss_matmul(a.to_sss(), m)


def sss_bidiagonal_matmul(m: SSS, a: Bidiagonal) -> SSS:
    return sss_matmul(m, a.to_sss())


def bidiagonal_inverse(a: Bidiagonal) -> OneSS:
    """Exact inverse as a :class:`~structmat.OneSS`: ``x_t = (y_t - sub_{t-1} x_{t-1}) / diag_t``.

    The ratios ``r_t = -sub_{t-1} / diag_t`` enter as decays ``|r_t|`` (log space) and phases
    ``r_t / |r_t|`` (signs for real entries) carried by ``b`` and ``c``: the cumulative phases have
    modulus one, so complex matrices invert as real ones do, with no growth or cancellation.
    """
    if not a.lower:
        return bidiagonal_inverse(a.T).T
    if bool((a.diag == 0).any()):
        raise SingularMatrixError("Bidiagonal has a zero diagonal entry")
    batch = a.batch_shape
    diag, sub = fit(a.diag, *batch, a.shape[-1]), fit(a.sub, *batch, a.sub.shape[-1])
    ratio = check_overflow(torch.cat([torch.ones_like(diag[..., :1]), -sub / diag[..., 1:]], dim=-1),
                           "Bidiagonal.inv(): the ratio sub[t-1] / diag[t]")
    size = ratio.abs()
    step = torch.where(size > 0, ratio / torch.where(size > 0, size, 1.0), 1.0)
    # a real step is a sign, of derivative 0: differentiating r / |r| would subtract two terms of size 1 / |r|
    step = step if step.is_complex() else step.detach()
    phase = torch.cumprod(step, dim=-1)
    log_size = safe_log(size)
    _check_inverse_range(log_size, size, diag)
    # |r| kept as a decay (with abs's curvature, for second derivatives), of derivative the phase at r = 0, where abs
    # has none: exact gradients at 0 for real matrices (complex ones lose the imaginary direction there: their solve
    # differentiates by the adjoint system, Bidiagonal.solve)
    decays = torch.where(size > 0, size, (ratio * step.detach().conj()).real)
    return OneSS._of(log_size, 1.0 / (phase * diag), phase, True, batch, decays)  # 1 / diag_i: the entry (i, i), in range


def _check_inverse_range(log_size: torch.Tensor, size: torch.Tensor, diag: torch.Tensor) -> None:
    """Raise where an entry ``prod_{k=i+1..j} |r_k| / |diag_i|`` of the inverse exceeds the dtype's range: the
    log-space generators hold it, but every matvec and ``to_dense`` would give infinities, then NaN. Ratios of
    at most one cannot grow an entry beyond ``1 / |diag_i|``: then two reductions decide."""
    if not overflow_checks_enabled() or log_size.numel() == 0 or log_size.device.type == "meta":
        return
    tiny = 1.0 / torch.finfo(real_dtype(diag.dtype)).max
    if float(size.detach().amax()) <= 1 and float(diag.detach().abs().amin()) > tiny:
        return
    logs = log_size.detach().real.double()
    finite = torch.isfinite(logs)
    # a cut (a zero ratio) as a log so negative that no product across it reaches 1: no -inf - -inf = NaN
    cut = -(logs.abs().where(finite, 0.0).sum(-1, keepdim=True) + 1e3)
    S = torch.cumsum(torch.where(finite, logs, cut), dim=-1)
    later_max = torch.flip(torch.cummax(torch.flip(S, (-1,)), dim=-1).values, (-1,))  # max_{j >= i} S_j
    largest = (later_max - S - diag.detach().abs().double().log()).max()
    limit = math.log(torch.finfo(real_dtype(diag.dtype)).max)
    if largest > limit:
        hint = "" if limit > 700 else "; try float64"
        raise SingularMatrixError(f"Bidiagonal.inv() has entries up to about 1e{largest / math.log(10):.0f}, beyond "
                                  f"{str(diag.dtype).replace('torch.', '')}: the matrix is too close to singular{hint}")


def oness_inverse(m: OneSS) -> Bidiagonal:
    """Exact inverse, a :class:`~structmat.Bidiagonal`: diagonal ``1 / (b_t c_t)``, subdiagonal
    ``-a_t / (b_t c_{t-1})`` (the upper mirror gives the transpose)."""
    b, c = m.B[..., 0], m.C[..., 0]
    bc = b * c
    if bool((bc == 0).any()):
        raise SingularMatrixError("OneSS is singular: some b_t * c_t is zero")
    a = m.transitions.actual()[..., 1:]  # (with the gradient of the decays it carries: exact at 0)
    diag = check_overflow(1.0 / bc, "OneSS.inv() diagonal")
    sub = check_overflow(-a / (b[..., 1:] * c[..., :-1]), "OneSS.inv() subdiagonal")
    batch, T = m.batch_shape, m.shape[-1]
    sub = sub if sub.dtype == m.dtype else sub.to(m.dtype)
    return Bidiagonal._of(fit(diag, *batch, T), fit(sub, *batch, max(T - 1, 0)), m.lower)
