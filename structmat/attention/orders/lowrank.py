"""The low-rank order: ``L = U V^T`` gives ``Y = sum_r diag(u_r) Q (K^T diag(v_r) V)``, linear in ``T``."""

from __future__ import annotations

import torch

from structmat.attention.heads import mask_as_bh
from structmat.attention.orders.registry import Cost, Order, Problem
from structmat.attention.tuning import Tuning
from structmat.core.base import StructuredMatrix
from structmat.matrices.lowrank import LowRank

__all__ = ["LowRankOrder"]


class LowRankOrder(Order):
    name = "lowrank"

    def admissible(self, mask: StructuredMatrix) -> bool:
        return isinstance(mask, LowRank)

    def cost(self, p: Problem, mask: StructuredMatrix, tuning: Tuning) -> Cost:
        r = mask.order
        held = p.BH * r * p.N * (p.S + p.T + p.P)  # the per-rank keys and queries (B, H, T, r N), and kv
        return Cost(r * (2 * p.BH * p.S * p.N * p.P + 2 * p.BH * p.T * p.N * p.P), held * p.element_bytes, 1)

    def run(self, q, k, v, mask, scale, tuning, chunk) -> torch.Tensor:
        Bsz, T, H, N = q.shape
        M = mask_as_bh(mask, Bsz, H)  # U and V broadcast to the mask's batch, then to (B, H)
        U = M.U.expand(Bsz, H, *M.U.shape[-2:])  # (B, H, T, r)
        W = M.V.expand(Bsz, H, *M.V.shape[-2:])  # (B, H, S, r)
        dtype = torch.promote_types(q.dtype, U.dtype)
        heads = lambda t: t.to(dtype).transpose(1, 2).contiguous()  # noqa: E731  (B, H, T, *): batched matmuls
        # the rank folded into the feature axis: two batched matmuls of width r N on (B, H)-major operands
        # (three-operand einsums, or matmuls over the (B, T, H) layout's strides, ran 2-4x slower at T = 256)
        per_rank = lambda x, w: (heads(x)[..., :, None, :] * w.to(dtype)[..., :, :, None]).flatten(-2)  # noqa: E731
        kv = per_rank(k, W).mT @ heads(v)  # (B, H, r N, P): sum_s v_r(s) k_s v_s^T, rank by rank
        return (per_rank(q, U) @ kv).transpose(1, 2) * scale

