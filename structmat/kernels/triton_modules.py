"""``triton`` and ``triton.language`` for the kernel modules, or stand-ins where Triton is not installed.

Triton is optional (the ``gpu`` extra). With it absent the kernel modules still import, so their pure-torch twins,
their constants and their docs stay reachable: a decorator (``@triton.jit``), a ``Config`` or a ``tl.constexpr``
evaluates to the stand-in, and launching a kernel (``kernel[grid](...)``) raises an ``ImportError`` that says why.
The callers ask :func:`~structmat.kernels.availability.triton_installed` first and never launch one then.
"""

from __future__ import annotations

__all__ = ["tl", "triton"]


class _Absent:
    """Whatever a kernel module reads of Triton while it is imported: attributes and calls give the stand-in again."""

    def __getattr__(self, name: str) -> _Absent:
        if name.startswith("__"):  # (copy, pickle and inspect probe dunders: no stand-in for those)
            raise AttributeError(name)
        return self

    def __call__(self, *args, **kwargs) -> _Absent:
        return self

    def __getitem__(self, grid) -> None:
        raise ImportError("Triton is not installed: the CUDA kernels need it (pip install 'structmat[gpu]')")


try:
    import triton
    import triton.language as tl
except ImportError:
    triton = tl = _Absent()
