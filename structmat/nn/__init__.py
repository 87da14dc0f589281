"""Torch layers on structured masked attention: ``Mamba2`` (a drop-in for mamba_ssm's block)."""

from structmat.nn.mamba2 import InferenceParams, Mamba2
from structmat.nn.norm import GatedRMSNorm

__all__ = ["Mamba2", "InferenceParams", "GatedRMSNorm"]
