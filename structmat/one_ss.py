"""1-semiseparable matrices with scalar decay: the Mamba-2 (SSD) mask."""

from __future__ import annotations

import torch

from structmat import iir
from structmat.base import SingularMatrixError, as_tensor, check_finite
from structmat.scan import decay_scan
from structmat.sss import SSS

__all__ = ["OneSS"]


def safe_log(a: torch.Tensor) -> torch.Tensor:
    """``log(a)`` with ``log(0) = -inf`` and a finite (zero) gradient at 0."""
    positive = a > 0
    return torch.where(positive, torch.log(torch.where(positive, a, torch.ones_like(a))), float("-inf"))


class OneSS(SSS):
    """1-semiseparable lower matrix with scalar decays, kept in log space.

    ``M[j, i] = c_j exp(sum_{k=i+1..j} log_a[k]) b_i`` for ``j >= i``, zero above;
    ``y = M x`` is the scan ``h_t = a_t h_{t-1} + b_t x_t``, ``y_t = c_t h_t``.

    Parameters
    ----------
    log_a : array_like, shape ``(*, T)``, real
        Log decays; ``-inf`` means ``a_t = 0`` (cuts the link from ``t-1`` to ``t``);
        ``log_a[..., 0]`` is unused.
    b, c : array_like, shape ``(*, T)``, optional
        Input and output scalings (default ones).

    Notes
    -----
    Segment products are ``exp`` of sums of ``log_a``, never ratios of cumulative products, so
    ``a_t = 0`` gives exact zeros and decays ``1 - 1e-7`` stay accurate over ``T = 10^6``.
    Matvec ``O(T K)``.

    Examples
    --------
    >>> import torch, structmat as sm
    >>> M = sm.OneSS.from_decays(torch.tensor([1.0, 0.5, 0.0, 0.5]))
    >>> M.to_dense()
    tensor([[1.0000, 0.0000, 0.0000, 0.0000],
            [0.5000, 1.0000, 0.0000, 0.0000],
            [0.0000, 0.0000, 1.0000, 0.0000],
            [0.0000, 0.0000, 0.5000, 1.0000]])
    >>> M @ torch.ones(4)
    tensor([1.0000, 1.5000, 1.0000, 1.5000])
    """

    _kind_override = "log"

    def __init__(self, log_a, *, b=None, c=None, lower: bool = True):
        log_a = as_tensor(log_a, "log_a")
        if log_a.is_complex():
            raise TypeError("log_a must be real (log of non-negative decays)")
        if log_a.dim() < 1:
            raise ValueError("log_a must have shape (*, T); got a scalar")
        check_finite(log_a, "log_a", allow_neg_inf=True)
        self.log_a = log_a
        self.b = None if b is None else self._check_scaling(b, "b", log_a)
        self.c = None if c is None else self._check_scaling(c, "c", log_a)
        ones = torch.ones((*log_a.shape, 1), dtype=log_a.dtype, device=log_a.device)
        B = ones if self.b is None else self.b[..., None]
        C = ones if self.c is None else self.c[..., None]
        super().__init__(log_a, B, C, lower=lower)

    @staticmethod
    def _check_scaling(x, name, log_a):
        x = as_tensor(x, name, device=log_a.device)
        if x.dim() != log_a.dim() or x.shape[-1] != log_a.shape[-1]:
            raise ValueError(f"{name} must have shape (*, T) like log_a {tuple(log_a.shape)}; got {tuple(x.shape)}")
        return x

    def to_dense(self) -> torch.Tensor:
        """``c_j exp(segsum(log_a))[j, i] b_i``, the segment sums as masked cumulative sums."""
        from structmat.ssd.chunked import segsum

        log_a = torch.cat([torch.zeros_like(self.log_a[..., :1]), self.log_a[..., 1:]], dim=-1)
        L = torch.exp(segsum(log_a)).to(self.dtype)
        dense = self.C[..., 0][..., :, None] * L * self.B[..., 0][..., None, :]
        dense = dense.expand(self.shape)
        return dense if self.lower else dense.transpose(-1, -2)

    def _matmat(self, X: torch.Tensor) -> torch.Tensor:
        if not self.lower:
            return super()._matmat(X)
        # h_t = a_t h_{t-1} + b_t x_t, y_t = c_t h_t: skip the unit scalings
        u = X if self.b is None else self.b[..., None] * X
        h = iir.cpu_scan(self.log_a, u)  # compiled code on the CPU (LAPACK / lfilter), else the blocked scan
        if h is None:
            h = decay_scan(torch.cat([torch.zeros_like(self.log_a[..., :1]), self.log_a[..., 1:]], dim=-1), u)
        return h if self.c is None else self.c[..., None] * h

    # --- constructors -------------------------------------------------------------------------
    @classmethod
    def from_decays(cls, a, *, b=None, c=None) -> OneSS:
        """From decays ``a >= 0`` of shape ``(*, T)``; ``a_t = 0`` gives exact zeros."""
        a = as_tensor(a, "a")
        if a.is_complex() or bool((a < 0).any()):
            raise ValueError("a must be real and >= 0 (use SSS for signed or complex transitions)")
        return cls(safe_log(a), b=b, c=c)

    @classmethod
    def causal(cls, T: int, *, dtype: torch.dtype | None = None, device=None) -> OneSS:
        """All-ones lower triangle (linear attention; ``M @ x`` is ``cumsum``)."""
        return cls(torch.zeros(T, dtype=dtype, device=device))

    @classmethod
    def decay(cls, gamma, T: int) -> OneSS:
        """RetNet decay ``gamma**(j - i)``; ``gamma`` a scalar or a tensor of shape ``(*,)``."""
        g = as_tensor(gamma, "gamma")
        if bool((g < 0).any()):
            raise ValueError("gamma must be >= 0")
        return cls(safe_log(g)[..., None].expand(*g.shape, T))

    # --- structure ---------------------------------------------------------------------------
    def _map(self, fn) -> OneSS:
        log_a = fn(self.log_a)
        if log_a.is_complex():  # a cast to a complex dtype applies to the scalings only
            log_a = log_a.real
        return OneSS(log_a, b=fn(self.B[..., 0]), c=fn(self.C[..., 0]), lower=self.lower)

    @property
    def T(self) -> OneSS:
        return OneSS(self.log_a, b=self.b, c=self.c, lower=not self.lower)

    def _scale(self, s) -> OneSS:
        c = torch.ones_like(self.log_a, dtype=self.dtype) if self.c is None else self.c
        return OneSS(self.log_a, b=self.b, c=c * s, lower=self.lower)

    def inv(self):
        """Exact inverse, a :class:`~structmat.Bidiagonal` (upper mirror: its transpose).

        ``M^{-1}`` has diagonal ``1 / (b_t c_t)`` and subdiagonal ``-a_t / (b_t c_{t-1})``.
        """
        from structmat.bidiagonal import Bidiagonal

        b, c = self.B[..., 0], self.C[..., 0]
        if bool((b == 0).any()) or bool((c == 0).any()):
            raise SingularMatrixError("OneSS is singular: some b_t * c_t is zero")
        a = torch.exp(self.log_a[..., 1:]).to(self.dtype)
        out = Bidiagonal(1.0 / (b * c), -a / (b[..., 1:] * c[..., :-1]))
        return out if self.lower else out.T
