"""Semiseparable rank: the largest rank of a submatrix on-and-below (or strictly below) the diagonal."""

from __future__ import annotations

import torch

from structmat.core.base import StructuredMatrix
from structmat.core.validation import as_tensor
from structmat.linalg.semiseparable import Generators
from structmat.matrices.bidiagonal import Bidiagonal
from structmat.matrices.dense import Dense
from structmat.matrices.diagonal import Diagonal
from structmat.matrices.lowrank import LowRank
from structmat.matrices.sss import SSS

__all__ = ["semiseparable_rank"]


def _dense_rank(M: torch.Tensor, tol: float | None, strict: bool) -> int:
    T = M.shape[-1]
    M = M.to(torch.complex128 if M.is_complex() else torch.float64)
    svals = []
    for k in range(T - 1 if strict else T):
        sub = M[..., k + 1 :, : k + 1] if strict else M[..., k:, : k + 1]
        svals.append(torch.linalg.svdvals(sub).flatten())
    s = torch.cat(svals) if svals else torch.zeros(1, dtype=torch.float64)
    cut = (T * torch.finfo(torch.float64).eps if tol is None else tol) * s.max().clamp_min(1e-300)
    n = max(1, int(torch.tensor(M.shape[:-2]).prod()) if M.dim() > 2 else 1)
    return max((int((sv > cut).sum()) for block in svals for sv in block.reshape(n, -1)), default=0)


def _psd_sqrt(G: torch.Tensor) -> torch.Tensor:
    w, U = torch.linalg.eigh(G)
    return (U * w.clamp_min(0).sqrt()[..., None, :]) @ U.mH


def _gramians(G: Generators, A: torch.Tensor):
    """Reachability ``P_k = R_k R_k^H`` (``R_k = [A_k R_{k-1}, B_k]``) and observability
    ``G_k = Omega_k^H Omega_k`` (``Omega_k = [C_k^T; Omega_{k+1} A_{k+1}]``), stacked over ``k``."""
    batch, T, N = G.batch_shape, G.length, G.order
    reach, obs = [], [None] * T
    P = torch.zeros(*batch, N, N, dtype=A.dtype)
    for k in range(T):
        Bk = G.B[..., k, :, None]
        P = (A[..., k, :, :] @ P @ A[..., k, :, :].mH if k else 0) + Bk @ Bk.mH
        reach.append(P)
    W = torch.zeros(*batch, N, N, dtype=A.dtype)
    for k in reversed(range(T)):
        Ck = G.C[..., k, :, None]
        W = Ck.conj() @ Ck.mT + (A[..., k + 1, :, :].mH @ W @ A[..., k + 1, :, :] if k + 1 < T else 0)
        obs[k] = W
    return torch.stack(reach, -3), torch.stack(obs, -3)


def _sss_rank(M: SSS, tol: float | None, strict: bool) -> int:
    """Ranks from Gram matrices of the observability and reachability factors, ``O(T N^3)``."""
    M = M.to(torch.complex128 if M.dtype.is_complex else torch.float64)
    if not M.lower:  # the on-and-below part of an upper matrix is its diagonal
        return 0 if strict else int(bool((M.diagonal() != 0).any()))
    batch, T, N = M.batch_shape, M.shape[-1], M.order
    if T == 0 or N == 0:
        return 0 if strict else int(bool((M.diagonal() != 0).any()))
    G = M.generators.expand(batch)
    A = G.A.matrices(N, M.dtype).expand(*batch, T, N, N)
    reach, obs = _gramians(G, A)
    if strict:
        left = A[..., 1:, :, :].mH @ obs[..., 1:, :, :] @ A[..., 1:, :, :]
        right = reach[..., :-1, :, :]
    else:
        Cc, Bc = G.C.conj()[..., None], G.B[..., None]
        dl = (G.diagonal() - (G.C * G.B).sum(-1))[..., None, None]
        left = torch.cat([torch.cat([obs, dl * Cc], -1), torch.cat([(dl * Cc).mH, (dl.abs() ** 2).to(M.dtype)], -1)], -2)
        right = torch.cat([torch.cat([reach, Bc], -1), torch.cat([Bc.mH, torch.ones_like(dl)], -1)], -2)
    if left.shape[-3] == 0:
        return 0
    s = torch.linalg.svdvals(_psd_sqrt(left) @ _psd_sqrt(right))
    cut = (N * torch.finfo(torch.float64).eps ** 0.5 if tol is None else tol) * s.max().clamp_min(1e-300)
    return int((s > cut).sum(-1).max())


def semiseparable_rank(M, tol: float | None = None, strict: bool = False) -> int:
    """Largest rank of a submatrix on-and-below (``strict=False``, Mamba-2 Def. 3.1) or strictly
    below (``strict=True``) the diagonal.

    Parameters
    ----------
    M : array_like of shape ``(*, T, T)`` or a structured matrix
        Structured inputs convertible to an SSS are handled from their parameters in
        ``O(T N^3)`` without densifying; other structured inputs raise ``TypeError``.
    tol : float, optional
        Singular values below ``tol`` times the largest one count as zero. Default ``T eps``
        (dense) or ``N sqrt(eps)`` (structured, which works with Gram matrices).
    strict : bool

    Returns
    -------
    int
        The maximum over the split points (and over any batch).

    Examples
    --------
    >>> import torch, structmat as sm
    >>> M = sm.OneSS.from_decays(torch.rand(20, dtype=torch.float64))
    >>> sm.semiseparable_rank(M), sm.semiseparable_rank(M.inv()), sm.semiseparable_rank(M.inv(), strict=True)
    (1, 2, 1)
    """
    if isinstance(M, StructuredMatrix):
        if isinstance(M, SSS):
            return _sss_rank(M, tol, strict)
        if isinstance(M, Bidiagonal):
            return _sss_rank(M.to_sss(), tol, strict)
        if isinstance(M, LowRank):
            return _sss_rank(M.tril(), tol, strict)
        if isinstance(M, Diagonal):
            return 0 if strict else int(bool((M.diagonal() != 0).any()))
        if isinstance(M, Dense):
            return _dense_rank(M.M, tol, strict)
        raise TypeError(f"semiseparable_rank has no structured path for {type(M).__name__}; "
                        "pass M.to_dense() explicitly if densifying is intended")
    M = as_tensor(M, "M")
    if M.dim() < 2 or M.shape[-1] != M.shape[-2]:
        raise ValueError(f"M must have shape (*, T, T); got {tuple(M.shape)}")
    return _dense_rank(M, tol, strict)
