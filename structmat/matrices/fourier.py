"""Circulant masks: the matrices diagonalised by the DFT."""

from __future__ import annotations

import math

import torch

from structmat.core.base import StructuredMatrix
from structmat.core.dtypes import complex_dtype, compute_dtype, real_dtype
from structmat.core.validation import as_tensor, check_dtype, check_finite, finite_checks_enabled
from structmat.linalg.spectral import circular_apply
from structmat.linalg.toeplitz_dense import circulant_dense
from structmat.matrices.toeplitz import Toeplitz

__all__ = ["Fourier", "fft_ulps"]


def _reverse_spectrum(lam: torch.Tensor) -> torch.Tensor:
    """The spectrum of the circulant with kernel ``c[-k mod T]`` (``lam[-k mod T]``)."""
    return torch.roll(torch.flip(lam, (-1,)), 1, dims=-1)


def _spectrum_dtype(dtype: torch.dtype) -> torch.dtype:
    """The complex dtype a spectrum is kept in for a matrix of ``dtype`` (complex64 for half precisions)."""
    return compute_dtype(complex_dtype(dtype))


def _sequence(x, name: str, dtype, device) -> tuple[torch.Tensor, torch.dtype | None, torch.dtype]:
    """``x`` as a finite tensor of shape ``(*, T)``, the checked ``dtype`` and the precision the matrix takes."""
    dtype = check_dtype(dtype)
    x = as_tensor(x, name, device=device)
    if x.dim() < 1:
        raise ValueError(f"{name} must have shape (*, T); got a scalar")
    check_finite(x, name)
    return x, dtype, x.dtype if dtype is None else dtype


#: How far (in units of ``eps * max|eigvals|``) an explicitly real spectrum may be from conjugate symmetry: the
#: rounding of spectra computed in a dtype (products, sums, rescaling), not a different kernel.
REAL_SPECTRUM_TOL = 1000


def fft_ulps(T: int) -> float:
    """Rounding of an FFT-computed spectrum of length ``T``, in units of ``eps * max|eigvals|``: ``10 log2 T``."""
    return 10.0 * max(1.0, math.log2(max(T, 1)))


def _symmetrise(lam: torch.Tensor) -> torch.Tensor:
    """``lam / 2 + conj(lam[-k]) / 2``: the nearest conjugate-symmetric spectrum, differentiably (autograd projects the
    gradient on symmetric spectra, whatever path uses it). Exactly symmetric (the two terms commute), halves first
    so that nothing overflows (at the cost of the last bit of subnormal eigenvalues)."""
    return lam * 0.5 + _reverse_spectrum(lam).conj() * 0.5


def _symmetric(lam: torch.Tensor, ulps: float) -> bool:
    """Whether ``lam[k] == conj(lam[-k])`` to ``ulps`` units of ``eps * max|lam|`` of each batch entry (a complex
    spectrum beside a large real one must not pass at the large one's scale; one host read)."""
    if lam.numel() == 0:
        return True
    scale = lam.abs().amax(-1)
    gap = (lam - _reverse_spectrum(lam).conj()).abs().amax(-1)
    return bool((gap <= ulps * torch.finfo(lam.real.dtype).eps * scale).all())


class Fourier(StructuredMatrix):
    """Circulant ``M = F^{-1} diag(eigvals) F`` with ``F`` the DFT along the sequence.

    Parameters
    ----------
    eigvals : array_like, shape ``(*, T)``
        Eigenvalues ``fft(c)`` of the first column ``c``. Use :meth:`from_kernel` to start from
        ``c``; a real kernel keeps real results (``rfft``/``irfft``).
    real : bool, optional
        Whether the kernel is real (default: read off the conjugate symmetry of ``eigvals``, to
        ``10 log2(T)`` units of ``eps * max|eigvals|``, the rounding of an FFT). A real matrix keeps
        the symmetrised spectrum ``(eigvals[k] + conj(eigvals[-k])) / 2`` (so the gradient with
        respect to ``eigvals`` is the same, conjugate-symmetric one for every operation).
    dtype : torch.dtype, optional
        The matrix's precision (default: that of ``eigvals``); the matrix is real or complex as its
        kernel is (``float16`` gives ``complex32`` for a complex kernel, ``bfloat16`` gives
        ``complex64``, torch's ``to_complex``).
    device : optional
        Where the spectrum lives (default: where ``eigvals`` is).

    Notes
    -----
    Matvec ``O(T log T)``; ``+``, ``@``, ``inv()``, ``.T`` and ``hadamard`` stay ``Fourier`` in
    ``O(T log T)``. ``inv()`` raises :class:`~structmat.SingularMatrixError` when an eigenvalue is
    below ``tol * max|eigvals|`` (``tol = min(T, 10 max(1, log2 T)) eps``, the accuracy of FFT eigenvalues).
    Half precisions (``float16``, ``bfloat16``, ``complex32``) keep the spectrum in ``complex64`` and
    transform in float32 (torch's CPU FFTs have no half-precision kernels; the design accumulates half
    precisions in float32); entries and products come back in the matrix's dtype. ``to(dtype)`` casts
    the entries as torch casts a tensor (a complex kernel cast to a real dtype keeps its real part).

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
    >>> (M.to(torch.float16) @ torch.ones(4, dtype=torch.float16)).dtype
    torch.float16
    """

    small_dense = True

    def __init__(self, eigvals, *, real: bool | None = None, dtype: torch.dtype | None = None, device=None):
        lam, dtype, precision = _sequence(eigvals, "eigvals", dtype, device)
        lam = lam.to(_spectrum_dtype(precision))
        if real is None:  # conjugate-symmetric spectrum <=> real kernel (a complex dtype asks for a complex matrix)
            # to an FFT's rounding relative to max|eigvals| (an elementwise test refused fft of real kernels)
            real = (not precision.is_complex or dtype is None) and _symmetric(lam, fft_ulps(lam.shape[-1]))
        elif real and finite_checks_enabled() and not _symmetric(lam, REAL_SPECTRUM_TOL):
            # (inv() and products use the spectrum as given, entries and solves its real kernel: they would disagree)
            raise ValueError("real=True needs a conjugate-symmetric spectrum, eigvals[k] == conj(eigvals[-k]); got "
                             "eigvals that are not (leave real unset, or pass fft of a real kernel)")
        # a real matrix keeps the symmetrised spectrum: M @ x (half spectrum), M.T (reversed) and to_dense() read
        # different halves, and only then do they all give the same, conjugate-symmetric gradient
        self.eigvals = _symmetrise(lam) if real else lam
        self.real = bool(real)
        precision = real_dtype(precision)
        T = lam.shape[-1]
        super().__init__((*lam.shape[:-1], T, T), precision if self.real else complex_dtype(precision), lam.device)

    @classmethod
    def _of(cls, eigvals: torch.Tensor, real: bool, dtype: torch.dtype) -> Fourier:
        """The circulant of a spectrum computed from checked matrices (kept in the spectrum dtype of ``dtype``, the
        matrix's dtype): unchecked (a closure operation on small matrices costs less than the constructor's checks)."""
        M = object.__new__(Fourier)
        M.eigvals, M.real = eigvals, real
        T = eigvals.shape[-1]
        StructuredMatrix.__init__(M, (*eigvals.shape[:-1], T, T), dtype, eigvals.device)
        return M

    @classmethod
    def from_kernel(cls, c, *, dtype: torch.dtype | None = None, device=None) -> Fourier:
        """Circulant with first column ``c`` (shape ``(*, T)``); ``dtype``, ``device`` as in the constructor."""
        c, dtype, precision = _sequence(c, "c", dtype, device)
        work = compute_dtype(real_dtype(precision))
        work = c.to(complex_dtype(work) if c.is_complex() else work)
        if not (c.is_complex() or precision.is_complex) and c.numel():
            # a real kernel: its half spectrum mirrored, conjugate-symmetric by construction (no check, nothing to
            # symmetrise: at T = 1e6 those passes cost as much as the solve)
            half, T = torch.fft.rfft(work), c.shape[-1]
            lam = torch.cat([half, half[..., 1:T - half.shape[-1] + 1].flip(-1).conj()], dim=-1)
            return cls._of(lam, True, real_dtype(precision))
        lam = torch.fft.fft(work) if c.numel() else work.to(_spectrum_dtype(precision))
        return cls(lam, real=not (c.is_complex() or precision.is_complex), dtype=precision)

    @property
    def kernel(self) -> torch.Tensor:
        """First column ``c = ifft(eigvals)`` (real for a real circulant), in the matrix's dtype."""
        c = torch.fft.ifft(self.eigvals) if self.eigvals.numel() else self.eigvals.clone()
        return (c.real if self.real else c).to(self.dtype)

    def matvec_flops(self, K: int) -> float:
        n = self.shape[-1]  # a circulant: transforms of length T
        return 10.0 * K * n * math.log2(max(n, 2))

    def diagonal(self) -> torch.Tensor:
        return self.kernel[..., :1].expand(self.shape[:-1])

    def to_dense(self) -> torch.Tensor:
        return circulant_dense(self.kernel)

    def _matmat(self, X: torch.Tensor) -> torch.Tensor:
        T = self.shape[-1]
        real = self.real and not X.is_complex()
        spectrum = self.eigvals[..., : T // 2 + 1] if real else self.eigvals
        return circular_apply(X.transpose(-1, -2), spectrum, T, not real).transpose(-1, -2).to(X.dtype)

    def _with(self, eigvals: torch.Tensor, real: bool | None = None) -> Fourier:
        return Fourier(eigvals, real=self.real if real is None else real, dtype=self.dtype)

    def _map(self, fn) -> Fourier:
        probe = fn(torch.zeros((), dtype=self.dtype, device=self.device))
        if probe.dtype == self.dtype:  # moves, reshapes, clones: of the spectrum, seen as real pairs (never cast)
            pairs = torch.view_as_real(self.eigvals.resolve_conj())
            moved = fn(pairs)
            moved = moved if moved.dtype == pairs.dtype else pairs.to(moved.device)  # a cast to this very dtype
            return self._with(torch.view_as_complex(moved.contiguous()))
        # a cast acts on the entries, as on a tensor: up, they stay exactly what to_dense() gave; down, they round
        return Fourier.from_kernel(fn(self.kernel))

    def solve(self, Y) -> torch.Tensor:
        """Solve ``M X = Y`` for ``Y (*, T, K)`` or ``(T,)``: reciprocal eigenvalues, ``O(T log T)`` per column."""
        return self._inverse()._product(Y, "Y")

    @property
    def T(self) -> Fourier:
        return Fourier._of(_reverse_spectrum(self.eigvals), self.real, self.dtype)

    def conj(self) -> Fourier:
        return Fourier._of(_reverse_spectrum(self.eigvals).conj(), self.real, self.dtype)

    def _scale(self, s) -> Fourier:
        real = self.real and not (isinstance(s, complex) or (torch.is_tensor(s) and s.is_complex()))
        return self._with(self.eigvals * s, real=real)

    def to_toeplitz(self) -> Toeplitz:
        """The same circulant as a :class:`~structmat.Toeplitz` (first row ``c[-k mod T]``)."""
        c = self.kernel
        return Toeplitz(c, torch.roll(torch.flip(c, (-1,)), 1, dims=-1))
