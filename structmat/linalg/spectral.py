"""FFT products: convolutions, circulant and Toeplitz matrices applied through ``torch.fft``.

A ``T x S`` Toeplitz matrix embeds in a circulant of length ``n >= T + S - 1``; a circulant is
diagonalised by the DFT, so its product with ``K`` columns costs two FFTs of length ``n`` per
column (real FFTs for real data). Half precisions (float16, bfloat16, complex32) transform in
float32 / complex64 (torch's CPU FFTs have no half-precision kernels, and the design accumulates them
in float32) and return their results in the inputs' dtype.
"""

from __future__ import annotations

import torch

from structmat.core.dtypes import compute_dtype
from structmat.core.validation import broadcast_shapes

__all__ = ["fft_length", "circular_apply", "linear_convolution", "circulant_spectrum", "toeplitz_matmat"]

def fft_length(n: int) -> int:
    """The FFT length used for a linear convolution of ``n`` terms: the next power of two."""
    return 1 << max(n - 1, 0).bit_length()


def circular_apply(Xt: torch.Tensor, spectrum: torch.Tensor, n: int, complex_: bool) -> torch.Tensor:
    """``ifft(spectrum * fft(Xt, n), n)`` along the last axis (real transforms unless ``complex_``).

    ``Xt (*, K, S)`` with ``S <= n`` (zero-padded to ``n``); ``spectrum (*, n)``, or ``(*, n // 2 + 1)``
    for real transforms, broadcast over ``K``. Returns ``(*, K, n)`` in the
    :func:`~structmat.core.dtypes.compute_dtype`. The transform of ``Xt`` is multiplied in place when the shapes
    allow (it has no other use), saving a pass and an allocation.
    """
    batch = broadcast_shapes(Xt.shape[:-2], spectrum.shape[:-1])
    Xt = Xt.to(compute_dtype(Xt.dtype))
    if Xt.numel() == 0 or 0 in batch:  # torch's FFT refuses empty batches
        dtype = torch.promote_types(Xt.dtype, spectrum.dtype) if complex_ else Xt.dtype
        return Xt.new_zeros((*batch, Xt.shape[-2], n), dtype=dtype)
    F = torch.fft.fft(Xt, n) if complex_ else torch.fft.rfft(Xt, n)
    S = spectrum[..., None, :]
    in_place = broadcast_shapes(F.shape, S.shape) == F.shape and torch.result_type(F, S) == F.dtype
    F = F.mul_(S) if in_place else F * S
    return torch.fft.ifft(F, n) if complex_ else torch.fft.irfft(F, n)


def linear_convolution(a: torch.Tensor, b: torch.Tensor, n_out: int) -> torch.Tensor:
    """First ``n_out`` terms of the linear convolution of ``a`` and ``b`` along the last axis (FFT).

    Examples
    --------
    >>> linear_convolution(torch.tensor([1.0, 1.0]), torch.tensor([1.0, 2.0]), 3)
    tensor([1., 3., 2.])
    """
    n = fft_length(a.shape[-1] + b.shape[-1] - 1)
    batch = broadcast_shapes(a.shape[:-1], b.shape[:-1])
    dtype = torch.promote_types(a.dtype, b.dtype)
    if 0 in batch or not (a.shape[-1] and b.shape[-1]):  # torch's FFT refuses empty batches
        return a.new_zeros(*batch, n_out, dtype=dtype)
    a, b = a.to(compute_dtype(dtype)), b.to(compute_dtype(dtype))
    if dtype.is_complex:
        out = torch.fft.ifft(torch.fft.fft(a, n) * torch.fft.fft(b, n), n)
    else:
        out = torch.fft.irfft(torch.fft.rfft(a, n) * torch.fft.rfft(b, n), n)
    return out[..., :n_out].to(dtype)


def circulant_spectrum(c: torch.Tensor, r: torch.Tensor, complex_: bool) -> torch.Tensor:
    """FFT of the first column of the circulant (length a power of two >= ``T + S - 1``) that
    embeds ``Toeplitz(c, r)``: ``c``, zeros, then ``r[S-1], ..., r[1]``; ``rfft`` unless ``complex_``."""
    T, S = c.shape[-1], r.shape[-1]
    n = fft_length(T + S - 1)
    batch = broadcast_shapes(c.shape[:-1], r.shape[:-1])
    c, r = c.to(compute_dtype(c.dtype)), r.to(compute_dtype(r.dtype))
    col = torch.cat([c.expand(*batch, T), c.new_zeros(*batch, n - T - S + 1),
                     torch.flip(r[..., 1:], (-1,)).expand(*batch, S - 1)], dim=-1)
    if col.numel() == 0:
        return col.new_zeros(*batch, n if complex_ else n // 2 + 1, dtype=torch.promote_types(col.dtype, torch.complex64))
    return torch.fft.fft(col, n) if complex_ else torch.fft.rfft(col, n)


def toeplitz_matmat(c: torch.Tensor, r: torch.Tensor, X: torch.Tensor, spectrum: torch.Tensor | None = None) -> torch.Tensor:
    """``Toeplitz(c, r) @ X`` for ``c (*, T)``, ``r (*, S)``, ``X (*, S, K)`` by one circulant FFT product
    (``spectrum``: :func:`circulant_spectrum`, if already computed)."""
    T, S = c.shape[-1], r.shape[-1]
    if T == 0 or S == 0:  # an empty side: no circulant to embed in (its length would be below T)
        batch = broadcast_shapes(c.shape[:-1], r.shape[:-1], X.shape[:-2])
        return X.new_zeros((*batch, T, X.shape[-1]), dtype=torch.promote_types(torch.promote_types(c.dtype, r.dtype), X.dtype))
    n = fft_length(T + S - 1)
    dtype = torch.promote_types(torch.promote_types(c.dtype, r.dtype), X.dtype)
    spectrum = circulant_spectrum(c, r, dtype.is_complex) if spectrum is None else spectrum
    return circular_apply(X.transpose(-1, -2), spectrum, n, dtype.is_complex)[..., :T].transpose(-1, -2).to(dtype)
