"""The Hankel blocks of a lower SSS: ``H_k = M[k+1:, :k+1]`` (strict) or ``M[k:, :k+1]`` (inclusive).

Each block factors through the state, ``H_k = Omega_k R_k``, so its singular values are those of
``sqrt(O_k) sqrt(P_k)`` with the observability and reachability Gram matrices ``O_k``, ``P_k``
(``O(T N^3)``, no ``T x T`` matrix). Ranks count singular values against the factors' own size
``sqrt(||O_k|| ||P_k||)`` of each block, the largest it could be without cancellation: an exactly
cancelling block (``M - M``) has rank 0 and ranks do not depend on the scale of ``M``. The rank of
``H_k`` is the smallest state a realization can have after step ``k``: the semiseparable rank is
the largest of them, and a minimal realization has exactly these state sizes.
"""

from __future__ import annotations

import torch

from structmat.linalg.gramian_factors import observability_factors, reachability_factors
from structmat.linalg.semiseparable import Generators

__all__ = ["hankel_ranks", "normalized"]


def normalized(G: Generators) -> Generators:
    """The generators of ``M / max(max|B| max|C|, max|diag|)`` in float64/complex128 (same ranks; Gram
    matrices that neither overflow nor underflow for matrices scaled by 1e160 or 1e-170, nor where ``B`` or
    ``C`` vanish beside a non-zero diagonal)."""
    dtype = torch.complex128 if G.B.dtype.is_complex else torch.float64
    G = G.expand(G.batch_shape)
    B, C, d = G.B.to(dtype), G.C.to(dtype), G.diagonal().to(dtype)
    sB, sC = B.abs().max().clamp_min(1e-300), C.abs().max().clamp_min(1e-300)
    scale = torch.maximum(sB * sC, d.abs().max()) if d.numel() else sB * sC
    return Generators(G.A.cast(dtype), B / sB, C / sC * (sB * sC / scale), d / scale)


def _psd_sqrt(G: torch.Tensor) -> torch.Tensor:
    w, U = torch.linalg.eigh(G)
    return (U * w.clamp_min(0).sqrt()[..., None, :]) @ U.mH


def _gramians(G: Generators, A: torch.Tensor):
    """Reachability ``P_k = R_k R_k^H`` (``R_k = [A_k R_{k-1}, B_k]``) and observability
    ``O_k = Omega_k^H Omega_k`` (``Omega_k = [C_k^T; Omega_{k+1} A_{k+1}]``), stacked over ``k``: from their square
    roots (:mod:`structmat.linalg.gramian_factors`, a blocked scan)."""
    S, F = reachability_factors(A, G.B[..., None]), observability_factors(A, G.C[..., None])
    return S @ S.mH, F @ F.mH


def _block_factors(G: Generators, strict: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Gram matrices ``(left_k, right_k)`` of the two factors of every Hankel block."""
    batch, T, N = G.batch_shape, G.length, G.order
    A = G.A.matrices(N, G.B.dtype).expand(*batch, T, N, N)
    reach, obs = _gramians(G, A)
    if strict:
        return A[..., 1:, :, :].mH @ obs[..., 1:, :, :] @ A[..., 1:, :, :], reach[..., :-1, :, :]
    Cc, Bc = G.C.conj()[..., None], G.B[..., None]
    dl = (G.diagonal() - (G.C * G.B).sum(-1))[..., None, None]
    left = torch.cat([torch.cat([obs, dl * Cc], -1), torch.cat([(dl * Cc).mH, (dl.abs() ** 2).to(dl.dtype)], -1)], -2)
    right = torch.cat([torch.cat([reach, Bc], -1), torch.cat([Bc.mH, torch.ones_like(dl)], -1)], -2)
    return left, right


def hankel_ranks(G: Generators, tol: float | None = None, strict: bool = True) -> torch.Tensor:
    """Rank of every Hankel block of the lower SSS with generators ``G`` (the largest over the batch):
    ``(T - 1,)`` strict (block ``k`` is ``M[k+1:, :k+1]``), ``(T,)`` inclusive.

    ``tol`` (default ``N sqrt(eps)``) is relative to the size of the block's factors.

    Examples
    --------
    >>> from structmat.core.transitions import Transitions
    >>> a = Transitions(torch.full((5,), 0.5, dtype=torch.float64), "scalar")
    >>> hankel_ranks(Generators(a, torch.ones(5, 2, dtype=torch.float64), torch.ones(5, 2, dtype=torch.float64)))
    tensor([1, 1, 1, 1])
    """
    G = normalized(G)
    T, N = G.length, G.order
    blocks = max(T - 1, 0) if strict else T
    if N == 0 or blocks == 0:
        d = G.diagonal().abs().reshape(-1, T).amax(0) if T else G.B.new_zeros(0)
        return torch.zeros(blocks, dtype=torch.long) if strict else (d > 0).long()
    left, right = _block_factors(G, strict)
    s = torch.linalg.svdvals(_psd_sqrt(left) @ _psd_sqrt(right))
    size = (torch.linalg.eigvalsh(left)[..., -1].clamp_min(0) * torch.linalg.eigvalsh(right)[..., -1].clamp_min(0)).sqrt()
    cut = (N * torch.finfo(torch.float64).eps ** 0.5 if tol is None else tol) * size.clamp_min(1e-300)
    return (s > cut[..., None]).sum(-1).reshape(-1, blocks).amax(0)
