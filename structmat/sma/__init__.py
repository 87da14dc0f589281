"""Structured masked attention (SMA): ``sma``, ``sma_plan`` and recurrent decoding.

``structmat.sma`` is this subpackage and, called, the function :func:`structmat.sma.engine.sma`:
``structmat.sma(q, k, v, mask)`` as DESIGN fixes it, ``structmat.sma.Decoder`` beside it.
"""

import sys
import types

from structmat.sma.decode import Decoder
from structmat.sma.engine import sma
from structmat.sma.plan import Plan, sma_plan

__all__ = ["sma", "sma_plan", "Plan", "Decoder"]


class _CallableModule(types.ModuleType):
    def __call__(self, *args, **kwargs):
        return sma(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
