"""The dense form of a Toeplitz matrix as windows of one vector: a view and one copy.

``M[t, s] = c[t - s]`` for ``t >= s`` and ``r[s - t]`` above, i.e. ``M[t, s] = a[S - 1 + t - s]`` for the
vector ``a = (r[S-1], ..., r[1], c[0], ..., c[T-1])``. Windows of ``a`` (``Tensor.unfold``) are a strided
view ``W[t, j] = a[t + j]``, and ``M = W`` with its columns reversed: one pass over the ``T x S`` entries,
where gathering through index matrices takes about forty (measured, one thread: ``Fourier.to_dense`` at T = 256
794 -> ~95 us with its inverse FFT, at T = 1024 24 -> 0.32 ms for a causal Toeplitz matrix).
"""

from __future__ import annotations

import torch

from structmat.core.validation import broadcast_shapes

__all__ = ["toeplitz_dense", "lower_toeplitz_dense", "circulant_dense"]


def toeplitz_dense(c: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """``(*, T, S)`` Toeplitz matrix with first column ``c (*, T)`` and first row ``r (*, S)`` (``r[..., 0]``
    is not read: the diagonal is ``c[..., 0]``); batch dimensions broadcast. Differentiable.

    Examples
    --------
    >>> toeplitz_dense(torch.tensor([1., 2., 3.]), torch.tensor([1., 4.]))
    tensor([[1., 4.],
            [2., 1.],
            [3., 2.]])
    """
    T, S = c.shape[-1], r.shape[-1]
    if c.shape[:-1] != r.shape[:-1]:
        batch = broadcast_shapes(c.shape[:-1], r.shape[:-1])
        c, r = c.expand(*batch, T), r.expand(*batch, S)
    if c.dtype != r.dtype:
        dtype = torch.promote_types(c.dtype, r.dtype)
        c, r = c.to(dtype), r.to(dtype)
    if T == 0 or S == 0:
        return c.new_zeros((*c.shape[:-1], T, S))
    if c.dtype == torch.complex32:  # (no complex32 flip: the same entries, copied in complex64)
        return toeplitz_dense(c.to(torch.complex64), r.to(torch.complex64)).to(torch.complex32)
    return torch.cat([r[..., 1:].flip(-1), c], dim=-1).unfold(-1, S, 1).flip(-1)


def lower_toeplitz_dense(c: torch.Tensor) -> torch.Tensor:
    """The dense lower-triangular Toeplitz matrix ``L(c)`` (``(*, T, T)``) from ``c (*, T)``: windows of
    ``(0, ..., 0, c)`` read backwards (one gather-free view and a flip), ``O(T^2)``.

    Examples
    --------
    >>> lower_toeplitz_dense(torch.tensor([1.0, 2.0, 3.0]))
    tensor([[1., 0., 0.],
            [2., 1., 0.],
            [3., 2., 1.]])
    """
    T = c.shape[-1]
    if T == 0:
        return c.new_zeros(*c.shape, 0)
    padded = torch.cat([c.new_zeros(*c.shape[:-1], T - 1), c], dim=-1)
    return padded.unfold(-1, T, 1).flip(-1)


def circulant_dense(k: torch.Tensor) -> torch.Tensor:
    """``(*, T, T)`` circulant ``M[t, s] = k[(t - s) mod T]`` of the kernel ``k (*, T)`` (windows of ``k`` preceded by
    its own tail).

    >>> circulant_dense(torch.tensor([1., 2., 3.]))
    tensor([[1., 3., 2.],
            [2., 1., 3.],
            [3., 2., 1.]])
    """
    T = k.shape[-1]
    if T == 0:
        return k.new_zeros((*k.shape, 0))
    if k.dtype == torch.complex32:  # (no complex32 flip: the same entries, copied in complex64)
        return circulant_dense(k.to(torch.complex64)).to(torch.complex32)
    return torch.cat([k[..., 1:], k], dim=-1).unfold(-1, T, 1).flip(-1)
