"""The DFT matrix as a mask (the Fourier SMA of Mamba-2, Fig. 3)."""

from __future__ import annotations

import math

import torch

from structmat.core.base import StructuredMatrix
from structmat.core.dtypes import complex_dtype, compute_dtype, real_dtype
from structmat.core.lazy import Product, Sum
from structmat.core.validation import check_count, check_device, check_dtype, check_flag, check_scalar
from structmat.matrices.diagonal import Diagonal

__all__ = ["DFT"]

_PARTS = ("full", "real", "imag")


class DFT(StructuredMatrix):
    """The DFT matrix as a mask: ``L[t, s] = scale * exp(-2 pi i t s / T)`` (``+`` if ``inverse``).

    ``part="real"`` / ``"imag"`` select ``scale * Re(.)`` / ``scale * Im(.)`` of the unscaled matrix:
    the cosine and sine masks (``DFT(T).real``, ``DFT(T).imag``). The properties ``.real`` / ``.imag``
    follow torch: they are the real and imaginary parts of the matrix they are called on (of a part or
    with a complex scale too, see :attr:`real`). Matvec by FFT, ``O(T log T)``; ``inv()`` of the full
    matrix is exact: ``DFT(T, inverse=True, scale=1/T)``.

    ``dtype`` sets the precision: the full matrix (and any part with a complex scale) is complex, the
    real and imaginary parts are real (``float16`` gives ``complex32`` / ``float16``; ``bfloat16`` gives
    ``complex64`` / ``bfloat16``, torch's ``to_complex``). Half precisions transform in float32.

    Examples
    --------
    >>> import torch, structmat as sm
    >>> F = sm.DFT(4)
    >>> torch.allclose(F @ torch.ones(4, dtype=torch.complex64), torch.tensor([4, 0, 0, 0], dtype=torch.complex64))
    True
    >>> torch.allclose((F.inv() @ F).to_dense(), torch.eye(4, dtype=torch.complex64), atol=1e-6)
    True
    >>> S = F.imag                                     # the sine mask, real
    >>> S.real is S, S.imag.to_dense().abs().max().item()
    (True, 0.0)
    >>> G = F * 1j                                     # Re(1j L) = -Im(L)
    >>> torch.equal(G.real.to_dense(), -S.to_dense())
    True
    """

    order = None

    def __init__(self, T: int, inverse: bool = False, *, scale: complex = 1.0, part: str = "full",
                 dtype: torch.dtype = torch.complex64, device=None):
        T = check_count(T, "T")
        if part not in _PARTS:
            raise ValueError(f"part must be one of {_PARTS}; got {part!r}")
        dtype = check_dtype(dtype) or torch.complex64
        scale = check_scalar(scale, "scale")  # the matrix keeps a Python number: its entries are computed on demand
        scale = scale.item() if isinstance(scale, torch.Tensor) else scale
        self.n, self.inverse, self.scale, self.part = T, check_flag(inverse, "inverse"), scale, part
        self._precision = real_dtype(dtype)  # float16 -> complex32, bfloat16 -> complex64
        if not abs(scale) <= torch.finfo(self._precision).max:  # its entries (|scale| times a root) would be inf
            raise ValueError(f"scale must be within the range of {str(self._precision).replace('torch.', '')} "
                             f"(|scale| <= {torch.finfo(self._precision).max:.4g}); got {scale!r}")
        self._complex = compute_dtype(complex_dtype(self._precision))  # what the FFTs run in
        real = part != "full" and not isinstance(scale, complex)
        super().__init__((self.n, self.n), self._precision if real else complex_dtype(self._precision),
                         check_device(device) or torch.device("cpu"))

    def _with(self, **changes) -> DFT:
        kw = dict(T=self.n, inverse=self.inverse, scale=self.scale, part=self.part, dtype=self._precision, device=self.device)
        kw.update(changes)
        return DFT(kw.pop("T"), kw.pop("inverse"), **kw)

    def _parts(self, imag: bool) -> StructuredMatrix:
        """``Re`` (``imag=False``) or ``Im`` of this matrix ``s P``, ``P`` the unscaled full matrix or part."""
        a, b = (self.scale.real, self.scale.imag) if isinstance(self.scale, complex) else (self.scale, 0.0)
        if self.part != "full":  # P real: Re(s P) = Re(s) P, Im(s P) = Im(s) P (the zero matrix for a real s)
            return self._with(scale=b if imag else a)
        # Re(s L) = a Re(L) - b Im(L), Im(s L) = a Im(L) + b Re(L): one real-scaled part, or the lazy Sum of two
        first, second = (self._with(part="imag", scale=a), self._with(part="real", scale=b)) if imag else \
            (self._with(part="real", scale=a), self._with(part="imag", scale=-b))
        return first if b == 0 else second if a == 0 else Sum(first, second)

    @property
    def real(self) -> StructuredMatrix:
        """The real part, as ``torch.Tensor.real`` of :meth:`to_dense`: ``DFT(T).real`` is the cosine mask
        (``part="real"``, real scale); a real part is its own real part; with a complex scale ``s``,
        ``Re(s L) = Re(s) Re(L) - Im(s) Im(L)`` (a lazy :class:`~structmat.Sum` of the two parts when both
        coefficients are nonzero)."""
        return self if not self.dtype.is_complex else self._parts(imag=False)

    @property
    def imag(self) -> StructuredMatrix:
        """The imaginary part: ``DFT(T).imag`` is the sine mask (``part="imag"``, real scale); that of a real part
        is the zero matrix (the same part with ``scale=0.0``); with a complex scale ``s``,
        ``Im(s L) = Re(s) Im(L) + Im(s) Re(L)`` (a lazy :class:`~structmat.Sum` when both are nonzero)."""
        return self._parts(imag=True)

    def matvec_flops(self, K: int) -> float:
        n = self.shape[-2] + self.shape[-1]
        return 10.0 * K * n * math.log2(max(n, 2))

    def diagonal(self) -> torch.Tensor:
        t = torch.arange(self.n, device=self.device, dtype=torch.int64)
        return self._roots()[(t * t) % max(self.n, 1)]

    def _roots(self) -> torch.Tensor:
        """``scale * part(exp(-+2 pi i k / T))`` for ``k = 0 .. T-1``, from float64 angles: entry ``(t, s)`` is
        root ``t s mod T`` (an exact integer), so every entry is a correctly rounded root in any dtype."""
        sign = 1.0 if self.inverse else -1.0
        angle = sign * 2 * math.pi * torch.arange(self.n, device=self.device, dtype=torch.float64) / max(self.n, 1)
        unit = torch.polar(torch.ones_like(angle), angle)
        part = {"full": unit, "real": unit.real, "imag": unit.imag}[self.part]
        return (self.scale * part).to(self.dtype)

    def to_dense(self) -> torch.Tensor:
        roots, n = self._roots(), self.n
        s = torch.arange(n, device=self.device, dtype=torch.int64)
        out = torch.empty(n, n, dtype=self.dtype, device=self.device)
        rows = max(1, 2**22 // max(n, 1))  # row blocks: int64 indices for all T^2 entries would be 8 bytes each
        for start in range(0, n, rows):
            out[start:start + rows] = roots[torch.outer(s[start:start + rows], s).remainder_(n)]
        return out

    def _full(self, X: torch.Tensor) -> torch.Tensor:
        X = X.to(torch.promote_types(self._complex, compute_dtype(X.dtype)))
        if X.numel() == 0:
            return X.clone()
        return torch.fft.ifft(X, dim=-2, norm="forward") if self.inverse else torch.fft.fft(X, dim=-2)

    def _matmat(self, X: torch.Tensor) -> torch.Tensor:
        if self.part == "full":
            return (self.scale * self._full(X)).to(torch.promote_types(self.dtype, X.dtype))
        # Re(L) X = (L X + conj(L) X) / 2 and conj(L) X = conj(L conj(X))
        both = self._full(X), self._full(X.conj()).conj()
        out = (both[0] + both[1]) / 2 if self.part == "real" else (both[0] - both[1]) / 2j
        out = out if (X.is_complex() or self.dtype.is_complex) else out.real
        return (self.scale * out).to(torch.promote_types(self.dtype, X.dtype))

    def _map(self, fn) -> DFT:
        """A cast sets the precision (a complex part stays complex: ``to(float16)`` gives ``complex32``); a complex
        cast of a real part makes it complex (its scale a complex number of the same value)."""
        probe = fn(torch.zeros((), dtype=self._precision, device=self.device))
        widened = not self.dtype.is_complex and fn(torch.zeros((), dtype=self.dtype, device=self.device)).is_complex()
        scale = complex(self.scale) if widened else self.scale
        return self._with(dtype=probe.dtype, device=probe.device, scale=scale)

    @property
    def T(self) -> DFT:
        return self  # symmetric

    def solve(self, Y) -> torch.Tensor:
        """Solve ``M X = Y`` for ``Y (*, T, K)`` or ``(T,)``: the inverse transform, ``O(T log T)`` per column."""
        return self.inv()._product(Y, "Y")

    def conj(self) -> DFT:
        """``conj(L)``: the transform of the opposite sign (full), else the same part with ``conj(scale)``."""
        scale = self.scale.conjugate() if isinstance(self.scale, complex) else self.scale
        if self.part == "full":
            return self._with(inverse=not self.inverse, scale=scale)
        return self._with(scale=scale)

    def _scale(self, s) -> StructuredMatrix:
        if torch.is_tensor(s) and s.requires_grad and torch.is_grad_enabled():  # (the kept scale is a number)
            return Product(self, Diagonal(s.expand(self.n)))  # the scale's gradient, through a diagonal factor
        s = s.item() if torch.is_tensor(s) else s
        scale = self.scale * s
        limit = torch.finfo(self._precision).max
        if not abs(scale) <= limit:  # (inf in Python when beyond float64)
            raise ValueError(f"scale {self.scale!r} times the factor {s!r} is beyond the range of "
                             f"{str(self._precision).replace('torch.', '')} (|scale| <= {limit:.4g})")
        return self._with(scale=scale)
