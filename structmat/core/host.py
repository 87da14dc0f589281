"""Host arrays: the numpy views through which small CPU computations run.

On arrays of a few dozen entries a numpy operation costs about a microsecond and a torch one several (measured, one
thread), so the paths that are chains of small operations (closure rules, Python steps of a recurrence) run in numpy
where that changes nothing a user can see: on the CPU, where no gradient is wanted (numpy keeps no graph), outside
``torch.compile``. The arithmetic and the dtype are the same.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.autograd.forward_ad

__all__ = ["HOST_DTYPES", "host", "host_steps_apply", "plain_eager"]

#: The dtypes numpy computes as torch does (numpy has no half precisions).
HOST_DTYPES = (torch.float32, torch.float64, torch.complex64, torch.complex128)


def host(t: torch.Tensor) -> np.ndarray:
    """``t`` as a numpy array: a view where torch allows (on the CPU); a copy with the values for a lazily conjugated
    or negated view (``x.conj()``, ``x.conj().imag``), which numpy cannot view, and for a tensor on a device (a
    value read there: checks that read a few numbers on the host, as ``Quasiseparable.inv()``'s growth check).

    >>> z = torch.tensor([1 + 2j, 3 - 1j])
    >>> host(z.conj()).tolist(), host(z.conj().imag).tolist()
    ([(1-2j), (3+1j)], [-2.0, 1.0])
    """
    try:
        return t.numpy()  # (the common case: one call, no copies)
    except (RuntimeError, TypeError):  # wants a gradient, carries a conjugate or negative bit, or lives on a device
        return t.detach().cpu().resolve_conj().resolve_neg().numpy()


def plain_eager() -> bool:
    """Whether torch runs eagerly with nothing recording around it: no ``torch.compile`` or ``torch.jit.trace`` trace, no
    forward-mode AD level (``torch.autograd.forward_ad.dual_level``), no ``torch.func`` transform. Each of those sees
    only torch operations: work done in numpy or compiled code on a tensor's memory would drop a tangent or a batch
    axis, or bake the values of one call into a trace (``requires_grad`` does not tell: dual tensors do not set it).

    >>> plain_eager()
    True
    """
    return (torch.autograd.forward_ad._current_level < 0 and torch._C._functorch.maybe_current_level() is None
            and not torch._C._is_tracing() and not torch.compiler.is_compiling())


def host_steps_apply(*tensors: torch.Tensor) -> bool:
    """Whether a computation on ``tensors`` runs in numpy: CPU tensors of :data:`HOST_DTYPES`, no gradient wanted,
    :func:`plain_eager`. A step of a recurrence multiplies stacks of matrices of a few rows, where a
    broadcast torch ``matmul`` costs about 20 us and a numpy one 3-5 us (measured, one thread: the quasiseparable
    inverse at T = 16 took 5.4 ms with its steps in torch)."""
    grad = torch.is_grad_enabled()
    return all(t.device.type == "cpu" and t.dtype in HOST_DTYPES and not (grad and t.requires_grad) for t in tensors) \
        and plain_eager()
