"""Dense matrices as members of the algebra (the fallback that is stated, never implied)."""

from __future__ import annotations

import torch

from structmat.base import SingularMatrixError, StructuredMatrix, as_tensor, check_finite

__all__ = ["Dense"]


class Dense(StructuredMatrix):
    """A dense ``(*, T, S)`` matrix; matvec ``O(T S K)``.

    Examples
    --------
    >>> import torch, structmat as sm
    >>> sm.Dense(torch.eye(3)) @ torch.ones(3)
    tensor([1., 1., 1.])
    """

    def __init__(self, M):
        M = as_tensor(M, "M")
        if M.dim() < 2:
            raise ValueError(f"M must have shape (*, T, S); got {tuple(M.shape)}")
        check_finite(M, "M")
        self.M = M

    @property
    def shape(self) -> torch.Size:
        return self.M.shape

    @property
    def dtype(self) -> torch.dtype:
        return self.M.dtype

    @property
    def device(self) -> torch.device:
        return self.M.device

    def diagonal(self) -> torch.Tensor:
        return torch.diagonal(self.M, dim1=-2, dim2=-1)

    def to_dense(self) -> torch.Tensor:
        return self.M

    def _matmat(self, X: torch.Tensor) -> torch.Tensor:
        return self.M @ X

    def _map(self, fn) -> Dense:
        return Dense(fn(self.M))

    @property
    def T(self) -> Dense:
        return Dense(self.M.transpose(-1, -2))

    def _scale(self, s) -> Dense:
        return Dense(self.M * s)

    def inv(self) -> Dense:
        self._check_square("inv()")
        inverse, info = torch.linalg.inv_ex(self.M)
        if bool((info != 0).any()):
            raise SingularMatrixError("Dense matrix is singular")
        return Dense(inverse)

    def solve(self, Y) -> torch.Tensor:
        self._check_square("solve()")
        Y = torch.as_tensor(Y, device=self.device)
        vector = Y.dim() == 1
        Yk = Y[:, None] if vector else Y
        dtype = torch.promote_types(self.dtype, Yk.dtype)
        X, info = torch.linalg.solve_ex(self.M.to(dtype), Yk.to(dtype))
        if bool((info != 0).any()):
            raise SingularMatrixError("Dense matrix is singular")
        return X[..., 0] if vector else X
