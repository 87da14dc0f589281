"""Closed-form algebra of SSS matrices: sums, products, Hadamard products, inverses, diagonal scalings.

Each rule works on the stored generators ``(A, B, C, D)``: of the matrix when it is lower, of its
transpose when it is upper. Sums and Hadamard products of two uppers are the transposes of those
of the lowers; a product of uppers is ``U1 U2 = (L2 L1)^T``. Results are :class:`~structmat.OneSS`
when they are still 1-SS with log decays and no explicit diagonal, else :class:`~structmat.SSS`.
"""

from __future__ import annotations

import torch

from structmat.core.transitions import Transitions
from structmat.core.validation import SingularMatrixError, check_overflow
from structmat.linalg.semiseparable import Generators
from structmat.matrices.diagonal import Diagonal
from structmat.matrices.one_ss import OneSS
from structmat.matrices.sss import SSS, SSSInverse

__all__ = ["same_orientation", "different_orientation", "build", "sss_add", "sss_matmul", "sss_hadamard", "sss_inverse",
           "sss_add_diagonal", "diagonal_matmul_sss", "sss_matmul_diagonal", "lower_times_upper_diagonal"]


def same_orientation(a, b) -> bool:
    """Both lower or both upper (SSS or Bidiagonal operands)."""
    return a.lower == b.lower


def different_orientation(a, b) -> bool:
    """One lower, one upper."""
    return a.lower != b.lower


def build(G: Generators, lower: bool) -> SSS:
    """An ``OneSS`` where the generators allow one, else an ``SSS``."""
    return OneSS._from_generators(G, lower)


def _batch(*Ms) -> torch.Size:
    return torch.broadcast_shapes(*(M.batch_shape for M in Ms))


def sss_add(M1: SSS, M2: SSS) -> SSS:
    """``SSS(N1) + SSS(N2) = SSS(N1 + N2)`` with block-diagonal ``A`` (diagonal if both are)."""
    batch = _batch(M1, M2)
    G1, G2 = M1.generators.expand(batch), M2.generators.expand(batch)
    D = None
    if G1.D is not None or G2.D is not None:
        D = G1.diagonal() + G2.diagonal()
    A = G1.A.block_diagonal(G2.A, G1.order, G2.order, batch)
    return build(Generators(A, torch.cat([G1.B, G2.B], -1), torch.cat([G1.C, G2.C], -1), D), M1.lower)


def _matmul_lower(G1: Generators, G2: Generators, batch) -> Generators:
    """``L1 L2`` with ``A = [[A1, B1 C2^T A2], [0, A2]]``, ``B = [B1 d2; B2]``, ``C = [C1; (D1 - C1^T B1) C2]``,
    ``D = D1 D2`` (no explicit ``D1``: ``C = [C1; 0]``, no ``D``)."""
    n1, n2 = G1.order, G2.order
    dtype = G1.B.dtype
    A1 = G1.A.matrices(n1, dtype).expand(*batch, G1.length, n1, n1)
    A2 = G2.A.matrices(n2, dtype).expand(*batch, G2.length, n2, n2)
    coupling = G1.B[..., :, None] * (G2.C[..., None, :] @ A2)
    A = torch.cat([torch.cat([A1, coupling], -1), torch.cat([A2.new_zeros(*A2.shape[:-1], n1), A2], -1)], dim=-2)
    d2 = G2.diagonal()
    B = torch.cat([G1.B * d2[..., None], G2.B], -1)
    if G1.D is None:
        return Generators(Transitions(A, "dense"), B, torch.cat([G1.C, torch.zeros_like(G2.C)], -1))
    gap = G1.D - (G1.C * G1.B).sum(-1)
    return Generators(Transitions(A, "dense"), B, torch.cat([G1.C, gap[..., None] * G2.C], -1), G1.D * d2)


def sss_matmul(M1: SSS, M2: SSS) -> SSS:
    """``SSS(N1) @ SSS(N2) = SSS(N1 + N2)`` with block upper-triangular ``A`` (``U1 U2 = (L2 L1)^T``)."""
    batch = _batch(M1, M2)
    G1, G2 = M1.generators.expand(batch), M2.generators.expand(batch)
    G = _matmul_lower(G1, G2, batch) if M1.lower else _matmul_lower(G2, G1, batch)
    return build(G, M1.lower)


def sss_hadamard(M1: SSS, M2: SSS) -> SSS:
    """``SSS(N1) * SSS(N2) = SSS(N1 N2)``: Kronecker products of the states (log decays add)."""
    batch = _batch(M1, M2)
    G1, G2 = M1.generators.expand(batch), M2.generators.expand(batch)
    kron = lambda x, y: (x[..., :, None] * y[..., None, :]).flatten(-2)  # noqa: E731
    D = None
    if G1.D is not None or G2.D is not None:
        D = G1.diagonal() * G2.diagonal()
    A = G1.A.kron(G2.A, G1.order, G2.order, batch)
    return build(Generators(A, kron(G1.B, G2.B), kron(G1.C, G2.C), D), M1.lower)


def lower_times_upper_diagonal(M1: SSS, M2: SSS) -> Diagonal:
    """A lower and an upper triangular matrix overlap on the diagonal only: ``diag(d1 d2)``."""
    return Diagonal(M1.diagonal() * M2.diagonal())


def _rescaled(M: SSS, batch, *, B=None, C=None, D=None) -> SSS:
    G = M.generators.expand(batch)
    return build(Generators(G.A, G.B if B is None else B, G.C if C is None else C, D), M.lower)


def diagonal_matmul_sss(Dg: Diagonal, M: SSS) -> SSS:
    """``diag(d) @ M`` scales the output map (lower) or the input map (upper); same order."""
    batch = _batch(Dg, M)
    G, d = M.generators.expand(batch), Dg.diagonal().expand(*batch, M.shape[-1])
    D = None if G.D is None else G.D * d
    return _rescaled(M, batch, C=G.C * d[..., None], D=D) if M.lower else _rescaled(M, batch, B=G.B * d[..., None], D=D)


def sss_matmul_diagonal(M: SSS, Dg: Diagonal) -> SSS:
    """``M @ diag(d)`` scales the input map (lower) or the output map (upper); same order."""
    batch = _batch(Dg, M)
    G, d = M.generators.expand(batch), Dg.diagonal().expand(*batch, M.shape[-1])
    D = None if G.D is None else G.D * d
    return _rescaled(M, batch, B=G.B * d[..., None], D=D) if M.lower else _rescaled(M, batch, C=G.C * d[..., None], D=D)


def sss_add_diagonal(M: SSS, Dg: Diagonal) -> SSS:
    """``M + diag(d)``: an explicit ``D``; same order."""
    batch = _batch(Dg, M)
    return _rescaled(M, batch, D=M.generators.expand(batch).diagonal() + Dg.diagonal().expand(*batch, M.shape[-1]))


def sss_inverse(M: SSS) -> SSS:
    """Inverse by the state-space inversion recurrence (``(L^T)^{-1} = (L^{-1})^T`` for uppers).

    From ``y_t = C_t^T A_t h_{t-1} + D_t x_t``: ``x_t = (y_t - C_t^T A_t h_{t-1}) / D_t`` and
    ``h_t = P_t A_t h_{t-1} + B_t y_t / D_t`` with ``P_t = I - B_t C_t^T / D_t``. With
    ``delta_t = D_t - C_t^T B_t`` nonzero this is ``SSS(N)``: ``A'_t = A_t P_{t-1}``,
    ``B' = B / delta``, ``C' = -C / D``, ``D' = 1 / D``. Otherwise an ``SSS(N + 1)`` realization
    ``A'_t = [[P_{t-1} A_{t-1}, B_{t-1} / D_{t-1}], [0, 0]]``, ``B' = e``, ``C'_t = [-A_t^T C_t / D_t; 0]``.
    Raises :class:`~structmat.SingularMatrixError` for a zero diagonal entry.
    """
    batch, N = M.batch_shape, M.order
    G = M.generators.expand(batch)
    d = G.diagonal()
    if bool((d == 0).any()):
        raise SingularMatrixError("SSS is singular: a diagonal entry is zero")
    check_overflow(1.0 / d, "SSS.inv() diagonal")
    delta = d - (G.C * G.B).sum(-1)
    scale = d.abs() + (G.C.abs() * G.B.abs()).sum(-1)
    if bool((delta.abs() > torch.finfo(M.dtype).eps ** 0.5 * scale).all()):
        return SSSInverse(M, lambda: _inverse_generators(G, d, delta), N)
    return SSSInverse(M, lambda: _inverse_generators_augmented(G, d), N + 1)


def _transfer(G: Generators, d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Dense transitions ``A_t`` and ``P_t = I - B_t C_t^T / D_t``, both ``(*, T, N, N)``."""
    N = G.B.shape[-1]
    A = G.A.matrices(N, G.B.dtype).expand(*G.B.shape[:-1], N, N)
    eye = torch.eye(N, dtype=G.B.dtype, device=G.B.device)
    return A, eye - G.B[..., :, None] * G.C[..., None, :] / d[..., None, None]


def _inverse_generators(G: Generators, d: torch.Tensor, delta: torch.Tensor) -> Generators:
    A, P = _transfer(G, d)
    P_prev = torch.cat([torch.eye(P.shape[-1], dtype=P.dtype, device=P.device).expand_as(P[..., :1, :, :]),
                        P[..., :-1, :, :]], dim=-3)
    return Generators(Transitions(A @ P_prev, "dense"), G.B / delta[..., None], -G.C / d[..., None], 1.0 / d)


def _inverse_generators_augmented(G: Generators, d: torch.Tensor) -> Generators:
    A, P = _transfer(G, d)
    N = P.shape[-1]
    Q_prev = torch.cat([torch.zeros_like(P[..., :1, :, :]), (P @ A)[..., :-1, :, :]], dim=-3)  # Q_t = P_t A_t, a step late
    g = G.B / d[..., None]
    g_prev = torch.cat([torch.zeros_like(g[..., :1, :]), g[..., :-1, :]], dim=-2)
    top = torch.cat([Q_prev, g_prev[..., None]], dim=-1)
    A_new = torch.cat([top, torch.zeros_like(top[..., :1, :])], dim=-2)
    e = torch.zeros(N + 1, dtype=P.dtype, device=P.device)
    e[-1] = 1
    out_map = -(A.transpose(-1, -2) @ G.C[..., None])[..., 0] / d[..., None]
    C_new = torch.cat([out_map, torch.zeros_like(out_map[..., :1])], dim=-1)
    return Generators(Transitions(A_new, "dense"), e.expand(*G.B.shape[:-1], N + 1), C_new, 1.0 / d)
