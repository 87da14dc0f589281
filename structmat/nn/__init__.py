"""Torch layers on structured masked attention: ``Mamba2`` (a drop-in for mamba_ssm's block), ``SMA`` (the
generic layer, the mask by name or built with the algebra) and ``Hydra`` (the quasiseparable mixer). Each maps
``u (batch, seqlen, d_model)`` to the same shape; the causal ones decode token by token.

Examples
--------
>>> import torch
>>> from structmat.nn import SMA, Hydra, Mamba2
>>> u = torch.randn(2, 10, 16)
>>> [tuple(layer(u).shape) for layer in (Mamba2(16, d_state=8, headdim=8, chunk_size=8), SMA(16, 4, mask="decay"),
...                                      Hydra(16, d_state=8, headdim=8, chunk_size=8))]
[(2, 10, 16), (2, 10, 16), (2, 10, 16)]
"""

from structmat.nn.hydra import Hydra
from structmat.nn.mamba2 import InferenceParams, Mamba2
from structmat.nn.norm import GatedRMSNorm
from structmat.nn.sma_layer import MASKS, SMA

__all__ = ["Mamba2", "SMA", "Hydra", "InferenceParams", "GatedRMSNorm", "MASKS"]
