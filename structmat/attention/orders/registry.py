"""The SMA contraction orders as a registry: each order says in one place when it applies, what it
costs and how it runs.

An :class:`Order` has a ``name``, :meth:`~Order.admissible` (can it run this mask?),
:meth:`~Order.cost` (FLOPs, extra bytes and Python-level passes of the code as it runs, for the
planner's time estimate) and :meth:`~Order.run`. ``ORDERS`` maps names to orders in the order the
planner lists them; :func:`register_order` adds one (a user's order for a mask class of their own).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

import torch

from structmat.attention.tuning import Tuning
from structmat.core.base import StructuredMatrix

__all__ = ["Problem", "Cost", "Order", "ORDERS", "register_order", "admissible"]


@dataclass(frozen=True)
class Problem:
    """The sizes of one SMA call: ``q (B, T, H, N)``, ``k (B, S, H, N)``, ``v (B, S, H, P)`` (heads expanded),
    the element size in bytes, and the block length of the chunked order."""

    B: int
    T: int
    S: int
    H: int
    N: int
    P: int
    element_bytes: int
    chunk: int

    @property
    def BH(self) -> int:
        return self.B * self.H


@dataclass(frozen=True)
class Cost:
    """What one order does on one problem: FLOPs, extra bytes (peak memory beyond inputs and output),
    Python-level passes (each a handful of kernel launches), and the code path taken (an order whose
    paths run at different rates per FLOP names them: the tuning may hold coefficients per path)."""

    flops: float
    bytes: float
    passes: float
    path: str = ""


class Order(abc.ABC):
    """One way to contract ``Y = (L o (Q K^T)) V``."""

    name: str = ""

    @abc.abstractmethod
    def admissible(self, mask: StructuredMatrix) -> bool:
        """Whether this order can run ``mask``."""

    @abc.abstractmethod
    def cost(self, problem: Problem, mask: StructuredMatrix, tuning: Tuning) -> Cost:
        """The order's cost on ``problem`` as it runs with ``tuning``."""

    @abc.abstractmethod
    def run(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: StructuredMatrix, scale: float,
            tuning: Tuning, chunk: int) -> torch.Tensor:
        """``(B, T, H, P)`` for heads already expanded and ``mask`` with batch ``(B|1, H|1)``."""


ORDERS: dict[str, Order] = {}
"""Every contraction order by name (``quadratic``, ``linear``, ``chunked``, ``lowrank``, ...), as registered."""


def register_order(order: Order) -> Order:
    """Add ``order`` (an :class:`Order` instance) to the registry, replacing one of the same name.

    Checked before anything is registered: an order class instead of an instance would break every later
    ``order="auto"`` call."""
    if not isinstance(order, Order):
        hint = " (an Order class: register an instance, order())" if isinstance(order, type) else ""
        raise TypeError(f"order must be an Order instance{hint}; got {order!r}")
    if not isinstance(order.name, str) or not order.name or order.name == "auto":
        raise ValueError(f"an order needs a name, a non-empty string other than 'auto'; got {order.name!r}")
    ORDERS[order.name] = order
    return order


def admissible(mask: StructuredMatrix) -> list[str]:
    """Names of the orders that can run ``mask`` (``quadratic`` always can)."""
    return [name for name, order in ORDERS.items() if order.admissible(mask)]
