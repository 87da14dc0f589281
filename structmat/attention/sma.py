"""``structmat.sma``: structured masked attention with a planned contraction order."""

from __future__ import annotations

import torch

from structmat.attention.heads import LOW_PRECISION, check_activations, check_mask, check_qkv, expand_heads, result_dtype
from structmat.attention.orders import ORDERS, admissible
from structmat.attention.plan import plan_checked
from structmat.attention.tuning import Tuning, tuning_for
from structmat.core.base import StructuredMatrix
from structmat.core.dtypes import real_dtype
from structmat.core.small import held_tensors
from structmat.core.validation import check_positive_int, check_scalar

__all__ = ["sma"]


class _EmptySum(torch.autograd.Function):
    """The zeros of an attention with nothing to sum over (an empty ``S`` or ``N``, or an empty output), in the graph
    of ``q, k, v`` and the mask's tensors as ``torch.einsum``'s result is: a loss built on it differentiates, to zero
    gradients."""

    @staticmethod
    def forward(ctx, shape, dtype, *inputs):
        ctx.inputs = [(t.shape, t.dtype, t.device) for t in inputs]
        return torch.zeros(shape, dtype=dtype, device=inputs[2].device)

    @staticmethod
    def backward(ctx, _):
        return None, None, *(torch.zeros(s, dtype=d, device=dev) for s, d, dev in ctx.inputs)


def sma(q, k, v, mask: StructuredMatrix, *, order: str = "auto", scale: float = 1.0, chunk: int | None = None,
        tuning: Tuning | None = None) -> torch.Tensor:
    """Structured masked attention ``Y = (L o (Q K^T)) V`` per batch and head.

    ``Y[b,t,h,p] = sum_s L[b,h,t,s] (sum_n Q[b,t,h,n] K[b,s,h,n]) V[b,s,h,p]``.

    Parameters
    ----------
    q : Tensor ``(B, T, H, N)`` (or ``H_k`` heads)
    k : Tensor ``(B, S, H_k, N)``, ``H % H_k == 0`` (grouped keys, Mamba-2's ``ngroups``)
    v : Tensor ``(B, S, H, P)``
    mask : StructuredMatrix with ``mask.shape[-2:] == (T, S)`` and batch broadcastable to ``(B, H)``
    order : {"auto", "quadratic", "linear", "chunked", "lowrank"}
        See :mod:`structmat.attention.orders`; ``auto`` takes :func:`sma_plan`'s choice.
    scale : float
        Multiplies ``Q K^T``.
    chunk : int, optional
        Block length of ``chunked`` (the tuning's by default).
    tuning : Tuning, optional
        How the orders cut their work (by default :func:`~structmat.attention.tuning_for` the device).

    Returns
    -------
    Tensor ``(B, T, H, P)`` in the dtype ``q, k, v`` and the mask promote to (torch's promotion:
    float32 activations with a float64 mask give float64), complex if the mask is complex. 16-bit
    inputs accumulate in float32 and come back in their dtype whatever the precision of a real mask
    (mixed precision: decays kept in float32 do not widen bfloat16 activations).

    Costs (:func:`sma_plan`): quadratic ``O(B H T S (N + P))``, linear ``O(B H S N P)`` times the
    mask's matvec, chunked ``O(B H T L (N + P) + B H T n N P)``.

    Examples
    --------
    >>> import torch, structmat as sm
    >>> q, k, v = torch.randn(1, 6, 2, 3), torch.randn(1, 6, 1, 3), torch.randn(1, 6, 2, 4)
    >>> M = sm.OneSS.causal(6)
    >>> y = sm.sma(q, k, v, M, order="linear")
    >>> torch.allclose(y, sm.sma(q, k, v, M, order="quadratic"), atol=1e-5)
    True
    """
    check_qkv(q, k, v)
    check_activations(q=q, k=k, v=v)
    if tuning is not None and not isinstance(tuning, Tuning):
        raise TypeError(f"tuning must be a Tuning (structmat.attention.tuning_for(device)) or None; got "
                        f"{type(tuning).__name__}")
    q, k, v = expand_heads(q, k, v)
    T, S = q.shape[1], k.shape[1]
    check_mask(mask, T, S, q.shape[0], q.shape[2], q.device)
    scale = check_scalar(scale, "scale", real=True)  # NaN or inf would spread to every output
    chunk = None if chunk is None else check_positive_int(chunk, "chunk")
    tuning = tuning or tuning_for(v.device)
    if order != "auto" and (order not in ORDERS or not ORDERS[order].admissible(mask)):
        raise ValueError(f"order {order!r} is not admissible for {type(mask).__name__}; choose from {admissible(mask)}")
    dtype = torch.promote_types(torch.promote_types(q.dtype, k.dtype), v.dtype)
    result = result_dtype(dtype, mask.dtype)
    if 0 in (q.shape[0], T, S, q.shape[2], q.shape[3], v.shape[3]):  # nothing to contract: zeros of the right shape
        graph = [t for t in held_tensors(mask) if t.requires_grad] if torch.is_grad_enabled() else []
        return _EmptySum.apply((q.shape[0], T, q.shape[2], v.shape[3]), result, q, k, v, *graph)
    if order == "auto":
        plan = plan_checked(q.shape, k.shape, v.shape, mask, dtype, chunk, tuning)
        order, chunk = plan.order, plan.chunk
    # 16-bit inputs accumulate in float32; others in the precision of the result (float32 activations beside a float64
    # mask: the products of q, k and v that an order forms before it meets the mask, in float64 too)
    work = torch.float32 if dtype in LOW_PRECISION else torch.promote_types(dtype, real_dtype(mask.dtype))
    q, k, v = (t if t.dtype == work else t.to(work) for t in (q, k, v))
    y = ORDERS[order].run(q, k, v, mask, scale, tuning, chunk or tuning.chunk)
    return y if y.dtype == result else y.to(result)
