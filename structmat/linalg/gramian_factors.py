"""Square roots of the reachability Gramians of a lower SSS, for every step at once (a blocked scan).

The reachability Gramians ``P_t = A_t P_{t-1} A_t^H + B_t B_t^H`` (``P_{-1} = 0``, ``A_0`` unused) have square
roots ``S_t`` (``S_t S_t^H = P_t``, ``N x N``) that follow ``S_t = f([A_t S_{t-1}, B_t])`` with ``f(K) = R^H`` from
the QR factorization ``K^H = Q R``: orthogonal steps on the factors, never the squares, so a direction keeps its
weight (its singular value) to the precision of the weight itself (the Gramians square it: weights below
``sqrt(eps)`` of the largest would be rounding noise). The steps are not independent, so they run as a blocked
scan (as :func:`structmat.linalg.scan.linear_scan`): chunks of ``L`` steps scanned from a zero state all at once,
the factors entering each chunk by the same scan one level up over the chunks' whole transitions and factors, and
every step's factor from ``[Phi S_in, S_local]`` (``Phi`` the chunk's partial product) in one batched QR. Python
steps ``O(L log_L T)`` instead of ``T``; products of transitions span at most ``L`` steps (no longer products than
the sequential factors' growth: unstable transitions overflow no sooner).
"""

from __future__ import annotations

import math

import torch

__all__ = ["reachability_factors", "observability_factors", "GRAMIAN_CHUNK"]

#: Steps of one chunk ``L``: each level of the recursion takes ``L`` Python steps (a batched QR each, tens of
#: microseconds on small matrices), so ``T = 4096`` takes 32 + 32 + 4 steps instead of 4096; the chunks' partial
#: products span at most 32 steps.
GRAMIAN_CHUNK = 32


def _factor(K: torch.Tensor) -> torch.Tensor:
    """``S (*, N, N)`` with ``S S^H = K K^H`` for ``K (*, N, m)``, ``m >= N``: ``R^H`` of ``K^H = Q R`` (with ``Q``,
    whose cost is a few percent: ``mode="r"`` has no derivative, and gradients reach the factors as they reached the
    step-by-step SVDs that these replace)."""
    return torch.linalg.qr(K.mH)[1].mH


def reachability_factors(A: torch.Tensor, B: torch.Tensor, chunk: int = GRAMIAN_CHUNK) -> torch.Tensor:
    """Square roots ``S_t`` of the reachability Gramians ``P_t = sum_{i <= t} Phi(t, i) B_i B_i^H Phi(t, i)^H``
    (``Phi(t, i) = A_t ... A_{i+1}``).

    Parameters
    ----------
    A : Tensor, shape ``(*, T, N, N)``
        Dense transitions; ``A[..., 0, :, :]`` is unused.
    B : Tensor, shape ``(*, T, N, K)``
        Input maps (``K`` columns each), batch dims equal to ``A``'s.
    chunk : int
        Most steps of one chunk ``L`` (``ceil(sqrt(T))`` where that is fewer).

    Returns
    -------
    Tensor, shape ``(*, T, N, N)``
        ``S_t`` with ``S_t S_t^H = P_t`` (lower triangular).
    """
    *batch, T, N, K = B.shape
    if T == 0:
        return B.new_zeros(*batch, 0, N, N)
    eye = torch.eye(N, dtype=A.dtype, device=A.device)
    chunk = min(chunk, math.isqrt(T - 1) + 1)  # (short sequences: about sqrt(T) steps per level, not a padded chunk)
    n = -(-T // chunk)
    # step 0's transition is unused: the identity (an entering zero state times a large A_0 would give inf * 0);
    # padded steps are identities without inputs
    A = torch.cat([eye.expand(*batch, 1, N, N), A[..., 1:, :, :], eye.expand(*batch, n * chunk - T, N, N)], -3)
    B = torch.cat([B, B.new_zeros(*batch, n * chunk - T, N, K)], -3)
    A, B = A.reshape(*batch, n, chunk, N, N), B.reshape(*batch, n, chunk, N, K)
    phi, S = eye.expand(*batch, n, N, N), B.new_zeros(*batch, n, N, N)
    phis, local = [], []
    for j in range(chunk):  # every chunk from a zero state: its partial products and local factors
        Aj = A[..., j, :, :]
        phi = Aj @ phi
        S = _factor(torch.cat([Aj @ S, B[..., j, :, :]], -1))
        phis.append(phi)
        local.append(S)
    if n == 1:
        return torch.stack(local, -3)[..., 0, :T, :, :]
    # the factor entering chunk c is that of the chunks' recurrence (whole products, local end factors) at c - 1
    ends = reachability_factors(phi, S, chunk)
    entering = torch.cat([torch.zeros_like(ends[..., :1, :, :]), ends[..., :-1, :, :]], -3)
    phis, local = torch.stack(phis, -3), torch.stack(local, -3)  # (*, n, L, N, N)
    S = _factor(torch.cat([phis @ entering[..., None, :, :], local], -1))
    return S.reshape(*batch, n * chunk, N, N)[..., :T, :, :]


def observability_factors(A: torch.Tensor, C: torch.Tensor, chunk: int = GRAMIAN_CHUNK) -> torch.Tensor:
    """Square roots ``F_t`` (``F_t F_t^H = O_t``) of the observability Gramians
    ``O_t = sum_{j >= t} Phi(j, t)^H conj(C_j) C_j^T Phi(j, t)``: the reachability factors of reversed time, whose
    transitions are ``A_{T-t}^H`` and whose inputs are ``conj(C_{T-1-t})``. ``A (*, T, N, N)``, ``C (*, T, N, K)``;
    returns ``(*, T, N, N)``."""
    reversed_A = torch.roll(torch.flip(A, (-3,)), 1, dims=-3).mH
    return torch.flip(reachability_factors(reversed_A, torch.flip(C, (-3,)).conj(), chunk), (-3,))
