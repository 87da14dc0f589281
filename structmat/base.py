"""The :class:`StructuredMatrix` base class: shapes, ``torch.matmul`` semantics and operators.

Subclasses implement ``_matmat(X)`` for ``X`` of shape ``(*batch, S, K)`` already broadcast
against the matrix batch and cast to the common dtype, plus ``to_dense()``. Every binary
operator goes through the closure dispatch table in :mod:`structmat.closure`.
"""

from __future__ import annotations

import abc
import numbers
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

__all__ = ["StructuredMatrix", "SingularMatrixError", "as_tensor", "check_finite"]


class SingularMatrixError(ValueError):
    """Raised when a structured inverse or solve meets a singular matrix."""


def as_tensor(x: Any, name: str, *, dtype: torch.dtype | None = None, device=None) -> torch.Tensor:
    """``torch.as_tensor`` that keeps float64, promotes integers to the default float dtype."""
    if isinstance(x, StructuredMatrix):
        raise TypeError(f"{name} must be array-like, got a structured matrix {type(x).__name__}")
    try:
        t = torch.as_tensor(x, dtype=dtype, device=device)
    except (TypeError, ValueError, RuntimeError) as err:
        raise TypeError(f"{name} must be array-like numbers, got {type(x).__name__}") from err
    if not (t.is_floating_point() or t.is_complex()):
        t = t.to(torch.get_default_dtype())
    return t


def check_finite(x: torch.Tensor, name: str, *, allow_neg_inf: bool = False) -> None:
    """Reject NaN and infinities (``-inf`` allowed where it means an exact zero decay)."""
    if x.is_complex():
        ok = torch.isfinite(x).all()
    elif allow_neg_inf:
        ok = ~(torch.isnan(x) | (x == float("inf"))).any()
    else:
        ok = torch.isfinite(x).all()
    if not bool(ok):
        allowed = " (-inf allowed)" if allow_neg_inf else ""
        raise ValueError(f"{name} must be finite{allowed}; found NaN or inf")


def _is_scalar(x: Any) -> bool:
    return isinstance(x, numbers.Number) or (isinstance(x, torch.Tensor) and x.dim() == 0)


class StructuredMatrix(abc.ABC):
    """Abstract ``(*batch_shape, T, S)`` matrix with a fast matvec.

    Conventions follow ``torch.matmul``: ``M @ X`` with ``X`` of shape ``(*, S, K)`` gives
    ``(*, T, K)`` with batch broadcasting, and a 1-D ``X`` of shape ``(S,)`` gives ``(T,)``.
    ``M @ N`` with ``N`` structured is the closed-form product where one exists
    (see :mod:`structmat.closure`), otherwise a lazy :class:`~structmat.Product`.
    """

    __array_priority__ = 1000  # so that ndarray @ M defers to __rmatmul__
    order: Any = None

    # --- to be provided by subclasses -------------------------------------------------------
    @property
    @abc.abstractmethod
    def shape(self) -> torch.Size:
        """``(*batch_shape, T, S)``."""

    @property
    @abc.abstractmethod
    def dtype(self) -> torch.dtype:
        """Dtype of the entries."""

    @property
    @abc.abstractmethod
    def device(self) -> torch.device:
        """Device of the parameters."""

    @abc.abstractmethod
    def to_dense(self) -> torch.Tensor:
        """The matrix as a dense tensor of shape ``(*batch_shape, T, S)``."""

    @abc.abstractmethod
    def _matmat(self, X: torch.Tensor) -> torch.Tensor:
        """``M @ X`` for ``X`` of shape ``(*batch, S, K)``, broadcast and cast already."""

    @abc.abstractmethod
    def _map(self, fn) -> StructuredMatrix:
        """Apply ``fn`` to every tensor parameter (used by ``to``, ``conj``)."""

    # --- derived -----------------------------------------------------------------------------
    @property
    def batch_shape(self) -> torch.Size:
        return self.shape[:-2]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        order = "" if self.order is None else f", order={self.order}"
        dtype = str(self.dtype).replace("torch.", "")
        return f"{type(self).__name__}(shape={tuple(self.shape)}{order}, dtype={dtype})"

    def _check_square(self, what: str) -> None:
        if self.shape[-1] != self.shape[-2]:
            raise ValueError(f"{what} needs a square matrix, got shape {tuple(self.shape)}")

    def matmul(self, X: Any) -> torch.Tensor:
        """``M @ X`` for a dense operand, following ``torch.matmul``."""
        M, X, vector = self._operand(X)
        Y = M._matmat(X)
        return Y[..., 0] if vector else Y

    def matmat_fn(self) -> Callable[[torch.Tensor], torch.Tensor]:
        """``X -> M @ X`` for many products with operands of one shape (what the SMA linear order does).

        Classes with a costly per-product setup (a Toeplitz matrix's circulant spectrum) do it once
        in the returned function; by default it is :meth:`matmul`.
        """
        return self.matmul

    def _operand(self, X: Any) -> tuple[StructuredMatrix, torch.Tensor, bool]:
        """Check ``X``; return the matrix in the common dtype, ``X`` as ``(*batch, S, K)`` and
        whether ``X`` was a vector."""
        X = as_tensor(X, "X", device=self.device) if not isinstance(X, torch.Tensor) else X
        if X.device != self.device:
            raise ValueError(f"X is on {X.device} but the matrix is on {self.device}")
        if X.dim() == 0:
            raise ValueError("X must have at least 1 dimension (S,) or (*, S, K); got a scalar")
        vector = X.dim() == 1
        if vector:
            X = X[:, None]
        S = self.shape[-1]
        if X.shape[-2] != S:
            expect = f"({S},)" if vector else f"(*, {S}, K)"
            raise ValueError(f"X has shape {tuple(X.shape)}; expected {expect} for a matrix of shape {tuple(self.shape)}")
        dtype = torch.promote_types(self.dtype, X.dtype)
        if not (dtype.is_floating_point or dtype.is_complex):
            dtype = torch.get_default_dtype()
        M = self if dtype == self.dtype else self.to(dtype)
        batch = torch.broadcast_shapes(self.batch_shape, X.shape[:-2])
        return M, X.to(dtype).expand(*batch, *X.shape[-2:]), vector

    def __matmul__(self, other: Any):
        if isinstance(other, StructuredMatrix):
            from structmat.closure import matmul

            return matmul(self, other)
        return self.matmul(other)

    def __rmatmul__(self, other: Any):
        X = as_tensor(other, "X", device=self.device) if not isinstance(other, torch.Tensor) else other
        if X.dim() == 1:
            return self.T.matmul(X)
        return self.T.matmul(X.transpose(-1, -2)).transpose(-1, -2)

    def __add__(self, other: Any):
        if not isinstance(other, StructuredMatrix):
            return NotImplemented
        from structmat.closure import add

        return add(self, other)

    def __sub__(self, other: Any):
        if not isinstance(other, StructuredMatrix):
            return NotImplemented
        return self + (-other)

    def __neg__(self):
        return self * -1.0

    def __mul__(self, s: Any):
        if not _is_scalar(s):
            return NotImplemented
        return self._scale(s)

    __rmul__ = __mul__

    def __truediv__(self, s: Any):
        if not _is_scalar(s):
            return NotImplemented
        return self._scale(1.0 / s)

    def _scale(self, s) -> StructuredMatrix:
        from structmat.diagonal import Diagonal

        d = torch.as_tensor(s, dtype=self.dtype, device=self.device).expand(self.shape[-2])
        return Diagonal(d) @ self

    def hadamard(self, other: StructuredMatrix) -> StructuredMatrix:
        """Elementwise product ``M * N`` (result class from the closure table)."""
        from structmat.closure import hadamard

        return hadamard(self, other)

    def inv(self) -> StructuredMatrix:
        """The inverse, structured where the class allows, else a lazy :class:`~structmat.Inverse`."""
        from structmat.lazy import Inverse

        self._check_square("inv()")
        return Inverse(self)

    def solve(self, Y: Any) -> torch.Tensor:
        """Solve ``M X = Y`` (``Y`` of shape ``(*, T, K)`` or ``(T,)``), via :meth:`inv`."""
        self._check_square("solve()")
        return self.inv().matmul(Y)

    @property
    def T(self) -> StructuredMatrix:
        """Transpose (no conjugation)."""
        from structmat.lazy import Transpose

        return Transpose(self)

    @property
    def H(self) -> StructuredMatrix:
        """Conjugate transpose."""
        return self.T.conj() if self.dtype.is_complex else self.T

    def conj(self) -> StructuredMatrix:
        return self._map(torch.conj) if self.dtype.is_complex else self

    def to(self, *args, **kwargs) -> StructuredMatrix:
        """Like ``torch.Tensor.to``: move every parameter to a dtype and/or device."""
        return self._map(lambda t: t.to(*args, **kwargs))

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = self.to_dense().detach().cpu().resolve_conj().numpy()
        return out.astype(dtype) if dtype is not None else out
