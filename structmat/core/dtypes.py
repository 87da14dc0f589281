"""The real and complex partners of torch dtypes, as tables ``torch.compile`` can trace.

``torch.dtype.to_complex`` / ``to_real`` are methods dynamo cannot trace (a graph break), so the
matrix classes look the partners up here instead.
"""

from __future__ import annotations

import torch

__all__ = ["complex_dtype", "real_dtype", "compute_dtype"]

_COMPLEX = {torch.float16: torch.complex32, torch.bfloat16: torch.complex64,
            torch.float32: torch.complex64, torch.float64: torch.complex128}
_REAL = {torch.complex32: torch.float16, torch.complex64: torch.float32, torch.complex128: torch.float64}
_HALF = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.complex32: torch.complex64}


def complex_dtype(dtype: torch.dtype) -> torch.dtype:
    """The complex dtype with the precision of ``dtype`` (itself when complex; ``bfloat16`` gives ``complex64``).

    >>> complex_dtype(torch.float32), complex_dtype(torch.complex128), complex_dtype(torch.bfloat16)
    (torch.complex64, torch.complex128, torch.complex64)
    """
    if dtype.is_complex:
        return dtype
    if dtype not in _COMPLEX:
        raise TypeError(f"no complex dtype for {dtype}: expected a floating or complex dtype")
    return _COMPLEX[dtype]


def real_dtype(dtype: torch.dtype) -> torch.dtype:
    """The real dtype with the precision of ``dtype`` (itself when real).

    >>> real_dtype(torch.complex64), real_dtype(torch.float64)
    (torch.float32, torch.float64)
    """
    return _REAL.get(dtype, dtype)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype FFTs and LAPACK run in for data of ``dtype`` (neither has half precisions): float32 / complex64 for
    the half precisions, else ``dtype``.

    >>> compute_dtype(torch.float16), compute_dtype(torch.complex32), compute_dtype(torch.float64)
    (torch.float32, torch.complex64, torch.float64)
    """
    return _HALF.get(dtype, dtype)
