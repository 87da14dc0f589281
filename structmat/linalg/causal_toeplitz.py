"""The causal (lower-triangular) Toeplitz inverse: its first column, the inverse series ``d = 1 / c`` of the
power series ``c(z)``, by Newton doubling with FFT products, checked, or term after term by divide and conquer;
and solves with ``L(c)``."""

from __future__ import annotations

import torch

from structmat.core.dtypes import compute_dtype
from structmat.core.validation import SingularMatrixError
from structmat.linalg.spectral import fft_length
from structmat.linalg.toeplitz_dense import lower_toeplitz_dense

__all__ = ["causal_inverse_series", "causal_solve_dense", "DIRECT_INVERSE_MAX",
           "NEWTON_TRUSTED_COND", "NEWTON_TOL", "FORWARD_BLOCK"]

#: Up to this length the causal inverse series comes from one dense triangular solve; above it,
#: Newton doubling with FFT products (``O(T log T)``) wins.
DIRECT_INVERSE_MAX = 64


def causal_inverse_series(c: torch.Tensor) -> torch.Tensor:
    """First column ``d`` of ``L(c)^{-1}`` for the lower-triangular Toeplitz ``L(c)``: the power series
    ``1 / c(z) mod z^T``, for ``c (*, T)``.

    Newton doubling ``d <- d + d (1 - c d)`` with FFT products, ``O(T log T)``: with ``m`` terms of ``d``
    right, ``c d = 1 + O(z^m)``, so of ``c d`` only the terms ``m .. 2m-1`` are needed and a cyclic
    convolution of length ``2m`` gives them (its wrap-around lands on the known low terms), sharing the
    transform of ``d`` with the correction product: five FFTs of length ``2m`` per doubling. One dense
    triangular solve for ``T <= DIRECT_INVERSE_MAX``. Half precisions compute in float32.

    An FFT product is accurate only relative to its largest term, and Newton amplifies the error of each
    doubling in the next: where the series grows (``c(z)`` has zeros inside the unit disk) or has a large hump
    (repeated zeros near the unit circle) the result can be wrong entirely, while forward substitution stays
    accurate. So each batch entry's series is checked (:func:`_newton_failures`: the bound
    ``|d - 1/c| <= sum |d| * max |c d - e_0|``, or a small condition number) and where it fails, recomputed term
    after term as forward substitution would, by divide and conquer (:func:`_series_divide`, ``O(T log^2 T)``):
    the answer of the dense path, up to rounding, on both sides of ``DIRECT_INVERSE_MAX``. Where the true series
    overflows the dtype the result is not finite (callers check, e.g. ``check_overflow``).

    Examples
    --------
    >>> causal_inverse_series(torch.tensor([1.0, -0.5, 0.0]))  # 1 / (1 - z/2)
    tensor([1.0000, 0.5000, 0.2500])
    """
    T = c.shape[-1]
    if c.numel() == 0:  # length 0 or a batch of 0: nothing to invert (and no FFT of an empty batch)
        return c.clone()
    if bool((c[..., 0] == 0).any()):
        raise SingularMatrixError("causal Toeplitz with c[0] == 0 is singular")
    work = c.to(compute_dtype(c.dtype))
    if T <= DIRECT_INVERSE_MAX:
        e0 = torch.zeros(T, 1, dtype=work.dtype, device=c.device)
        e0[0] = 1
        return causal_solve_dense(work, e0)[..., 0].to(c.dtype)
    d = _series_newton(work)
    if (bad := _newton_failures(work, d)) is not None:
        d = d.clone()
        d[bad] = _series_divide(work[bad])
    return d.to(c.dtype)


#: Newton's series is kept without further check where ``sum |c| * sum |d|`` (the 1-norm condition number of
#: ``L(c)``: its first column has the largest sum, as has ``L(d)``'s) is at most this. Measured (``T = 4096``,
#: ``c(z) = (1 - a z)^p``, ``p <= 4``, ``a`` 0.5 to 0.999, float32 and float64): its error against forward
#: substitution (relative to ``max |d|``) was at most ``20 eps`` wherever the condition number was at most 100, but
#: ``200 eps`` at 360 (``a = 0.9, p = 2``) and ``3e4 eps`` at 1.5e3 (``a = 0.95, p = 2``). The residual check costs
#: a product of length ``2T`` (``a = 0.999, p = 1``, T = 4096, one thread: 1.04 against 0.62 ms).
NEWTON_TRUSTED_COND = 100.0

#: Above :data:`NEWTON_TRUSTED_COND`, Newton's series is kept where the error bound
#: ``sum |d| * max |c d - e_0| / max |d|`` is at most this many ``eps``. Measured as above: the bound exceeded the
#: error by 10 to 1e5; kept series had errors of at most ``1e2 eps`` (``a = 0.999``, ``p = 1``: bound ``6e3 eps``),
#: while the first rejected ones had ``1e2 eps`` (``a = 0.9, p = 2``) and ``3e4 eps`` (``a = 0.95, p = 2``).
NEWTON_TOL = 1e4


@torch.no_grad()  # a test, not part of the result
def _newton_failures(work: torch.Tensor, d: torch.Tensor) -> torch.Tensor | None:
    """Where Newton's series ``d`` of ``work (*, T)`` is not accurate to about working precision (or not finite):
    None where every batch entry has a small condition number (the common case: one reduction, one sync), else a
    mask of the entries whose residual bound (one more FFT product) fails."""
    total = d.abs().sum(-1)
    cond = work.abs().sum(-1) * total
    if cond.max().item() <= NEWTON_TRUSTED_COND:  # NaN: no
        return None
    T = work.shape[-1]
    n = fft_length(2 * T - 1)  # no wrap-around onto terms 0 .. T-1
    fft, ifft = (torch.fft.fft, torch.fft.ifft) if work.is_complex() else (torch.fft.rfft, torch.fft.irfft)
    residual = ifft(fft(work, n) * fft(d, n), n)[..., :T]
    residual[..., 0] -= 1
    bound = total * residual.abs().amax(-1) / d.abs().amax(-1)  # |d - c^{-1}| = |c^{-1} (c d - e_0)|
    failed = ~((cond <= NEWTON_TRUSTED_COND) | (bound <= NEWTON_TOL * torch.finfo(work.dtype).eps))  # NaN: failed
    return failed if bool(failed.any()) else None


#: Terms of a leaf of :func:`_series_divide` (one triangular solve of this size).
FORWARD_BLOCK = 64


def _series_newton(work: torch.Tensor) -> torch.Tensor:
    """The inverse series of ``work (*, T)`` by Newton doubling with FFT products (see :func:`causal_inverse_series`)."""
    T = work.shape[-1]
    fft, ifft = (torch.fft.fft, torch.fft.ifft) if work.is_complex() else (torch.fft.rfft, torch.fft.irfft)
    d, m = 1.0 / work[..., :1], 1
    while m < T:
        new = min(2 * m, T)
        n = fft_length(new)
        Fd = fft(d, n)
        high = ifft(fft(work[..., :new], n) * Fd, n)[..., m:new]  # terms m .. new-1 of c d
        d = torch.cat([d, -ifft(fft(high, n) * Fd, n)[..., : new - m]], dim=-1)
        m = new
    return d


def _series_divide(work: torch.Tensor) -> torch.Tensor:
    """The inverse series of ``work (n, T)`` term after term, by divide and conquer: the first half's terms, then
    their contribution to the second half (one FFT product), then the second half; leaves of :data:`FORWARD_BLOCK`
    terms by one triangular solve with ``L(c[:B])``. Each term meets only earlier terms, as in forward substitution
    (where Newton lets the large terms' rounding into the small ones): accurate to the rounding of the sums that make
    it. ``O(T log^2 T)`` (``T = 65536``, one thread: 58 ms, where plain blocked forward substitution took 1.5-5 s)."""
    n, T = work.shape
    fft, ifft = (torch.fft.fft, torch.fft.ifft) if work.is_complex() else (torch.fft.rfft, torch.fft.irfft)
    B = FORWARD_BLOCK
    L = lower_toeplitz_dense(work[:, :min(B, T)])
    d, acc = work.new_zeros(n, T), work.new_zeros(n, T)  # acc: sum_{j < l} c_{k - j} d_j of the terms solved so far

    def solve(lo: int, hi: int) -> None:
        if hi - lo <= B:
            rhs = -acc[:, lo:hi, None]
            if lo == 0:
                rhs[:, 0] += 1
            d[:, lo:hi] = torch.linalg.solve_triangular(L[:, :hi - lo, :hi - lo], rhs, upper=False)[..., 0]
            return
        mid = lo + max(B, (hi - lo) // 2 // B * B)  # (leaves of B terms, the size of L)
        solve(lo, mid)
        size = fft_length(hi - lo)  # the product's terms up to hi - lo - 1 without wrap-around
        product = ifft(fft(d[:, lo:mid], size) * fft(work[:, :hi - lo], size), size)
        acc[:, mid:hi] += product[:, mid - lo:hi - lo]
        solve(mid, hi)

    solve(0, T)
    return d


def causal_solve_dense(c: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """``L(c)^{-1} Y`` for ``c (*, T)``, ``Y (*, T, K)`` by one dense triangular solve (``O(T^2 K)``: the
    fastest way for short sequences). ``c[..., 0] = 0`` gives non-finite entries: callers check.

    Examples
    --------
    >>> causal_solve_dense(torch.tensor([2.0, 1.0]), torch.tensor([[2.0], [3.0]]))  # [[2, 0], [1, 2]] x = y
    tensor([[1.],
            [1.]])
    """
    return torch.linalg.solve_triangular(lower_toeplitz_dense(c), Y, upper=False)
