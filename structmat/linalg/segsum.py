"""Stable segment sums of log decays, and segment products of transitions: the decay between two positions as
one masked cumulative sum (or product), never a difference of long cumulative sums."""

from __future__ import annotations

import torch

from structmat.core.transitions import Transitions

__all__ = ["segsum", "segment_products"]


def segsum(x: torch.Tensor) -> torch.Tensor:
    """``out[..., i, j] = sum_{k=j+1..i} x[..., k]`` for ``i >= j``, ``-inf`` above (``x (*, L)``, ``out (*, L, L)``).

    Each entry is its own cumulative sum of the segment (never a difference of two long
    cumulative sums), so ``exp(out)`` keeps full relative accuracy and ``-inf`` entries of ``x``
    (exact zero decays) give exact zeros.

    Examples
    --------
    >>> segsum(torch.tensor([0.0, 1.0, 2.0]))
    tensor([[0., -inf, -inf],
            [1., 0., -inf],
            [3., 2., 0.]])
    """
    L = x.shape[-1]
    rep = x[..., None, :].expand(*x.shape[:-1], L, L)  # rep[..., i, k] = x[k]
    strictly_lower = torch.ones(L, L, dtype=torch.bool, device=x.device).tril(-1)
    # rep[..., i, k] for k in (j, i]: cumulative along the row index of the transposed view
    sums = torch.cumsum(rep.transpose(-1, -2).masked_fill(~strictly_lower, 0), dim=-2)
    lower = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
    return sums.masked_fill(~lower, float("-inf"))


def segment_products(A: Transitions) -> torch.Tensor | None:
    """``P[..., j, i] = A_j ... A_{i+1}`` for ``j >= i`` (one at ``j = i``), zero above, for scalar and diagonal
    transitions: ``(*, T, T)`` for the scalar kinds, ``(*, N, T, T)`` (one matrix per diagonal entry) for the
    diagonal kind; None for dense transitions.

    Log decays go through :func:`segsum`; other factors (signed, complex) through a masked cumulative product
    of the factors themselves, so every entry is a product of consecutive steps (never a ratio of two
    prefix products) and exact zeros stay exact. ``A_0`` never enters. ``O(T^2 N)`` time and memory.

    Examples
    --------
    >>> segment_products(Transitions(torch.tensor([9.0, 2.0, -3.0]), "scalar"))
    tensor([[ 1.,  0.,  0.],
            [ 2.,  1.,  0.],
            [-6., -3.,  1.]])
    """
    if A.kind == "dense":
        return None
    if A.kind == "log":
        return torch.exp(segsum(A.values))
    a = A.values if A.kind == "scalar" else A.values.movedim(-1, -2)  # (*, T) or (*, N, T)
    T = a.shape[-1]
    later = torch.ones(T, T, dtype=torch.bool, device=a.device).triu(1)  # [i, k]: step k comes after column i
    factors = torch.where(later, a[..., None, :], torch.ones((), dtype=a.dtype, device=a.device))
    return torch.cumprod(factors, dim=-1).transpose(-1, -2).tril()
