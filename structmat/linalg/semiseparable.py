"""The generators of a lower semiseparable matrix and its two basic algorithms (matvec, dense form).

A lower SSS matrix has entries ``M[j, i] = C_j^T A_j ... A_{i+1} B_i`` for ``j > i``, ``D_i`` (or
``C_i^T B_i`` when ``D`` is None) on the diagonal and zeros above. ``y = M x`` is the recurrence

    h_t = A_t h_{t-1} + B_t x_t,     y_t = C_t^T A_t h_{t-1} + D_t x_t,

evaluated by :func:`structmat.linalg.scan.linear_scan` in ``O(T N K)`` (scalar and diagonal
``A``) or ``O(T N^2 K)`` (dense ``A``). An upper matrix is the transpose of a lower one; in
reversed time it is lower again (:meth:`Generators.flipped`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from structmat.core.transitions import Transitions
from structmat.core.validation import broadcast_shapes
from structmat.linalg.scan import linear_scan

__all__ = ["Generators"]


@dataclass(frozen=True)
class Generators:
    """``(A, B, C, D)`` of a lower SSS: transitions, input maps ``(*, T, N)``, output maps ``(*, T, N)``,
    and an optional explicit diagonal ``(*, T)``."""

    A: Transitions
    B: torch.Tensor
    C: torch.Tensor
    D: torch.Tensor | None = None

    @property
    def order(self) -> int:
        return self.B.shape[-1]

    @property
    def length(self) -> int:
        return self.B.shape[-2]

    @property
    def batch_shape(self) -> torch.Size:
        shapes = [self.A.batch_shape, self.B.shape[:-2], self.C.shape[:-2]]
        return broadcast_shapes(*shapes, *([] if self.D is None else [self.D.shape[:-1]]))

    def diagonal(self) -> torch.Tensor:
        """The effective diagonal ``(*, T)``: ``D`` or ``C_i^T B_i``."""
        return self.D if self.D is not None else (self.C * self.B).sum(-1)

    def flipped(self) -> Generators:
        """Generators of ``J M^T J`` (``J`` the reversal): a lower matrix again. An involution.

        ``A'' = roll(flip(A), 1)^T``, ``B'' = flip(C)``, ``C'' = flip(B)``, ``D'' = flip(D)``.
        """
        D = None if self.D is None else torch.flip(self.D, (-1,))
        return Generators(self.A.reversed(), torch.flip(self.C, (-2,)), torch.flip(self.B, (-2,)), D)

    def narrow(self, start: int, length: int) -> Generators:
        """The diagonal block ``M[start : start + length, start : start + length]``."""
        D = None if self.D is None else self.D.narrow(-1, start, length)
        return Generators(self.A.narrow(start, length), self.B.narrow(-2, start, length),
                          self.C.narrow(-2, start, length), D)

    def expand(self, batch) -> Generators:
        T, N = self.length, self.order
        D = None if self.D is None else self.D.expand(*batch, T)
        return Generators(self.A.expand(batch), self.B.expand(*batch, T, N), self.C.expand(*batch, T, N), D)

    def with_diagonal(self, D: torch.Tensor | None) -> Generators:
        return Generators(self.A, self.B, self.C, D)

    def matmat(self, X: torch.Tensor, h0: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``M X`` for ``X (*, T, K)`` continuing from the state ``h0 (*, N, K)``; also the last state.

        With ``h0`` the first transition ``A_0`` applies to it, so a long product runs in
        consecutive time blocks: ``Y1, h = G.narrow(0, t).matmat(X[:t])``, then
        ``G.narrow(t, T - t).matmat(X[t:], h)``.
        """
        if self.length == 0:
            batch = broadcast_shapes(self.batch_shape, X.shape[:-2])
            state = X.new_zeros(*batch, self.order, X.shape[-1]) if h0 is None else h0
            return X.new_zeros(*batch, 0, X.shape[-1]), state
        A = self.A.with_identity_first() if h0 is None else self.A
        A = A.cast(torch.promote_types(A.dtype, X.dtype))  # the scan's steps multiply without promoting (dense A)
        h = linear_scan(A, self.B[..., :, :, None] * X[..., :, None, :], h0)
        if self.D is None:
            return (self.C[..., :, :, None] * h).sum(-2), h[..., -1, :, :]
        first = torch.zeros_like(h[..., :1, :, :]) if h0 is None else h0[..., None, :, :].expand_as(h[..., :1, :, :])
        prev = torch.cat([first, h[..., :-1, :, :]], dim=-3)
        Y = (self.C[..., :, :, None] * A.apply(prev)).sum(-2) + self.D[..., None] * X
        return Y, h[..., -1, :, :]

    def dense(self) -> torch.Tensor:
        """The lower matrix ``(*, T, T)`` from the definition, column recurrences vectorised: ``O(T^2 N^2)``."""
        G = self.expand(self.batch_shape)
        T = G.length
        rows = []
        V = None  # V[..., :, i] = A_j ... A_{i+1} B_i for the columns i < j seen so far
        for j in range(T):
            Bj = G.B[..., j, :, None]
            V = Bj if V is None else torch.cat([G.A.narrow(j, 1).apply(V[..., None, :, :])[..., 0, :, :], Bj], dim=-1)
            row = (G.C[..., j, :, None] * V).sum(-2)  # (*, j+1)
            if G.D is not None:
                row = torch.cat([row[..., :-1], G.D[..., j, None].to(row.dtype)], dim=-1)
            rows.append(torch.nn.functional.pad(row, (0, T - j - 1)))
        if not rows:
            return G.B.new_zeros(*G.batch_shape, 0, 0)
        return torch.stack(rows, dim=-2)
