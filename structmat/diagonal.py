"""Diagonal matrices."""

from __future__ import annotations

import torch

from structmat.base import SingularMatrixError, StructuredMatrix, as_tensor, check_finite

__all__ = ["Diagonal"]


class Diagonal(StructuredMatrix):
    """``diag(d)`` for ``d`` of shape ``(*, T)``; matvec ``O(T K)``.

    Examples
    --------
    >>> import structmat as sm
    >>> (sm.Diagonal([1.0, 2.0]) @ sm.Diagonal([3.0, 4.0])).d
    tensor([3., 8.])
    """

    order = 0

    def __init__(self, d):
        d = as_tensor(d, "d")
        if d.dim() < 1:
            raise ValueError("d must have shape (*, T); got a scalar")
        check_finite(d, "d")
        self.d = d

    @property
    def shape(self) -> torch.Size:
        return torch.Size((*self.d.shape, self.d.shape[-1]))

    @property
    def dtype(self) -> torch.dtype:
        return self.d.dtype

    @property
    def device(self) -> torch.device:
        return self.d.device

    def diagonal(self) -> torch.Tensor:
        return self.d

    def to_dense(self) -> torch.Tensor:
        return torch.diag_embed(self.d)

    def _matmat(self, X: torch.Tensor) -> torch.Tensor:
        return self.d[..., None] * X

    def _map(self, fn) -> Diagonal:
        return Diagonal(fn(self.d))

    @property
    def T(self) -> Diagonal:
        return self

    def _scale(self, s) -> Diagonal:
        return Diagonal(self.d * s)

    def inv(self) -> Diagonal:
        if bool((self.d == 0).any()):
            raise SingularMatrixError("Diagonal has a zero entry")
        return Diagonal(1.0 / self.d)
