"""Minimal realizations of lower SSS generators (what ``compress`` computes).

Two sweeps of the same step: a forward *reachability* sweep keeps, at each ``t``, an orthonormal
basis ``V_t`` of ``range([A_t V_{t-1}, B_t])`` and projects the state onto it
(``A'_t = V_t^H A_t V_{t-1}``, ``B'_t = V_t^H B_t``, ``C'_t = V_t^T C_t``); the *observability*
sweep is the reachability sweep of the flipped transpose ``J M^T J``, flipped back. The bases carry
their weights (square roots of the Gramians), so directions are dropped by their actual size, not
by their size after renormalisation. Exact up to the weights dropped below ``tol``. Cost ``O(T N^3)`` with a Python step per time
index: an analysis tool, not a hot path.
"""

from __future__ import annotations

import torch

from structmat.core.transitions import Transitions
from structmat.core.validation import check_tolerance
from structmat.linalg.semiseparable import Generators

__all__ = ["minimal_realization"]


def _reachability_sweep(A: torch.Tensor, B: torch.Tensor, C: torch.Tensor, tol: float):
    """One sweep on dense ``A (*, T, N, N)``; returns the reduced ``(A', B', C')`` padded to the largest rank.

    The basis carries its weights (``W_t = V_t diag(s_t)``, a square root of the reachability
    Gramian): a direction is kept while its weight is above ``tol`` times the largest, so rounding
    noise stays at its own small weight even where an unstable ``A`` amplifies every direction."""
    T = B.shape[-2]
    bases = []
    W = None
    for t in range(T):
        Bt = B[..., t, :, None]
        K = Bt if W is None else torch.cat([A[..., t, :, :] @ W, Bt], dim=-1)
        U, s, _ = torch.linalg.svd(K, full_matrices=False)
        r = max(int((s > tol * s[..., :1].clamp_min(torch.finfo(s.dtype).tiny)).sum(-1).max()), 1)
        bases.append(U[..., :, :r])
        W = U[..., :, :r] * s[..., None, :r].to(U.dtype)
    r_max = max(V.shape[-1] for V in bases)
    Vs = torch.stack([torch.nn.functional.pad(V, (0, r_max - V.shape[-1])) for V in bases], dim=-3)  # (*, T, N, r)
    V_prev = torch.cat([torch.zeros_like(Vs[..., :1, :, :]), Vs[..., :-1, :, :]], dim=-3)
    return Vs.mH @ A @ V_prev, (Vs.mH @ B[..., None])[..., 0], (Vs.mT @ C[..., None])[..., 0]


def minimal_realization(G: Generators, tol: float | None = None) -> Generators:
    """Generators equal to ``G`` (to ``tol``) whose order is minimal in the SSS convention.

    Parameters
    ----------
    G : Generators
    tol : float, optional
        Relative singular-value cutoff at each step, in ``[0, 1)``; default ``100 N eps``.

    Examples
    --------
    >>> import torch
    >>> T = 30
    >>> a = Transitions(torch.rand(T, 2, dtype=torch.float64), "diag")
    >>> b = torch.ones(T, 2, dtype=torch.float64)
    >>> minimal_realization(Generators(a, b, b)).order  # two states, both needed
    2
    """
    tol = check_tolerance(tol, below=1.0)
    if G.length == 0 or G.order == 0:
        return G
    dtype = G.B.dtype
    if tol is None:
        tol = 100 * max(G.order, 2) * torch.finfo(dtype).eps
    batch = G.batch_shape
    A = G.A.matrices(G.order, dtype).expand(*batch, G.length, G.order, G.order)
    B, C = G.B.expand(*batch, *G.B.shape[-2:]), G.C.expand(*batch, *G.C.shape[-2:])
    for _ in range(2):  # reachability, then reachability of the flipped transpose (observability)
        A, B, C = _reachability_sweep(A, B, C, tol)
        flipped = Generators(Transitions(A, "dense"), B, C).flipped()
        A, B, C = flipped.A.values, flipped.B, flipped.C
    transitions = Transitions(A[..., 0, 0], "scalar") if A.shape[-1] == 1 else Transitions(A, "dense")
    return Generators(transitions, B, C, G.D)
