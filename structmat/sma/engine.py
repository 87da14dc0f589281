"""``structmat.sma``: structured masked attention with a planned contraction order."""

from __future__ import annotations

import torch

from structmat.base import StructuredMatrix
from structmat.sma import orders as O
from structmat.sma.plan import admissible, sma_plan

__all__ = ["sma", "expand_heads"]

_LOW_PRECISION = (torch.bfloat16, torch.float16)


def expand_heads(q, k, v):
    """Check shapes and expand grouped ``k`` (and ``q`` with ``Hk`` heads) to the ``H`` heads of ``v``."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError(f"{name} must be a 4-D tensor; got {getattr(t, 'shape', type(t))}")
    Bsz, T, Hq, N = q.shape
    _, S, Hk, Nk = k.shape
    _, Sv, H, P = v.shape
    if k.shape[0] != Bsz or v.shape[0] != Bsz:
        raise ValueError(f"q, k, v must share the batch size; got {Bsz}, {k.shape[0]}, {v.shape[0]}")
    if Nk != N:
        raise ValueError(f"q and k must share the last dim N; got {N} and {Nk}")
    if Sv != S:
        raise ValueError(f"k and v must share the sequence length S; got {S} and {Sv}")
    if H % Hk:
        raise ValueError(f"v heads H={H} must be a multiple of k heads H_k={Hk}")
    if Hq not in (H, Hk):
        raise ValueError(f"q must have H={H} or H_k={Hk} heads; got {Hq}")
    k = k.repeat_interleave(H // Hk, dim=2) if Hk != H else k
    q = q.repeat_interleave(H // Hq, dim=2) if Hq != H else q
    return q, k, v


def sma(q, k, v, mask: StructuredMatrix, *, order: str = "auto", scale: float = 1.0, chunk: int | None = None):
    """Structured masked attention ``Y = (L o (Q K^T)) V`` per batch and head.

    Parameters
    ----------
    q : Tensor ``(B, T, H, N)`` (or ``H_k`` heads)
    k : Tensor ``(B, S, H_k, N)``, ``H % H_k == 0`` (grouped keys, Mamba-2's ``ngroups``)
    v : Tensor ``(B, S, H, P)``
    mask : StructuredMatrix with ``mask.shape[-2:] == (T, S)`` and batch broadcastable to ``(B, H)``
    order : {"auto", "quadratic", "linear", "chunked", "lowrank"}
        See :mod:`structmat.sma.orders`; ``auto`` takes :func:`sma_plan`'s choice.
    scale : float
        Multiplies ``Q K^T``.
    chunk : int, optional
        Block length of the ``chunked`` order (the plan's by default).

    Returns
    -------
    Tensor ``(B, T, H, P)``: the dtype of ``v`` (16-bit inputs accumulate in float32), complex if
    the mask is complex.

    Examples
    --------
    >>> import torch, structmat as sm
    >>> q, k, v = torch.randn(1, 6, 2, 3), torch.randn(1, 6, 1, 3), torch.randn(1, 6, 2, 4)
    >>> M = sm.OneSS.causal(6)
    >>> y = sm.sma(q, k, v, M, order="linear")
    >>> torch.allclose(y, sm.sma(q, k, v, M, order="quadratic"), atol=1e-5)
    True
    """
    if not isinstance(mask, StructuredMatrix):
        raise TypeError(f"mask must be a StructuredMatrix; got {type(mask).__name__}")
    q, k, v = expand_heads(q, k, v)
    T, S = q.shape[1], k.shape[1]
    if tuple(mask.shape[-2:]) != (T, S):
        raise ValueError(f"mask must have shape (*, {T}, {S}) for T={T}, S={S}; got {tuple(mask.shape)}")
    O.mask_to_bh(mask, q.shape[0], q.shape[2])
    if order == "auto":
        plan = sma_plan(q, k, v, mask, chunk=chunk)
        order, chunk = plan.order, plan.chunk
    elif order not in admissible(mask):
        raise ValueError(f"order {order!r} is not admissible for {type(mask).__name__}; choose from {admissible(mask)}")
    out_dtype = v.dtype
    if v.dtype in _LOW_PRECISION:
        q, k, v = q.float(), k.float(), v.float()
    if order == "quadratic":
        y = O.quadratic(q, k, v, mask, scale)
    elif order == "linear":
        y = O.linear(q, k, v, mask, scale)
    elif order == "chunked":
        y = O.chunked(q, k, v, mask, scale, chunk or 64)
    else:
        y = O.lowrank(q, k, v, mask, scale)
    return y if y.is_complex() else y.to(out_dtype)
