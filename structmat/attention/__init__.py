"""Structured masked attention: ``sma`` (the function), ``sma_plan``, the order registry, decoding."""

from structmat.attention.decode import SMADecoder, sma_state, sma_step
from structmat.attention.orders import ORDERS, Order, admissible, register_order
from structmat.attention.plan import Plan, sma_plan
from structmat.attention.sma import sma
from structmat.attention.tuning import Tuning, tuning_for

__all__ = ["sma", "sma_plan", "Plan", "SMADecoder", "sma_step", "sma_state", "ORDERS", "Order", "admissible", "register_order", "Tuning",
           "tuning_for"]
