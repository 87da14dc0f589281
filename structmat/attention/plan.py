"""Planning an SMA call: the cost of every admissible order and the choice of ``order="auto"``.

Every admissible order (:mod:`structmat.attention.orders`) reports its FLOPs, the extra bytes its
passes hold and its number of Python-level passes, as the code runs with the device's
:class:`~structmat.attention.tuning.Tuning`; the estimate ``flops * s_flop + bytes * s_byte +
passes * ms_pass`` uses the tuning's coefficients (fitted by ``benchmarks/calibrate_plan.py``).
The dtype enters through the bytes (element size). In the spirit of ``opt_einsum.contract_path``:
the plan is separate from the run and prints as a table.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from structmat.attention.heads import check_mask, check_qkv
from structmat.attention.orders import ORDERS, Problem, admissible
from structmat.attention.tuning import Tuning, tuning_for
from structmat.core.base import StructuredMatrix
from structmat.core.validation import check_positive_int

__all__ = ["Plan", "sma_plan"]


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
                 f"{'order':<10} {'GFLOP':>10} {'extra MB':>10} {'passes':>8} {'est. ms':>10}"]
        for name, cost in self.alternatives.items():
            mark = " <" if name == self.order else ""
            lines.append(f"{name:<10} {cost['flops'] / 1e9:>10.3f} {cost['bytes'] / 2**20:>10.2f} "
                         f"{cost['passes']:>8.0f} {cost['ms']:>10.3f}{mark}")
        return "\n".join(lines)


def _shape(t) -> tuple[int, ...]:
    return tuple(t.shape) if isinstance(t, torch.Tensor) else tuple(t)


def _check(q, k, v, mask, chunk) -> None:
    """What :func:`~structmat.sma` checks, on tensors or shapes."""
    check_qkv(q, k, v, shapes=True)
    H = _shape(v)[2]
    check_mask(mask, _shape(q)[1], _shape(k)[1], _shape(q)[0], H, q.device if isinstance(q, torch.Tensor) else None)
    if chunk is not None:
        check_positive_int(chunk, "chunk")


def sma_plan(q, k, v, mask: StructuredMatrix, *, dtype: torch.dtype | None = None, device=None, chunk: int | None = None,
             tuning: Tuning | None = None) -> Plan:
    """Plan an SMA call from tensors or shapes ``q (B, T, H|Hk, N)``, ``k (B, S, Hk, N)``, ``v (B, S, H, P)``.

    Examples
    --------
    >>> import structmat as sm
    >>> plan = sm.sma_plan((2, 4096, 8, 64), (2, 4096, 8, 64), (2, 4096, 8, 64), sm.OneSS.causal(4096))
    >>> plan.order
    'chunked'
    """
    _check(q, k, v, mask, chunk)
    Bsz, T, _, N = _shape(q)
    S = _shape(k)[1]
    H, P = _shape(v)[2], _shape(v)[3]
    if isinstance(v, torch.Tensor):
        dtype, device = dtype or v.dtype, device or v.device
    tuning = tuning or tuning_for(device or "cpu")
    chunk = chunk or tuning.chunk
    problem = Problem(Bsz, T, S, H, N, P, torch.empty((), dtype=dtype or torch.float32).element_size(), chunk)
    costs = {}
    for name in admissible(mask):
        cost = ORDERS[name].cost(problem, mask, tuning)
        ms = tuning.estimate_ms(name, cost.flops, cost.bytes, cost.passes)
        costs[name] = {"flops": cost.flops, "bytes": cost.bytes, "passes": cost.passes, "ms": ms}
    best = min(costs, key=lambda o: costs[o]["ms"])
    return Plan(best, costs[best]["flops"], costs[best]["bytes"], costs, tuning.device, chunk)
