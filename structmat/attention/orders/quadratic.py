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
from structmat.matrices.one_ss import OneSS
from structmat.matrices.quasiseparable import Quasiseparable
from structmat.matrices.sss import SSS

__all__ = ["Quadratic", "einsum_flops"]


@torch.compiler.assume_constant_result  # shapes in, a number out: torch.compile folds it, no trace of opt_einsum
def einsum_flops(expr: str, *shapes) -> float:
    """FLOPs of one contraction, as ``opt_einsum.contract_path`` counts them."""
    _, info = opt_einsum.contract_path(expr, *shapes, shapes=True)
    return float(info.opt_cost)


def _python_rows(mask: StructuredMatrix) -> bool:
    """Masks whose ``to_dense`` walks the rows in Python (cost grows with T, not T^2 / rate)."""
    return (isinstance(mask, SSS) and not isinstance(mask, OneSS)) or isinstance(mask, Quasiseparable)


class Quadratic(Order):
    name = "quadratic"

    def admissible(self, mask: StructuredMatrix) -> bool:
        return True

    def cost(self, p: Problem, mask: StructuredMatrix, tuning: Tuning) -> Cost:
        flops = einsum_flops("bthn,bshn->bhts", (p.B, p.T, p.H, p.N), (p.B, p.S, p.H, p.N)) + p.BH * p.T * p.S
        flops += einsum_flops("bhts,bshp->bthp", (p.B, p.H, p.T, p.S), (p.B, p.S, p.H, p.P))
        extra = (4 if tuning.device == "cpu" else 12) * p.BH * p.T * p.S * p.element_bytes  # scores, mask, products
        return Cost(flops, extra, 1 + (p.T * tuning.row_pass if _python_rows(mask) else 0))

    def run(self, q, k, v, mask, scale, tuning, chunk) -> torch.Tensor:
        L = mask.to_dense()
        L = L.reshape(*mask_to_bh(mask, q.shape[0], q.shape[2]), *L.shape[-2:])
        dtype = torch.promote_types(q.dtype, L.dtype)
        scores = torch.einsum("bthn,bshn->bhts", q.to(dtype), k.to(dtype)) * scale
        return torch.einsum("bhts,bshp->bthp", scores * L.to(dtype), v.to(dtype))

