"""Diagonal matrices."""

from __future__ import annotations

import torch

from structmat.core.base import StructuredMatrix
from structmat.core.validation import as_tensor, check_finite

__all__ = ["Diagonal"]


class Diagonal(StructuredMatrix):
    """``diag(d)`` for ``d`` of shape ``(*, T)``; matvec ``O(T K)``.

    Examples
    --------
    >>> import structmat as sm
    >>> (sm.Diagonal([1.0, 2.0]) @ sm.Diagonal([3.0, 4.0])).diagonal()
    tensor([3., 8.])
    """

    order = 0

    def __init__(self, d, *, dtype: torch.dtype | None = None, device=None):
        d = as_tensor(d, "d", dtype=dtype, device=device)
        if d.dim() < 1:
            raise ValueError("d must have shape (*, T); got a scalar")
        check_finite(d, "d")
        self.d = d
        super().__init__((*d.shape, d.shape[-1]), d.dtype, d.device)

    @classmethod
    def _of(cls, d: torch.Tensor) -> Diagonal:
        """The diagonal matrix of ``d (*, T)`` computed from checked matrices: unchecked (a closure operation on
        small matrices costs less than the constructor's checks)."""
        M = object.__new__(Diagonal)
        M.d = d
        StructuredMatrix.__init__(M, (*d.shape, d.shape[-1]), d.dtype, d.device)
        return M

    def matvec_flops(self, K: int) -> float:
        return float(K * self.shape[-1])

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
