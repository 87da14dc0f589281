"""Planning an SMA call: the cost of every admissible order and the choice of ``order="auto"``.

Every admissible order (:mod:`structmat.attention.orders`) reports its FLOPs, the extra bytes its
passes hold and its number of Python-level passes, as the code runs with the device's
:class:`~structmat.attention.tuning.Tuning`; the estimate ``flops * s_flop + bytes * s_byte +
passes * ms_pass`` uses the tuning's coefficients (fitted by ``benchmarks/calibrate_plan.py``).
The dtype enters through the bytes (element size). In the spirit of ``opt_einsum.contract_path``:
the plan is separate from the run and prints as a table.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field, replace

import torch

from structmat.attention.heads import check_mask, check_qkv
from structmat.attention.orders import ORDERS, Problem, admissible
from structmat.attention.tuning import _BY_KIND, Tuning, tuning_for
from structmat.core.base import StructuredMatrix
from structmat.core.validation import check_device, check_positive_int
from structmat.matrices import DFT, SSS, Bidiagonal, Dense, Diagonal, Fourier, LowRank, OneSS, Quasiseparable, Toeplitz

__all__ = ["Plan", "sma_plan", "plan_checked", "structure", "PLAN_CACHE_SIZE"]


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
            ms = "-" if cost["ms"] is None else f"{cost['ms']:.3f}"  # (an order the tuning has no coefficients for)
            lines.append(f"{name:<10} {cost['flops'] / 1e9:>10.3f} {cost['bytes'] / 2**20:>10.2f} "
                         f"{cost['passes']:>8.0f} {ms:>10}{mark}")
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
    if tuning is not None and not isinstance(tuning, Tuning):
        raise TypeError(f"tuning must be a Tuning (structmat.attention.tuning_for(device)) or None; got "
                        f"{type(tuning).__name__}")
    if dtype is not None and not (isinstance(dtype, torch.dtype) and (dtype.is_floating_point or dtype.is_complex)):
        raise TypeError(f"dtype must be a floating or complex torch.dtype (that of the activations) or None; got {dtype!r}")
    device = check_device(device)
    if isinstance(v, torch.Tensor):
        dtype, device = dtype or v.dtype, device or v.device
    tuning = tuning or tuning_for(device or "cpu")
    plan = plan_checked(_shape(q), _shape(k), _shape(v), mask, dtype or torch.float32, chunk, tuning)
    return replace(plan, alternatives={name: dict(cost) for name, cost in plan.alternatives.items()})  # the caller's own


#: Plans kept for calls of the same sizes with masks of the same structure (a training loop plans once).
PLAN_CACHE_SIZE = 512
_PLANS: OrderedDict = OrderedDict()


def plan_checked(q_shape, k_shape, v_shape, mask: StructuredMatrix, dtype: torch.dtype, chunk: int | None,
                 tuning: Tuning) -> Plan:
    """The plan of a call whose arguments are checked already; kept (:data:`PLAN_CACHE_SIZE` plans, least
    recently used dropped) for masks whose costs depend only on their class, shape, dtype and
    :func:`structure`, with the device's own tuning, outside ``torch.compile``."""
    sizes = (q_shape[0], q_shape[1], k_shape[1], v_shape[2], q_shape[3], v_shape[3], dtype, chunk or tuning.chunk)
    shape = structure(mask)
    if shape is None or tuning is not _BY_KIND.get(tuning.device) or torch.compiler.is_compiling():
        return _plan(sizes, mask, tuning)
    key = (type(mask), shape, mask.shape, mask.dtype, sizes, tuning.device, tuple(ORDERS.items()))
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS[key] = _plan(sizes, mask, tuning)
        if len(_PLANS) > PLAN_CACHE_SIZE:
            _PLANS.popitem(last=False)
    else:
        _PLANS.move_to_end(key)
    return plan


def _plan(sizes: tuple, mask: StructuredMatrix, tuning: Tuning) -> Plan:
    """Every admissible order costed for ``sizes = (B, T, S, H, N, P, dtype, chunk)``; the cheapest chosen."""
    Bsz, T, S, H, N, P, dtype, chunk = sizes
    problem = Problem(Bsz, T, S, H, N, P, _element_bytes(dtype), chunk)
    costs = {}
    for name in admissible(mask):
        cost = ORDERS[name].cost(problem, mask, tuning)
        ms = tuning.estimate_ms(name, cost.flops, cost.bytes, cost.passes, cost.path)
        costs[name] = {"flops": cost.flops, "bytes": cost.bytes, "passes": cost.passes, "ms": ms}
    estimated = [name for name in costs if costs[name]["ms"] is not None]
    if not estimated:
        raise ValueError(f"the tuning for {tuning.device} has no coefficients for any admissible order "
                         f"({', '.join(costs)}): name one with order=, or add coefficients to the tuning")
    best = min(estimated, key=lambda o: costs[o]["ms"])
    return Plan(best, costs[best]["flops"], costs[best]["bytes"], costs, tuning.device, chunk)


def _element_bytes(dtype: torch.dtype) -> int:
    return dtype.itemsize if hasattr(dtype, "itemsize") else torch.empty((), dtype=dtype).element_size()


def structure(mask: StructuredMatrix) -> tuple | None:
    """What the orders' costs read of a mask beyond its class, shape and dtype (orders, kinds of transitions,
    orientation), or None for classes whose costs may read more (composites, users' classes): no plan is kept
    for those."""
    kind = type(mask)
    if kind in (SSS, OneSS):
        return (mask.order, mask.transitions.kind, mask.lower)
    if kind is Quasiseparable:
        return (structure(mask.lower_part), structure(mask.upper_part))
    if kind is LowRank:
        return (mask.order,)
    if kind in (Toeplitz, Fourier, DFT, Dense, Diagonal, Bidiagonal):
        return ()
    return None
