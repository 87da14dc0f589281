"""Stable segment sums of log decays, and segment products of transitions: the decay between two positions as
one masked cumulative sum (or product), never a difference of long cumulative sums."""

from __future__ import annotations

import math

import torch

from structmat.core.transitions import Transitions, carries_gradient, with_gradient_of

__all__ = ["segsum", "decay_products", "segment_products", "factor_products", "DECAY_BLOCK"]


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
    later = torch.ones(L, L, dtype=torch.bool, device=x.device).triu(1)  # [j, k]: step k comes after column j
    # sums[..., j, i] = x[j+1] + ... + x[i]: a cumulative sum along the contiguous last axis (along the other axis
    # it cost 20% more at L = 256), transposed as a view
    sums = torch.cumsum(torch.where(later, x[..., None, :], torch.zeros((), dtype=x.dtype, device=x.device)), dim=-1)
    return sums.transpose(-1, -2).masked_fill(later, float("-inf"))


#: Fewest entries of a segment-product matrix for which :func:`decay_products` checks, on the CPU, whether a product
#: can underflow. The CPU's ``exp`` takes a slow path for results below the smallest normal number: measured (one
#: thread, 256 x 256, float32) 0.1 ms for ``exp(-80)``, 2-5 ms for ``exp(-95)``; float64 likewise below ``-708``.
#: The check costs a few small operations, more than the slow path can cost on a smaller matrix.
FLUSH_MIN_ENTRIES = 64 * 64


def _exp(logs: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``exp(logs)`` for segment sums ``logs`` of the log decays ``x (*, T)``; on the CPU, where a product can fall
    below the smallest normal number (``sum_k min(x_k, 0)`` below its log), those results are exact zeros (they
    would be subnormal, below ``1e-38`` in float32) and the rest come from arguments on ``exp``'s fast path."""
    if logs.device.type != "cpu" or logs.numel() < FLUSH_MIN_ENTRIES or torch.compiler.is_compiling():
        return torch.exp(logs)
    floor = math.log(torch.finfo(logs.dtype).tiny) + 1  # exp right at the boundary is on the slow path too
    if not bool(x[..., 1:].clamp_max(0).sum(-1).min() < floor):  # NaN: the plain exp, which keeps it
        return torch.exp(logs)
    return torch.exp(logs.clamp_min(floor)).masked_fill(logs < floor, 0)


#: Block length of :func:`decay_products`: inside a block of ``L`` steps the decays come from segment sums of
#: ``L x L`` (:func:`segsum`); across blocks from three short sums added. Measured (one thread, float32): the
#: ``T x T`` products of ``T = 4096`` decays took 3.1 s through one masked cumulative sum, 0.3 s in blocks of 64.
DECAY_BLOCK = 64


def decay_products(x: torch.Tensor) -> torch.Tensor:
    """``exp(segsum(x))``, ``(*, T, T)`` for log decays ``x (*, T)``: ``out[..., j, i] = exp(sum_{k=i+1..j} x_k)``,
    zero above the diagonal.

    In blocks of ``L =`` :data:`DECAY_BLOCK` steps: for ``j`` in block ``J`` after ``i`` in block ``I < J`` the sum is
    (steps of ``J`` up to ``j``) + (the whole blocks between, a segment sum of block totals) + (steps of ``I``
    after ``i``): three short sums of decays, each a cumulative sum of at most ``L`` (or ``T / L``) terms, never
    a difference of two sums. ``-inf`` (an exact zero decay) stays ``-inf`` in each piece. ``O(T^2)`` time and
    memory in a few contiguous passes.

    Examples
    --------
    >>> decay_products(torch.log(torch.tensor([1.0, 0.5, 0.5])))
    tensor([[1.0000, 0.0000, 0.0000],
            [0.5000, 1.0000, 0.0000],
            [0.2500, 0.5000, 1.0000]])
    """
    T, L = x.shape[-1], DECAY_BLOCK
    if T <= 2 * L:
        return _exp(segsum(x), x)
    n = -(-T // L)
    xc = torch.nn.functional.pad(x, (0, n * L - T)).unflatten(-1, (n, L))  # (*, n, L)
    upto = torch.cumsum(xc, -1)  # steps start .. j of the block
    after = torch.flip(torch.cumsum(torch.flip(xc, (-1,)), -1), (-1,))  # steps i .. end of the block
    after = torch.cat([after[..., 1:], torch.zeros_like(after[..., :1])], -1)  # steps i+1 .. end
    between = segsum(xc.sum(-1))  # (*, n, n): the whole blocks I+1 .. J', -inf for J' < I
    between = torch.cat([torch.full_like(between[..., :1, :], float("-inf")), between[..., :-1, :]], -2)  # J' = J - 1
    logs = upto[..., :, :, None, None] + between[..., :, None, :, None] + after[..., None, None, :, :]  # (*, n, L, n, L)
    logs.diagonal(dim1=-4, dim2=-2).copy_(segsum(xc).movedim(-3, -1))  # the blocks J = I
    return _exp(logs, x).flatten(-4, -3).flatten(-2, -1)[..., :T, :T]


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
        P = decay_products(A.values)
        # the decays a log kind carries: the value from the logs, the gradient from the factors (exact at a_t = 0)
        return with_gradient_of(P, factor_products(A.decays)) if carries_gradient(A.decays) else P
    a = A.values if A.kind == "scalar" else A.values.movedim(-1, -2)  # (*, T) or (*, N, T)
    if not a.is_complex() and bool((a[..., 1:] > 0).all()):  # positive decays: in log space (exact gradients)
        return decay_products(torch.log(torch.cat([torch.ones_like(a[..., :1]), a[..., 1:]], -1)))
    return factor_products(a)


def factor_products(a: torch.Tensor) -> torch.Tensor:
    """``P[..., j, i] = a_j ... a_{i+1}`` (one at ``j = i``, zero above) from factors ``a (*, T)`` of any sign or
    complex: a masked cumulative product, every entry its own product of consecutive factors (no ratio, so zeros
    stay exact and autograd differentiates it, twice, exactly at them). ``O(T^2)``."""
    T = a.shape[-1]
    later = torch.ones(T, T, dtype=torch.bool, device=a.device).triu(1)  # [i, k]: step k comes after column i
    factors = torch.where(later, a[..., None, :], torch.ones((), dtype=a.dtype, device=a.device))
    return torch.cumprod(factors, dim=-1).transpose(-1, -2).tril()
