"""``ssd_step``: one decoding step of Mamba-2's SSD with the arguments of mamba_ssm's ``selective_state_update``
(one Triton kernel on CUDA, the torch form elsewhere and wherever a gradient is wanted).
"""

from __future__ import annotations

import math
import os

import torch
import torch.nn.functional as F

from structmat.kernels.availability import eager_triton
from structmat.ssd_arguments import BACKENDS, check_limit, check_shape, check_types, process_dt

__all__ = ["ssd_step", "step_unchecked", "step_backend"]


def step_backend(backend: str, state, x, B, *inputs) -> str:
    """The backend ``ssd_step`` runs for ``backend`` (``auto``, ``torch``, ``triton``) on these tensors (heads layout;
    ``inputs``: the others). ``auto`` takes the torch form where a gradient is wanted: the Triton step has no backward."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}; got {backend!r}")
    real = not any(t.is_complex() for t in (state, x, B)) and torch.float64 not in (state.dtype, x.dtype)
    if backend == "triton":
        if not state.is_cuda and os.environ.get("TRITON_INTERPRET") != "1":
            raise ValueError("backend='triton' needs CUDA tensors; use backend='torch' (or 'auto') on the CPU")
        if not real:
            raise ValueError("the Triton step computes in float32 on real data; use backend='torch'")
        return backend
    if backend == "auto":
        wanted = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (state, x, B, *inputs))
        return "triton" if eager_triton(x) and real and eager_triton(state) and not wanted else "torch"
    return backend


def _check_step(state, x, dt, A, B, C, D, z, dt_bias, indices) -> None:
    """Types, devices and the layout (with or without the heads axis) that ``state`` sets for the others."""
    check_types(dict(state=state, x=x, dt=dt, A=A, B=B, C=C), dict(D=D, z=z, dt_bias=dt_bias, state_batch_indices=indices))
    if not (state.is_floating_point() or state.is_complex()):  # the new state is written into it
        raise TypeError(f"state must be a floating tensor (updated in place); got {state.dtype}")
    if state.dim() not in (3, 4) or x.dim() != state.dim() - 1:
        raise ValueError(f"state must have shape (batch, nheads, headdim, dstate) with x (batch, nheads, headdim), or "
                         f"(batch, dim, dstate) with x (batch, dim); got state {tuple(state.shape)} and x {tuple(x.shape)}")


def ssd_step(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus: bool = False, *,
             dt_limit=(0.0, math.inf), state_batch_indices=None, backend: str = "auto"):
    """One decoding step with ``selective_state_update``'s arguments; ``state`` is updated in place.

    ``state (batch, nheads, headdim, dstate)``, ``x, dt, z (batch, nheads, headdim)``,
    ``A (nheads, headdim, dstate)``, ``B, C (batch, ngroups, dstate)``, ``D, dt_bias (nheads, headdim)``
    (Mamba-2 passes broadcast views of per-head values); the forms without the heads axis
    (``state (batch, dim, dstate)``, ``x (batch, dim)``, ...) work too. Returns ``out`` like ``x``::

        state <- exp(dt A) state + dt x B^T,    out = (state C + D x) * silu(z)

    ``dt_limit`` (keyword only, as :func:`ssd` takes it; ``selective_state_update`` has none): ``dt`` clamped to
    ``(min, max)`` after the bias and softplus, so that decoding reproduces an :func:`ssd` run with the same limit.
    ``backend`` (keyword only): ``auto`` runs one Triton kernel for CUDA tensors (not float64 or complex, and no
    gradient wanted: :mod:`structmat.kernels.ssd_step_triton`) and the torch form below elsewhere; ``torch`` or ``triton``
    force one. ``state_batch_indices (batch,)`` (keyword only, an integer tensor, as ``selective_state_update``'s):
    batch row ``i`` steps the state ``state[state_batch_indices[i]]`` (a cache of more sequences than the batch, as
    in continuous batching; the others stay untouched); distinct, in ``[0, state.shape[0])``, checked on the CPU (on
    CUDA a check would wait for the device at every token: there the torch form raises torch's device-side
    assertion, the Triton step writes nothing and returns NaN for an index out of range).
    ``O(batch nheads headdim dstate)``.

    Examples
    --------
    >>> import torch, structmat as sm
    >>> state = torch.zeros(1, 2, 3, 4)
    >>> x, dt = torch.ones(1, 2, 3), torch.full((1, 2, 3), 0.5)
    >>> A = -torch.ones(2, 3, 4)
    >>> B = C = torch.ones(1, 1, 4)
    >>> sm.ssd_step(state, x, dt, A, B, C)[0, 0]
    tensor([2., 2., 2.])
    """
    _check_step(state, x, dt, A, B, C, D, z, dt_bias, state_batch_indices)
    heads = state.dim() == 4
    lift = lambda t, dim: None if t is None else (t if heads else t.unsqueeze(dim))  # noqa: E731
    st, x_, dt_, A_, B_, C_ = lift(state, 1), lift(x, 1), lift(dt, 1), lift(A, 0), lift(B, 1), lift(C, 1)
    D_, z_, bias_ = lift(D, 0), lift(z, 1), lift(dt_bias, 0)
    _, h, p, n = st.shape
    b = st.shape[0] if state_batch_indices is None else _check_indices(state_batch_indices, st.shape[0])
    check_shape("x", x_, (b, h, p))
    check_shape("dt", dt_, (b, h, p))
    check_shape("A", A_, (h, p, n))
    if B_.dim() != 3 or B_.shape[0] != b or B_.shape[2] != n or B_.shape[1] == 0 or h % B_.shape[1] or C_.shape != B_.shape:
        raise ValueError(f"B and C must have shape ({b}, ngroups, {n}) with nheads={h} a multiple of ngroups; "
                         f"got {tuple(B_.shape)} and {tuple(C_.shape)}")
    check_shape("D", D_, (h, p))
    check_shape("z", z_, (b, h, p))
    check_shape("dt_bias", bias_, (h, p))
    check_limit(dt_limit)
    if tuple(dt_limit) != (0.0, math.inf):  # processed here: the step's kernel applies no limit
        dt_, bias_, dt_softplus = process_dt(dt_, bias_, dt_softplus, dt_limit), None, False
    run = step_backend(backend, st, x_, B_, dt_, A_, C_, D_, z_, bias_)
    out = step_unchecked(st, x_, dt_, A_, B_, C_, D_, z_, bias_, dt_softplus, run, state_batch_indices)
    return out if heads else out.squeeze(1)


def _check_indices(indices: torch.Tensor, rows: int) -> int:
    """The batch that ``state_batch_indices`` sets: its length; the values checked where that needs no device wait."""
    if indices.dim() != 1:
        raise ValueError(f"state_batch_indices must have shape (batch,); got {tuple(indices.shape)}")
    if indices.device.type == "cpu" and indices.numel():
        low, high = int(indices.min()), int(indices.max())
        if low < 0 or high >= rows:
            raise ValueError(f"state_batch_indices must lie in [0, {rows}) (the state's first axis); got values in "
                             f"[{low}, {high}]")
        if indices.unique().numel() != indices.numel():
            raise ValueError("state_batch_indices must be distinct (two batch rows would write one state)")
    return indices.shape[0]


def step_unchecked(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus: bool, backend: str,
                   indices: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`ssd_step` on arguments already checked, in the layout with heads, ``backend`` ``"triton"`` or ``"torch"``
    (a decoding layer whose own shapes guarantee the arguments calls it once per token: no checks per step);
    ``indices``: ``state_batch_indices``."""
    if backend == "triton":
        from structmat.kernels.ssd_step_triton import ssd_step_triton

        return ssd_step_triton(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, indices)
    if indices is not None:  # the rows stepped, then written back
        indices = indices.long()  # (index_copy_ takes no int32)
        rows = state.index_select(0, indices)
        out = step_unchecked(rows, x, dt, A, B, C, D, z, dt_bias, dt_softplus, backend)
        state.index_copy_(0, indices, rows)
        return out
    work = torch.float64 if state.dtype == torch.float64 else torch.float32
    d = dt.to(work) + (0 if dt_bias is None else dt_bias.to(work))
    d = torch.where(d <= 20.0, F.softplus(d), d) if dt_softplus else d
    g = state.shape[1] // B.shape[1]
    Bh, Ch = B.to(work).repeat_interleave(g, dim=1), C.to(work).repeat_interleave(g, dim=1)
    prev = state.to(work)
    if prev is state and torch.is_grad_enabled():  # autograd keeps it for the backward; the copy below overwrites state
        prev = prev.clone()
    new = torch.exp(d[..., None] * A.to(work)) * prev + (d * x.to(work))[..., None] * Bh[:, :, None, :]
    state.copy_(new)
    out = torch.einsum("bhpn,bhn->bhp", new, Ch)
    if D is not None:
        out = out + x.to(work) * D.to(work)
    if z is not None:
        out = out * F.silu(z.to(work))
    return out.to(x.dtype)
