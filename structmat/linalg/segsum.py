"""Stable segment sums of log decays: the decay between two positions as one masked cumulative sum."""

from __future__ import annotations

import torch

__all__ = ["segsum"]


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
