"""The structured LU factorisation of a quasiseparable matrix (Eidelman and Gohberg's generator recursion).

Write ``M = strict(lower) + diag(d) + strict(upper)^T`` where ``lower`` holds the generators
``(A, B, C)`` of the strictly-lower part and ``upper`` those ``(Au, Bu, Cu)`` of the transposed
strictly-upper part::

    M[j, i] = C_j^T A_j ... A_{i+1} B_i          (j > i)
    M[i, j] = Bu_i^T Au_{i+1}^T ... Au_j^T Cu_j  (i < j)

With ``p_k = A_k^T C_k``, ``h_k = Au_k^T Cu_k`` and the ``n_l x n_u`` Schur state ``F_0 = 0``::

    delta_k = d_k - p_k^T F_k h_k
    s_k     = (B_k - A_k F_k h_k) / delta_k
    g_k     = Bu_k - Au_k F_k^T p_k
    F_{k+1} = A_k F_k Au_k^T + s_k g_k^T

gives ``M = L U``: ``L`` unit lower with generators ``(A, s, C)``, ``U`` upper with diagonal ``delta``
and ``U^T``'s generators ``(Au, g, Cu)``. ``F_k`` is the coupling of the leading ``k x k`` Schur
complement to the rest. Each step needs ``delta_k != 0`` (the leading principal minors).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from structmat.core.validation import SingularMatrixError
from structmat.linalg.semiseparable import Generators

__all__ = ["DenseParts", "LUFactors", "dense_parts", "lu_recurrence", "quasiseparable_lu"]


@dataclass(frozen=True)
class DenseParts:
    """The generators of both sides with dense transitions, expanded to one batch: ``A (*, T, n_l, n_l)``,
    ``B, C (*, T, n_l)``, ``Au (*, T, n_u, n_u)``, ``Bu, Cu (*, T, n_u)``, ``d (*, T)``."""

    A: torch.Tensor
    B: torch.Tensor
    C: torch.Tensor
    Au: torch.Tensor
    Bu: torch.Tensor
    Cu: torch.Tensor
    d: torch.Tensor


@dataclass(frozen=True)
class LUFactors:
    """``s (*, T, n_l)``, ``g (*, T, n_u)`` and ``delta (*, T)`` of the recurrence in the module docstring."""

    s: torch.Tensor
    g: torch.Tensor
    delta: torch.Tensor


def dense_parts(lower: Generators, upper: Generators, d: torch.Tensor, batch) -> DenseParts:
    """:class:`DenseParts` of ``strict(lower) + diag(d) + strict(upper)^T`` expanded to ``batch``."""
    T, nl, nu = d.shape[-1], lower.order, upper.order
    A = lower.A.matrices(nl, d.dtype).expand(*batch, T, nl, nl)
    Au = upper.A.matrices(nu, d.dtype).expand(*batch, T, nu, nu)
    return DenseParts(A, lower.B.expand(*batch, T, nl), lower.C.expand(*batch, T, nl),
                      Au, upper.B.expand(*batch, T, nu), upper.C.expand(*batch, T, nu), d.expand(*batch, T))


def lu_recurrence(parts: DenseParts) -> LUFactors:
    """The recurrence of the module docstring, one Python step per position: ``O(T n_l n_u (n_l + n_u))``.

    Raises :class:`~structmat.SingularMatrixError` when a leading principal minor vanishes.
    """
    A, B, Au, Bu, d = parts.A, parts.B, parts.Au, parts.Bu, parts.d
    batch, T = d.shape[:-1], d.shape[-1]
    p = (A.mT @ parts.C[..., None])[..., 0]
    h = (Au.mT @ parts.Cu[..., None])[..., 0]
    F = d.new_zeros(*batch, A.shape[-1], Au.shape[-1])
    ss, gs, deltas = [], [], []
    for k in range(T):
        Fh = (F @ h[..., k, :, None])[..., 0]
        delta = d[..., k] - (p[..., k, :] * Fh).sum(-1)
        if bool((delta == 0).any()):
            raise SingularMatrixError(f"quasiseparable LU: leading principal minor {k + 1} is zero")
        s = (B[..., k, :] - (A[..., k, :, :] @ Fh[..., None])[..., 0]) / delta[..., None]
        g = Bu[..., k, :] - (Au[..., k, :, :] @ (F.mT @ p[..., k, :, None]))[..., 0]
        F = A[..., k, :, :] @ F @ Au[..., k, :, :].mT + s[..., :, None] * g[..., None, :]
        ss.append(s)
        gs.append(g)
        deltas.append(delta)
    if T == 0:
        return LUFactors(B.clone(), Bu.clone(), d.clone())
    return LUFactors(torch.stack(ss, -2), torch.stack(gs, -2), torch.stack(deltas, -1))


def quasiseparable_lu(lower: Generators, upper: Generators, d: torch.Tensor, batch) -> tuple[Generators, Generators]:
    """``M = L U`` for ``M = strict(lower) + diag(d) + strict(upper)^T``, without pivoting.

    Returns the generators of the unit lower ``L`` (order ``n_l``) and of ``U^T`` (order ``n_u``,
    diagonal ``delta``); see the module docstring. ``O(T n_l n_u (n_l + n_u))`` with a Python step
    per position. Raises :class:`~structmat.SingularMatrixError` when a leading principal minor vanishes.

    Examples
    --------
    >>> import torch
    >>> from structmat.core.transitions import Transitions
    >>> G = Generators(Transitions(torch.full((3,), 0.5), "scalar"), torch.ones(3, 1), torch.ones(3, 1))
    >>> L, Ut = quasiseparable_lu(G, G, torch.full((3,), 2.0), ())
    >>> Ut.D  # the pivots: ratios of consecutive leading minors of [[2, .5, .25], [.5, 2, .5], [.25, .5, 2]]
    tensor([2.0000, 1.8750, 1.8667])
    """
    parts = dense_parts(lower, upper, d, batch)
    f = lu_recurrence(parts)
    L = Generators(lower.A.expand(batch), f.s, parts.C, torch.ones_like(parts.d))
    U = Generators(upper.A.expand(batch), f.g, parts.Cu, f.delta)
    return L, U
