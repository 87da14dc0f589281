"""Circulant masks: the matrices diagonalised by the DFT."""

from __future__ import annotations

import math

import torch

from structmat.core.base import StructuredMatrix
from structmat.core.validation import as_tensor, check_finite
from structmat.linalg.spectral import circular_apply
from structmat.matrices.toeplitz import Toeplitz

__all__ = ["Fourier"]


def _reverse_spectrum(lam: torch.Tensor) -> torch.Tensor:
    """The spectrum of the circulant with kernel ``c[-k mod T]`` (``lam[-k mod T]``)."""
    return torch.roll(torch.flip(lam, (-1,)), 1, dims=-1)


class Fourier(StructuredMatrix):
    """Circulant ``M = F^{-1} diag(eigvals) F`` with ``F`` the DFT along the sequence.

    Parameters
    ----------
    eigvals : array_like, shape ``(*, T)``
        Eigenvalues ``fft(c)`` of the first column ``c``. Use :meth:`from_kernel` to start from
        ``c``; a real kernel keeps real results (``rfft``/``irfft``).
    real : bool, optional
        Whether the kernel is real (default: read off the conjugate symmetry of ``eigvals``).

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
            real = bool(torch.allclose(lam, _reverse_spectrum(lam).conj(), atol=0, rtol=10 * torch.finfo(lam.real.dtype).eps))
        self.eigvals = lam
        self.real = bool(real)
        T = lam.shape[-1]
        super().__init__((*lam.shape[:-1], T, T), lam.real.dtype if self.real else lam.dtype, lam.device)

    @classmethod
    def from_kernel(cls, c) -> Fourier:
        """Circulant with first column ``c`` (shape ``(*, T)``)."""
        c = as_tensor(c, "c")
        if c.dim() < 1:
            raise ValueError("c must have shape (*, T); got a scalar")
        check_finite(c, "c")
        lam = torch.fft.fft(c) if c.numel() else c.to(torch.promote_types(c.dtype, torch.complex64))
        return cls(lam, real=not c.is_complex())

    @property
    def kernel(self) -> torch.Tensor:
        """First column ``c = ifft(eigvals)`` (real for a real circulant)."""
        c = torch.fft.ifft(self.eigvals) if self.eigvals.numel() else self.eigvals.clone()
        return c.real if self.real else c

    def matvec_flops(self, K: int) -> float:
        n = self.shape[-2] + self.shape[-1]
        return 10.0 * K * n * math.log2(max(n, 2))

    def diagonal(self) -> torch.Tensor:
        return self.kernel[..., :1].expand(self.shape[:-1])

    def to_dense(self) -> torch.Tensor:
        T = self.shape[-1]
        idx = (torch.arange(T, device=self.device)[:, None] - torch.arange(T, device=self.device)[None, :]) % max(T, 1)
        return self.kernel[..., idx]

    def _matmat(self, X: torch.Tensor) -> torch.Tensor:
        T = self.shape[-1]
        real = self.real and not X.is_complex()
        spectrum = self.eigvals[..., : T // 2 + 1] if real else self.eigvals
        return circular_apply(X.transpose(-1, -2), spectrum, T, not real).transpose(-1, -2)

    def _map(self, fn) -> Fourier:
        probe = fn(torch.zeros((), dtype=self.dtype, device=self.device))
        lam = self.eigvals.to(device=probe.device)
        if probe.dtype != self.dtype:  # a cast: the spectrum takes the matching complex dtype
            lam = lam.to(probe.dtype if probe.dtype.is_complex else torch.promote_types(probe.dtype, torch.complex64))
            return Fourier(lam, real=self.real and not probe.dtype.is_complex)
        return Fourier(fn(lam) if self.dtype.is_complex else lam, real=self.real)

    @property
    def T(self) -> Fourier:
        return Fourier(_reverse_spectrum(self.eigvals), real=self.real)

    def conj(self) -> Fourier:
        return Fourier(_reverse_spectrum(self.eigvals).conj(), real=self.real)

    def _scale(self, s) -> Fourier:
        real = self.real and not (isinstance(s, complex) or (torch.is_tensor(s) and s.is_complex()))
        return Fourier(self.eigvals * s, real=real)

    def to_toeplitz(self) -> Toeplitz:
        """The same circulant as a :class:`~structmat.Toeplitz` (first row ``c[-k mod T]``)."""
        c = self.kernel
        return Toeplitz(c, torch.roll(torch.flip(c, (-1,)), 1, dims=-1))
