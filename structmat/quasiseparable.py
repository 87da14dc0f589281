"""Quasiseparable (bidirectional) masks: a strictly-lower SSS, a strictly-upper SSS, a free diagonal.

These are the Hydra and LION masks: ``M = tril(M_F, -1) + triu(J M_B J, 1) + diag(d)``.
"""

from __future__ import annotations

import torch

from structmat.base import StructuredMatrix, as_tensor, check_finite
from structmat.one_ss import OneSS
from structmat.sss import SSS, flip_params

__all__ = ["Quasiseparable"]


def _strict(M: SSS) -> SSS:
    """The strictly triangular part of ``M``, as an SSS with an explicit zero diagonal."""
    zeros = torch.zeros(M.shape[:-1], dtype=M.dtype, device=M.device)
    batch = M.batch_shape
    tail = {"log": 1, "scalar": 1, "diag": 2, "dense": 3}[M.kind]
    A = M.A.expand(*batch, *M.A.shape[M.A.dim() - tail :])
    B, C = M.B.expand(*batch, *M.B.shape[-2:]), M.C.expand(*batch, *M.C.shape[-2:])
    return SSS(A, B, C, zeros, lower=M.lower)


class Quasiseparable(StructuredMatrix):
    """``M = strictly_lower(lower) + strictly_upper(upper) + diag(diag)``; orders ``(n_l, n_u)``.

    Parameters
    ----------
    lower : SSS or OneSS (lower)
        Its strictly-lower part is used.
    upper : SSS or OneSS with ``lower=False`` (e.g. ``M.T`` of a lower one)
        Its strictly-upper part is used.
    diag : array_like, shape ``(*, T)``

    Notes
    -----
    Matvec: one forward and one backward scan, ``O(T (n_l + n_u) K)`` for diagonal transitions.
    ``+`` and ``@`` with ``Quasiseparable``, ``SSS``, ``OneSS`` and ``Diagonal`` stay quasiseparable
    (orders add); ``inv()`` keeps the orders (structured LU, then ``U^{-1} L^{-1}``).

    Examples
    --------
    >>> import torch, structmat as sm
    >>> fwd = sm.OneSS.decay(0.5, 4)
    >>> M = sm.Quasiseparable.bidirectional(fwd, fwd)  # LION: M_F + J M_B J - I
    >>> M.to_dense()
    tensor([[1.0000, 0.5000, 0.2500, 0.1250],
            [0.5000, 1.0000, 0.5000, 0.2500],
            [0.2500, 0.5000, 1.0000, 0.5000],
            [0.1250, 0.2500, 0.5000, 1.0000]])
    """

    def __init__(self, lower: SSS, upper: SSS, diag):
        if not isinstance(lower, SSS) or not lower.lower:
            raise TypeError("lower must be a lower SSS or OneSS")
        if not isinstance(upper, SSS) or upper.lower:
            raise TypeError("upper must be an upper SSS or OneSS (lower=False, e.g. M.T)")
        if lower.shape[-1] != upper.shape[-1]:
            raise ValueError(f"lower and upper must have the same T; got {lower.shape[-1]} and {upper.shape[-1]}")
        d = as_tensor(diag, "diag", device=lower.device)
        if d.dim() < 1 or d.shape[-1] != lower.shape[-1]:
            raise ValueError(f"diag must have shape (*, T) with T={lower.shape[-1]}; got {tuple(d.shape)}")
        check_finite(d, "diag")
        dtype = torch.promote_types(torch.promote_types(lower.dtype, upper.dtype), d.dtype)
        self.lower_part = _strict(lower.to(dtype))
        self.upper_part = _strict(upper.to(dtype))
        self.diag = d.to(dtype)

    @classmethod
    def bidirectional(cls, forward: SSS, backward: SSS, diag=None) -> Quasiseparable:
        """LION / Hydra mask from two lower masks: ``backward`` runs over the reversed sequence.

        With ``J`` the reversal the strictly-upper part is that of ``J M_B J``; ``diag=None`` keeps
        the diagonal of ``forward`` (for unit diagonals ``M = M_F + J M_B J - I``).
        """
        if not (isinstance(forward, SSS) and forward.lower and isinstance(backward, SSS) and backward.lower):
            raise TypeError("forward and backward must be lower SSS/OneSS masks")
        # J M_B J = (J M_B^T J)^T = upper SSS with the flipped parameters
        A, B, C, D = flip_params(backward._A, backward.B, backward.C, backward.D, backward.kind)
        if backward.kind == "log":
            upper = OneSS(A, b=B[..., 0], c=C[..., 0], lower=False)
        else:
            upper = SSS(A, B, C, D, lower=False)
        d = forward.diagonal() if diag is None else diag
        return cls(forward, upper, d)

    @property
    def order(self) -> tuple[int, int]:
        return (self.lower_part.order, self.upper_part.order)

    @property
    def shape(self) -> torch.Size:
        batch = torch.broadcast_shapes(self.lower_part.batch_shape, self.upper_part.batch_shape, self.diag.shape[:-1])
        T = self.diag.shape[-1]
        return torch.Size((*batch, T, T))

    @property
    def dtype(self) -> torch.dtype:
        return self.diag.dtype

    @property
    def device(self) -> torch.device:
        return self.diag.device

    def diagonal(self) -> torch.Tensor:
        return self.diag.expand(self.shape[:-1])

    def to_dense(self) -> torch.Tensor:
        return self.lower_part.to_dense() + self.upper_part.to_dense() + torch.diag_embed(self.diag)

    def _matmat(self, X: torch.Tensor) -> torch.Tensor:
        return self.lower_part.matmul(X) + self.upper_part.matmul(X) + self.diag[..., None] * X

    def _map(self, fn) -> Quasiseparable:
        return Quasiseparable(self.lower_part._map(fn), self.upper_part._map(fn), fn(self.diag))

    @property
    def T(self) -> Quasiseparable:
        return Quasiseparable(self.upper_part.T, self.lower_part.T, self.diag)

    def _scale(self, s) -> Quasiseparable:
        return Quasiseparable(self.lower_part * s, self.upper_part * s, self.diag * s)

    def compress(self, tol: float | None = None) -> Quasiseparable:
        """Minimal orders for both triangular parts (see :meth:`SSS.compress`)."""
        return Quasiseparable(self.lower_part.compress(tol), self.upper_part.compress(tol), self.diag)

    def tril(self) -> SSS:
        """Lower triangle with the diagonal, as an SSS of order ``n_l``."""
        return SSS(self.lower_part.A, self.lower_part.B, self.lower_part.C, self.diag.expand(self.shape[:-1]))

    def triu(self) -> SSS:
        """Upper triangle with the diagonal, as an upper SSS of order ``n_u``."""
        U = self.upper_part
        return SSS(U.A, U.B, U.C, self.diag.expand(self.shape[:-1]), lower=False)

    def inv(self) -> Quasiseparable:
        """Inverse through the structured LU (``O(T n^3)``, a Python step per position; see
        :mod:`structmat.quasiseparable_algebra`). Needs nonzero leading minors. Orders are kept,
        except one more on a side whose triangular factor's inverse needs it (see :meth:`SSS.inv`:
        the LION decay mask has a tridiagonal inverse, order 2 per side in the SSS convention)."""
        from structmat.quasiseparable_algebra import qs_inverse

        self._check_square("inv()")
        return qs_inverse(self)

    def solve(self, Y) -> torch.Tensor:
        return self.inv().matmul(Y)

    def lu(self) -> tuple[SSS, SSS]:
        """``M = L U``: unit lower SSS of order ``n_l`` and upper SSS of order ``n_u``."""
        from structmat.quasiseparable_algebra import qs_lu

        return qs_lu(self)


def _zero_sss(like: SSS, lower: bool) -> SSS:
    """An order-0 SSS of the shape of ``like``: the missing triangle of a one-sided operand."""
    T = like.shape[-1]
    empty = torch.zeros(*like.batch_shape, T, 0, dtype=like.dtype, device=like.device)
    return SSS(torch.ones(*like.batch_shape, T, dtype=like.dtype, device=like.device), empty, empty,
               torch.zeros(*like.batch_shape, T, dtype=like.dtype, device=like.device), lower=lower)


def as_quasiseparable(m) -> Quasiseparable:
    """A lower or upper SSS (or OneSS) as a quasiseparable matrix (order 0 on the other side)."""
    if m.lower:
        return Quasiseparable(m, _zero_sss(m, lower=False), m.diagonal())
    return Quasiseparable(_zero_sss(m, lower=True), m, m.diagonal())


def qs_add(a: Quasiseparable, b: Quasiseparable) -> Quasiseparable:
    return Quasiseparable(a.lower_part + b.lower_part, a.upper_part + b.upper_part, a.diag + b.diag)


def qs_add_sss(a: Quasiseparable, m: SSS):
    """A lower (upper) SSS joins the lower (upper) part; its diagonal joins ``diag``."""
    part = _strict(m)
    if m.lower:
        return Quasiseparable(a.lower_part + part, a.upper_part, a.diag + m.diagonal())
    return Quasiseparable(a.lower_part, a.upper_part + part, a.diag + m.diagonal())


def qs_add_diagonal(a: Quasiseparable, d) -> Quasiseparable:
    return Quasiseparable(a.lower_part, a.upper_part, a.diag + d.d)


def sss_add_mixed(a: SSS, b: SSS):
    """Lower + upper SSS: a quasiseparable matrix."""
    if a.lower == b.lower:
        return NotImplemented
    lo, up = (a, b) if a.lower else (b, a)
    return Quasiseparable(lo, up, lo.diagonal() + up.diagonal())
