"""Costing the SMA contraction orders: ``sma_plan`` and the ``auto`` rule.

Every admissible order gets its FLOPs, the bytes its passes move and its number of Python-level
passes. Dense pairwise steps are costed by ``opt_einsum.contract_path``; the mask step by the mask
class (scan, FFT, dense). ``auto`` picks the order with the smallest estimated time
``flops * s_flop + bytes * s_byte + passes * ms_pass``, with coefficients per device kind and
order (:data:`COEFFICIENTS`): the CPU ones fitted by ``benchmarks/calibrate_plan.py`` to
``bench_sma_cpu.json`` (this project's 2-core machine), the CUDA ones to an H200/H100. The dtype
enters through the bytes (element size).
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
#: ``(ms per flop, ms per byte, ms per pass)`` per device kind and order.
COEFFICIENTS = {
    "cpu": {"quadratic": (5.57e-9, 1.9e-7, 0.283), "linear": (5.4e-9, 3.11e-8, 0.424),
            "chunked": (1.28e-8, 2.96e-7, 0.595), "lowrank": (2e-8, 1e-7, 0.2)},
    "cuda": {"quadratic": (1 / 3e11, 1 / 1.5e9, 0.3), "linear": (1 / 3e11, 1 / 1.5e9, 1.0),
             "chunked": (1 / 3e11, 1 / 1.5e9, 0.8), "lowrank": (1 / 3e11, 1 / 1.5e9, 0.1)},
}
_ROW_PASS = 0.1  # a Python-level row of a dense SSS/quasiseparable build, in passes of its order


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


def order_features(order: str, mask, Bsz: int, T: int, S: int, H: int, N: int, P: int, elt: int, kind: str,
                   chunk: int) -> tuple[float, float, float]:
    """``(flops, bytes, passes)`` of one order as :mod:`structmat.sma.orders` runs it on ``kind``."""
    from structmat.sma.orders import (
        chunk_terms,
        chunked_tile,
        linear_slices,
        matvec_length,
        state_parts,
        streamed_sizes,
    )

    BH = Bsz * H
    if order == "quadratic":
        flops = _einsum_flops("bthn,bshn->bhts", (Bsz, T, H, N), (Bsz, S, H, N)) + BH * T * S
        flops += _einsum_flops("bhts,bshp->bthp", (Bsz, H, T, S), (Bsz, S, H, P))
        extra = (4 if kind == "cpu" else 12) * BH * T * S * elt  # scores, mask build, products
        return flops, extra, 1 + (T * _ROW_PASS if _row_loop_dense(mask) else 0)
    if order == "linear":
        flops = 2 * BH * S * N * P + BH * mask_matvec_flops(mask, N * P) + 2 * BH * T * N * P
        scan = isinstance(mask, (SSS, Quasiseparable))
        if kind == "cpu" and scan and state_parts(mask) is not None:
            # each part over time blocks with carried states; the blocked scan passes over (n, K) states
            extra, passes = 0, 0
            for params, _ in state_parts(mask):
                n_state = params[1].shape[-1]
                n_slice, tile = streamed_sizes("cpu", Bsz, H, T, N, P, n_state)
                extra += 4 * BH * T * n_state * N * P * elt
                passes += -(-N // n_slice) * -(-T // tile) * (1 + int(math.log(max(tile, 2), 32)))
            return flops, extra, passes
        n_slice, p_slice = linear_slices(matvec_length(mask), Bsz, H, N, P, kind)
        slices = -(-N // n_slice) * -(-P // p_slice)
        extra = (2 if kind == "cpu" else 6) * BH * max(S, T) * N * P * elt  # Z and its passes
        return flops, extra, slices * ((1 + int(math.log(max(T, 2), 32))) if scan else 1)
    if order == "chunked":
        L = min(chunk, T)
        term_orders = [t.order for t in chunk_terms(mask)]
        flops = sum(2 * BH * T * L * (N + P) + 4 * BH * T * n * N * P for n in term_orders)
        extra = sum(BH * (T // L + 1) * n * N * P * elt + 4 * BH * T * L * elt for n in term_orders)
        tiles = -(-T // chunked_tile(kind, Bsz, H, T, N, P, L)) if kind == "cpu" else 1
        return flops, extra, len(term_orders) * tiles
    r = mask.order
    return r * (2 * BH * S * N * P + 2 * BH * T * N * P), BH * r * N * P * elt, 1


def sma_plan(q, k, v, mask: StructuredMatrix, *, dtype=None, device=None, chunk: int | None = None) -> Plan:
    """Plan an SMA call from tensors or shapes ``q (B, T, H|Hk, N)``, ``k (B, S, Hk, N)``, ``v (B, S, H, P)``.

    Examples
    --------
    >>> import structmat as sm
    >>> plan = sm.sma_plan((2, 4096, 8, 64), (2, 4096, 8, 64), (2, 4096, 8, 64), sm.OneSS.causal(4096))
    >>> plan.order
    'chunked'
    """

    Bsz, T, _, N = _shape(q)
    S = _shape(k)[1]
    H, P = _shape(v)[2], _shape(v)[3]
    if isinstance(v, torch.Tensor):
        dtype, device = dtype or v.dtype, device or v.device
    elt = torch.empty((), dtype=dtype or torch.float32).element_size()
    kind = torch.device(device or "cpu").type
    kind = kind if kind in COEFFICIENTS else "cpu"
    chunk = chunk or (64 if kind == "cpu" else 256)
    costs = {}
    for order in admissible(mask):
        flops, extra, passes = order_features(order, mask, Bsz, T, S, H, N, P, elt, kind, chunk)
        s_flop, s_byte, ms_pass = COEFFICIENTS[kind][order]
        ms = flops * s_flop + extra * s_byte + passes * ms_pass
        costs[order] = {"flops": flops, "bytes": extra, "passes": passes, "ms": ms}
    best = min(costs, key=lambda o: costs[o]["ms"])
    return Plan(best, costs[best]["flops"], costs[best]["bytes"], costs, kind, chunk)
