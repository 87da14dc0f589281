"""Toeplitz matrices (scipy's convention) with FFT matvecs, and their inverses.

``Toeplitz(c, r)`` has first column ``c`` and first row ``r`` (``r[0]`` ignored; ``r=None`` means
``conj(c)``, Hermitian). Products with vectors embed the matrix in a circulant of length
``n >= T + S - 1`` and use ``torch.fft`` (real FFTs for real data): ``O((T + S) log(T + S))``.
"""

from __future__ import annotations

import cmath
import math
from collections.abc import Callable

import torch

from structmat.core import small
from structmat.core.base import StructuredMatrix, reciprocal
from structmat.core.dtypes import compute_dtype
from structmat.core.lazy import Inverse
from structmat.core.validation import (
    SingularMatrixError,
    as_tensor,
    broadcast_batch,
    check_finite,
    check_flag,
    check_overflow,
    finite_checks_enabled,
    trusted_parameters,
)
from structmat.linalg.causal_toeplitz import DIRECT_INVERSE_MAX
from structmat.linalg.spectral import circulant_spectrum, fft_length, toeplitz_matmat
from structmat.linalg.toeplitz_dense import lower_toeplitz_dense, toeplitz_dense
from structmat.linalg.toeplitz_solvers import InverseGenerators, toeplitz_inverse_generators, toeplitz_solve

__all__ = ["Toeplitz", "ToeplitzInverse"]


def _check_finite(x: torch.Tensor, name: str) -> None:
    """:func:`check_finite` behind one reduction: a finite sum means finite entries (an inf or NaN anywhere
    makes it inf or NaN), and torch's ``isfinite`` is four kernels, most of a short solve's time at T = 64."""
    if finite_checks_enabled() and x.numel() and x.device.type != "meta" and \
            not cmath.isfinite((x if x.dtype != torch.complex32 else x.to(torch.complex64)).sum().item()):  # (no sum)
        check_finite(x, name)  # the exact check, and its error (or a sum that merely overflowed)


class Toeplitz(StructuredMatrix):
    """Toeplitz matrix ``M[i, j] = c[i - j]`` (``i >= j``), ``r[j - i]`` (``j > i``).

    Parameters
    ----------
    c : array_like, shape ``(*, T)``
        First column.
    r : array_like, shape ``(*, S)``, optional
        First row (``r[..., 0]`` ignored). ``None`` means ``conj(c)`` (Hermitian, ``S = T``).
        The batch shapes of ``c`` and ``r`` broadcast, as in :func:`scipy.linalg.toeplitz`.
    causal : bool
        Lower triangular (``r = 0`` off the diagonal); :meth:`causal` is the usual way to ask.

    Notes
    -----
    Matvec ``O((T + S) log(T + S))`` by FFT. ``+`` of two Toeplitz matrices is Toeplitz; the product
    of two *causal* ones is causal Toeplitz (a truncated polynomial product), but the product of two
    general Toeplitz matrices is not Toeplitz (``T1 T2`` differs from a Toeplitz matrix by a
    low-displacement-rank term), so it stays a lazy :class:`~structmat.Product`. ``inv()`` is
    causal Toeplitz for causal matrices (``O(T log T)``), else a :class:`ToeplitzInverse`
    (Gohberg-Semencul, ``O(T^2)`` setup by Levinson recursion, ``O(T log T)`` matvec; a pivoted
    dense LU where Levinson breaks down). ``solve`` and ``inv() @`` are differentiable in ``c``, ``r``.

    Examples
    --------
    >>> import torch, structmat as sm
    >>> M = sm.Toeplitz(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([0.0, 4.0]))
    >>> M.to_dense()
    tensor([[1., 4.],
            [2., 1.],
            [3., 2.]])
    >>> M @ torch.ones(2)
    tensor([5., 3., 5.])
    """

    small_dense = True

    def __init__(self, c, r=None, *, causal: bool = False, dtype: torch.dtype | None = None, device=None):
        c = as_tensor(c, "c", dtype=dtype, device=device)
        if c.dim() < 1:
            raise ValueError(f"c must have shape (*, T); got {tuple(c.shape)}")
        _check_finite(c, "c")
        self.is_causal = check_flag(causal, "causal")
        self.is_anticausal = False  # upper triangular: the transpose of a causal one (set by ``T``)
        self._lower: torch.Tensor | None = None  # dense L(c) of a short causal matrix, once solved with
        if self.is_causal:  # first row (c[0], 0, ..., 0): nothing to check or broadcast, built when asked for
            if r is not None:
                raise ValueError("r must be None for a causal Toeplitz (its first row is (c[0], 0, ..., 0))")
            self.c, self._row = c, None
            super().__init__(tuple(c.shape) + c.shape[-1:], c.dtype, c.device)
            return
        r = as_tensor(c.conj() if r is None else r, "r", dtype=dtype, device=device, like=("c", c))
        if r.dim() < 1:
            raise ValueError(f"r must have shape (*, S); got {tuple(r.shape)}")
        _check_finite(r, "r")
        batch = broadcast_batch(("c", c.shape[:-1]), ("r", r.shape[:-1]))
        dtype = torch.promote_types(c.dtype, r.dtype)
        c, r = c.to(dtype).expand(*batch, c.shape[-1]), r.to(dtype).expand(*batch, r.shape[-1])
        self.c, self._row = c, r  # (r[0] := c[0] at each use, :attr:`r`: a copy made here went stale under writes to c)
        super().__init__((*batch, c.shape[-1], r.shape[-1]), dtype, c.device)

    @classmethod
    def _of(cls, c: torch.Tensor, r: torch.Tensor | None) -> Toeplitz:
        """The Toeplitz matrix of a first column and row computed from checked matrices, causal where ``r`` is None
        (else ``r[..., 0] == c[..., 0]``, one dtype and device, batches that broadcast): unchecked (a closure
        operation on small matrices costs less than the constructor's checks)."""
        M = object.__new__(Toeplitz)
        M.is_causal, M._lower, M.is_anticausal = r is None, None, False
        if r is None:
            M.c, M._row = c, None
            StructuredMatrix.__init__(M, (*c.shape, c.shape[-1]), c.dtype, c.device)
            return M
        batch = c.shape[:-1]
        if batch != r.shape[:-1]:  # (an expand costs more than a small sum)
            batch = torch.broadcast_shapes(batch, r.shape[:-1])
            c, r = c.expand(*batch, c.shape[-1]), r.expand(*batch, r.shape[-1])
        M.c, M._row = c, r
        StructuredMatrix.__init__(M, (*batch, c.shape[-1], r.shape[-1]), c.dtype, c.device)
        return M

    @property
    def r(self) -> torch.Tensor:
        """First row, ``(*, S)`` (``r[..., 0] == c[..., 0]``), from ``c`` and the row given as they are now (kept while
        neither changes in place)."""
        return small.keep(self, "r", self._first_row)

    def _first_row(self) -> torch.Tensor:
        c, row = self.c, self._row
        if row is None:  # causal: (c[0], 0, ..., 0)
            return torch.cat([c[..., :1], torch.zeros_like(c[..., 1:])], dim=-1)
        return torch.cat([c[..., :1], row[..., 1:]], dim=-1) if c.shape[-1] and row.shape[-1] else row

    @classmethod
    def causal(cls, c, *, dtype: torch.dtype | None = None, device=None) -> Toeplitz:
        """Lower-triangular Toeplitz with first column ``c``."""
        return cls(c, causal=True, dtype=dtype, device=device)

    def matvec_flops(self, K: int) -> float:
        n = self.shape[-2] + self.shape[-1]
        return 10.0 * K * n * math.log2(max(n, 2))

    def diagonal(self) -> torch.Tensor:
        n = min(self.shape[-2:])
        return self.c[..., :1].expand(*self.batch_shape, n)

    def to_dense(self) -> torch.Tensor:
        return toeplitz_dense(self.c, self.r)

    def _matmat(self, X: torch.Tensor) -> torch.Tensor:
        if 0 in self.shape[-2:]:
            return toeplitz_matmat(self.c, self.r, X)
        # the circulant spectrum kept with the matrix: building it (a padded copy and one FFT) cost as much as the
        # product's own two FFTs (T = 1024, one column: 185 us a call, 116 with the spectrum kept)
        complex_ = self.dtype.is_complex or X.is_complex()
        spectrum = small.keep(self, ("spectrum", complex_), lambda: circulant_spectrum(self.c, self.r, complex_))
        return toeplitz_matmat(self.c, self.r, X, spectrum)

    def matmat_fn(self) -> Callable[[torch.Tensor], torch.Tensor]:
        """``X -> M @ X`` with the circulant spectrum computed once (per operand dtype)."""
        spectra = {}

        def apply(X):
            M, X, vector = self._operand(X)
            key = (M.dtype, X.is_complex())
            if key not in spectra:
                spectra[key] = circulant_spectrum(M.c, M.r, M.dtype.is_complex or X.is_complex())
            Y = toeplitz_matmat(M.c, M.r, X, spectra[key])
            return Y[..., 0] if vector else Y

        return apply

    def _map(self, fn) -> Toeplitz:
        if self.is_causal:
            return Toeplitz(fn(self.c), causal=True)
        return Toeplitz(fn(self.c), fn(self.r))

    @property
    def T(self) -> Toeplitz:
        """The transpose ``Toeplitz(r, c)``; of a causal matrix, upper triangular (``is_anticausal``: its solves
        take the causal path in reversed time, ``U = J L J`` with ``L`` causal with first column ``r``)."""
        def build():
            with trusted_parameters():  # checked when this one was made
                if self.is_anticausal:  # its first row is the causal matrix's first column
                    return Toeplitz(self.r, causal=True)
                out = Toeplitz(self.r, self.c)
                out.is_anticausal = self.is_causal
                return out

        return small.keep(self, "T", build)

    def _scale(self, s) -> Toeplitz:
        return Toeplitz(self.c * s, causal=True) if self.is_causal else Toeplitz(self.c * s, self.r * s)

    def solve(self, Y) -> torch.Tensor:
        """Solve ``M X = Y`` for ``Y`` of shape ``(*, T, K)`` or ``(T,)`` (batches broadcast).

        Causal: one dense triangular solve for ``T <= 64`` (``O(T^2 K)``), else the inverse power series
        (Newton, ``O(T log T)``) and one FFT product per column. General: :class:`ToeplitzInverse`
        (``O(T^2)`` setup, ``O(T log T)`` per column). Differentiable in ``c``, ``r`` and ``Y``.

        >>> import torch, structmat as sm
        >>> sm.Toeplitz(torch.tensor([0.0, 1.0]), torch.tensor([0.0, 2.0])).solve(torch.tensor([2.0, 3.0]))
        tensor([3., 1.])
        """
        self._check_square("solve()")
        if self.is_anticausal:  # U = J L J: U^{-1} Y = J L^{-1} J Y
            flip = lambda t: torch.flip(t, (-2,))  # noqa: E731
            M, Y, vector = self._solve_operand(Y)
            X = flip(small.keep(self, "reversed", lambda: Toeplitz(self.r, causal=True)).solve(flip(Y)))
            return X[..., 0] if vector else X
        if self.is_causal and (X := self._small_solve(Y, "lower", "causal Toeplitz with c[0] == 0 is singular")) is not None:
            return X
        if self.is_causal and self.shape[-1] > DIRECT_INVERSE_MAX:  # the inverse's spectrum kept too: one FFT less
            M, Y, vector = self._solve_operand(Y)
            X = M._causal_inverse_product(Y)
            return X[..., 0] if vector else X
        if not self.is_causal:
            return self._inverse()._product(Y, "Y")
        M, Y, vector = self._solve_operand(Y)
        work = compute_dtype(M.dtype)
        X = torch.linalg.solve_triangular(M._lower_dense(work), Y if Y.dtype == work else Y.to(work), upper=False)
        X = X if X.dtype == M.dtype else X.to(M.dtype)
        # one reduction sees any inf or NaN (a sum that overflows only sends us to the exact check)
        if finite_checks_enabled() and not math.isfinite(abs(X.sum().item())) and not bool(torch.isfinite(X).all()):
            if bool((M.c[..., 0] == 0).any()):
                raise SingularMatrixError("causal Toeplitz with c[0] == 0 is singular")
            if bool(torch.isfinite(Y).all()):  # else NaN in, NaN out, as torch.linalg.solve
                check_overflow(X, "causal Toeplitz solve")
        return X[..., 0] if vector else X

    def _causal_inverse_product(self, Y: torch.Tensor) -> torch.Tensor:
        """``L^{-1} Y`` for this causal matrix ``L`` and ``Y (*, T, K)`` (checked, in the common dtype): the product
        with the inverse series by FFT, its spectrum kept with the matrix. A real matrix without batch dims and a
        real ``Y (T, K)``: three FFT calls and nothing else (the general product's broadcasting and casts cost
        as much as its transforms at T = 1024)."""
        if self.batch_shape or Y.dim() != 2 or Y.is_complex() or self.dtype not in (torch.float32, torch.float64):
            return small.keep(self, "inverse product", lambda: self._inverse().matmat_fn())(Y)
        T = self.shape[-1]
        n = fft_length(2 * T - 1)
        spectrum = small.keep(self, "inverse spectrum", lambda: torch.fft.rfft(self._inverse().c, n))
        return torch.fft.irfft(torch.fft.rfft(Y.mT, n) * spectrum, n)[..., :T].mT

    def _lower_dense(self, work: torch.dtype) -> torch.Tensor:
        """``L(c)`` dense in ``work``, kept for the next solve unless ``c`` needs gradients (a kept matrix would
        carry no graph) or inference mode is on (an inference tensor could not be saved for a backward)."""
        if self._lower is not None and self._lower.dtype == work and not self.c.requires_grad:
            return self._lower
        L = lower_toeplitz_dense(self.c if self.c.dtype == work else self.c.to(work))
        if not (self.c.requires_grad or torch.is_inference_mode_enabled()):
            self._lower = L
        return L

    def _solve_operand(self, Y) -> tuple[Toeplitz, torch.Tensor, bool]:
        """:meth:`_operand` (naming ``Y``), skipping its checks for a plain vector or matrix ``Y`` of the
        matrix's dtype and device: they cost more than the solve itself at ``T = 64``."""
        T = self.shape[-1]
        if (isinstance(Y, torch.Tensor) and not self.batch_shape and Y.dtype == self.dtype and Y.device == self.device
                and Y.dim() in (1, 2) and Y.shape[0] == T):
            return self, (Y[:, None] if Y.dim() == 1 else Y), Y.dim() == 1
        return self._operand(Y, "Y")

    def tril(self) -> Toeplitz:
        """Lower triangle, a causal Toeplitz."""
        self._check_square("tril()")
        return Toeplitz(self.c, causal=True)

    def triu(self) -> StructuredMatrix:
        """Upper triangle (the transpose of a causal Toeplitz)."""
        self._check_square("triu()")
        return Toeplitz(self.r, causal=True).T


class ToeplitzInverse(Inverse):
    """Inverse of a square Toeplitz matrix from four generator vectors (displacement rank 2)::

        M^{-1} = L(p1) U(q1) + L(p2) U(q2)

    with ``L(v)`` / ``U(v)`` lower / upper triangular Toeplitz with first column / row ``v``
    (:class:`~structmat.linalg.toeplitz_solvers.InverseGenerators`). Usually the Gohberg-Semencul
    formula ``(L(x) U(J y) - L(Z y) U(Z J x)) / x_0`` with ``x = M^{-1} e_0``, ``y = M^{-1} e_{T-1}`` from
    Levinson's recursion (``O(T^2)`` setup on the CPU); where Levinson breaks down (a zero leading
    principal minor, e.g. ``c[0] = 0``) or ``x_0 = 0``, Heinig's formula from a pivoted dense LU
    (``O(T^2)`` memory, ``O(T^3)`` time, for those matrices only). Matvec: six FFTs of length ``2T``,
    ``O(T log T)``, differentiable in ``c``, ``r`` and the right-hand side (the backward solves with
    ``M^H`` from the same generators). Transposes and scalings reuse the generators.

    Examples
    --------
    >>> import torch, structmat as sm
    >>> M = sm.Toeplitz(torch.tensor([0.0, 1.0, 2.0]), torch.tensor([0.0, 3.0, 1.0]))  # c[0] = 0
    >>> (M.inv() @ (M @ torch.tensor([1.0, 2.0, 3.0]))).round(decimals=4)
    tensor([1., 2., 3.])
    """

    def __init__(self, M: Toeplitz, generators: InverseGenerators | None = None):
        if not isinstance(M, Toeplitz):
            raise TypeError(f"M must be a square Toeplitz matrix; got {type(M).__name__}")
        super().__init__(M)
        self.generators = toeplitz_inverse_generators(M.c, M.r) if generators is None else generators

    def _matmat(self, X: torch.Tensor) -> torch.Tensor:
        work = compute_dtype(X.dtype)  # half precisions solve in float32, as their generators are kept
        return toeplitz_solve(self.M.c.to(work), self.M.r.to(work), X.to(work), self.generators).to(X.dtype)

    def to_dense(self) -> torch.Tensor:
        """``M^{-1}`` from the generators (``O(T^2 log T)``), differentiable in ``c``, ``r``."""
        T = self.shape[-1]
        eye = torch.eye(T, dtype=compute_dtype(self.dtype), device=self.device)
        return self._matmat(eye.to(self.dtype).expand(*self.batch_shape, T, T))

    def _map(self, fn) -> ToeplitzInverse:
        probe = fn(torch.zeros((), dtype=self.dtype, device=self.device))
        if torch.promote_types(self.dtype, probe.dtype) != probe.dtype:  # a downcast: the inverse of another matrix
            return ToeplitzInverse(self.M._map(fn))
        work = compute_dtype(probe.dtype)  # upcasts, moves, reshapes, conj: the generators follow
        return ToeplitzInverse(self.M._map(fn), self.generators.map(lambda t: fn(t).to(work)))

    @property
    def T(self) -> ToeplitzInverse:
        return ToeplitzInverse(self.M.T, self.generators.transposed())

    conj = StructuredMatrix.conj  # the parameters are entries: the generators conjugate with c and r

    def _scale(self, s) -> StructuredMatrix:
        if not bool(s != 0):  # the zero matrix: no Toeplitz matrix has this inverse (Inverse keeps the scale)
            return Inverse._scale(self, s)
        return ToeplitzInverse(self.M * reciprocal(s, self.dtype), self.generators.scaled(s))
