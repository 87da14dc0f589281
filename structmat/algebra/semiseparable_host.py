"""The generators of an SSS product in numpy, on the CPU where no gradient is wanted.

:func:`~structmat.algebra.semiseparable.matmul_lower` (the torch original, and the reference: it runs wherever a
gradient is wanted) builds ``A = [[A1, B1 C2^T A2], [0, A2]]``, ``B = [B1 d2; B2]``, ``C = [C1; (D1 - C1^T B1) C2]``,
``D = D1 D2`` in about sixteen tensor operations on arrays of ``T`` rows. At the sizes of masks and tests each torch
operation costs several microseconds and a numpy one about one, so the same formulas written into preallocated numpy
arrays take the product from 84 to 56 us (``SSS(4)``) and from 110 to 63 us (dense transitions) at ``T = 16``
(measured, one thread, float32, fresh operands). Same dtype, same arithmetic.
"""

from __future__ import annotations

import numpy as np
import torch

from structmat.core.transitions import Transitions
from structmat.linalg.semiseparable import Generators

__all__ = ["host_applies", "host_matmul_lower"]

_DTYPES = (torch.float32, torch.float64, torch.complex64, torch.complex128)


def _parameters(G: Generators) -> tuple[torch.Tensor, ...]:
    return (G.A.values, G.B, G.C) + (() if G.D is None else (G.D,))


def host_applies(G1: Generators, G2: Generators) -> bool:
    """Whether :func:`host_matmul_lower` runs ``G1, G2``: CPU tensors of one dtype (float32/64, complex64/128; real
    transitions with complex maps), every parameter at one batch shape (no broadcasting left to do), no gradient
    wanted, not while ``torch.compile`` traces."""
    B = G1.B
    if B.device.type != "cpu" or B.dtype not in _DTYPES or torch.compiler.is_compiling():
        return False
    batch, grad = B.shape[:-2], torch.is_grad_enabled()
    dtypes = (B.dtype, B.dtype.to_real())  # (a real decay's logs with complex maps)
    for G in (G1, G2):
        if G.A.batch_shape != batch or G.B.shape[:-2] != batch or G.C.shape[:-2] != batch or G.B.dtype != B.dtype:
            return False
        if G.A.values.dtype not in dtypes or G.C.dtype != B.dtype or (G.D is not None and G.D.dtype != B.dtype):
            return False
        if G.D is not None and G.D.shape[:-1] != batch:
            return False
        if grad and any(t.requires_grad for t in _parameters(G)):
            return False
    return True


def _np(t: torch.Tensor) -> np.ndarray:
    return (t.detach() if t.requires_grad else t).numpy()


def _factors(A: Transitions) -> np.ndarray:
    """The transitions as numpy factors: ``(*, T)`` for the scalar kinds, ``(*, T, N)`` diagonal, ``(*, T, N, N)``."""
    return np.exp(_np(A.values)) if A.kind == "log" else _np(A.values)


def host_matmul_lower(G1: Generators, G2: Generators) -> Generators:
    """:func:`~structmat.algebra.semiseparable.matmul_lower` of ``G1, G2`` (where :func:`host_applies`) in numpy.

    Examples
    --------
    >>> G = Generators(Transitions(torch.full((3,), 0.5), "scalar"), torch.ones(3, 1), torch.ones(3, 1), torch.ones(3))
    >>> P = host_matmul_lower(G, G)
    >>> P.dense()[2].tolist()  # the last row of L @ L for L[j, i] = 0.5^(j - i)
    [0.75, 1.0, 1.0]
    """
    n1, n2 = G1.order, G2.order
    n = n1 + n2
    B1, C1, B2, C2 = _np(G1.B), _np(G1.C), _np(G2.B), _np(G2.C)
    lead = B1.shape[:-1]  # (*, T)
    A = np.zeros(lead + (n, n), B1.dtype)
    diagonal = A.reshape(lead + (n * n,))[..., ::n + 1]  # a writable view of the diagonals
    a1, a2 = _factors(G1.A), _factors(G2.A)
    if G1.A.kind == "dense":
        A[..., :n1, :n1] = a1
    else:
        diagonal[..., :n1] = a1 if G1.A.kind == "diag" else a1[..., None]
    if G2.A.kind == "dense":
        A[..., n1:, n1:] = a2
        c2a2 = (C2[..., None, :] @ a2)[..., 0, :]
    else:
        a2 = a2 if G2.A.kind == "diag" else a2[..., None]
        diagonal[..., n1:] = a2
        c2a2 = C2 * a2
    np.multiply(B1[..., :, None], c2a2[..., None, :], out=A[..., :n1, n1:])  # the coupling b1 (c2^T A2)
    d2 = _np(G2.D) if G2.D is not None else (C2 * B2).sum(-1)
    B, C = np.empty(lead + (n,), B1.dtype), np.empty(lead + (n,), B1.dtype)
    np.multiply(B1, d2[..., None], out=B[..., :n1])
    B[..., n1:] = B2
    C[..., :n1] = C1
    if G1.D is None:
        C[..., n1:] = 0
        D = None
    else:
        D1 = _np(G1.D)
        np.multiply((D1 - (C1 * B1).sum(-1))[..., None], C2, out=C[..., n1:])
        D = torch.from_numpy(D1 * d2)
    return Generators(Transitions(torch.from_numpy(A), "dense"), torch.from_numpy(B), torch.from_numpy(C), D)
