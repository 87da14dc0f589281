"""1-semiseparable matrices with scalar decay: the Mamba-2 (SSD) mask."""

from __future__ import annotations

import torch

from structmat.core import small
from structmat.core.dtypes import real_dtype
from structmat.core.transitions import Transitions, carries_gradient
from structmat.core.validation import (
    as_tensor,
    broadcast_batch,
    check_count,
    check_device,
    check_dtype,
    check_finite,
    check_nonnegative,
    trusted_parameters,
)
from structmat.linalg import chunk_form
from structmat.linalg.dense_form import sss_dense
from structmat.linalg.first_order import decay_matrix, first_order_scan
from structmat.linalg.semiseparable import Generators
from structmat.matrices.sss import SSS

__all__ = ["OneSS", "safe_log"]


def safe_log(a: torch.Tensor) -> torch.Tensor:
    """``log(a)`` for ``a >= 0`` with ``log(0) = -inf`` exactly; NaN stays NaN (never a zero decay)."""
    zero = a == 0
    return torch.where(zero, float("-inf"), torch.log(torch.where(zero, torch.ones_like(a), a)))


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
    lower : bool
        ``False`` gives the upper mirror (the transpose).

    Notes
    -----
    Segment products are ``exp`` of sums of ``log_a``, never ratios of cumulative products, so
    ``a_t = 0`` gives exact zeros and decays ``1 - 1e-7`` stay accurate over ``T = 10^6``.
    Matvec ``O(T K)``: LAPACK / ``lfilter`` on the CPU, a blocked scan elsewhere.

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

    def __init__(self, log_a, *, b=None, c=None, lower: bool = True, dtype: torch.dtype | None = None, device=None):
        dtype = check_dtype(dtype)
        real = None if dtype is None else real_dtype(dtype)
        log_a = as_tensor(log_a, "log_a", dtype=real, device=device)
        if log_a.is_complex():
            raise TypeError("log_a must be real (log of non-negative decays)")
        if log_a.dim() < 1:
            raise ValueError("log_a must have shape (*, T); got a scalar")
        check_finite(log_a, "log_a", allow_neg_inf=True)
        self.log_a = log_a
        self.b = None if b is None else self._scaling(b, "b", log_a, dtype, device)
        self.c = None if c is None else self._scaling(c, "c", log_a, dtype, device)
        if dtype is not None and dtype.is_complex and self.b is None and self.c is None:
            self.c = torch.ones(log_a.shape, dtype=dtype, device=log_a.device)
        _check_batches(log_a, self.b, self.c, "log_a")
        ones = torch.ones((), dtype=log_a.dtype, device=log_a.device).expand(*log_a.shape, 1)  # no T-long buffer
        B = ones if self.b is None else self.b[..., None]
        C = ones if self.c is None else self.c[..., None]
        with trusted_parameters():  # checked above, once
            super().__init__(Transitions.from_log(log_a), B, C, lower=lower)

    @staticmethod
    def _scaling(x, name, log_a, dtype=None, device=None):
        x = as_tensor(x, name, dtype=dtype, device=device, like=("log_a", log_a))
        if x.dim() != log_a.dim() or x.shape[-1] != log_a.shape[-1]:
            raise ValueError(f"{name} must have shape (*, T) like log_a {tuple(log_a.shape)}; got {tuple(x.shape)}")
        check_finite(x, name)
        return x

    @classmethod
    def _from_generators(cls, G: Generators, lower: bool) -> SSS:
        log_a = G.A.log_decays()
        if log_a is None or G.order != 1 or G.D is not None:
            return SSS(G.A, G.B, G.C, G.D, lower=lower)
        return OneSS(log_a, b=G.B[..., 0], c=G.C[..., 0], lower=lower)._with_decays(G.A.decays)

    @classmethod
    def _assemble(cls, G: Generators, lower: bool, batch: tuple[int, ...]) -> SSS:
        """A OneSS where the generators allow one (log decays, order 1, no explicit diagonal), else an SSS;
        unchecked, as :meth:`SSS._assemble`."""
        if G.A.kind != "log" or G.B.shape[-1] != 1 or G.D is not None:
            return SSS._assemble(G, lower, batch)
        return OneSS._of(G.A.values, G.B[..., 0], G.C[..., 0], lower, batch, G.A.decays)

    @classmethod
    def _of(cls, log_a: torch.Tensor, b: torch.Tensor | None, c: torch.Tensor | None, lower: bool,
            batch: tuple[int, ...], decays: torch.Tensor | None = None) -> OneSS:
        """The OneSS of parameters taken from checked matrices (real ``log_a``, shapes that fit, ``batch`` their
        broadcast batch; ``decays``, where differentiated, the same numbers as ``exp(log_a)`` of its shape):
        unchecked, as :meth:`SSS._assemble`."""
        M = object.__new__(OneSS)
        ones = None if b is not None and c is not None else \
            torch.ones((), dtype=log_a.dtype, device=log_a.device).expand(*log_a.shape, 1)
        M._set(Transitions(log_a, "log", decays), ones if b is None else b[..., None], ones if c is None else c[..., None],
               None, lower, batch)
        M.log_a, M.b, M.c = M.transitions.values, b, c
        return M

    # --- structure: unit scalings stay None (the matvec then skips them) ---------------------------
    @property
    def decays(self) -> torch.Tensor | None:
        """The decays ``exp(log_a)`` themselves where the matrix was built from them and they are differentiated
        (their gradient is then exact at 0: see :class:`~structmat.core.transitions.Transitions`), else None."""
        return self.transitions.decays

    def _with_decays(self, decays: torch.Tensor | None) -> OneSS:
        """The matrix with its decays (the same numbers as ``exp(log_a)``, broadcast to it) carried beside ``log_a``
        while they are differentiated."""
        if not carries_gradient(decays):
            return self
        log_a = self.transitions.values
        if decays.dtype != log_a.dtype:  # (guarded: each call costs microseconds)
            decays = decays.to(log_a.dtype)
        if decays.shape != log_a.shape:
            decays = decays.expand(log_a.shape)
        self.transitions = Transitions.from_log(log_a, decays)
        return self

    def _map(self, fn) -> OneSS:
        keep = lambda t: None if t is None else fn(t)  # noqa: E731
        c = keep(self.c)
        if self.b is None and c is None:  # the scalings carry a complex dtype; the decays stay real
            probe = fn(torch.ones((), dtype=self.dtype, device=self.device))
            if probe.is_complex():
                c = probe.expand(self.log_a.shape)
        mapped = self.transitions.map(fn)
        return OneSS(mapped.values, b=keep(self.b), c=c, lower=self.lower)._with_decays(mapped.decays)

    @property
    def T(self) -> OneSS:
        return small.keep(self, "T", lambda: OneSS._of(self.log_a, self.b, self.c, not self.lower, self.batch_shape,
                                                       self.decays))

    def _scale(self, s) -> OneSS:
        c = torch.ones_like(self.log_a, dtype=self.dtype) if self.c is None else self.c
        return OneSS(self.log_a, b=self.b, c=c * s, lower=self.lower)._with_decays(self.decays)

    def reverse(self) -> OneSS:
        flip = lambda t: None if t is None else torch.flip(t, (-1,))  # noqa: E731
        rev = self.transitions.reversed()
        return OneSS._of(rev.values, flip(self.c), flip(self.b), not self.lower, self.batch_shape, rev.decays)

    # --- constructors -------------------------------------------------------------------------------
    @classmethod
    def from_decays(cls, a, *, b=None, c=None, dtype: torch.dtype | None = None, device=None) -> OneSS:
        """From decays ``a >= 0`` of shape ``(*, T)``; ``a_t = 0`` gives exact zeros."""
        dtype = check_dtype(dtype)  # (a complex dtype is the maps': the decays take its precision)
        a = as_tensor(a, "a", dtype=None if dtype is None else real_dtype(dtype), device=device)
        hint = "must be real and >= 0 (use SSS for signed or complex transitions)"
        if a.is_complex():
            raise TypeError(f"a {hint}")
        check_nonnegative(a, "a", hint)
        check_finite(a, "a")
        # the scalings are checked against a (the matrix keeps log a, a name the caller never wrote)
        b, c = (None if x is None else as_tensor(x, name, dtype=dtype, device=device, like=("a", a))
                for x, name in ((b, "b"), (c, "c")))
        _check_batches(a, b, c, "a")
        return cls(safe_log(a), b=b, c=c, dtype=dtype)._with_decays(a)

    @classmethod
    def causal(cls, T: int, *, dtype: torch.dtype | None = None, device=None) -> OneSS:
        """All-ones lower triangle (linear attention; ``M @ x`` is ``cumsum``)."""
        dtype = check_dtype(dtype)  # (a complex dtype is the maps': the decays take its precision)
        zeros = torch.zeros(check_count(T, "T"), dtype=None if dtype is None else real_dtype(dtype),
                            device=check_device(device))
        return cls(zeros, dtype=dtype)

    @classmethod
    def decay(cls, gamma, T: int, *, dtype: torch.dtype | None = None, device=None) -> OneSS:
        """RetNet decay ``gamma**(j - i)``; ``gamma`` a scalar or a tensor of shape ``(*,)`` in ``[0, 1]``."""
        T, dtype = check_count(T, "T"), check_dtype(dtype)  # (a complex dtype is the maps': gamma takes its precision)
        g = as_tensor(gamma, "gamma", dtype=None if dtype is None else real_dtype(dtype), device=device)
        if g.is_complex():
            raise TypeError("gamma must be real (decays in [0, 1]); got a complex value")
        check_finite(g, "gamma")
        check_nonnegative(g, "gamma")
        with trusted_parameters():  # gamma checked above: not its T-fold expansion again
            out = cls(safe_log(g)[..., None].expand(*g.shape, T), dtype=dtype)
        return out._with_decays(g[..., None]) if carries_gradient(g) else out

    def solve(self, Y) -> torch.Tensor:
        """Solve ``M X = Y`` through the exact bidiagonal inverse: ``O(T K)``, no scan (a small matrix:
        one dense triangular solve, :mod:`structmat.core.small`)."""
        self._check_square("solve()")
        X = self._small_solve(Y, "lower" if self.lower else "upper", "OneSS is singular: a diagonal entry c_t b_t is zero")
        if X is not None:
            return X
        dtype = torch.promote_types(self.dtype, Y.dtype) if isinstance(Y, torch.Tensor) else self.dtype
        return self._cast(dtype)._inverse()._product(Y, "Y")  # (the inverse in the promoted dtype, as products)

    # --- products -----------------------------------------------------------------------------------
    def to_dense(self) -> torch.Tensor:
        """``c_j exp(segsum(log_a))[j, i] b_i``, the segment sums as short cumulative sums
        (long sequences in chunks, :func:`~structmat.linalg.dense_form.sss_dense`); the decays' gradient in linear
        space where the matrix keeps them (:func:`~structmat.linalg.first_order.decay_matrix`)."""
        if carries_gradient(self.decays):
            L = decay_matrix(self.log_a.detach(), self.decays).to(self.dtype)
            dense = (self.C * L * self.B.transpose(-1, -2)).expand(self.shape)  # c_j L[j, i] b_i
        else:
            dense = sss_dense(self.generators).expand(self.shape)
        return dense if self.lower else dense.transpose(-1, -2)

    def _matmat(self, X: torch.Tensor) -> torch.Tensor:
        if (F := self._chunk_form(X)) is not None:
            return chunk_form.apply(F, X)
        # lower: diag(c) F diag(b) X with F the first-order recurrence; upper: its transpose diag(b) F^T diag(c) X
        first, last = (self.b, self.c) if self.lower else (self.c, self.b)
        u = X if first is None else first[..., None] * X
        h = first_order_scan(self.log_a, u, self.decays, transpose=not self.lower)  # compiled code on the CPU
        return h if last is None else last[..., None] * h


def _check_batches(decays: torch.Tensor, b: torch.Tensor | None, c: torch.Tensor | None, name: str) -> None:
    """The batch shapes of the decays (or their logs, ``name``) and the maps broadcast, else an error naming them."""
    named = [(name, decays.shape[:-1])] + [(n, x.shape[:-1]) for n, x in (("b", b), ("c", c)) if x is not None]
    if len(named) > 1:
        broadcast_batch(*named)
