"""The structured LU factorisation of a quasiseparable matrix (Eidelman and Gohberg's generator recursion)."""

from __future__ import annotations

import torch

from structmat.core.validation import SingularMatrixError
from structmat.linalg.semiseparable import Generators

__all__ = ["quasiseparable_lu"]


def quasiseparable_lu(lower: Generators, upper: Generators, d: torch.Tensor, batch) -> tuple[Generators, Generators]:
    """``M = L U`` for ``M = strict(lower) + strict(upper)^T + diag(d)`` (``upper`` holds the generators
    of the transposed strictly-upper part). Returns the generators of the unit lower ``L`` (order
    ``n_l``) and of ``U^T`` (order ``n_u``, diagonal ``delta``), without pivoting.

    With ``p_k = A_k^T C_k``, ``h_k = Au_k^T Cu_k`` and the ``n_l x n_u`` Schur state ``f``::

        delta_k = d_k - p_k^T f h_k,   q_k = (B_k - A_k f h_k) / delta_k,   g_k = Bu_k - (p_k^T f Au_k^T)^T
        f <- A_k f Au_k^T + q_k g_k^T

    ``O(T n^3)`` with a Python step per position. Raises
    :class:`~structmat.SingularMatrixError` when a leading principal minor vanishes.
    """
    T = d.shape[-1]
    A, B, C = lower.A.matrices(lower.order, d.dtype).expand(*batch, T, lower.order, lower.order), \
        lower.B.expand(*batch, T, lower.order), lower.C.expand(*batch, T, lower.order)
    Au, Bu, Cu = upper.A.matrices(upper.order, d.dtype).expand(*batch, T, upper.order, upper.order), \
        upper.B.expand(*batch, T, upper.order), upper.C.expand(*batch, T, upper.order)
    d = d.expand(*batch, T)
    p = (A.mT @ C[..., None])[..., 0]
    h = (Au.mT @ Cu[..., None])[..., 0]
    f = torch.zeros(*batch, lower.order, upper.order, dtype=d.dtype, device=d.device)
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
    stack = lambda xs, shape: torch.stack(xs, -2) if xs else d.new_zeros(shape)  # noqa: E731
    L = Generators(lower.A.expand(batch), stack(qs, (*batch, 0, lower.order)), C, torch.ones_like(d))
    U = Generators(upper.A.expand(batch), stack(gs, (*batch, 0, upper.order)), Cu,
                   torch.stack(deltas, -1) if deltas else d.new_zeros(*batch, 0))
    return L, U
