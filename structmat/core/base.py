"""The :class:`StructuredMatrix` base class: shape, dtype, device, ``torch.matmul`` semantics, operators.

A subclass stores its parameters, passes ``(shape, dtype, device)`` to ``__init__``, and provides
``_matmat(X)`` for ``X`` of shape ``(*batch, S, K)`` (already broadcast against the matrix batch
and cast to the common dtype), ``to_dense()``, ``_map(fn)`` (the same matrix with ``fn`` applied to
every tensor parameter) and ``_scale(s)``. Binary operators and ``inv()`` go through the closure
dispatch (:mod:`structmat.core.dispatch`); this module knows no subclass.
"""

from __future__ import annotations

import abc
import numbers
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from structmat.core import dispatch, small
from structmat.core.dtypes import compute_dtype, real_dtype
from structmat.core.host import host
from structmat.core.validation import (
    as_tensor,
    broadcast_batch,
    check_scalar,
    check_solution,
    finite_checks_enabled,
    to_target,
    trusted_parameters,
)

__all__ = ["StructuredMatrix", "is_scalar", "reciprocal"]


def is_scalar(x: Any) -> bool:
    """A Python, numpy or 0-d torch number (what ``M * s`` scales by)."""
    if isinstance(x, (numbers.Number, np.generic)):
        return True
    return isinstance(x, (torch.Tensor, np.ndarray)) and x.ndim == 0


class StructuredMatrix(abc.ABC):
    """Abstract ``(*batch_shape, T, S)`` matrix with a fast matvec.

    Conventions follow ``torch.matmul``: ``M @ X`` with ``X`` of shape ``(*, S, K)`` gives
    ``(*, T, K)`` with batch broadcasting, and a 1-D ``X`` of shape ``(S,)`` gives ``(T,)``.
    ``M @ N`` with ``N`` structured is the closed-form product where a rule exists
    (:mod:`structmat.algebra.rules`), otherwise a lazy :class:`~structmat.Product`.

    Examples
    --------
    >>> import torch, structmat as sm
    >>> M = sm.OneSS.from_decays(torch.full((2, 4), 0.5))  # a batch of two 4 x 4 matrices
    >>> M.shape, M.batch_shape, (M @ torch.ones(4, 3)).shape
    (torch.Size([2, 4, 4]), torch.Size([2]), torch.Size([2, 4, 3]))
    >>> isinstance(M, sm.StructuredMatrix), type(M + M).__name__, (M + M).order
    (True, 'SSS', 2)
    """

    __structured_matrix__ = True
    __array_ufunc__ = None  # numpy defers ``ndarray * M`` and ``ndarray @ M`` to M instead of densifying it
    order: Any = None
    #: Products and solves of a small instance run through its kept dense form (:mod:`structmat.core.small`):
    #: set by the classes whose products cost scans or FFTs.
    small_dense: bool = False

    def __init__(self, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str):
        self._shape = torch.Size(shape)
        self._dtype = dtype
        self._device = device if type(device) is torch.device else torch.device(device)  # (closure results pass one)

    # --- what subclasses provide -------------------------------------------------------------
    @abc.abstractmethod
    def to_dense(self) -> torch.Tensor:
        """The matrix as a dense tensor of shape ``(*batch_shape, T, S)``."""

    @abc.abstractmethod
    def _matmat(self, X: torch.Tensor) -> torch.Tensor:
        """``M @ X`` for ``X`` of shape ``(*batch, S, K)``, broadcast and cast already."""

    @abc.abstractmethod
    def _map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> StructuredMatrix:
        """The same matrix with ``fn`` applied to every tensor parameter (moves, casts, reshapes, ``torch.conj``).

        Only the default :meth:`conj` maps ``torch.conj``: classes whose parameters are not their entries
        (spectra, transforms) override :meth:`conj`, and composites conjugate operand by operand."""

    @abc.abstractmethod
    def _scale(self, s) -> StructuredMatrix:
        """``s * M`` for a scalar ``s``."""

    # --- attributes ----------------------------------------------------------------------------
    @property
    def shape(self) -> torch.Size:
        """``(*batch_shape, T, S)``."""
        return self._shape

    @property
    def dtype(self) -> torch.dtype:
        return self._dtype

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def batch_shape(self) -> torch.Size:
        return self._shape[:-2]

    @property
    def ndim(self) -> int:
        return len(self._shape)

    def matvec_flops(self, K: int) -> float:
        """FLOPs of ``M @ X`` for ``X`` with ``K`` columns, per batch entry (the planner's cost model)."""
        return 2.0 * self.shape[-2] * self.shape[-1] * K

    def diagonal(self) -> torch.Tensor:
        """Main diagonal, shape ``(*batch_shape, min(T, S))``."""
        raise TypeError(f"{type(self).__name__} has no structured diagonal; use to_dense().diagonal(dim1=-2, dim2=-1)")

    def __getstate__(self) -> dict:
        """Pickles and copies carry the matrix, not what its uses kept (``core.small``: dense forms, factors, spectra,
        closures that do not pickle; a copy builds its own on use)."""
        state = dict(self.__dict__)
        state.pop("_small", None)
        return state

    def __repr__(self) -> str:
        order = "" if self.order is None else f", order={self.order}"
        dtype = str(self.dtype).replace("torch.", "")
        return f"{type(self).__name__}(shape={tuple(self.shape)}{order}, dtype={dtype})"

    def _check_square(self, what: str) -> None:
        if self.shape[-1] != self.shape[-2]:
            raise ValueError(f"{what} needs a square matrix, got shape {tuple(self.shape)}")

    # --- products with dense operands ----------------------------------------------------------
    def matmul(self, X: Any) -> torch.Tensor:
        """``M @ X`` for a dense operand, following ``torch.matmul``."""
        return self._product(X, "X")

    def _product(self, X: Any, name: str) -> torch.Tensor:
        """:meth:`matmul` with errors that call the operand ``name`` (``Y`` when an inverse solves)."""
        X, vector = self._prepare(X, name)
        dense = small.dense_form(self, X)
        Y = dense @ X if dense is not None else self._cast(X.dtype)._matmat(X)
        return Y[..., 0] if vector else Y

    def matmat_fn(self) -> Callable[[torch.Tensor], torch.Tensor]:
        """``X -> M @ X`` for many products with operands of one shape (what the SMA linear order does).

        Classes with a costly per-product setup (a Toeplitz matrix's circulant spectrum) do it once
        in the returned function; by default it is :meth:`matmul`.
        """
        return self.matmul

    def _operand(self, X: Any, name: str = "X") -> tuple[StructuredMatrix, torch.Tensor, bool]:
        """``X`` checked: the matrix in the common dtype, ``X`` as ``(*batch, S, K)``, and whether it was a vector."""
        X, vector = self._prepare(X, name)
        return self._cast(X.dtype), X, vector

    def _cast(self, dtype: torch.dtype) -> StructuredMatrix:
        """The matrix in ``dtype`` (kept for the next products: a float32 mask applied to float64 data)."""
        return self if dtype == self.dtype else small.keep(self, ("to", dtype), lambda: self.to(dtype))

    def _prepare(self, X: Any, name: str) -> tuple[torch.Tensor, bool]:
        """``X`` checked and brought to ``(*batch, S, K)`` in the common dtype, and whether it was a vector."""
        if (type(X) is torch.Tensor and X.dtype == self._dtype and len(self._shape) == 2 and 1 <= X.dim() <= 2
                and X.shape[0] == self._shape[1] and X.device == self._device):  # the common case, in a few us
            return (X[:, None], True) if X.dim() == 1 else (X, False)
        X = as_tensor(X, name, device=self.device) if not isinstance(X, torch.Tensor) else X
        if X.device != self.device:
            raise ValueError(f"{name} is on {X.device} but the matrix is on {self.device}")
        if X.dim() == 0:
            raise ValueError(f"{name} must have shape ({self.shape[-1]},) or (*, {self.shape[-1]}, K); got a scalar")
        vector = X.dim() == 1
        if vector:
            X = X[:, None]
        S = self.shape[-1]
        if X.shape[-2] != S:
            expect = f"({S},)" if vector else f"(*, {S}, K)"
            raise ValueError(f"{name} has shape {tuple(X.shape[:-1] if vector else X.shape)}; expected {expect} "
                             f"for a matrix of shape {tuple(self.shape)}")
        dtype = torch.promote_types(self.dtype, X.dtype)
        if not (dtype.is_floating_point or dtype.is_complex):
            dtype = torch.get_default_dtype()
        X = X if X.dtype == dtype else X.to(dtype)
        batch = broadcast_batch(("matrix", self.batch_shape), (name, X.shape[:-2]))
        return (X if batch == X.shape[:-2] else X.expand(*batch, *X.shape[-2:])), vector

    def __matmul__(self, other: Any):
        if type(other) is torch.Tensor:
            return self._product(other, "X")
        if isinstance(other, StructuredMatrix):
            return _binary("matmul", self, other)
        return self.matmul(other)

    def __rmatmul__(self, other: Any):
        X = as_tensor(other, "X", device=self.device) if not isinstance(other, torch.Tensor) else other
        T = self.shape[-2]
        if X.dim() == 0 or X.shape[-1] != T:  # (checked here: the transposed product would name X transposed)
            got = "a scalar" if X.dim() == 0 else f"shape {tuple(X.shape)}"
            raise ValueError(f"X in X @ M must have shape ({T},) or (*, K, {T}) for a matrix of shape "
                             f"{tuple(self.shape)}; got {got}")
        if X.dim() == 1:
            return self.T.matmul(X)
        return self.T.matmul(X.transpose(-1, -2)).transpose(-1, -2)

    # --- operators through the closure rules ---------------------------------------------------
    def __add__(self, other: Any):
        if not isinstance(other, StructuredMatrix):
            return NotImplemented
        return _binary("add", self, other)

    def __radd__(self, other: Any):
        """``0 + M`` is ``M``: Python's ``sum`` of matrices starts from the integer 0."""
        if isinstance(other, int) and not isinstance(other, bool) and other == 0:
            return self
        return NotImplemented

    def __sub__(self, other: Any):
        if not isinstance(other, StructuredMatrix):
            return NotImplemented
        return self + (-other)

    def __neg__(self):
        return self._scale(-1.0)

    def __mul__(self, s: Any):
        if not is_scalar(s):
            return NotImplemented
        return self._scale(check_scalar(s, "scale factor"))  # NaN or inf would spread to every entry

    __rmul__ = __mul__

    def __truediv__(self, s: Any):
        if not is_scalar(s):
            return NotImplemented
        s = check_scalar(s, "divisor")
        if not isinstance(s, torch.Tensor):
            return self * (1.0 / s)  # a Python zero raises Python's ZeroDivisionError
        if finite_checks_enabled() and s.device.type != "meta" and bool(s == 0):
            raise ZeroDivisionError("division by zero: the divisor is a zero tensor")
        return self * reciprocal(s, self.dtype)

    def hadamard(self, other: StructuredMatrix) -> StructuredMatrix:
        """Elementwise product ``M * N`` (the result class comes from the closure rules)."""
        if not isinstance(other, StructuredMatrix):
            raise TypeError(f"hadamard needs a StructuredMatrix; got {type(other).__name__}")
        return _binary("hadamard", self, other)

    def inv(self) -> StructuredMatrix:
        """The inverse: structured where a rule exists, else a lazy :class:`~structmat.Inverse`."""
        self._check_square("inv()")
        return dispatch.apply("inv", self)

    def solve(self, Y: Any) -> torch.Tensor:
        """Solve ``M X = Y`` for ``Y`` of shape ``(*, T, K)`` or ``(T,)``, through :meth:`inv`."""
        self._check_square("solve()")
        X = self._inverse()._product(Y, "Y")
        return check_solution(X, Y if isinstance(Y, torch.Tensor) else torch.as_tensor(Y), f"{type(self).__name__}.solve")

    def _solve_in_float32(self, Y: Any) -> torch.Tensor:
        """``solve`` of a half-precision matrix (LAPACK and the triangular solves have none): in float32, the
        solution rounded to the common dtype (DESIGN section 5: half precisions accumulate in float32)."""
        M, Y, vector = self._operand(Y, "Y")
        X = M.to(compute_dtype(Y.dtype)).solve(Y.to(compute_dtype(Y.dtype))).to(Y.dtype)
        return X[..., 0] if vector else X

    def _inverse(self) -> StructuredMatrix:
        """:meth:`inv`, kept with the matrix for its next solves (:func:`structmat.core.small.keep`)."""
        return small.keep(self, "inv", self.inv)

    def _small_solve(self, Y: Any, triangle: str | None, singular: str) -> torch.Tensor | None:
        """``M^{-1} Y`` through the kept dense form of a small matrix (:func:`structmat.core.small.dense_solve`:
        ``triangle`` ``"lower"``, ``"upper"`` or None for an LU), or None where that form does not apply."""
        if not type(self).small_dense:
            return None
        if type(Y) is torch.Tensor and triangle is not None and (X := small.vector_solve(self, Y, triangle)) is not None:
            return X
        Y, vector = self._prepare(Y, "Y")
        X = small.dense_solve(self, Y, triangle, singular)
        return X if X is None or not vector else X[..., 0]

    @property
    def T(self) -> StructuredMatrix:
        """Transpose (no conjugation)."""
        return dispatch.apply("transpose", self)

    @property
    def H(self) -> StructuredMatrix:
        """Conjugate transpose."""
        return self.T.conj() if self.dtype.is_complex else self.T

    # torch's names for the transposes of the last two dimensions (``.T`` here already is one)
    mT = T
    mH = H

    def conj(self) -> StructuredMatrix:
        return self._map(torch.conj) if self.dtype.is_complex else self

    def detach(self) -> StructuredMatrix:
        """The same matrix with every parameter detached from the autograd graph (``torch.Tensor.detach``)."""
        return self._map(torch.Tensor.detach)

    def cpu(self) -> StructuredMatrix:
        return self.to("cpu")

    def to(self, *args, **kwargs) -> StructuredMatrix:
        """Like ``torch.Tensor.to``: move every parameter to a floating or complex dtype and/or a device
        (an integer or boolean dtype raises ``TypeError``: it would truncate the parameters)."""
        dtype, _ = to_target(args, kwargs)
        if _range(dtype or self.dtype) >= _range(self.dtype):  # no overflow: checked when made
            with trusted_parameters():
                return self._map(lambda t: t.to(*args, **kwargs))
        return self._map(lambda t: t.to(*args, **kwargs))

    def double(self) -> StructuredMatrix:
        return self.to(torch.complex128 if self.dtype.is_complex else torch.float64)

    def float(self) -> StructuredMatrix:
        return self.to(torch.complex64 if self.dtype.is_complex else torch.float32)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        if copy is False:  # (numpy 2's protocol: the entries are computed, never a view of stored data)
            raise ValueError(f"a {type(self).__name__} has no array to view: its entries are computed "
                             "(np.asarray(M) or copy=None)")
        out = host(self.to_dense().cpu())
        return out.astype(dtype) if dtype is not None else out


def reciprocal(s: Any, dtype: torch.dtype) -> Any:
    """``1 / s`` for a scalar ``s`` in the precision of a matrix of ``dtype``: a float32 0-d tensor's reciprocal is
    taken in float64 for a float64 matrix (``1.0 / s`` alone would round it to float32, D36).

    >>> float(reciprocal(torch.tensor(3.0), torch.float64)) == 1 / 3
    True
    """
    return 1.0 / s.to(torch.promote_types(s.dtype, dtype)) if isinstance(s, torch.Tensor) else 1.0 / s


def _range(dtype: torch.dtype) -> float:
    """The largest finite magnitude of a floating or complex dtype (a cast to a smaller one can overflow)."""
    return torch.finfo(real_dtype(dtype)).max if (dtype.is_floating_point or dtype.is_complex) \
        else float("inf")


_SAME_SHAPE = {"add": "add", "hadamard": "hadamard"}


def _binary(op: str, a: StructuredMatrix, b: StructuredMatrix) -> StructuredMatrix:
    """Shape, batch, device and dtype checks shared by the binary operations, then the rule (the common case,
    equal batch shapes and dtypes, without helper calls: they cost more than a small closure operation)."""
    sa, sb = a._shape, b._shape
    if op == "matmul" and sa[-1] != sb[-2]:
        raise ValueError(f"cannot multiply matrices of shapes {tuple(sa)} and {tuple(sb)}")
    if sa != sb:  # (equal shapes pass the other checks, without the slices' microseconds)
        if op in _SAME_SHAPE and sa[-2:] != sb[-2:]:
            raise ValueError(f"{op} needs matrices of equal (T, S); got shapes {tuple(sa)} and {tuple(sb)}")
        if sa[:-2] != sb[:-2]:
            broadcast_batch(("left operand", sa[:-2]), ("right operand", sb[:-2]))
    if a._device != b._device:
        raise ValueError(f"operands are on different devices: {a.device} and {b.device}")
    if a._dtype != b._dtype:
        dtype = torch.promote_types(a._dtype, b._dtype)
        a = a if a._dtype == dtype else a.to(dtype)
        b = b if b._dtype == dtype else b.to(dtype)
    return dispatch.apply(op, a, b)
