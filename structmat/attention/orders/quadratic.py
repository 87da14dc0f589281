"""The quadratic order: materialise ``Q K^T`` per head, multiply by the dense mask, times ``V``.

Any mask; ``O(B H T S (N + P))`` time and ``O(B H T S)`` memory.
"""

from __future__ import annotations

import opt_einsum
import torch

from structmat.attention.heads import mask_to_bh
from structmat.attention.orders.registry import Cost, Order, Problem
from structmat.attention.tuning import Tuning
from structmat.core.base import StructuredMatrix
from structmat.matrices.quasiseparable import Quasiseparable
from structmat.matrices.sss import SSS

__all__ = ["Quadratic", "einsum_flops", "dense_weight"]


_FLOPS: dict = {}  # (expr, shapes) -> flops: planning a call of sizes seen before costs no path search


@torch.compiler.assume_constant_result  # shapes in, a number out: torch.compile folds it, no trace of opt_einsum
def einsum_flops(expr: str, *shapes) -> float:
    """FLOPs of one contraction, as ``opt_einsum.contract_path`` counts them."""
    key = (expr, shapes)
    if key not in _FLOPS:
        if len(_FLOPS) >= 4096:
            _FLOPS.clear()
        _FLOPS[key] = float(opt_einsum.contract_path(expr, *shapes, shapes=True)[1].opt_cost)
    return _FLOPS[key]


def dense_weight(mask: StructuredMatrix) -> int:
    """Passes over the ``T x S`` entries that ``mask.to_dense()`` makes, roughly: one per state of a semiseparable
    mask (its entries sum over the states), one for the others (a gather or a product of two vectors)."""
    if isinstance(mask, Quasiseparable):
        return dense_weight(mask.lower_part) + dense_weight(mask.upper_part)
    return max(1, mask.order) if isinstance(mask, SSS) else 1


class Quadratic(Order):
    name = "quadratic"

    def admissible(self, mask: StructuredMatrix) -> bool:
        return True

    def cost(self, p: Problem, mask: StructuredMatrix, tuning: Tuning) -> Cost:
        flops = einsum_flops("bthn,bshn->bhts", (p.B, p.T, p.H, p.N), (p.B, p.S, p.H, p.N)) + p.BH * p.T * p.S
        flops += einsum_flops("bhts,bshp->bthp", (p.B, p.H, p.T, p.S), (p.B, p.S, p.H, p.P))
        flops += 4 * mask.batch_shape.numel() * p.T * p.S * dense_weight(mask)  # the dense mask
        extra = (4 if tuning.device == "cpu" else 12) * p.BH * p.T * p.S * p.element_bytes  # scores, mask, products
        return Cost(flops, extra, 1)

    def run(self, q, k, v, mask, scale, tuning, chunk) -> torch.Tensor:
        L = mask.to_dense()
        L = L.reshape(*mask_to_bh(mask, q.shape[0], q.shape[2]), *L.shape[-2:])
        dtype = torch.promote_types(q.dtype, L.dtype)
        cast = lambda t: t if t.dtype == dtype else t.to(dtype)  # noqa: E731
        q = cast(q) if isinstance(scale, float) and scale == 1.0 else cast(q) * scale  # (scaled: T N entries, not T S)
        # batched matrix products over (b, h): the contractions of "bthn,bshn->bhts" and "bhts,bshp->bthp"
        # without einsum's parsing, a third of the time of a call at T = 16
        scores = q.transpose(1, 2) @ cast(k).permute(0, 2, 3, 1)
        return ((scores * cast(L)) @ cast(v).transpose(1, 2)).transpose(1, 2)

