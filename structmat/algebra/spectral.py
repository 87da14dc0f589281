"""Closure rules of the FFT family: Toeplitz, causal Toeplitz, circulant (``Fourier``) and ``DFT`` masks."""

from __future__ import annotations

import torch

from structmat.core.base import StructuredMatrix
from structmat.core.dtypes import complex_dtype, real_dtype
from structmat.core.validation import SingularMatrixError, check_overflow
from structmat.linalg.causal_toeplitz import causal_inverse_series
from structmat.linalg.spectral import linear_convolution
from structmat.linalg.toeplitz_dense import lower_toeplitz_dense
from structmat.matrices.dft import DFT
from structmat.matrices.fourier import Fourier, fft_ulps
from structmat.matrices.toeplitz import Toeplitz, ToeplitzInverse

__all__ = ["DIRECT_PRODUCT_MAX_T", "both_causal", "toeplitz_add", "causal_toeplitz_matmul", "toeplitz_hadamard", "toeplitz_inverse",
           "fourier_add", "fourier_matmul", "fourier_hadamard", "fourier_inverse", "dft_inverse"]


def both_causal(a: Toeplitz, b: Toeplitz) -> bool:
    return a.is_causal and b.is_causal


def toeplitz_add(a: Toeplitz, b: Toeplitz) -> Toeplitz:
    """First columns and rows add (causal if both are)."""
    if both_causal(a, b):
        return Toeplitz._of(a.c + b.c, None)
    return Toeplitz._of(a.c + b.c, a.r + b.r)


#: Longest causal Toeplitz product taken as one dense triangular matrix-vector product (``O(T^2)``) instead of
#: three FFTs (``O(T log T)``). Measured (one thread, float32, the machine shared): T = 16 / 64 / 256: 115 / 169 /
#: 261 us against 334 / 349 / 549 us.
DIRECT_PRODUCT_MAX_T = 256


def causal_toeplitz_matmul(a: Toeplitz, b: Toeplitz) -> Toeplitz:
    """Causal @ causal is causal: a truncated polynomial product, ``O(T log T)`` (``O(T^2)`` for short ones)."""
    T = a.shape[-1]
    if T <= DIRECT_PRODUCT_MAX_T:
        return Toeplitz._of((lower_toeplitz_dense(a.c) @ b.c[..., None])[..., 0], None)
    return Toeplitz._of(linear_convolution(a.c, b.c, T), None)


def toeplitz_hadamard(a: Toeplitz, b: Toeplitz) -> Toeplitz:
    """Entries multiply along each diagonal (causal if either is)."""
    if a.is_causal or b.is_causal:
        return Toeplitz._of(a.c * b.c, None)
    return Toeplitz._of(a.c * b.c, a.r * b.r)


def toeplitz_inverse(a: Toeplitz) -> StructuredMatrix:
    """Causal: the inverse power series (causal Toeplitz); else Gohberg-Semencul (``ToeplitzInverse``)."""
    if a.is_causal:
        return Toeplitz._of(check_overflow(causal_inverse_series(a.c), "causal Toeplitz inverse series"), None)
    return ToeplitzInverse(a)


def _fourier(eigvals: torch.Tensor, real: bool, like: Fourier) -> Fourier:
    """The circulant of a spectrum computed from ``like`` (and an operand of its dtype): its dtype as the
    constructor would give it."""
    precision = real_dtype(like.dtype)
    return Fourier._of(eigvals, real, precision if real else complex_dtype(precision))


def fourier_add(a: Fourier, b: Fourier) -> Fourier:
    return _fourier(a.eigvals + b.eigvals, a.real and b.real, a)


def fourier_matmul(a: Fourier, b: Fourier) -> Fourier:
    """Circulants commute; eigenvalues multiply."""
    return _fourier(a.eigvals * b.eigvals, a.real and b.real, a)


def fourier_hadamard(a: Fourier, b: Fourier) -> Fourier:
    """The elementwise product of circulants is the circulant of the product of the kernels."""
    return Fourier.from_kernel(a.kernel * b.kernel)


def fourier_inverse(a: Fourier) -> Fourier:
    """Reciprocal eigenvalues; singular when one is below ``min(T, 10 max(1, log2 T)) eps`` times the largest
    (FFT-computed eigenvalues are accurate to about ``eps log2 T`` of the largest; ``T eps`` refused well-conditioned
    float32 circulants at long ``T``)."""
    mag = a.eigvals.abs()
    if mag.numel() == 0:
        return _fourier(a.eigvals.clone(), a.real, a)
    tol = min(a.shape[-1], fft_ulps(a.shape[-1])) * torch.finfo(mag.dtype).eps * mag.amax(-1, keepdim=True)
    if bool((mag <= tol).any()):
        raise SingularMatrixError("Fourier mask has a (numerically) zero eigenvalue")
    return _fourier(check_overflow(1.0 / a.eigvals, "Fourier.inv() eigenvalues"), a.real, a)


def dft_inverse(a: DFT) -> DFT:
    """``F^{-1} = conj(F) / T``: the transform of the opposite sign, scaled.

    The real part is invertible only for ``T <= 2``, where the DFT matrix is real and ``F^{-1} = F / T``;
    the imaginary part only for ``T = 0``. The ``0 x 0`` matrix is its own inverse, whatever the scale. A zero scale,
    or one whose inverse ``1 / (T scale)`` overflows the matrix's precision (it is zero, or a subnormal of it, there),
    is singular.
    """
    if a.n == 0:
        return a
    if a.part == "imag" or (a.part == "real" and a.n > 2):
        raise SingularMatrixError(f"the {a.part} part of the DFT matrix is singular for T = {a.n}")
    finfo = torch.finfo(a._precision)
    if not a.n * abs(a.scale) * finfo.max >= 1:  # |1 / (T scale)| > max, without dividing by a zero scale
        precision = str(a._precision).replace("torch.", "")
        raise SingularMatrixError(f"the DFT matrix with scale {a.scale!r} is singular in {precision}: its inverse's "
                                  f"scale 1 / (T * scale) would overflow {precision}")
    return a._with(inverse=not a.inverse, scale=1.0 / (a.n * a.scale))
