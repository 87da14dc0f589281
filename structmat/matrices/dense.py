"""Dense matrices as members of the algebra (the fallback that is stated, never implied)."""

from __future__ import annotations

import torch

from structmat.core.base import StructuredMatrix
from structmat.core.dtypes import compute_dtype
from structmat.core.validation import SingularMatrixError, as_tensor, check_finite, check_solution

__all__ = ["Dense"]


class Dense(StructuredMatrix):
    """A dense ``(*, T, S)`` matrix; matvec ``O(T S K)``.

    Examples
    --------
    >>> import torch, structmat as sm
    >>> sm.Dense(torch.eye(3)) @ torch.ones(3)
    tensor([1., 1., 1.])
    """

    def __init__(self, M, *, dtype: torch.dtype | None = None, device=None):
        M = as_tensor(M, "M", dtype=dtype, device=device)
        if M.dim() < 2:
            raise ValueError(f"M must have shape (*, T, S); got {tuple(M.shape)}")
        check_finite(M, "M")
        self.M = M
        super().__init__(M.shape, M.dtype, M.device)

    def diagonal(self) -> torch.Tensor:
        return torch.diagonal(self.M, dim1=-2, dim2=-1)

    def to_dense(self) -> torch.Tensor:
        return self.M

    def _matmat(self, X: torch.Tensor) -> torch.Tensor:
        if X.dtype == torch.complex32:  # (no complex32 matmul: accumulated in complex64, DESIGN section 5)
            return (self.M.to(torch.complex64) @ X.to(torch.complex64)).to(torch.complex32)
        return self.M @ X

    def _map(self, fn) -> Dense:
        return Dense(fn(self.M))

    @property
    def T(self) -> Dense:
        return Dense(self.M.transpose(-1, -2))

    def _scale(self, s) -> Dense:
        return Dense(self.M * s)

    def solve(self, Y) -> torch.Tensor:
        """Solve ``M X = Y`` by LU (``torch.linalg.solve``); ``Y`` of shape ``(*, T, K)`` or ``(T,)``."""
        self._check_square("solve()")
        if compute_dtype(self.dtype) != self.dtype:  # (LAPACK has no half precision)
            return self._solve_in_float32(Y)
        M, Y, vector = self._operand(Y, "Y")
        X, info = torch.linalg.solve_ex(M.M, Y)
        if bool((info != 0).any()):
            raise SingularMatrixError("Dense matrix is singular")
        X = check_solution(X, Y, "Dense.solve")
        return X[..., 0] if vector else X
