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
from structmat.linalg.segsum import segment_products

__all__ = ["Generators", "DENSE_BLOCK"]

#: Most entries of one ``(*, n, T, T)`` block of segment products that :meth:`Generators.dense` forms at once
#: (``2^22``, 32 MiB in float64): the dense form of an order-64 mask at ``T = 4096`` stays within a few times its
#: own size.
DENSE_BLOCK = 1 << 22


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
        """Every parameter expanded to ``batch`` (those already there as they are: an expand costs more than the check)."""
        T, N = self.length, self.order
        fit = lambda t, *shape: t if t is None or t.shape == shape else t.expand(*shape)  # noqa: E731
        A = self.A if self.A.batch_shape == tuple(batch) else self.A.expand(batch)
        return Generators(A, fit(self.B, *batch, T, N), fit(self.C, *batch, T, N), fit(self.D, *batch, T))

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
        """The lower matrix ``(*, T, T)`` from the definition.

        Scalar and diagonal transitions: ``M[j, i] = sum_n C_j[n] P_n[j, i] B_i[n]`` with the segment products
        ``P`` of :func:`~structmat.linalg.segsum.segment_products` (``O(T^2 N)``, in blocks of states of at most
        :data:`DENSE_BLOCK` entries; :func:`structmat.linalg.dense_form.sss_dense` takes long sequences in
        chunks). Dense transitions: the product with the identity through the blocked scan, ``O(T^2 N^2)``.
        No Python loop over time.
        """
        G = self.expand(self.batch_shape)
        T, N = G.length, G.order
        if G.A.kind == "dense":
            eye = torch.eye(T, dtype=torch.promote_types(G.B.dtype, G.A.dtype), device=G.B.device)
            return G.matmat(eye)[0]
        P = segment_products(G.A)
        if G.A.kind != "diag":  # scalar kinds: one product for every state
            M = P.to(G.B.dtype) * (G.C @ G.B.mT)
        else:
            Ct, Bt = G.C.mT, G.B.mT  # (*, N, T)
            step = max(1, DENSE_BLOCK // max(1, P[..., :1, :, :].numel()))
            M = sum((Ct[..., n:n + step, :, None] * P[..., n:n + step, :, :] * Bt[..., n:n + step, None, :]).sum(-3)
                    for n in range(0, N, step)) if N else G.B.new_zeros(*G.batch_shape, T, T)
        if G.D is None:
            return M
        eye = torch.eye(T, dtype=torch.bool, device=M.device)
        return torch.where(eye, torch.diag_embed(G.D.to(M.dtype)), M)
