"""Lazy composites: sums, products, inverses and transposes that keep a fast matvec.

They conjugate operand by operand through ``conj()``, never ``_map(torch.conj)``: conjugating the
parameters of a spectral operand (a ``Fourier`` spectrum, a ``DFT``) does not conjugate its entries.

They are the last resort of the closure rules (registered here at precedence
:data:`~structmat.core.dispatch.FALLBACK`). None of them ever densifies: ``to_dense()`` is only
computed when asked for, from the operands' dense forms.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from structmat.core.base import StructuredMatrix, reciprocal
from structmat.core.dispatch import FALLBACK, register
from structmat.core.dtypes import compute_dtype
from structmat.core.validation import (
    SingularMatrixError,
    broadcast_batch,
    broadcast_shapes,
    check_matrix,
    check_overflow,
)

__all__ = ["Sum", "Product", "Inverse", "Transpose"]


def _common_dtype(ops) -> torch.dtype:
    return functools.reduce(torch.promote_types, (op.dtype for op in ops))


def _operands(ops, kind: type, what: str) -> list[StructuredMatrix]:
    """The ``what``s (terms, factors) of a lazy ``kind`` (a Sum or Product), nested ones flattened, checked:
    structured matrices on one device."""
    flat = []
    for i, op in enumerate(ops):
        check_matrix(op, f"{kind.__name__} {what} {i}", "a StructuredMatrix (wrap a tensor in Dense)")
        flat.extend(getattr(op, what + "s") if isinstance(op, kind) else [op])
    devices = sorted({str(op.device) for op in flat})
    if len(devices) > 1:
        raise ValueError(f"{kind.__name__} {what}s are on different devices: {', '.join(devices)}")
    return flat


class Sum(StructuredMatrix):
    """``M_1 + M_2 + ...``; matvec is the sum of the operands' matvecs.

    Examples
    --------
    >>> import torch, structmat as sm
    >>> S = sm.Sum(sm.Diagonal(torch.ones(3)), sm.Dense(torch.ones(3, 3)))
    >>> S @ torch.ones(3)
    tensor([4., 4., 4.])
    """

    def __init__(self, *terms: StructuredMatrix):
        if len(terms) < 2:
            raise ValueError("Sum needs at least two terms")
        flat = _operands(terms, Sum, "term")
        shapes = {tuple(t.shape[-2:]) for t in flat}
        if len(shapes) != 1:
            raise ValueError(f"Sum terms must share (T, S); got {sorted(shapes)}")
        self.terms = tuple(flat)
        batch = broadcast_batch(*((f"term {i}", t.batch_shape) for i, t in enumerate(flat)))
        super().__init__((*batch, *flat[0].shape[-2:]), _common_dtype(flat), flat[0].device)

    def to_dense(self) -> torch.Tensor:
        return sum(t.to_dense().to(self.dtype) for t in self.terms).expand(self.shape)

    def diagonal(self) -> torch.Tensor:
        return sum(t.diagonal().to(self.dtype) for t in self.terms).expand(*self.batch_shape, min(self.shape[-2:]))

    def _matmat(self, X):
        return sum(t.matmul(X) for t in self.terms)

    def _map(self, fn) -> Sum:
        return Sum(*(t._map(fn) for t in self.terms))

    def conj(self) -> Sum:
        return Sum(*(t.conj() for t in self.terms)) if self.dtype.is_complex else self

    @property
    def T(self) -> Sum:
        return Sum(*(t.T for t in self.terms))

    def _scale(self, s) -> Sum:
        return Sum(*(t * s for t in self.terms))

    def inv(self):
        raise TypeError(
            "no fast inverse for a lazy Sum of " + ", ".join(type(t).__name__ for t in self.terms)
            + "; solve iteratively with scipy.sparse.linalg.gmres(structmat.aslinearoperator(M), y)"
        )


class Product(StructuredMatrix):
    """``M_1 @ M_2 @ ...`` of shapes ``(*, T, S_1), (*, S_1, S_2), ...`` (batches broadcast), applied right to left:
    the matvec is the chain of the factors' matvecs, never a dense product.

    Examples
    --------
    >>> import torch, structmat as sm
    >>> P = sm.Product(sm.Toeplitz.causal(torch.ones(3)), sm.Fourier.from_kernel(torch.tensor([1.0, 2.0, 0.0])))
    >>> torch.allclose(P @ torch.ones(3), P.to_dense() @ torch.ones(3))
    True
    """

    def __init__(self, *factors: StructuredMatrix):
        if len(factors) < 2:
            raise ValueError("Product needs at least two factors")
        flat = _operands(factors, Product, "factor")
        for left, right in zip(flat, flat[1:]):
            if left.shape[-1] != right.shape[-2]:
                raise ValueError(f"Product factors do not chain: {tuple(left.shape)} @ {tuple(right.shape)}")
        self.factors = tuple(flat)
        batch = broadcast_batch(*((f"factor {i}", f.batch_shape) for i, f in enumerate(flat)))
        super().__init__((*batch, flat[0].shape[-2], flat[-1].shape[-1]), _common_dtype(flat), flat[0].device)

    def to_dense(self) -> torch.Tensor:
        work = compute_dtype(self.dtype)  # (complex32 has no matmul on the CPU)
        dense = functools.reduce(torch.matmul, (f.to_dense().to(work) for f in self.factors))
        return dense.to(self.dtype).expand(self.shape)

    def _matmat(self, X):
        for f in reversed(self.factors):
            X = f.matmul(X)
        return X

    def _map(self, fn) -> Product:
        return Product(*(f._map(fn) for f in self.factors))

    def conj(self) -> Product:
        return Product(*(f.conj() for f in self.factors)) if self.dtype.is_complex else self

    @property
    def T(self) -> Product:
        return Product(*(f.T for f in reversed(self.factors)))

    def _scale(self, s) -> Product:
        return Product(self.factors[0] * s, *self.factors[1:])

    def inv(self) -> StructuredMatrix:
        self._check_square("inv()")
        if any(f.shape[-1] != f.shape[-2] for f in self.factors):
            raise TypeError("inverse of a Product with rectangular factors has no fast form")
        return functools.reduce(lambda a, b: a @ b, [f.inv() for f in reversed(self.factors)])


class Inverse(StructuredMatrix):
    """``M^{-1}`` (shape of ``M``, square) for a matrix with a fast ``solve`` but no structured inverse form: a
    product with it is ``M.solve``.

    Examples
    --------
    >>> import torch, structmat as sm
    >>> M = sm.LowRank(torch.eye(3), 2 * torch.eye(3))  # full rank: no structured inverse, a fast solve
    >>> type(M.inv()).__name__, M.inv() @ torch.ones(3)
    ('Inverse', tensor([0.5000, 0.5000, 0.5000]))
    """

    def __init__(self, M: StructuredMatrix, *, scale=None):
        check_matrix(M, "M", "a square StructuredMatrix")
        M._check_square("Inverse")
        self.M = M
        self.scale = scale  # ``scale * M^{-1}``: only where the scale is zero (``M * (1 / 0)`` has no form)
        super().__init__(M.shape, M.dtype, M.device)

    def to_dense(self) -> torch.Tensor:
        dense = self.M.to_dense()
        D, info = torch.linalg.inv_ex(dense.to(compute_dtype(dense.dtype)))  # (half precisions in float32)
        if bool((info != 0).any()):
            raise SingularMatrixError(f"{type(self.M).__name__} is singular: no dense inverse")
        D = check_overflow(D, f"the inverse of {type(self.M).__name__}").to(dense.dtype)
        return D if self.scale is None else D * self.scale

    def _matmat(self, X):
        M = self.M
        # M without a solve of its own solves through its inverse: fine where that is a lazy inverse of a matrix with one
        # (Transpose(LowRank): the inverse of the LowRank), a loop back here where it is not
        no_solve = type(M).solve is StructuredMatrix.solve
        if no_solve and isinstance(inv := M._inverse(), Inverse) and type(inv.M).solve is StructuredMatrix.solve:
            raise TypeError(f"{type(M).__name__} has no solve of its own and no structured inverse; solve "
                            "iteratively with scipy.sparse.linalg.gmres(structmat.aslinearoperator(M), y), or densely "
                            "with torch.linalg.solve(M.to_dense(), y)")
        Y = M.solve(X)
        return Y if self.scale is None else Y * self.scale

    def _map(self, fn) -> Inverse:
        scale = fn(self.scale) if isinstance(self.scale, torch.Tensor) else self.scale
        return Inverse(self.M._map(fn), scale=scale)

    def conj(self) -> Inverse:
        if not self.dtype.is_complex:
            return self
        scale = self.scale.conjugate() if isinstance(self.scale, complex) else self.scale
        return Inverse(self.M.conj(), scale=scale.conj() if isinstance(scale, torch.Tensor) else scale)

    @property
    def T(self) -> Inverse:
        return Inverse(self.M.T, scale=self.scale)

    def _scale(self, s) -> StructuredMatrix:
        if self.scale is None and bool(s != 0):  # (a nonzero scale goes into M: its inverse keeps one form)
            return Inverse(self.M * reciprocal(s, self.dtype))
        return Inverse(self.M, scale=s if self.scale is None else self.scale * s)

    def inv(self) -> StructuredMatrix:
        if self.scale is None:
            return self.M
        if not bool(self.scale != 0):
            raise SingularMatrixError("the zero matrix (an inverse scaled by 0) has no inverse")
        return self.M * reciprocal(self.scale, self.dtype)


class Transpose(StructuredMatrix):
    """``M^T`` (shape ``(*, S, T)`` for ``M (*, T, S)``) applied through the vector-Jacobian product of ``M @ Z``
    (exact, one matvec): the transpose of a class without a structured one.

    Examples
    --------
    >>> import torch, structmat as sm
    >>> M = sm.OneSS.from_decays(torch.full((3,), 0.5))
    >>> torch.allclose(sm.Transpose(M) @ torch.ones(3), M.to_dense().T @ torch.ones(3))
    True
    """

    def __init__(self, M: StructuredMatrix):
        check_matrix(M, "M")
        self.M = M
        s = M.shape
        super().__init__((*s[:-2], s[-1], s[-2]), M.dtype, M.device)

    def to_dense(self) -> torch.Tensor:
        return self.M.to_dense().transpose(-1, -2)

    def diagonal(self) -> torch.Tensor:
        return self.M.diagonal()

    def _product(self, X: Any, name: str) -> torch.Tensor:
        structured = self.M.T  # where M has a structured transpose, its product with every fast path (a small
        if not isinstance(structured, Transpose):  # matrix's kept dense form: 4 us at T = 16 against 50)
            return structured._product(X, name)
        return super()._product(X, name)

    def _matmat(self, X):
        structured = self.M.T  # where M has a structured transpose, its matvec: the VJP route needs a twice-
        if not isinstance(structured, Transpose):  # differentiable matvec, and the fast scans are differentiable once
            return structured._matmat(X)
        return transpose_matmat(self.M, X)

    def _map(self, fn) -> Transpose:
        return Transpose(self.M._map(fn))

    def conj(self) -> Transpose:
        return Transpose(self.M.conj()) if self.dtype.is_complex else self

    @property
    def T(self) -> StructuredMatrix:
        return self.M

    def _scale(self, s) -> Transpose:
        return Transpose(self.M * s)

    def inv(self) -> StructuredMatrix:
        return self.M.inv().T


def transpose_matmat(M: StructuredMatrix, X: torch.Tensor) -> torch.Tensor:
    """``M^T X`` as the vector-jacobian product of ``Z -> M Z``; works under ``torch.inference_mode`` too."""
    batch = broadcast_shapes(M.batch_shape, X.shape[:-2])
    if torch.is_inference_mode_enabled():  # autograd refuses inference tensors: copy them out of that mode
        with torch.inference_mode(False):
            out = transpose_matmat(M._map(torch.clone), X.clone())
        return out.detach()
    with torch.enable_grad():
        Z = torch.zeros(*batch, M.shape[-1], X.shape[-1], dtype=X.dtype, device=X.device, requires_grad=True)
        Y = M.matmul(Z)
        if not Y.requires_grad:  # Y does not depend on Z: for a linear map, M = 0 (an empty matrix), so M^T X = 0
            return X.new_zeros(*batch, M.shape[-1], X.shape[-1])
        (out,) = torch.autograd.grad(Y, Z, grad_outputs=X.conj() if X.is_complex() else X, create_graph=True)
    return out.conj() if X.is_complex() else out


@register("add", StructuredMatrix, StructuredMatrix, precedence=FALLBACK, result="Sum (lazy)", trusted=True)
def lazy_sum(a: StructuredMatrix, b: StructuredMatrix) -> Sum:
    """No structured sum: a lazy ``Sum`` whose matvec adds the operands' matvecs."""
    return Sum(a, b)


@register("matmul", StructuredMatrix, StructuredMatrix, precedence=FALLBACK, result="Product (lazy)", trusted=True)
def lazy_product(a: StructuredMatrix, b: StructuredMatrix) -> Product:
    """No structured product: a lazy ``Product`` (chain of matvecs)."""
    return Product(a, b)


@register("inv", StructuredMatrix, precedence=FALLBACK, result="Inverse (lazy)", trusted=True)
def lazy_inverse(a: StructuredMatrix) -> Inverse:
    """No structured inverse: a lazy ``Inverse`` whose matvec is ``a.solve``."""
    return Inverse(a)


@register("transpose", StructuredMatrix, precedence=FALLBACK, result="Transpose (lazy)", trusted=True)
def lazy_transpose(a: StructuredMatrix) -> Transpose:
    """No structured transpose: a lazy ``Transpose`` (matvec through a vector-Jacobian product)."""
    return Transpose(a)


@register("hadamard", StructuredMatrix, StructuredMatrix, precedence=FALLBACK, result="TypeError", trusted=True)
def no_hadamard(a: StructuredMatrix, b: StructuredMatrix):
    """No structured Hadamard product and no lazy form: a clear error (densify explicitly if intended)."""
    raise TypeError(f"no structured Hadamard product for {type(a).__name__} and {type(b).__name__}; "
                    "use Dense(a.to_dense()).hadamard(b) if densifying is intended")
