"""Low-rank matrices ``U V^T``."""

from __future__ import annotations

import torch

from structmat.core.base import StructuredMatrix
from structmat.core.dtypes import compute_dtype
from structmat.core.validation import SingularMatrixError, as_tensor, broadcast_batch, check_finite, check_solution
from structmat.matrices.sss import SSS

__all__ = ["LowRank"]


class LowRank(StructuredMatrix):
    """``M = U V^T`` with ``U`` of shape ``(*, T, r)`` and ``V`` of shape ``(*, S, r)``.

    Matvec ``O((T + S) r K)``. ``.tril()`` keeps the lower triangle as an ``SSS`` of order ``r``.

    Examples
    --------
    >>> import torch, structmat as sm
    >>> L = sm.LowRank(torch.ones(4, 1), torch.ones(4, 1)).tril()
    >>> L.to_dense()[3]
    tensor([1., 1., 1., 1.])
    """

    def __init__(self, U, V, *, dtype: torch.dtype | None = None, device=None):
        U = as_tensor(U, "U", dtype=dtype, device=device)
        V = as_tensor(V, "V", dtype=dtype, device=device, like=("U", U))
        if U.dim() < 2 or V.dim() < 2 or U.shape[-1] != V.shape[-1]:
            raise ValueError(f"U and V must have shapes (*, T, r) and (*, S, r); got {tuple(U.shape)} and {tuple(V.shape)}")
        batch = broadcast_batch(("U", U.shape[:-2]), ("V", V.shape[:-2]))
        check_finite(U, "U")
        check_finite(V, "V")
        dtype = torch.promote_types(U.dtype, V.dtype)
        self.U, self.V = U.to(dtype), V.to(dtype)
        super().__init__((*batch, U.shape[-2], V.shape[-2]), dtype, U.device)

    @classmethod
    def _of(cls, U: torch.Tensor, V: torch.Tensor) -> LowRank:
        """``U V^T`` of factors computed from checked matrices (one dtype and device, batches that broadcast):
        unchecked (a closure operation on small matrices costs less than the constructor's checks)."""
        M = object.__new__(LowRank)
        M.U, M.V = U, V
        batch = U.shape[:-2] if U.shape[:-2] == V.shape[:-2] else torch.broadcast_shapes(U.shape[:-2], V.shape[:-2])
        StructuredMatrix.__init__(M, (*batch, U.shape[-2], V.shape[-2]), U.dtype, U.device)
        return M

    @property
    def order(self) -> int:
        return self.U.shape[-1]

    def matvec_flops(self, K: int) -> float:
        return 2.0 * K * (self.shape[-2] + self.shape[-1]) * self.order

    def diagonal(self) -> torch.Tensor:
        n = min(self.shape[-2:])
        U, V = self._factors()
        return (U[..., :n, :] * V[..., :n, :]).sum(-1).expand(*self.batch_shape, n).to(self.dtype)

    def to_dense(self) -> torch.Tensor:
        U, V = self._factors()
        return (U @ V.transpose(-1, -2)).expand(self.shape).to(self.dtype)

    def _matmat(self, X: torch.Tensor) -> torch.Tensor:
        U, V = self._factors()
        return (U @ (V.transpose(-1, -2) @ X.to(U.dtype))).to(X.dtype)

    def _factors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``U, V``; in complex64 for complex32 (no complex32 matmul or sum: accumulated in complex64, DESIGN
        section 5)."""
        if self.U.dtype == torch.complex32:
            return self.U.to(torch.complex64), self.V.to(torch.complex64)
        return self.U, self.V

    def _map(self, fn) -> LowRank:
        return LowRank(fn(self.U), fn(self.V))

    @property
    def T(self) -> LowRank:
        return LowRank._of(self.V, self.U)

    def _scale(self, s) -> LowRank:
        return LowRank(self.U * s, self.V)

    def tril(self) -> SSS:
        """Lower triangle ``tril(U V^T)`` as an :class:`~structmat.SSS` with ``A = 1``, order ``r``."""
        self._check_square("tril()")
        batch = self.batch_shape
        U, V = self.U.expand(*batch, *self.U.shape[-2:]), self.V.expand(*batch, *self.V.shape[-2:])
        return SSS(torch.ones(U.shape[:-1], dtype=self.dtype, device=self.device), V, U)

    def solve(self, Y) -> torch.Tensor:
        """Solve ``U V^T X = Y``: singular below full rank; at rank ``r >= T`` the parameters are
        already ``O(T^2)``, and the ``T x T`` product is factored densely."""
        self._check_square("solve()")
        if self.order < self.shape[-1]:
            raise SingularMatrixError(f"LowRank of rank {self.order} < {self.shape[-1]} is singular")
        if compute_dtype(self.dtype) != self.dtype:  # (LAPACK has no half precision)
            return self._solve_in_float32(Y)
        M, Y, vector = self._operand(Y, "Y")
        X, info = torch.linalg.solve_ex(M.to_dense(), Y)
        if bool((info != 0).any()):
            raise SingularMatrixError("LowRank matrix is singular")
        X = check_solution(X, Y, "LowRank.solve")
        return X[..., 0] if vector else X
