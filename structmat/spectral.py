"""Products with matrices diagonalised by the DFT: the FFT step shared by circulant and Toeplitz masks."""

from __future__ import annotations

import torch

__all__ = ["fft_length", "circular_apply"]


def fft_length(n: int) -> int:
    """The FFT length used for a linear convolution of ``n`` terms: the next power of two."""
    return 1 << (n - 1).bit_length()


def circular_apply(Xt: torch.Tensor, spectrum: torch.Tensor, n: int, complex_: bool) -> torch.Tensor:
    """``ifft(spectrum * fft(Xt, n), n)`` along the last axis (real transforms unless ``complex_``).

    ``Xt (*, K, S)`` with ``S <= n`` (zero-padded to ``n``); ``spectrum (*, n)``, or ``(*, n // 2 + 1)``
    for real transforms, broadcast over ``K``. Returns ``(*, K, n)``. The transform of ``Xt`` is
    multiplied in place when the shapes allow (it has no other use), saving a pass and an allocation.
    """
    F = torch.fft.fft(Xt, n) if complex_ else torch.fft.rfft(Xt, n)
    S = spectrum[..., None, :]
    in_place = torch.broadcast_shapes(F.shape, S.shape) == F.shape and torch.result_type(F, S) == F.dtype
    F = F.mul_(S) if in_place else F * S
    return torch.fft.ifft(F, n) if complex_ else torch.fft.irfft(F, n)
