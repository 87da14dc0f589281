"""Whether the Triton kernels can run: Triton installed (an optional dependency), CUDA tensors of a dtype
they compute, and not while ``torch.compile`` traces (it fuses the torch forms itself)."""

from __future__ import annotations

import functools
import importlib.util

import torch

__all__ = ["triton_installed", "eager_triton"]

KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@functools.lru_cache(maxsize=1)
def triton_installed() -> bool:
    """Triton is an optional dependency (the ``gpu`` extra; CUDA builds of torch bring it)."""
    return importlib.util.find_spec("triton") is not None


def eager_triton(x: torch.Tensor) -> bool:
    """The layers' elementwise kernels apply: ``x`` on CUDA in 16-bit or float32, eager mode, Triton installed."""
    return x.is_cuda and x.dtype in KERNEL_DTYPES and not torch.compiler.is_compiling() and triton_installed()
