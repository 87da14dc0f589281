"""SSD (Mamba-2): the 1-SS case of structured masked attention.

``naive`` (sequential reference), ``chunked`` (pure torch backend) and, in
:mod:`structmat.triton`, the fused Triton kernels; :func:`ssd` is the front door.
"""

from structmat.ssd.api import ssd

__all__ = ["ssd"]
