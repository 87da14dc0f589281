"""Masks diagonalised by the DFT (circulants, ``Fourier``) and the DFT matrix itself (``DFT``)."""

from __future__ import annotations

import math

import torch

from structmat.base import SingularMatrixError, StructuredMatrix, as_tensor, check_finite
from structmat.spectral import circular_apply

__all__ = ["Fourier", "DFT"]


class Fourier(StructuredMatrix):
    """Circulant ``M = F^{-1} diag(eigvals) F`` with ``F`` the DFT along the sequence.

    Parameters
    ----------
    eigvals : array_like, shape ``(*, T)``
        Eigenvalues ``fft(c)`` of the first column ``c``. Use :meth:`from_kernel` to start from
        ``c``; a real kernel keeps real results (``rfft``/``irfft``).

    Notes
    -----
    Matvec ``O(T log T)``; ``+``, ``@``, ``inv()``, ``.T`` and ``hadamard`` stay ``Fourier`` in
    ``O(T log T)``. ``inv()`` raises :class:`~structmat.SingularMatrixError` when an eigenvalue is
    below ``tol * max|eigvals|`` (``tol = T eps``).

    Examples
    --------
    >>> import torch, structmat as sm
    >>> M = sm.Fourier.from_kernel(torch.tensor([2.0, 1.0, 0.0, 0.0]))
    >>> M.to_dense()
    tensor([[2., 0., 0., 1.],
            [1., 2., 0., 0.],
            [0., 1., 2., 0.],
            [0., 0., 1., 2.]])
    >>> (M.inv() @ (M @ torch.arange(4.0))).round(decimals=5)
    tensor([0., 1., 2., 3.])
    """

    def __init__(self, eigvals, *, real: bool | None = None):
        lam = as_tensor(eigvals, "eigvals")
        if lam.dim() < 1:
            raise ValueError("eigvals must have shape (*, T); got a scalar")
        check_finite(lam, "eigvals")
        if not lam.is_complex():
            lam = lam.to(torch.promote_types(lam.dtype, torch.complex64))
        if real is None:  # conjugate-symmetric spectrum <=> real kernel
            flipped = torch.roll(torch.flip(lam, (-1,)), 1, dims=-1).conj()
            real = bool(torch.allclose(lam, flipped, atol=0, rtol=10 * torch.finfo(lam.real.dtype).eps))
        self.eigvals = lam
        self.real = real

    @classmethod
    def from_kernel(cls, c) -> Fourier:
        """Circulant with first column ``c`` (shape ``(*, T)``)."""
        c = as_tensor(c, "c")
        check_finite(c, "c")
        return cls(torch.fft.fft(c), real=not c.is_complex())

    @property
    def kernel(self) -> torch.Tensor:
        """First column ``c = ifft(eigvals)`` (real for a real circulant)."""
        c = torch.fft.ifft(self.eigvals)
        return c.real if self.real else c

    @property
    def shape(self) -> torch.Size:
        T = self.eigvals.shape[-1]
        return torch.Size((*self.eigvals.shape[:-1], T, T))

    @property
    def dtype(self) -> torch.dtype:
        return self.eigvals.real.dtype if self.real else self.eigvals.dtype

    @property
    def device(self) -> torch.device:
        return self.eigvals.device

    def diagonal(self) -> torch.Tensor:
        return self.kernel[..., :1].expand(self.shape[:-1])

    def to_dense(self) -> torch.Tensor:
        T = self.shape[-1]
        idx = (torch.arange(T, device=self.device)[:, None] - torch.arange(T, device=self.device)[None, :]) % T
        return self.kernel[..., idx]

    def _matmat(self, X: torch.Tensor) -> torch.Tensor:
        T = self.shape[-1]
        real = self.real and not X.is_complex()
        spectrum = self.eigvals[..., : T // 2 + 1] if real else self.eigvals
        return circular_apply(X.transpose(-1, -2), spectrum, T, not real).transpose(-1, -2)

    def _map(self, fn) -> Fourier:
        probe = fn(torch.zeros((), dtype=self.dtype, device=self.device))
        lam = self.eigvals.to(device=probe.device)
        if probe.dtype != self.dtype:
            complex_dtype = probe.dtype if probe.dtype.is_complex else torch.promote_types(probe.dtype, torch.complex64)
            lam = lam.to(complex_dtype)
            return Fourier(lam, real=self.real and not probe.dtype.is_complex)
        return Fourier(fn(lam) if self.dtype.is_complex else lam, real=self.real)

    @property
    def T(self) -> Fourier:
        # c -> c[-k mod T]: the spectrum is read backwards
        return Fourier(torch.roll(torch.flip(self.eigvals, (-1,)), 1, dims=-1), real=self.real)

    def conj(self) -> Fourier:
        return Fourier(torch.roll(torch.flip(self.eigvals, (-1,)), 1, dims=-1).conj(), real=self.real)

    def _scale(self, s) -> Fourier:
        real = self.real and not (isinstance(s, complex) or (torch.is_tensor(s) and s.is_complex()))
        return Fourier(self.eigvals * s, real=real)

    def inv(self) -> Fourier:
        mag = self.eigvals.abs()
        tol = self.shape[-1] * torch.finfo(mag.dtype).eps * mag.amax(-1, keepdim=True)
        if bool((mag <= tol).any()):
            raise SingularMatrixError("Fourier mask has a (numerically) zero eigenvalue")
        return Fourier(1.0 / self.eigvals, real=self.real)

    def to_toeplitz(self):
        """The same circulant as a :class:`~structmat.Toeplitz` (first row ``c[-k mod T]``)."""
        from structmat.toeplitz import Toeplitz

        c = self.kernel
        return Toeplitz(c, torch.roll(torch.flip(c, (-1,)), 1, dims=-1))


class DFT(StructuredMatrix):
    """The DFT matrix as a mask: ``L[t, s] = scale * exp(-2 pi i t s / T)`` (``+`` if ``inverse``).

    ``part="real"`` / ``"imag"`` select the cosine / sine mask (``DFT(T).real``). Matvec by FFT,
    ``O(T log T)``; ``inv()`` of the full matrix is exact: ``DFT(T, inverse=True, scale=1/T)``.

    Examples
    --------
    >>> import torch, structmat as sm
    >>> F = sm.DFT(4)
    >>> torch.allclose(F @ torch.ones(4, dtype=torch.complex64), torch.tensor([4, 0, 0, 0], dtype=torch.complex64))
    True
    >>> torch.allclose((F.inv() @ F).to_dense(), torch.eye(4, dtype=torch.complex64), atol=1e-6)
    True
    """

    order = None

    def __init__(self, T: int, inverse: bool = False, *, scale: float = 1.0, part: str = "full",
                 dtype: torch.dtype = torch.complex64, device=None):
        if int(T) < 1:
            raise ValueError(f"T must be a positive integer; got {T}")
        if part not in ("full", "real", "imag"):
            raise ValueError(f"part must be 'full', 'real' or 'imag'; got {part!r}")
        if not dtype.is_complex:
            dtype = torch.promote_types(dtype, torch.complex64)
        self.n, self.inverse, self.scale, self.part = int(T), bool(inverse), scale, part
        self._dtype, self._device = dtype, torch.device(device or "cpu")

    @property
    def shape(self) -> torch.Size:
        return torch.Size((self.n, self.n))

    @property
    def dtype(self) -> torch.dtype:
        return self._dtype if self.part == "full" else self._dtype.to_real()

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def real(self) -> DFT:
        """Cosine mask ``Re(L)``."""
        return DFT(self.n, self.inverse, scale=self.scale, part="real", dtype=self._dtype, device=self._device)

    @property
    def imag(self) -> DFT:
        """Sine mask ``Im(L)``."""
        return DFT(self.n, self.inverse, scale=self.scale, part="imag", dtype=self._dtype, device=self._device)

    def to_dense(self) -> torch.Tensor:
        t = torch.arange(self.n, device=self.device, dtype=self._dtype.to_real())
        sign = 1.0 if self.inverse else -1.0
        angle = sign * 2 * math.pi * torch.outer(t, t).remainder(self.n) / self.n
        full = self.scale * torch.polar(torch.ones_like(angle), angle).to(self._dtype)
        return {"full": full, "real": full.real, "imag": full.imag}[self.part]

    def _full(self, X: torch.Tensor) -> torch.Tensor:
        X = X.to(self._dtype)
        out = torch.fft.ifft(X, dim=-2, norm="forward") if self.inverse else torch.fft.fft(X, dim=-2)
        return self.scale * out

    def _matmat(self, X: torch.Tensor) -> torch.Tensor:
        if self.part == "full":
            return self._full(X)
        # Re(L) X = (L X + conj(L) X) / 2 and conj(L) X = conj(L conj(X))
        both = self._full(X), self._full(X.conj()).conj()
        out = (both[0] + both[1]) / 2 if self.part == "real" else (both[0] - both[1]) / 2j
        return out if X.is_complex() else out.real

    def _map(self, fn) -> DFT:
        probe = fn(torch.zeros((), dtype=self._dtype, device=self.device))
        return DFT(self.n, self.inverse, scale=self.scale, part=self.part, dtype=probe.dtype, device=probe.device)

    @property
    def T(self) -> DFT:
        return self  # symmetric

    def _scale(self, s) -> StructuredMatrix:
        if self.part == "full" or not isinstance(s, complex):
            return DFT(self.n, self.inverse, scale=self.scale * s, part=self.part, dtype=self._dtype, device=self.device)
        return super()._scale(s)

    def inv(self) -> DFT:
        if self.part != "full":
            raise SingularMatrixError(f"the {self.part} part of the DFT matrix is singular for T > 2")
        return DFT(self.n, not self.inverse, scale=1.0 / (self.n * self.scale), dtype=self._dtype, device=self.device)
