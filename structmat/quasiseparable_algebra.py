"""Products and inverses of quasiseparable matrices in structured form (orders add / are kept).

Write ``M = L + D + U`` (strictly lower SSS, diagonal, strictly upper SSS). The only new objects
in ``M1 M2`` are the cross terms ``L1 U2`` and ``U1 L2``; each is quasiseparable and its generators
come from one matrix-valued recurrence:

* ``W_i = sum_{k<i} Phi1(i,k) B1_k B2_k^T Phi2(i,k)^T``, forwards: ``(L1 U2)`` has lower part
  ``(A1, W C2, C1)`` and upper part ``(A2, W^T C1, C2)``;
* ``V_j = sum_{k>j} Phi1(k,j)^T C1_k C2_k^T Phi2(k,j)``, backwards: ``(U1 L2)`` has lower part
  ``(A2, B2, V^T B1)`` and upper part ``(A1, B1, V B2)``.

The lower cross part joins the input map of the ``L1`` block of ``(L1 + D1)(L2 + D2)`` and the output
map of its ``L2`` block, so the orders are ``(n_l1 + n_l2, n_u1 + n_u2)``. The inverse goes through
the structured LU factorisation ``M = L U`` (the generator recursion of Eidelman and Gohberg, with an
``n_l x n_u`` Schur state), ``M^{-1} = U^{-1} L^{-1}``: an upper times a lower SSS, orders unchanged.
"""

from __future__ import annotations

import torch

from structmat.base import SingularMatrixError
from structmat.scan import apply_transition, linear_scan
from structmat.sss import SSS
from structmat.sss_algebra import _as_dense_A, sss_inverse, sss_matmul_lower

__all__ = ["qs_matmul", "qs_inverse", "qs_lu"]


def _gens(M: SSS, batch):
    """Dense ``A (*, T, n, n)``, ``B``, ``C`` of an SSS (the parameters, for either orientation)."""
    T, n = M.shape[-1], M.order
    return _as_dense_A(M, batch), M.B.expand(*batch, T, n), M.C.expand(*batch, T, n)


def _kron(X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """``X (x) Y`` for stacks of square matrices, so that ``vec(X W Y^T) = (X (x) Y) vec(W)`` (row-major)."""
    n1, n2 = X.shape[-1], Y.shape[-1]
    return (X[..., :, None, :, None] * Y[..., None, :, None, :]).reshape(*X.shape[:-2], n1 * n2, n1 * n2)


def _forward_pairs(Aa, Ba, Ab, Bb) -> torch.Tensor:
    """``W_i = sum_{k<i} Phi_a(i,k) Ba_k Bb_k^T Phi_b(i,k)^T``, shape ``(*, T, na, nb)``."""
    na, nb = Ba.shape[-1], Bb.shape[-1]
    K = _kron(Aa, Ab)
    U = (Ba[..., :, None] * Bb[..., None, :]).flatten(-2)[..., None]  # (*, T, na nb, 1)
    G = linear_scan(K, U, "dense")  # G_i = W_i + U_i
    prev = torch.cat([torch.zeros_like(G[..., :1, :, :]), G[..., :-1, :, :]], dim=-3)
    return apply_transition(K, prev, "dense")[..., 0].reshape(*Ba.shape[:-1], na, nb)


def _backward_pairs(Aa, Ca, Ab, Cb) -> torch.Tensor:
    """``V_j = sum_{k>j} Phi_a(k,j)^T Ca_k Cb_k^T Phi_b(k,j)``, shape ``(*, T, na, nb)``."""
    flip = lambda t: torch.flip(t, (-3,) if t.dim() == Aa.dim() else (-2,))  # noqa: E731
    # reversed time: V_j = Aa_{j+1}^T (E_{j+1} + V_{j+1}) Ab_{j+1}, a forward recurrence on flipped data
    Ar, Br = torch.roll(flip(Aa), 1, dims=-3).mT, torch.roll(flip(Ab), 1, dims=-3).mT
    W = _forward_pairs(Ar, flip(Ca), Br, flip(Cb))
    return torch.flip(W, (-3,))


def _product_parts(M1, M2, batch):
    """Lower SSS (explicit diagonal) of ``M1 @ M2`` for quasiseparable ``M1``, ``M2``."""
    L1, L2, U1, U2 = M1.lower_part, M2.lower_part, M1.upper_part, M2.upper_part
    T = M1.shape[-1]
    d1, d2 = M1.diag.expand(*batch, T), M2.diag.expand(*batch, T)
    A1, B1, C1 = _gens(L1, batch)
    A2, B2, C2 = _gens(L2, batch)
    A1u, B1u, C1u = _gens(U1, batch)
    A2u, B2u, C2u = _gens(U2, batch)
    base = sss_matmul_lower(SSS(A1, B1, C1, d1), SSS(A2, B2, C2, d2))
    n1 = L1.order
    W = _forward_pairs(A1, B1, A2u, B2u)  # L1 U2
    w = (W @ C2u[..., None])[..., 0]
    V = _backward_pairs(A1u, C1u, A2, C2)  # U1 L2
    cv = (V.mT @ B1u[..., None])[..., 0]
    B = base.B.clone()
    B[..., :n1] = B[..., :n1] + w
    C = base.C.clone()
    C[..., n1:] = C[..., n1:] + cv
    diag = base.D + (C1 * w).sum(-1) + (B1u[..., None, :] @ V @ B2[..., :, None])[..., 0, 0]
    return SSS(base.A, B, C, diag)


def qs_matmul(M1, M2):
    """``M1 @ M2`` for quasiseparable matrices: orders ``(n_l1 + n_l2, n_u1 + n_u2)``."""
    from structmat.quasiseparable import Quasiseparable

    batch = torch.broadcast_shapes(M1.batch_shape, M2.batch_shape)
    lower = _product_parts(M1, M2, batch)
    upper_t = _product_parts(M2.T, M1.T, batch)  # (M1 M2)^T = M2^T M1^T
    return Quasiseparable(lower, upper_t.T, lower.D)


def qs_lu(M):
    """``M = L U`` with ``L`` unit lower SSS (order ``n_l``) and ``U`` upper SSS (order ``n_u``).

    Generator recursion (no pivoting): with ``p_k = A_k^T C_k``, ``h_k = Au_k^T Cu_k``::

        delta_k = d_k - p_k^T f h_k,   q_k' = (B_k - A_k f h_k) / delta_k,   g_k' = Bu_k - (p_k^T f Au_k^T)^T
        f <- A_k f Au_k^T + q_k' g_k'^T

    Raises :class:`~structmat.SingularMatrixError` when a leading principal minor vanishes.
    """
    batch, T = M.batch_shape, M.shape[-1]
    A, B, C = _gens(M.lower_part, batch)
    Au, Bu, Cu = _gens(M.upper_part, batch)
    d = M.diag.expand(*batch, T)
    p = (A.mT @ C[..., None])[..., 0]
    h = (Au.mT @ Cu[..., None])[..., 0]
    f = torch.zeros(*batch, B.shape[-1], Bu.shape[-1], dtype=M.dtype, device=M.device)
    qs, gs, deltas = [], [], []
    for k in range(T):
        fh = (f @ h[..., k, :, None])[..., 0]
        delta = d[..., k] - (p[..., k, :] * fh).sum(-1)
        if bool((delta == 0).any()):
            raise SingularMatrixError(f"quasiseparable LU: leading principal minor {k + 1} is zero")
        q = (B[..., k, :] - (A[..., k, :, :] @ fh[..., None])[..., 0]) / delta[..., None]
        g = Bu[..., k, :] - (p[..., k, None, :] @ f @ Au[..., k, :, :].mT)[..., 0, :]
        f = A[..., k, :, :] @ f @ Au[..., k, :, :].mT + q[..., :, None] * g[..., None, :]
        qs.append(q)
        gs.append(g)
        deltas.append(delta)
    ones = torch.ones_like(d)
    L = SSS(A, torch.stack(qs, -2), C, ones)
    U = SSS(Au, torch.stack(gs, -2), Cu, torch.stack(deltas, -1), lower=False)
    return L, U


def _upper_times_lower(U: SSS, L: SSS):
    """``U @ L`` for an upper and a lower SSS (explicit diagonals): quasiseparable ``(n_L, n_U)``."""
    from structmat.quasiseparable import Quasiseparable

    batch = torch.broadcast_shapes(U.batch_shape, L.batch_shape)
    T = U.shape[-1]
    Au, Bu, Cu = _gens(U, batch)
    Al, Bl, Cl = _gens(L, batch)
    du, dl = U.diag_values().expand(*batch, T), L.diag_values().expand(*batch, T)
    # strictly triangular parts: for an explicit D the SSS entries off the diagonal are the same
    V = _backward_pairs(Au, Cu, Al, Cl)
    lower = SSS(Al, Bl, Cl * du[..., None] + (V.mT @ Bu[..., None])[..., 0], torch.zeros_like(du))
    upper = SSS(Au, Bu, Cu * dl[..., None] + (V @ Bl[..., None])[..., 0], torch.zeros_like(du), lower=False)
    diag = du * dl + (Bu[..., None, :] @ V @ Bl[..., :, None])[..., 0, 0]
    return Quasiseparable(lower, upper, diag)


def qs_inverse(M):
    """``M^{-1} = U^{-1} L^{-1}`` from the structured LU; orders unchanged (``n + 1`` for a factor
    whose inverse needs it, see :meth:`SSS.inv`)."""
    L, U = qs_lu(M)
    return _upper_times_lower(sss_inverse(U), sss_inverse(L))
