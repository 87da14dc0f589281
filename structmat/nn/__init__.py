"""Torch layers on structured masked attention: ``Mamba2`` (a drop-in for mamba_ssm's block), ``SMA`` (the
generic layer, the mask by name or built with the algebra) and ``Hydra`` (the quasiseparable mixer)."""

from structmat.nn.hydra import Hydra
from structmat.nn.mamba2 import InferenceParams, Mamba2
from structmat.nn.norm import GatedRMSNorm
from structmat.nn.sma_layer import MASKS, SMA

__all__ = ["Mamba2", "SMA", "Hydra", "InferenceParams", "GatedRMSNorm", "MASKS"]
