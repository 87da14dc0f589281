"""Minimal realizations of SSS matrices (``compress``).

Two sweeps of the same step: a forward *reachability* sweep keeps, at each ``t``, an orthonormal
basis ``V_t`` of ``range([A_t V_{t-1}, B_t])`` and projects the state onto it
(``A'_t = V_t^H A_t V_{t-1}``, ``B'_t = V_t^H B_t``, ``C'_t = V_t^T C_t``); the *observability*
sweep is the reachability sweep of the flipped transpose ``J M^T J`` (:func:`flip_params`),
flipped back. Both are exact up to the singular values dropped below ``tol``.
Cost ``O(T N^3)`` with a Python step per time index: an analysis tool, not a hot path.
"""

from __future__ import annotations

import torch

from structmat.sss import SSS, flip_params

__all__ = ["minimal_realization"]


def _dense_A(A: torch.Tensor, kind: str, N: int, dtype) -> torch.Tensor:
    A = torch.exp(A).to(dtype) if kind == "log" else A
    if kind in ("log", "scalar"):
        return A[..., None, None] * torch.eye(N, dtype=dtype, device=A.device)
    if kind == "diag":
        return torch.diag_embed(A)
    return A


def _reachability_sweep(A, B, C, tol):
    """One sweep on dense ``A (*, T, N, N)``; returns padded reduced ``(A', B', C')``."""
    T, _N = B.shape[-2], B.shape[-1]
    bases, ranks = [], []
    V = None
    for t in range(T):
        Bt = B[..., t, :, None]
        K = Bt if V is None else torch.cat([A[..., t, :, :] @ V, Bt], dim=-1)
        U, s, _ = torch.linalg.svd(K, full_matrices=False)
        keep = s > tol * s[..., :1].clamp_min(torch.finfo(s.dtype).tiny)
        r = max(int(keep.sum(-1).max()), 1)
        V = U[..., :, :r]
        bases.append(V)
        ranks.append(r)
    r_max = max(ranks)
    pad = lambda V: torch.nn.functional.pad(V, (0, r_max - V.shape[-1]))  # noqa: E731
    Vs = torch.stack([pad(V) for V in bases], dim=-3)  # (*, T, N, r)
    V_prev = torch.cat([torch.zeros_like(Vs[..., :1, :, :]), Vs[..., :-1, :, :]], dim=-3)
    A_new = Vs.mH @ A @ V_prev
    B_new = (Vs.mH @ B[..., None])[..., 0]
    C_new = (Vs.mT @ C[..., None])[..., 0]
    return A_new, B_new, C_new


def minimal_realization(M: SSS, tol: float | None = None) -> SSS:
    """An SSS equal to ``M`` (to ``tol``) whose order is minimal in the SSS convention.

    Parameters
    ----------
    M : SSS
    tol : float, optional
        Relative singular-value cutoff at each step; default ``100 N eps``.

    Examples
    --------
    >>> import torch, structmat as sm
    >>> a = sm.OneSS.from_decays(torch.rand(50, dtype=torch.float64))
    >>> (a + a).order, (a + a).compress().order
    (2, 1)
    """
    if not M.lower:
        return minimal_realization(M.T, tol).T
    dtype = M.dtype
    tol = 100 * max(M.order, 2) * torch.finfo(dtype).eps if tol is None else tol
    batch, T = M.batch_shape, M.shape[-1]
    A = _dense_A(M._A, M.kind, M.order, dtype).expand(*batch, T, M.order, M.order)
    B, C = M.B.expand(*batch, T, M.order), M.C.expand(*batch, T, M.order)
    A, B, C = _reachability_sweep(A, B, C, tol)
    A, B, C, _ = flip_params(A, B, C, None, "dense")
    A, B, C = _reachability_sweep(A, B, C, tol)
    A, B, C, _ = flip_params(A, B, C, None, "dense")
    if A.shape[-1] == 1:
        return SSS(A[..., 0, 0], B, C, M.D)
    return SSS(A, B, C, M.D)
