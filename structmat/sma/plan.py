"""Costing the SMA contraction orders: ``sma_plan`` and the ``auto`` rule.

Every admissible order gets its FLOPs and peak extra bytes. Dense pairwise steps are costed by
``opt_einsum.contract_path``; the mask step by the mask class (scan, FFT, dense). ``auto`` picks
the order with the smallest estimated time ``flops / rate + bytes / bandwidth``; the rates are
per device kind (the CPU numbers are this project's 2-core CI machine, the CUDA ones an H100).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import opt_einsum
import torch

from structmat.base import StructuredMatrix
from structmat.diagonal import Diagonal
from structmat.fourier import DFT, Fourier
from structmat.lowrank import LowRank
from structmat.one_ss import OneSS
from structmat.quasiseparable import Quasiseparable
from structmat.sss import SSS
from structmat.toeplitz import Toeplitz

__all__ = ["Plan", "sma_plan", "mask_matvec_flops", "ORDERS"]

ORDERS = ("quadratic", "linear", "chunked", "lowrank")
_RATES = {"cpu": (5e10, 1e10), "cuda": (3e14, 1.5e12)}  # (flop/s, effective byte/s of small ops)
# fixed costs per Python-level pass (ms), fitted to benchmarks/bench_sma.py (2-core CPU; H200)
_OVERHEAD_MS = {"cpu": {"quadratic": 0.2, "linear": 0.3, "chunked": 2.0, "lowrank": 0.2, "row": 0.02},
                "cuda": {"quadratic": 0.3, "linear": 1.0, "chunked": 0.8, "lowrank": 0.1, "row": 0.03}}


def _row_loop_dense(mask: StructuredMatrix) -> bool:
    """Masks whose ``to_dense`` walks the rows in Python (cost grows with T, not T^2 / rate)."""
    return (isinstance(mask, SSS) and not isinstance(mask, OneSS)) or isinstance(mask, Quasiseparable)


def mask_matvec_flops(mask: StructuredMatrix, K: int) -> float:
    """FLOPs of ``mask @ X`` for ``X`` with ``K`` columns (per mask batch entry)."""
    T, S = mask.shape[-2:]
    if isinstance(mask, SSS):
        n = mask.order
        return K * T * (4 * n if mask.kind != "dense" else 2 * n * n + 2 * n)
    if isinstance(mask, Quasiseparable):
        return mask_matvec_flops(mask.lower_part, K) + mask_matvec_flops(mask.upper_part, K) + K * T
    if isinstance(mask, (Toeplitz, Fourier, DFT)):
        n = T + S
        return K * 10 * n * math.log2(max(n, 2))
    if isinstance(mask, LowRank):
        return K * 2 * (T + S) * mask.order
    if isinstance(mask, Diagonal):
        return K * T
    return K * 2 * T * S


@dataclass
class Plan:
    """The chosen order and the cost of every admissible one (``print(plan)`` for a table)."""

    order: str
    flops: float
    bytes: float
    alternatives: dict = field(default_factory=dict)
    device: str = "cpu"
    chunk: int = 64

    def __str__(self) -> str:
        lines = [f"SMA plan on {self.device}: order = {self.order!r} (chunk {self.chunk})",
                 f"{'order':<10} {'GFLOP':>10} {'extra MB':>10} {'est. ms':>10}"]
        for name, cost in self.alternatives.items():
            mark = " <" if name == self.order else ""
            lines.append(f"{name:<10} {cost['flops'] / 1e9:>10.3f} {cost['bytes'] / 2**20:>10.2f} {cost['ms']:>10.3f}{mark}")
        return "\n".join(lines)


def _shape(t) -> tuple[int, ...]:
    return tuple(t.shape) if isinstance(t, torch.Tensor) else tuple(t)


def _einsum_flops(expr: str, *shapes) -> float:
    _, info = opt_einsum.contract_path(expr, *shapes, shapes=True)
    return float(info.opt_cost)


def admissible(mask: StructuredMatrix) -> list[str]:
    """Orders that can run ``mask``; ``quadratic`` always can."""
    from structmat.sma.orders import chunk_terms

    orders = ["quadratic", "linear"]
    if chunk_terms(mask) is not None:
        orders.append("chunked")
    if isinstance(mask, LowRank):
        orders.append("lowrank")
    return orders


def sma_plan(q, k, v, mask: StructuredMatrix, *, dtype=None, device=None, chunk: int | None = None) -> Plan:
    """Plan an SMA call from tensors or shapes ``q (B, T, H|Hk, N)``, ``k (B, S, Hk, N)``, ``v (B, S, H, P)``.

    Examples
    --------
    >>> import structmat as sm
    >>> plan = sm.sma_plan((2, 4096, 8, 64), (2, 4096, 8, 64), (2, 4096, 8, 64), sm.OneSS.causal(4096))
    >>> plan.order
    'chunked'
    """
    from structmat.sma.orders import chunk_terms

    Bsz, T, _, N = _shape(q)
    S = _shape(k)[1]
    H, P = _shape(v)[2], _shape(v)[3]
    if isinstance(v, torch.Tensor):
        dtype, device = dtype or v.dtype, device or v.device
    elt = torch.empty((), dtype=dtype or torch.float32).element_size()
    kind = torch.device(device or "cpu").type
    flop_rate, byte_rate = _RATES.get(kind, _RATES["cpu"])
    chunk = chunk or (64 if kind == "cpu" else 256)
    BH = Bsz * H
    costs = {}
    for order in admissible(mask):
        passes = 1
        if order == "quadratic":
            flops = _einsum_flops("bthn,bshn->bhts", (Bsz, T, H, N), (Bsz, S, H, N)) + BH * T * S
            flops += _einsum_flops("bhts,bshp->bthp", (Bsz, H, T, S), (Bsz, S, H, P))
            extra = (4 if kind == "cpu" else 12) * BH * T * S * elt  # scores, mask build, products (passes)
            if _row_loop_dense(mask):
                passes += T * _OVERHEAD_MS[kind if kind in _OVERHEAD_MS else "cpu"]["row"] / _OVERHEAD_MS[
                    kind if kind in _OVERHEAD_MS else "cpu"]["quadratic"]
        elif order == "linear":
            flops = 2 * BH * S * N * P + BH * mask_matvec_flops(mask, N * P) + 2 * BH * T * N * P
            extra = (2 if kind == "cpu" else 6) * BH * max(S, T) * N * P * elt  # Z and its passes
            if kind == "cpu" and isinstance(mask, (SSS, Quasiseparable)):
                # the blocked scan streams its (T, n_state, K) tensors some twenty times
                n_state = mask.order if isinstance(mask, SSS) else sum(mask.order)
                extra += 20 * BH * T * n_state * N * P * elt
            from structmat.sma.orders import linear_slices

            n_slice, p_slice = linear_slices(max(S, T), H, P, Bsz, N, kind)
            slices = -(-N // n_slice) * -(-P // p_slice)
            scan = isinstance(mask, (SSS, Quasiseparable))  # the blocked scan has log_32(T) levels; FFTs one pass
            passes = slices * ((1 + int(math.log(max(T, 2), 32))) if scan else 1)
        elif order == "chunked":
            L = min(chunk, T)
            term_orders = [t.order for t in chunk_terms(mask)]
            terms = len(term_orders)
            flops = sum(2 * BH * T * L * (N + P) + 4 * BH * T * n * N * P for n in term_orders)
            extra = sum(BH * (T // L + 1) * n * N * P * elt + 4 * BH * T * L * elt for n in term_orders)
            passes = terms
        else:
            r = mask.order
            flops = r * (2 * BH * S * N * P + 2 * BH * T * N * P)
            extra = BH * r * N * P * elt
        ms = 1e3 * (flops / flop_rate + extra / byte_rate) + passes * _OVERHEAD_MS.get(kind, _OVERHEAD_MS["cpu"])[order]
        costs[order] = {"flops": flops, "bytes": extra, "ms": ms}
    best = min(costs, key=lambda o: costs[o]["ms"])
    return Plan(best, costs[best]["flops"], costs[best]["bytes"], costs, kind, chunk)
