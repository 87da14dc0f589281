"""Joining small tensors whose batch sizes broadcast, as the closure rules need: ``torch.cat`` does not broadcast, and
each shape check and expand costs microseconds on small tensors, so both happen only where the shapes differ."""

from __future__ import annotations

import torch

__all__ = ["join_states", "same_batch", "pad"]

#: Zero padding of the last dims (``torch.nn.functional.pad``'s constant mode without its Python wrapper, which costs
#: as much as the padding itself on small tensors).
pad = torch.constant_pad_nd


def join_states(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``[x y]`` along the last axis (the states) for ``x (*, n1)``, ``y (*, n2)`` with leading dims of one count whose
    sizes broadcast."""
    if x.shape[:-1] != y.shape[:-1]:
        lead = torch.broadcast_shapes(x.shape[:-1], y.shape[:-1])
        x, y = x.expand(*lead, x.shape[-1]), y.expand(*lead, y.shape[-1])
    return torch.cat([x, y], -1)


def same_batch(*matrices: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Matrices ``(*, m, n)`` with batch dims of one count, expanded to their common batch where the batches differ."""
    if all(M.shape[:-2] == matrices[0].shape[:-2] for M in matrices[1:]):
        return matrices
    batch = torch.broadcast_shapes(*(M.shape[:-2] for M in matrices))
    return tuple(M.expand(*batch, *M.shape[-2:]) for M in matrices)
