"""The quasiseparable decay product (:func:`~structmat.algebra.quasiseparable_decay.decay_matmul`) in one compiled call.

In numpy the product takes some forty array operations and two LAPACK calls, each costing more than the arithmetic of
a ``T = 16`` matrix (a microsecond or two a call; the whole product 40-43x a dense product, session 22's runs, one
thread). The C extension ``structmat.algebra._quasiseparable_decay`` (built by ``setup.py``) runs the same formulas in
one pass per row from the operands' tensors as they are stored, strides included, and writes the product's seven
generators into fresh tensors: 36-40 us through the operator, 13-15x the dense product. It serves real float32 and
float64 CPU tensors where no gradient is wanted, in plain eager mode (:func:`~structmat.core.host.plain_eager`); every
other case, and an installation built without a C compiler, takes the numpy or torch path.
"""

from __future__ import annotations

import torch

from structmat.core.host import plain_eager

try:
    from structmat.algebra._quasiseparable_decay import decay_product as _decay_product
except ImportError:  # (installed without a C compiler: setup.py's extension is optional)
    _decay_product = None

__all__ = ["COMPILED_DTYPES", "compiled_available", "compiled_decay_product"]

#: The dtypes of the compiled product (complex maps and half precisions take the numpy or torch path).
COMPILED_DTYPES = (torch.float32, torch.float64)


def compiled_available() -> bool:
    """Whether the C extension was built (``pip install`` with a C compiler)."""
    return _decay_product is not None


def compiled_decay_product(sides: list, d1: torch.Tensor, d2: torch.Tensor, batch: torch.Size, T: int) -> tuple | None:
    """The product's generators ``A_lower, A_upper (*batch, T, 2, 2)``, ``B_lower, B_upper, C_lower, C_upper
    (*batch, T, 2)`` and its diagonal ``(*batch, T)`` by the compiled routine, or None where it does not apply (see the
    module docstring). ``sides``: the log decays ``(*batch, T)`` and maps ``(*batch, T, 1)`` of the sides ``1l, 1u,
    2l, 2u`` at ``batch``; ``d1, d2 (*batch, T)`` the diagonals. ``O(T)`` per row, one pass each way."""
    if _decay_product is None or not plain_eager():
        return None
    (l1, b1l, c1l), (m1, b1u, c1u), (l2, b2l, c2l), (m2, b2u, c2u) = sides
    dtype = d1.dtype
    if dtype not in COMPILED_DTYPES:
        return None
    grad, R = torch.is_grad_enabled(), batch.numel()
    args, held = [], []  # (held: the reshaped copies, alive until the call has read them)
    # the log decays and diagonals by their last axis, the maps (*batch, T, 1) as stored by the one before (a view of
    # each would cost more than the product's arithmetic); the checks keep the C routine's reads inside CPU tensors
    # of its dtype
    try:
        for step, inputs in ((-1, (l1, m1, l2, m2)), (-2, (b1l, c1l, b1u, c1u, b2l, c2l, b2u, c2u)), (-1, (d1, d2))):
            for t in inputs:
                if t.dtype != dtype or not t.is_cpu or t.is_neg() or (grad and t.requires_grad):
                    return None
                if len(batch) > 1:  # (the rows' stride exists for one batch axis; a view or a copy of the others)
                    t = t.reshape(R, *t.shape[len(batch):])
                    held.append(t)
                args += (t.data_ptr(), t.stride(0) if batch else 0, t.stride(step))
    except RuntimeError:  # a tensor without storage (a wrapper subclass): its values are not in memory to read
        return None
    A_lower, A_upper = torch.empty(*batch, T, 2, 2, dtype=dtype), torch.empty(*batch, T, 2, 2, dtype=dtype)
    maps = [torch.empty(*batch, T, 2, dtype=dtype) for _ in range(4)]  # B and C of the lower and the upper part
    diag = torch.empty(*batch, T, dtype=dtype)
    _decay_product(dtype.itemsize, R, T, A_lower.data_ptr(), A_upper.data_ptr(), *(x.data_ptr() for x in maps),
                   diag.data_ptr(), *args)
    return A_lower, A_upper, *maps, diag
