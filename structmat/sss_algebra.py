"""Closed-form algebra of SSS matrices: sums, products, Hadamard products, inverses.

Each rule is a small function on lower parameters ``(A, B, C, D)``; upper operands go through
transposes (``U1 + U2 = (L1 + L2)^T``, ``U1 U2 = (L2 L1)^T``). The dispatch table in
:mod:`structmat.closure` decides which rule applies to which pair of classes.
"""

from __future__ import annotations

import torch

from structmat.base import SingularMatrixError
from structmat.sss import SSS

__all__ = ["sss_add", "sss_matmul", "sss_hadamard", "sss_inverse", "sss_add_diagonal", "diagonal_matmul_sss", "sss_matmul_diagonal"]


def _as_dense_A(M: SSS, batch) -> torch.Tensor:
    """Transitions of ``M`` as ``(*batch, T, N, N)``."""
    A, N = M.A, M.order
    if M.kind in ("log", "scalar"):
        A = A[..., None, None] * torch.eye(N, dtype=M.dtype, device=M.device)
    elif M.kind == "diag":
        A = torch.diag_embed(A)
    return A.to(M.dtype).expand(*batch, *A.shape[-3:])


def _as_diag_A(M: SSS, batch) -> torch.Tensor:
    """Transitions of a scalar/diagonal ``M`` as ``(*batch, T, N)``."""
    A = M.A.to(M.dtype)
    if M.kind in ("log", "scalar"):
        A = A[..., None].expand(*A.shape, M.order)
    return A.expand(*batch, *A.shape[-2:])


def _expand(t: torch.Tensor | None, batch, tail: int):
    return None if t is None else t.expand(*batch, *t.shape[t.dim() - tail :])


def _params(M: SSS, batch):
    return _expand(M.B, batch, 2), _expand(M.C, batch, 2), _expand(M.D, batch, 1)


def _batch(*Ms: SSS):
    return torch.broadcast_shapes(*(M.batch_shape for M in Ms))


def _upper_via_transpose(rule):
    """Lift a rule on lower matrices to upper pairs through transposes."""

    def lifted(M1: SSS, M2: SSS):
        if M1.lower and M2.lower:
            return rule(M1, M2)
        if not M1.lower and not M2.lower:
            swapped = rule is sss_matmul_lower
            return (rule(M2.T, M1.T) if swapped else rule(M1.T, M2.T)).T
        return NotImplemented

    lifted.__name__ = rule.__name__.replace("_lower", "")
    lifted.__doc__ = rule.__doc__
    return lifted


def _block_diag_A(M1: SSS, M2: SSS, batch) -> torch.Tensor:
    if M1.kind != "dense" and M2.kind != "dense":
        return torch.cat([_as_diag_A(M1, batch), _as_diag_A(M2, batch)], dim=-1)
    A1, A2 = _as_dense_A(M1, batch), _as_dense_A(M2, batch)
    top = torch.cat([A1, torch.zeros(*A1.shape[:-1], M2.order, dtype=A1.dtype, device=A1.device)], dim=-1)
    bottom = torch.cat([torch.zeros(*A2.shape[:-1], M1.order, dtype=A2.dtype, device=A2.device), A2], dim=-1)
    return torch.cat([top, bottom], dim=-2)


def sss_add_lower(M1: SSS, M2: SSS) -> SSS:
    """``SSS(N1) + SSS(N2) = SSS(N1 + N2)`` with block-diagonal ``A`` (diagonal if both are)."""
    batch = _batch(M1, M2)
    (B1, C1, D1), (B2, C2, D2) = _params(M1, batch), _params(M2, batch)
    D = None
    if D1 is not None or D2 is not None:
        D = M1.diag_values().expand(*batch, M1.shape[-1]) + M2.diag_values().expand(*batch, M2.shape[-1])
    return SSS(_block_diag_A(M1, M2, batch), torch.cat([B1, B2], -1), torch.cat([C1, C2], -1), D)


def sss_matmul_lower(M1: SSS, M2: SSS) -> SSS:
    """``SSS(N1) @ SSS(N2) = SSS(N1 + N2)`` with block upper-triangular ``A``.

    With ``H = [h1; h2]``: ``A = [[A1, B1 C2^T A2], [0, A2]]``, ``B = [B1 D2; B2]``,
    ``C = [C1; (D1 - C1^T B1) C2]``, ``D = D1 D2``.
    """
    batch = _batch(M1, M2)
    (B1, C1, _), (B2, C2, _) = _params(M1, batch), _params(M2, batch)
    A1, A2 = _as_dense_A(M1, batch), _as_dense_A(M2, batch)
    d2 = M2.diag_values().expand(*batch, M2.shape[-1])
    coupling = B1[..., :, None] * (C2[..., None, :] @ A2)
    zeros = torch.zeros(*A2.shape[:-1], M1.order, dtype=A2.dtype, device=A2.device)
    A = torch.cat([torch.cat([A1, coupling], -1), torch.cat([zeros, A2], -1)], dim=-2)
    B = torch.cat([B1 * d2[..., None], B2], -1)
    if M1.D is None:
        C = torch.cat([C1, torch.zeros_like(C2)], -1)
        D = None
    else:
        d1 = M1.D.expand(*batch, M1.shape[-1])
        gap = d1 - (C1 * B1).sum(-1)
        C = torch.cat([C1, gap[..., None] * C2], -1)
        D = d1 * d2
    return SSS(A, B, C, D)


def sss_hadamard_lower(M1: SSS, M2: SSS) -> SSS:
    """``SSS(N1) * SSS(N2) = SSS(N1 N2)``: Kronecker products of the states."""
    batch = _batch(M1, M2)
    (B1, C1, _), (B2, C2, _) = _params(M1, batch), _params(M2, batch)
    kron = lambda x, y: (x[..., :, None] * y[..., None, :]).flatten(-2)  # noqa: E731
    if M1.kind != "dense" and M2.kind != "dense":
        A = kron(_as_diag_A(M1, batch), _as_diag_A(M2, batch))
    else:
        A1, A2 = _as_dense_A(M1, batch), _as_dense_A(M2, batch)
        A = (A1[..., :, None, :, None] * A2[..., None, :, None, :]).flatten(-4, -3).flatten(-2, -1)
    D = None
    if M1.D is not None or M2.D is not None:
        D = M1.diag_values().expand(*batch, M1.shape[-1]) * M2.diag_values().expand(*batch, M2.shape[-1])
    return SSS(A, kron(B1, B2), kron(C1, C2), D)


sss_add = _upper_via_transpose(sss_add_lower)
sss_matmul = _upper_via_transpose(sss_matmul_lower)
sss_hadamard = _upper_via_transpose(sss_hadamard_lower)


def _reparam(M: SSS, other, *, B=None, C=None, D=None) -> SSS:
    """``M`` with some of ``B, C, D`` replaced, all expanded to the batch shared with ``other``."""
    batch = torch.broadcast_shapes(M.batch_shape, other.batch_shape)
    A = M.A.expand(*batch, *M.A.shape[M.A.dim() - {"log": 1, "scalar": 1, "diag": 2, "dense": 3}[M.kind] :])
    B0, C0, _ = _params(M, batch)
    B = B0 if B is None else B.expand(*batch, *B.shape[-2:])
    C = C0 if C is None else C.expand(*batch, *C.shape[-2:])
    D = None if D is None else D.expand(*batch, D.shape[-1])
    return SSS(A, B, C, D, lower=M.lower)


def diagonal_matmul_sss(Dg, M: SSS) -> SSS:
    """``diag(d) @ M``: scales the output map (lower) or input map (upper); same order."""
    if not M.lower:
        return sss_matmul_diagonal(M.T, Dg).T
    d = Dg.d
    return _reparam(M, Dg, C=M.C * d[..., None], D=None if M.D is None else M.D * d)


def sss_matmul_diagonal(M: SSS, Dg) -> SSS:
    """``M @ diag(d)``: scales the input map (lower); same order."""
    if not M.lower:
        return diagonal_matmul_sss(Dg, M.T).T
    d = Dg.d
    return _reparam(M, Dg, B=M.B * d[..., None], D=None if M.D is None else M.D * d)


def sss_add_diagonal(M: SSS, Dg) -> SSS:
    """``M + diag(d)``: an explicit ``D``; same order."""
    return _reparam(M, Dg, D=M.diag_values() + Dg.d)


def sss_inverse(M: SSS) -> SSS:
    """Inverse by the state-space inversion recurrence.

    From ``y_t = C_t^T A_t h_{t-1} + D_t x_t``: ``x_t = (y_t - C_t^T A_t h_{t-1}) / D_t`` and
    ``h_t = P_t A_t h_{t-1} + B_t y_t / D_t`` with ``P_t = I - B_t C_t^T / D_t``. With
    ``delta_t = D_t - C_t^T B_t`` nonzero this is ``SSS(N)``: ``A'_t = A_t P_{t-1}``,
    ``B' = B / delta``, ``C' = -C / D``, ``D' = 1 / D``. Otherwise an ``SSS(N + 1)`` realization
    ``A'_t = [[P_{t-1} A_{t-1}, B_{t-1} / D_{t-1}], [0, 0]]``, ``B' = e``, ``C'_t = [-A_t^T C_t / D_t; 0]``.
    """
    if not M.lower:
        return sss_inverse(M.T).T
    batch, T, N = M.batch_shape, M.shape[-1], M.order
    B, C, _ = _params(M, batch)
    d = M.diag_values().expand(*batch, T)
    if bool((d == 0).any()):
        raise SingularMatrixError("SSS is singular: a diagonal entry is zero")
    A = _as_dense_A(M, batch)
    eye = torch.eye(N, dtype=M.dtype, device=M.device)
    P = eye - B[..., :, None] * C[..., None, :] / d[..., None, None]
    delta = d - (C * B).sum(-1)
    scale = d.abs() + (C.abs() * B.abs()).sum(-1)
    tiny = torch.finfo(M.dtype).eps ** 0.5
    if bool((delta.abs() > tiny * scale).all()):
        P_prev = torch.cat([eye.expand_as(P[..., :1, :, :]), P[..., :-1, :, :]], dim=-3)
        return SSS(A @ P_prev, B / delta[..., None], -C / d[..., None], 1.0 / d)
    Q = P @ A  # Q_t = P_t A_t, used one step later
    g = B / d[..., None]
    Q_prev = torch.cat([torch.zeros_like(Q[..., :1, :, :]), Q[..., :-1, :, :]], dim=-3)
    g_prev = torch.cat([torch.zeros_like(g[..., :1, :]), g[..., :-1, :]], dim=-2)
    top = torch.cat([Q_prev, g_prev[..., None]], dim=-1)
    A_new = torch.cat([top, torch.zeros_like(top[..., :1, :])], dim=-2)
    e = torch.zeros(N + 1, dtype=M.dtype, device=M.device)
    e[-1] = 1
    out_map = -(A.transpose(-1, -2) @ C[..., None])[..., 0] / d[..., None]
    C_new = torch.cat([out_map, torch.zeros_like(out_map[..., :1])], dim=-1)
    return SSS(A_new, e.expand(*batch, T, N + 1), C_new, 1.0 / d)
