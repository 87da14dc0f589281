"""``ssd_step``: one decoding step of Mamba-2's SSD with the arguments of mamba_ssm's ``selective_state_update``
(one Triton kernel on CUDA, the torch form elsewhere and wherever a gradient is wanted).
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F

from structmat.core.validation import check_flag
from structmat.kernels.availability import eager_triton
from structmat.ssd_arguments import BACKENDS, check_finite_parameters, check_limit, check_shape, check_types, process_dt

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


def _check_step(state, x, dt, A, B, C, D, z, dt_bias, indices, dt_softplus) -> None:
    """Types, devices and ranks (each argument with or without its heads axis, as ``selective_state_update`` lifts
    them one by one)."""
    check_types(dict(state=state, x=x, dt=dt, A=A, B=B, C=C), dict(D=D, z=z, dt_bias=dt_bias, state_batch_indices=indices))
    check_flag(dt_softplus, "dt_softplus")
    if not (state.is_floating_point() or state.is_complex()):  # the new state is written into it
        raise TypeError(f"state must be a floating tensor (updated in place); got {state.dtype}")
    if state.dim() not in (3, 4) or x.dim() not in (2, 3):
        raise ValueError(f"state must have shape (batch, nheads, headdim, dstate) with x (batch, nheads, headdim), or "
                         f"(batch, dim, dstate) with x (batch, dim); got state {tuple(state.shape)} and x {tuple(x.shape)}")


def ssd_step(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus: bool = False, state_batch_indices=None,
             *, dt_limit=None, backend: str = "auto"):
    """One decoding step with ``selective_state_update``'s arguments; ``state`` is updated in place.

    ``state (batch, nheads, headdim, dstate)``, ``x, dt, z (batch, nheads, headdim)``,
    ``A (nheads, headdim, dstate)``, ``B, C (batch, ngroups, dstate)``, ``D, dt_bias (nheads, headdim)``
    (Mamba-2 passes broadcast views of per-head values); the forms without the heads axis
    (``state (batch, dim, dstate)``, ``x (batch, dim)``, ...) work too, each argument lifted on its own as
    ``selective_state_update`` does (``B (batch, dstate)`` beside a state with heads). Returns ``out`` like ``x``
    (without the heads axis where ``state`` has none)::

        state <- exp(dt A) state + dt x B^T,    out = (state C + D x) * silu(z)

    ``dt_limit`` (keyword only; ``selective_state_update`` has none): None (the default) clamps nothing, as
    ``selective_state_update``; a pair ``(min, max)`` clamps ``dt`` after the bias and softplus as :func:`ssd` does,
    so that decoding reproduces an :func:`ssd` run with that limit (``ssd``'s default ``(0, inf)`` makes a negative
    ``dt`` 0: pass it to decode such a run).
    ``backend`` (keyword only): ``auto`` runs one Triton kernel for CUDA tensors (not float64 or complex, and no
    gradient wanted: :mod:`structmat.kernels.ssd_step_triton`) and the torch form below elsewhere; ``torch`` or ``triton``
    force one. ``state_batch_indices (batch,)`` (an integer tensor, ``selective_state_update``'s eleventh argument):
    batch row ``i`` steps the state ``state[state_batch_indices[i]]`` (a cache of more sequences than the batch, as
    in continuous batching; the others stay untouched); a negative index marks a padding row (its output 0, no state
    touched); the others distinct and below ``state.shape[0]``, checked on the CPU (on CUDA a check would wait for
    the device at every token: there the torch form raises torch's device-side assertion, the Triton step writes
    nothing and returns NaN for an index past the state's rows). ``A``, ``D`` and ``dt_bias`` must be finite (read
    once per tensor version).
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
    _check_step(state, x, dt, A, B, C, D, z, dt_bias, state_batch_indices, dt_softplus)
    heads = state.dim() == 4
    st, x_, dt_, z_ = (_lifted(t, 1, r) for t, r in ((state, 3), (x, 2), (dt, 2), (z, 2)))
    A_, B_, C_, D_, bias_ = _lifted(A, 0, 2), _lifted(B, 1, 2), _lifted(C, 1, 2), _lifted(D, 0, 1), _lifted(dt_bias, 0, 1)
    _, h, p, n = st.shape
    b = st.shape[0] if state_batch_indices is None else _check_indices(state_batch_indices, st.shape[0])
    if tuple(x_.shape) != (b, h, p):
        raise ValueError(f"x must have shape {(b, h, p)} (batch, nheads, headdim), or without the heads axis, as state "
                         f"{tuple(state.shape)} sets; got {tuple(x.shape)}")
    if tuple(dt_.shape) != (b, h, p):
        raise ValueError(f"dt must have shape {(b, h, p)} (batch, nheads, headdim), or without the heads axis, as state "
                         f"{tuple(state.shape)} sets; got {tuple(dt.shape)}")
    check_shape("A", A_, (h, p, n))
    if B_.dim() != 3 or B_.shape[0] != b or B_.shape[2] != n or B_.shape[1] == 0 or h % B_.shape[1] or C_.shape != B_.shape:
        raise ValueError(f"B and C must have shape ({b}, ngroups, {n}) with nheads={h} a multiple of ngroups; "
                         f"got {tuple(B_.shape)} and {tuple(C_.shape)}")
    check_shape("D", D_, (h, p))
    check_shape("z", z_, (b, h, p))
    check_shape("dt_bias", bias_, (h, p))
    if dt_limit is not None:
        check_limit(dt_limit)
    check_finite_parameters(A=A, D=D, dt_bias=dt_bias)
    if dt_limit is not None:  # processed here: the step's kernel applies no limit
        dt_, bias_, dt_softplus = process_dt(dt_, bias_, dt_softplus, dt_limit), None, False
    run = step_backend(backend, st, x_, B_, dt_, A_, C_, D_, z_, bias_)
    out = step_unchecked(st, x_, dt_, A_, B_, C_, D_, z_, bias_, dt_softplus, run, state_batch_indices)
    return out if heads else out.squeeze(1)


def _lifted(t, dim: int, rank: int):
    """``t`` with the heads axis inserted at ``dim`` where it has ``rank`` dims (the layout without heads)."""
    return t.unsqueeze(dim) if t is not None and t.dim() == rank else t


def _check_indices(indices: torch.Tensor, rows: int) -> int:
    """The batch that ``state_batch_indices`` sets: its length; the values checked where that needs no device wait
    (negative ones mark padding rows)."""
    if indices.dim() != 1:
        raise ValueError(f"state_batch_indices must have shape (batch,); got {tuple(indices.shape)}")
    if indices.device.type == "cpu" and indices.numel():
        if int(indices.max()) >= rows:
            raise ValueError(f"state_batch_indices must lie below {rows} (the state's first axis; negative for a "
                             f"padding row); got {int(indices.max())}")
        used = indices[indices >= 0]
        if used.unique().numel() != used.numel():
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
        if not bool((indices >= 0).all()):  # padding rows: output 0, no state touched
            used = (indices >= 0).nonzero()[:, 0]
            pick = lambda t: None if t is None else t.index_select(0, used)  # noqa: E731
            part = step_unchecked(state, pick(x), pick(dt), A, pick(B), pick(C), D, pick(z), dt_bias, dt_softplus,
                                  backend, indices.index_select(0, used))
            return torch.zeros_like(x).index_copy(0, used, part)
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
