"""Toeplitz matrices (scipy's convention) with FFT matvecs, and their inverses.

``Toeplitz(c, r)`` has first column ``c`` and first row ``r`` (``r[0]`` ignored; ``r=None`` means
``conj(c)``, Hermitian). Products with vectors embed the matrix in a circulant of length
``n >= T + S - 1`` and use ``torch.fft`` (real FFTs for real data): ``O((T + S) log(T + S))``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import scipy.linalg
import torch

from structmat.base import SingularMatrixError, StructuredMatrix, as_tensor, check_finite
from structmat.lazy import Inverse
from structmat.spectral import circular_apply, fft_length

__all__ = ["Toeplitz", "ToeplitzInverse", "toeplitz_matmat", "circulant_spectrum", "causal_inverse_series"]

_DIRECT_INVERSE_MAX = 64  # below this the causal inverse is a forward substitution


def _conv(a: torch.Tensor, b: torch.Tensor, n_out: int) -> torch.Tensor:
    """Linear convolution of ``a`` and ``b`` along the last axis, first ``n_out`` terms (FFT)."""
    n = fft_length(a.shape[-1] + b.shape[-1] - 1)
    if a.is_complex() or b.is_complex():
        return torch.fft.ifft(torch.fft.fft(a, n) * torch.fft.fft(b, n), n)[..., :n_out]
    return torch.fft.irfft(torch.fft.rfft(a, n) * torch.fft.rfft(b, n), n)[..., :n_out]


def circulant_spectrum(c: torch.Tensor, r: torch.Tensor, complex_: bool) -> torch.Tensor:
    """FFT of the first column of the circulant (length a power of two >= ``T + S - 1``) that
    embeds ``T(c, r)``: ``c``, zeros, then ``r[S-1], ..., r[1]``; ``rfft`` unless ``complex_``."""
    T, S = c.shape[-1], r.shape[-1]
    n = fft_length(T + S - 1)
    col = torch.cat([c, torch.zeros(*c.shape[:-1], n - T - S + 1, dtype=c.dtype, device=c.device),
                     torch.flip(r[..., 1:], (-1,))], dim=-1)
    return torch.fft.fft(col, n) if complex_ else torch.fft.rfft(col, n)


def toeplitz_matmat(c: torch.Tensor, r: torch.Tensor, X: torch.Tensor, spectrum: torch.Tensor | None = None) -> torch.Tensor:
    """``T(c, r) @ X`` for ``c (*, T)``, ``r (*, S)``, ``X (*, S, K)`` by one circulant FFT product
    (``spectrum``: :func:`circulant_spectrum`, if already computed)."""
    T, S = c.shape[-1], r.shape[-1]
    n = fft_length(T + S - 1)
    complex_ = c.is_complex() or X.is_complex()
    spectrum = circulant_spectrum(c, r, complex_) if spectrum is None else spectrum
    return circular_apply(X.transpose(-1, -2), spectrum, n, complex_)[..., :T].transpose(-1, -2)


def causal_inverse_series(c: torch.Tensor) -> torch.Tensor:
    """First column ``d`` of ``L(c)^{-1}`` for lower-triangular Toeplitz ``L(c)``: the power series
    ``1 / c(z) mod z^T``. Newton doubling ``d <- d (2 - c d)`` with FFT products, ``O(T log T)``;
    forward substitution for ``T <= 64``. The FFT products are accurate relative to the largest
    coefficient: if ``c(z)`` has zeros inside the unit disk the series grows geometrically and its
    small leading terms lose relative accuracy (as any method in floating point would)."""
    T = c.shape[-1]
    if bool((c[..., 0] == 0).any()):
        raise SingularMatrixError("causal Toeplitz with c[0] == 0 is singular")
    if T <= _DIRECT_INVERSE_MAX:
        d = [1.0 / c[..., 0]]
        for k in range(1, T):
            acc = sum(c[..., j] * d[k - j] for j in range(1, k + 1))
            d.append(-acc / c[..., 0])
        return torch.stack(d, dim=-1)
    d = (1.0 / c[..., :1])
    m = 1
    while m < T:
        m = min(2 * m, T)
        e = _conv(c[..., :m], d, m)
        two_minus = -e
        two_minus[..., 0] = two_minus[..., 0] + 2.0
        d = _conv(d, two_minus, m)
    return d


class Toeplitz(StructuredMatrix):
    """Toeplitz matrix ``M[i, j] = c[i - j]`` (``i >= j``), ``r[j - i]`` (``j > i``).

    Parameters
    ----------
    c : array_like, shape ``(*, T)``
        First column.
    r : array_like, shape ``(*, S)``, optional
        First row (``r[..., 0]`` ignored). ``None`` means ``conj(c)`` (Hermitian, ``S = T``).

    Notes
    -----
    Matvec ``O((T + S) log(T + S))`` by FFT. ``+`` of two Toeplitz matrices is Toeplitz; the product
    of two *causal* ones is causal Toeplitz (a truncated polynomial product), but the product of two
    general Toeplitz matrices is not Toeplitz (``T1 T2`` differs from a Toeplitz matrix by a
    low-displacement-rank term), so it stays a lazy :class:`~structmat.Product`. ``inv()`` is
    causal Toeplitz for causal matrices (``O(T log T)``), else a :class:`ToeplitzInverse`
    (Gohberg-Semencul, ``O(T^2)`` setup by Levinson recursion, ``O(T log T)`` matvec).

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

    def __init__(self, c, r=None, *, causal: bool = False):
        c = as_tensor(c, "c")
        if c.dim() < 1 or c.shape[-1] < 1:
            raise ValueError(f"c must have shape (*, T) with T >= 1; got {tuple(c.shape)}")
        check_finite(c, "c")
        if causal:
            r = torch.zeros_like(c)
        elif r is None:
            r = c.conj()
        r = as_tensor(r, "r", device=c.device)
        if r.dim() < 1 or r.shape[-1] < 1:
            raise ValueError(f"r must have shape (*, S) with S >= 1; got {tuple(r.shape)}")
        check_finite(r, "r")
        torch.broadcast_shapes(c.shape[:-1], r.shape[:-1])
        dtype = torch.promote_types(c.dtype, r.dtype)
        c, r = c.to(dtype), r.to(dtype)
        self.c = c
        self.r = torch.cat([c[..., :1].expand(*r.shape[:-1], 1), r[..., 1:]], dim=-1)  # r[0] := c[0]
        self.causal = causal

    @classmethod
    def causal(cls, c) -> Toeplitz:
        """Lower-triangular Toeplitz with first column ``c``."""
        return cls(c, causal=True)

    @property
    def shape(self) -> torch.Size:
        batch = torch.broadcast_shapes(self.c.shape[:-1], self.r.shape[:-1])
        return torch.Size((*batch, self.c.shape[-1], self.r.shape[-1]))

    @property
    def dtype(self) -> torch.dtype:
        return self.c.dtype

    @property
    def device(self) -> torch.device:
        return self.c.device

    def diagonal(self) -> torch.Tensor:
        n = min(self.shape[-2:])
        return self.c[..., :1].expand(*self.c.shape[:-1], n)

    def to_dense(self) -> torch.Tensor:
        T, S = self.shape[-2:]
        i = torch.arange(T, device=self.device)[:, None]
        j = torch.arange(S, device=self.device)[None, :]
        lower = self.c[..., (i - j).clamp(min=0)]
        upper = self.r[..., (j - i).clamp(min=0)]
        return torch.where(i >= j, lower, upper)

    def _matmat(self, X: torch.Tensor) -> torch.Tensor:
        return toeplitz_matmat(self.c, self.r, X)

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
        if self.causal:
            return Toeplitz(fn(self.c), causal=True)
        return Toeplitz(fn(self.c), fn(self.r))

    @property
    def T(self) -> Toeplitz:
        return Toeplitz(self.r, self.c)

    def _scale(self, s) -> Toeplitz:
        return Toeplitz(self.c * s, causal=True) if self.causal else Toeplitz(self.c * s, self.r * s)

    def inv(self) -> StructuredMatrix:
        self._check_square("inv()")
        if self.causal:
            return Toeplitz(causal_inverse_series(self.c), causal=True)
        return ToeplitzInverse(self)

    def solve(self, Y) -> torch.Tensor:
        """Solve ``M X = Y``; many right-hand sides share one inverse (``O(T log T)`` each)."""
        return self.inv().matmul(Y)

    def tril(self) -> Toeplitz:
        """Lower triangle, a causal Toeplitz."""
        self._check_square("tril()")
        return Toeplitz(self.c, causal=True)

    def triu(self) -> StructuredMatrix:
        """Upper triangle (the transpose of a causal Toeplitz)."""
        self._check_square("triu()")
        return Toeplitz(self.r, causal=True).T


def _levinson_generators(M: Toeplitz) -> tuple[torch.Tensor, torch.Tensor]:
    """``x = M^{-1} e_0`` and ``y = M^{-1} e_{T-1}`` per batch entry (scipy's Levinson recursion)."""
    T = M.shape[-1]
    batch = M.batch_shape
    c = M.c.expand(*batch, T).detach().cpu().resolve_conj().numpy().reshape(-1, T)
    r = M.r.expand(*batch, T).detach().cpu().resolve_conj().numpy().reshape(-1, T)
    rhs = np.zeros((T, 2), dtype=np.result_type(c, r))
    rhs[0, 0] = rhs[-1, 1] = 1
    out = []
    for ci, ri in zip(c, r):
        try:
            out.append(scipy.linalg.solve_toeplitz((ci, ri), rhs))
        except np.linalg.LinAlgError as err:
            raise SingularMatrixError(f"Levinson recursion met a singular leading minor: {err}") from err
    sol = torch.as_tensor(np.stack(out), device=M.device).reshape(*batch, T, 2).to(M.dtype)
    return sol[..., 0], sol[..., 1]


class ToeplitzInverse(Inverse):
    """Inverse of a square Toeplitz matrix by the Gohberg-Semencul formula.

    With ``x = M^{-1} e_0``, ``y = M^{-1} e_{T-1}`` and ``x_0 != 0``::

        M^{-1} = (L(x) U(J y) - L(Z y) U(Z J x)) / x_0

    where ``L(v)`` / ``U(v)`` are lower / upper triangular Toeplitz with first column / row ``v``,
    ``J`` reverses and ``Z`` shifts down. Setup ``O(T^2)`` (Levinson, scipy's ``solve_toeplitz``,
    on the CPU, not differentiated); matvec four triangular FFT products, ``O(T log T)``.
    """

    def __init__(self, M: Toeplitz):
        super().__init__(M)
        x, y = _levinson_generators(M)
        if bool((x[..., 0] == 0).any()):
            raise SingularMatrixError("Gohberg-Semencul needs (M^{-1})[0, 0] != 0")
        zero = torch.zeros_like(x[..., :1])
        jy, jx = torch.flip(y, (-1,)), torch.flip(x, (-1,))
        self._L1, self._U1 = x, jy
        self._L2 = torch.cat([zero, y[..., :-1]], dim=-1)
        self._U2 = torch.cat([zero, jx[..., :-1]], dim=-1)
        self._x0 = x[..., 0]

    def _matmat(self, X: torch.Tensor) -> torch.Tensor:
        zeros = torch.zeros_like(self._L1)
        first = toeplitz_matmat(self._L1, zeros, toeplitz_matmat(_first(self._U1), self._U1, X))
        second = toeplitz_matmat(self._L2, zeros, toeplitz_matmat(_first(self._U2), self._U2, X))
        return (first - second) / self._x0[..., None, None]

    def _map(self, fn) -> ToeplitzInverse:
        return ToeplitzInverse(self.M._map(fn))

    @property
    def T(self) -> ToeplitzInverse:
        return ToeplitzInverse(self.M.T)

    def _scale(self, s) -> ToeplitzInverse:
        return ToeplitzInverse(self.M * (1.0 / s))


def _first(row: torch.Tensor) -> torch.Tensor:
    """Column of an upper-triangular Toeplitz with first row ``row``: ``row[0]`` then zeros."""
    out = torch.zeros_like(row)
    out[..., 0] = row[..., 0]
    return out
