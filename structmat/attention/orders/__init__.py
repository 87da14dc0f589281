"""The SMA contraction orders, registered in the order the planner lists them."""

from structmat.attention.orders.chunked import Chunked
from structmat.attention.orders.linear import Linear
from structmat.attention.orders.lowrank import LowRankOrder
from structmat.attention.orders.quadratic import Quadratic
from structmat.attention.orders.registry import ORDERS, Cost, Order, Problem, admissible, register_order

for _order in (Quadratic(), Linear(), Chunked(), LowRankOrder()):
    register_order(_order)

__all__ = ["ORDERS", "Cost", "Order", "Problem", "admissible", "register_order", "Quadratic", "Linear", "Chunked",
           "LowRankOrder"]
