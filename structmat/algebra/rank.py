"""Semiseparable rank: the largest rank of a submatrix on-and-below (or strictly below) the diagonal."""

from __future__ import annotations

import torch

from structmat.core.base import StructuredMatrix
from structmat.core.validation import as_tensor, check_finite, check_flag, check_tolerance
from structmat.linalg.hankel import hankel_ranks
from structmat.matrices.bidiagonal import Bidiagonal
from structmat.matrices.dense import Dense
from structmat.matrices.diagonal import Diagonal
from structmat.matrices.lowrank import LowRank
from structmat.matrices.quasiseparable import Quasiseparable
from structmat.matrices.sss import SSS

__all__ = ["semiseparable_rank", "DENSE_RANK_MAX"]

#: Classes with no semiseparable structure (Toeplitz, Fourier, lazy sums and products) get their rank from the
#: dense form up to this length: ``T`` thin SVDs of ``T x (r + 1)`` for ranks ``r`` (:func:`_dense_rank`), ``O(T^2 r^2)``:
#: about a second at T = 1000 for ranks of a few, 30 s where the ranks reach ``T / 2`` (a general Toeplitz).
DENSE_RANK_MAX = 1024


def _dense_rank(M: torch.Tensor, tol: float | None, strict: bool) -> int:
    """Ranks of the blocks ``B_k = M[k:, :k + 1]`` (``M[k + 1:, :k + 1]`` strict) from their singular values, counted
    against the whole matrix's 2-norm (so blocks that are rounding noise of a cancelled matrix count as zero).

    The blocks are swept with a square root of ``B_k B_k^H``: ``B_{k+1}`` is ``B_k`` without its first row and with
    column ``k + 1``, so ``B_{k+1} B_{k+1}^H = W_k' W_k'^H + m m^H`` (``W_k'``: ``W_k`` without its first row) and
    ``[W_k', m]`` has the singular values of ``B_{k+1}``; its thin SVD, cut at the tolerance, gives ``W_{k+1}`` with
    ``rank(B_{k+1})`` columns. ``O(T^2 r^2)`` for ranks ``r``, where an SVD of every block costs ``O(T^4)``."""
    T = M.shape[-1]
    if M.numel() == 0:  # no entries (T = 0 or an empty batch): no block has a rank
        return 0
    eps = torch.finfo(M.dtype).eps if M.is_floating_point() or M.is_complex() else torch.finfo(torch.float64).eps
    M = M.to(torch.complex128 if M.is_complex() else torch.float64)
    norm = torch.linalg.matrix_norm(M, ord=2).max().clamp_min(1e-300)
    cut = (T * eps if tol is None else tol) * norm  # (the data's own precision: float32 entries round at its eps)
    shift = int(strict)
    W = M.new_zeros(*M.shape[:-2], T - shift, 0)  # rows shift.. of the square root of B_0 B_0^H, before column 0
    best = 0
    for k in range(T - shift):
        X = torch.cat([W, M[..., k + shift :, k : k + 1]], -1)
        U, S, _ = torch.linalg.svd(X, full_matrices=False)
        kept = S > cut
        r = int(kept.sum(-1).max())
        best = max(best, r)
        W = (U[..., :r] * (S[..., :r] * kept[..., :r])[..., None, :])[..., 1:, :]  # B_{k+1}'s rows: one fewer
    return best


def _sss_rank(M: SSS, tol: float | None, strict: bool) -> int:
    """The largest Hankel-block rank, from the generators (:mod:`structmat.linalg.hankel`), ``O(T N^3)``."""
    if not M.lower:  # the on-and-below part of an upper matrix is its diagonal
        return 0 if strict else int(bool((M.diagonal() != 0).any()))
    ranks = hankel_ranks(M.generators, tol, strict)
    return int(ranks.max()) if ranks.numel() else 0


def semiseparable_rank(M, tol: float | None = None, strict: bool = False) -> int:
    """Largest rank of a submatrix on-and-below (``strict=False``, Mamba-2 Def. 3.1) or strictly
    below (``strict=True``) the diagonal.

    Parameters
    ----------
    M : array_like of shape ``(*, T, T)`` or a structured matrix
        SSS-like inputs (``SSS``, ``OneSS``, ``Bidiagonal``, ``LowRank``, ``Diagonal``, and the
        lower part of a ``Quasiseparable``: pass ``M.T`` for the upper one) are handled from their
        parameters in ``O(T N^3)`` without densifying; other classes from their dense form up to
        ``T = DENSE_RANK_MAX``, a ``TypeError`` above.
    tol : float, optional
        Relative threshold below which singular values count as zero: against the largest singular value of the
        whole matrix for dense inputs (rounding noise in a block that should vanish stays below it), against each
        block's largest for structured ones (their blocks are formed from the generators, exactly; a block of tiny
        but nonzero entries keeps its rank there and drops below the dense threshold: a 1-SS mask of decays 1e-6 has
        strict rank 1 from its parameters, 0 from its dense form with ``tol=1e-3``). Default ``T eps`` (dense) or
        ``N sqrt(eps)`` (structured, which works with Gram matrices).
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
    tol = check_tolerance(tol)
    strict = check_flag(strict, "strict")
    if isinstance(M, StructuredMatrix):
        if M.shape[-1] != M.shape[-2]:  # (the definition's diagonal; a rectangular LowRank failed inside tril)
            raise ValueError(f"M must have shape (*, T, T); got {tuple(M.shape)}")
        if M.shape[-1] == 0 or M.batch_shape.numel() == 0:  # no submatrix: rank 0, as for a dense one (D39)
            return 0
        if isinstance(M, SSS):
            return _sss_rank(M, tol, strict)
        if isinstance(M, Bidiagonal):
            return _sss_rank(M.to_sss(), tol, strict)
        if isinstance(M, LowRank):
            return _sss_rank(M.tril(), tol, strict)
        if isinstance(M, Diagonal):
            return 0 if strict else int(bool((M.diagonal() != 0).any()))
        if isinstance(M, Quasiseparable):  # on-and-below: the lower part and the diagonal (M.T for the upper)
            return _sss_rank(M.tril(), tol, strict)
        if isinstance(M, Dense) or M.shape[-1] <= DENSE_RANK_MAX:
            return _dense_rank(M.to_dense(), tol, strict)
        raise TypeError(f"semiseparable_rank has no structured path for {type(M).__name__} and T = {M.shape[-1]} > "
                        f"{DENSE_RANK_MAX}; pass M.to_dense() explicitly if densifying is intended")
    M = as_tensor(M, "M")
    if M.dim() < 2 or M.shape[-1] != M.shape[-2]:
        raise ValueError(f"M must have shape (*, T, T); got {tuple(M.shape)}")
    check_finite(M, "M")  # (an SVD of NaN does not converge; of inf, it is no rank)
    return _dense_rank(M, tol, strict)
