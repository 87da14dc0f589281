"""The gated RMSNorm of Mamba-2: grouped, the gate applied before (or after) the normalisation."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from structmat.kernels.availability import eager_triton

__all__ = ["GatedRMSNorm"]


class GatedRMSNorm(nn.Module):
    """``RMSNorm(x * silu(z))`` over groups of ``group_size`` channels (``norm_before_gate=False``, Mamba-2's
    default), or ``RMSNorm(x) * silu(z)``; computed in float32 (float64 stays float64), returned in ``x``'s dtype.
    On CUDA (eager) one Triton kernel each way (:mod:`structmat.kernels.gated_norm_triton`), which keeps
    only ``x``, ``z`` and one float32 per row and group for the backward; elsewhere, and while
    ``torch.compile`` traces, the torch form below.

    Parameters
    ----------
    hidden_size : int
        Features of ``x`` and ``z``.
    eps : float
        Added to the mean square.
    group_size : int, optional
        Features normalised together (default: all, one group).
    norm_before_gate : bool
        ``RMSNorm(x) * silu(z)`` when True, else ``RMSNorm(x * silu(z))``.

    Notes
    -----
    Shapes: ``x, z (*, hidden_size)``. The parameter is ``weight (hidden_size,)``, as in mamba_ssm and
    HuggingFace's ``MambaRMSNormGated``.

    Examples
    --------
    >>> import torch, structmat.nn as smnn
    >>> norm = smnn.GatedRMSNorm(4, group_size=2)
    >>> norm(torch.tensor([[3.0, 4.0, 1.0, 1.0]])).round(decimals=4)
    tensor([[0.8485, 1.1314, 1.0000, 1.0000]], grad_fn=<RoundBackward1>)
    """

    def __init__(self, hidden_size: int, eps: float = 1e-5, group_size: int | None = None, norm_before_gate: bool = False,
                 device=None, dtype=None):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size, device=device, dtype=dtype))
        self.eps, self.group_size, self.norm_before_gate = eps, group_size or hidden_size, norm_before_gate
        if hidden_size % self.group_size:
            raise ValueError(f"group_size={self.group_size} must divide hidden_size={hidden_size}")

    def forward(self, x: torch.Tensor, z: torch.Tensor | None = None) -> torch.Tensor:
        if eager_triton(x) and (z is None or z.dtype == x.dtype):
            from structmat.kernels.gated_norm_triton import gated_rms_norm_triton

            return gated_rms_norm_triton(x, z, self.weight, self.eps, self.group_size, self.norm_before_gate)
        work = torch.float64 if x.dtype == torch.float64 else torch.float32
        h = x.to(work)
        if z is not None and not self.norm_before_gate:
            h = h * F.silu(z.to(work))
        g = h.unflatten(-1, (-1, self.group_size))
        h = (g * torch.rsqrt(g.square().mean(-1, keepdim=True) + self.eps)).flatten(-2) * self.weight.to(work)
        if z is not None and self.norm_before_gate:
            h = h * F.silu(z.to(work))
        return h.to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}, group_size={self.group_size}, norm_before_gate={self.norm_before_gate}"
