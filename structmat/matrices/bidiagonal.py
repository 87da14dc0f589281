"""Bidiagonal matrices (the inverses of 1-SS matrices)."""

from __future__ import annotations

import torch

from structmat.core import small
from structmat.core.base import StructuredMatrix
from structmat.core.validation import as_tensor, broadcast_batch, check_finite, check_flag
from structmat.linalg import banded
from structmat.matrices.sss import SSS

__all__ = ["Bidiagonal"]


class Bidiagonal(StructuredMatrix):
    """Lower bidiagonal ``M[t, t] = diag[t]``, ``M[t + 1, t] = sub[t]`` (with ``lower=False`` the
    transpose: ``M[t, t + 1] = sub[t]``).

    Parameters
    ----------
    diag : array_like, shape ``(*, T)``
    sub : array_like, shape ``(*, T - 1)``
        The sub-diagonal of the lower matrix (the super-diagonal of the upper one).
    lower : bool

    Notes
    -----
    Matvec ``O(T K)``; ``inv()`` is a :class:`~structmat.OneSS` (with ``b``, and ``c`` for the signs), ``O(T)``.
    As an SSS it has order 2 (``to_sss``): with ``M[j, i] = C_j^T A_j ... A_{i+1} B_i`` the
    output always passes through ``A_j``, so a lone subdiagonal needs a two-state shift register.

    Examples
    --------
    >>> import torch, structmat as sm
    >>> M = sm.Bidiagonal(torch.ones(3), -0.5 * torch.ones(2))
    >>> M.inv().to_dense()
    tensor([[1.0000, 0.0000, 0.0000],
            [0.5000, 1.0000, 0.0000],
            [0.2500, 0.5000, 1.0000]])
    """

    order = 2
    small_dense = True

    def __init__(self, diag, sub, *, lower: bool = True, dtype: torch.dtype | None = None, device=None):
        diag = as_tensor(diag, "diag", dtype=dtype, device=device)
        sub = as_tensor(sub, "sub", dtype=dtype, device=device, like=("diag", diag))
        if diag.dim() < 1 or sub.dim() < 1 or sub.shape[-1] != max(diag.shape[-1] - 1, 0):  # batches broadcast
            raise ValueError(f"diag and sub must have shapes (*, T) and (*, T-1); got {tuple(diag.shape)} and {tuple(sub.shape)}")
        batch = broadcast_batch(("diag", diag.shape[:-1]), ("sub", sub.shape[:-1]))
        check_finite(diag, "diag")
        check_finite(sub, "sub")
        dtype = torch.promote_types(diag.dtype, sub.dtype)
        self.diag, self.sub, self.lower = diag.to(dtype), sub.to(dtype), check_flag(lower, "lower")
        T = diag.shape[-1]
        super().__init__((*batch, T, T), dtype, diag.device)

    @classmethod
    def _of(cls, diag: torch.Tensor, sub: torch.Tensor, lower: bool) -> Bidiagonal:
        """The bidiagonal matrix of ``diag (*, T)`` and ``sub (*, T - 1)`` computed from checked matrices (one dtype
        and device, batches that broadcast): unchecked (a closure operation on small matrices costs less than
        the constructor's checks)."""
        M = object.__new__(Bidiagonal)
        M.diag, M.sub, M.lower = diag, sub, lower
        batch = diag.shape[:-1] if diag.shape[:-1] == sub.shape[:-1] else torch.broadcast_shapes(diag.shape[:-1], sub.shape[:-1])
        T = diag.shape[-1]
        StructuredMatrix.__init__(M, (*batch, T, T), diag.dtype, diag.device)
        return M

    def matvec_flops(self, K: int) -> float:
        return 3.0 * K * self.shape[-1]

    def diagonal(self) -> torch.Tensor:
        return self.diag.expand(self.shape[:-1])

    def to_dense(self) -> torch.Tensor:
        dense = torch.diag_embed(self.diag) + torch.diag_embed(self.sub, offset=-1 if self.lower else 1)
        return dense.expand(self.shape)

    def _matmat(self, X: torch.Tensor) -> torch.Tensor:
        # two passes that keep X's memory layout (the SMA linear order passes time-last views)
        out = self.diag[..., None] * X
        if X.shape[-2] > 1:
            below, above = (slice(1, None), slice(None, -1)) if self.lower else (slice(None, -1), slice(1, None))
            out[..., below, :].addcmul_(self.sub[..., None], X[..., above, :])
        return out

    def _map(self, fn) -> Bidiagonal:
        return Bidiagonal(fn(self.diag), fn(self.sub), lower=self.lower)

    @property
    def T(self) -> Bidiagonal:
        return small.keep(self, "T", lambda: Bidiagonal._of(self.diag, self.sub, not self.lower))

    def _scale(self, s) -> Bidiagonal:
        return Bidiagonal(self.diag * s, self.sub * s, lower=self.lower)

    def to_sss(self) -> SSS:
        """The same matrix as an order-2 :class:`~structmat.SSS` (shift register)."""
        T, batch = self.shape[-1], self.batch_shape
        shift = torch.tensor([[0.0, 0.0], [1.0, 0.0]], dtype=self.dtype, device=self.device)
        B = torch.tensor([1.0, 0.0], dtype=self.dtype, device=self.device)
        sub = torch.cat([self.sub.new_zeros(*self.sub.shape[:-1], min(T, 1)), self.sub], dim=-1)
        C = torch.stack([torch.zeros_like(sub), sub], dim=-1)
        return SSS(shift.expand(*batch, T, 2, 2), B.expand(*batch, T, 2), C.expand(*batch, T, 2),
                   self.diag.expand(*batch, T), lower=self.lower)

    def solve(self, Y) -> torch.Tensor:
        """Solve ``M X = Y``, ``O(T K)``: by LAPACK's banded solve on the CPU (real data, no gradient), else through
        the exact inverse (a 1-SS scan); complex parameters that want a gradient differentiate by the adjoint system
        (exact where a sub-diagonal entry is zero). :class:`~structmat.SingularMatrixError` for a zero diagonal entry
        and a solution that overflows."""
        self._check_square("solve()")
        if self.diag.is_complex() and torch.is_grad_enabled() and (self.diag.requires_grad or self.sub.requires_grad):
            M, Y, vector = self._operand(Y, "Y")
            X = _AdjointSolve.apply(M.diag, M.sub, Y, M.lower)
            return X[..., 0] if vector else X
        X = self._small_solve(Y, "lower" if self.lower else "upper", "Bidiagonal is singular: a diagonal entry is zero")
        if X is not None:
            return X
        M, Y, vector = self._operand(Y, "Y")
        if not banded.bidiagonal_applies(M.diag, M.sub, Y):
            return self._inverse()._product(Y[..., 0] if vector else Y, "Y")
        X = banded.bidiagonal_solve(small.keep(M, "band", lambda: banded.bidiagonal_band(M.diag, M.sub)), Y, not M.lower)
        return X[..., 0] if vector else X


class _AdjointSolve(torch.autograd.Function):
    """``X = M^{-1} Y`` for a bidiagonal ``M`` whose gradients come from the adjoint system ``Lam = M^{-H} G``: as
    ``dX = -M^{-1} dM X``, ``dL/dM = -Lam X^H``, whose diagonal and sub-diagonal are the gradients in ``diag`` and
    ``sub``. Exact where a ratio ``sub / diag`` is zero or tiny, where the inverse's decays and phases are not for
    complex matrices (their split has no derivative at 0); twice differentiable (the backward solves by this
    function)."""

    @staticmethod
    def forward(ctx, diag, sub, Y, lower):
        X = Bidiagonal._of(diag, sub, lower).solve(Y)  # (autograd is off in a forward: the fast paths)
        ctx.lower = lower
        ctx.save_for_backward(diag, sub, X)
        return X

    @staticmethod
    def backward(ctx, G):
        diag, sub, X = ctx.saved_tensors
        Lam = _AdjointSolve.apply(diag.conj(), sub.conj(), G, not ctx.lower)  # M^H: the conjugate transpose
        near, far = (slice(1, None), slice(None, -1)) if ctx.lower else (slice(None, -1), slice(1, None))
        grad_diag = -(Lam * X.conj()).sum(-1).sum_to_size(diag.shape)
        grad_sub = -(Lam[..., near, :] * X[..., far, :].conj()).sum(-1).sum_to_size(sub.shape)
        return grad_diag, grad_sub, Lam.sum_to_size(G.shape), None
