"""The generators of an SSS product in numpy, on the CPU where no gradient is wanted.

:func:`~structmat.algebra.semiseparable.matmul_lower` (the torch original, and the reference: it runs wherever a
gradient is wanted) builds ``A = [[A1, B1 C2^T A2], [0, A2]]``, ``B = [B1 d2; B2]``, ``C = [C1; (D1 - C1^T B1) C2]``,
``D = D1 D2`` in about sixteen tensor operations on arrays of ``T`` rows. At the sizes of masks and tests each torch
operation costs several microseconds and a numpy one about one, so the same formulas written into preallocated numpy
arrays take the product from 84 to 56 us (``SSS(4)``) and from 110 to 63 us (dense transitions) at ``T = 16``
(measured, one thread, float32, fresh operands). Same dtype, same arithmetic. Whether the path applies is read off the
numpy arrays (shapes as tuples): a torch shape's slice or a tensor's device costs about half a microsecond, as much as
a numpy operation of the product. The operands and the result are plain ``(A, B, C, D)`` tuples: a ``Generators``
(a frozen dataclass), its checks and the assembly's dtype checks cost about ten microseconds of the product's 55 at
``T = 16`` (session 18).
"""

from __future__ import annotations

import numpy as np
import torch

from structmat.core.host import HOST_DTYPES, host
from structmat.core.transitions import Transitions

__all__ = ["Parts", "host_matmul_lower"]

#: A lower SSS's generators as a plain tuple: ``(A: Transitions, B (*, T, N), C (*, T, N), D (*, T) or None)``.
Parts = tuple


def _arrays(parts: Parts) -> tuple | None:
    """``(A, B, C, D)`` as numpy arrays (``D`` None where implicit), or None where a gradient is wanted."""
    A, B, C, D = parts
    A = A.values
    if (A.requires_grad or B.requires_grad or C.requires_grad or (D is not None and D.requires_grad)) \
            and torch.is_grad_enabled():
        return None
    return host(A), host(B), host(C), None if D is None else host(D)


def _fits(arrays: tuple, lead: tuple, dtype: np.dtype, real: np.dtype) -> bool:
    """The maps at ``lead + (N,)`` (``lead = (*batch, T)``), the diagonal at ``lead``, the transitions' leading dims
    ``lead``: no broadcasting left to do; one dtype (real transitions with complex maps)."""
    A, B, C, D = arrays
    return (B.shape[:-1] == lead and C.shape == B.shape and A.shape[:len(lead)] == lead and B.dtype == C.dtype == dtype
            and (A.dtype == dtype or A.dtype == real) and (D is None or (D.shape == lead and D.dtype == dtype)))


def _factors(A: Transitions, values: np.ndarray) -> np.ndarray:
    """The transitions as numpy factors: ``(*, T)`` for the scalar kinds, ``(*, T, N)`` diagonal, ``(*, T, N, N)``.
    Log decays are exponentiated in float64: numpy's float32 ``exp`` is off by an ulp near 1 (``exp(-1.19e-7)`` gives
    ``1 - 6e-8``, half the decay's distance to 1), which a product compounds over ``T`` steps (D73)."""
    return np.exp(values.astype(np.float64, copy=False)).astype(values.dtype, copy=False) if A.kind == "log" else values


def host_matmul_lower(first: Parts, second: Parts) -> Parts | None:
    """:func:`~structmat.algebra.semiseparable.matmul_lower` of the generators ``first, second`` in numpy, as
    ``(A, B, C, D)`` of the product (``A`` dense), or None where it does not apply: it needs CPU tensors of one dtype
    (float32/64, complex64/128; real transitions with complex maps), every parameter at one batch shape, no gradient
    wanted, and not to be tracing ``torch.compile``.

    Examples
    --------
    >>> from structmat.linalg.semiseparable import Generators
    >>> G = (Transitions(torch.full((3,), 0.5), "scalar"), torch.ones(3, 1), torch.ones(3, 1), torch.ones(3))
    >>> P = Generators(*host_matmul_lower(G, G))
    >>> P.dense()[2].tolist()  # the last row of L @ L for L[j, i] = 0.5^(j - i)
    [0.75, 1.0, 1.0]
    """
    B = first[1]
    if B.device.type != "cpu" or B.dtype not in HOST_DTYPES or torch.compiler.is_compiling():
        return None
    arrays1, arrays2 = _arrays(first), _arrays(second)
    if arrays1 is None or arrays2 is None:
        return None
    (a1, B1, C1, D1), (a2, B2, C2, D2) = arrays1, arrays2
    lead, dtype = B1.shape[:-1], B1.dtype  # lead: (*batch, T)
    real = a1.real.dtype
    if not (_fits(arrays1, lead, dtype, real) and _fits(arrays2, lead, dtype, real)):
        return None
    n1, n2 = B1.shape[-1], B2.shape[-1]
    n = n1 + n2
    A = np.zeros(lead + (n, n), dtype)
    diagonal = A.reshape(lead + (n * n,))[..., ::n + 1]  # a writable view of the diagonals
    k1, k2 = first[0].kind, second[0].kind
    a1, a2 = _factors(first[0], a1), _factors(second[0], a2)
    if k1 == "dense":
        A[..., :n1, :n1] = a1
    else:
        diagonal[..., :n1] = a1 if k1 == "diag" else a1[..., None]
    if k2 == "dense":
        A[..., n1:, n1:] = a2
        c2a2 = (C2[..., None, :] @ a2)[..., 0, :]
    else:
        a2 = a2 if k2 == "diag" else a2[..., None]
        diagonal[..., n1:] = a2
        c2a2 = C2 * a2
    np.multiply(B1[..., :, None], c2a2[..., None, :], out=A[..., :n1, n1:])  # the coupling b1 (c2^T A2)
    d2 = D2 if D2 is not None else np.vecdot(C2.conj(), B2)  # (vecdot conjugates its first argument)
    B, C = np.empty(lead + (n,), dtype), np.empty(lead + (n,), dtype)
    np.multiply(B1, d2[..., None], out=B[..., :n1])
    B[..., n1:] = B2
    C[..., :n1] = C1
    if D1 is None:
        C[..., n1:] = 0
        D = None
    else:
        np.multiply((D1 - np.vecdot(C1.conj(), B1))[..., None], C2, out=C[..., n1:])
        D = torch.from_numpy(D1 * d2)
    return Transitions(torch.from_numpy(A), "dense"), torch.from_numpy(B), torch.from_numpy(C), D
