"""Mamba-2's SSD layer on the chunked-decay primitive: ``ssd`` (training, prefill) and ``ssd_step`` (decoding).

``ssd`` has the positional order, argument names, shapes, return values and semantics of mamba_ssm's
``mamba_chunk_scan_combined``, so swapping it in means changing the import; ``ssd_step`` those of
``selective_state_update``. With ``dt`` processed (bias, softplus, limit) both are the recurrence
``h_t = exp(dt_t A) h_{t-1} + dt_t x_t B_t^T``, ``y_t = h_t C_t + D x_t``, ``out = y * silu(z)``:
the primitive of :mod:`structmat.kernels.chunked_decay` with log decays ``dt A`` and input scale ``dt``.
"""

from __future__ import annotations

import math
import numbers
import os

import torch
import torch.nn.functional as F

from structmat.core.validation import (
    check_positive_int,
    check_same_device,
    check_tensor,
    checked_once,
    finite_checks_enabled,
)
from structmat.kernels.availability import eager_triton
from structmat.kernels.chunked_decay import chunked_decay, states_after, torch_chunk, triton_supports

__all__ = ["ssd", "ssd_step", "process_dt", "step_unchecked", "step_backend"]

BACKENDS = ("auto", "torch", "triton")


def process_dt(dt, dt_bias=None, dt_softplus=False, dt_limit=(0.0, math.inf)) -> torch.Tensor:
    """``dt + dt_bias``, then ``softplus`` (identity above 20, as Mamba-2), then clamped to ``dt_limit``;
    float32 (float64 stays float64)."""
    work = torch.float64 if dt.dtype == torch.float64 else torch.float32
    dt = dt.to(work)
    if dt_bias is not None:
        dt = dt + dt_bias.to(work)
    if dt_softplus:
        dt = torch.where(dt <= 20.0, F.softplus(dt), dt)
    if tuple(dt_limit) != (0.0, math.inf):
        dt = dt.clamp(min=dt_limit[0], max=dt_limit[1])
    return dt


def _shape(name: str, t, shape) -> None:
    if t is not None and tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}; got {tuple(t.shape)}")


def _check_types(required: dict, optional: dict) -> None:
    """Every argument a tensor (the optional ones may be None), on the device of the first."""
    first_name, first = next(iter(required.items()))
    for name, t in (*required.items(), *optional.items()):
        check_tensor(t, name, optional=name in optional)
        if t is not None:
            check_same_device(t, name, first, first_name)


def _check_limit(dt_limit) -> None:
    if not (isinstance(dt_limit, (tuple, list)) and len(dt_limit) == 2 and all(isinstance(d, numbers.Real) for d in dt_limit)):
        raise TypeError(f"dt_limit must be a pair (min, max) of numbers; got {dt_limit!r}")
    if not dt_limit[0] <= dt_limit[1]:
        raise ValueError(f"dt_limit must be (min, max) with min <= max; got {tuple(dt_limit)}")


def _check(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, cu_seqlens, dt_limit, varlen=False):
    if varlen and cu_seqlens is None:
        raise ValueError("return_varlen_states needs cu_seqlens")
    if not isinstance(x, torch.Tensor) or x.dim() != 4:
        raise ValueError(f"x must have shape (batch, seqlen, nheads, headdim); got {tuple(getattr(x, 'shape', ()))}")
    _check_types(dict(x=x, dt=dt, A=A, B=B, C=C), dict(D=D, z=z, dt_bias=dt_bias, initial_states=initial_states,
                                                      seq_idx=seq_idx, cu_seqlens=cu_seqlens))
    _check_limit(dt_limit)
    b, l, h, p = x.shape
    _shape("dt", dt, (b, l, h))
    _shape("A", A, (h,))
    if B.dim() != 4 or B.shape[:2] != (b, l) or C.shape != B.shape:
        raise ValueError(f"B and C must have shape ({b}, {l}, ngroups, dstate); got {tuple(B.shape)} and {tuple(C.shape)}")
    if B.shape[2] == 0 or h % B.shape[2]:
        raise ValueError(f"nheads={h} must be a multiple of ngroups={B.shape[2]}")
    if D is not None and tuple(D.shape) not in ((h,), (h, p)):
        raise ValueError(f"D must have shape ({h},) or ({h}, {p}); got {tuple(D.shape)}")
    _shape("z", z, x.shape)
    _shape("dt_bias", dt_bias, (h,))
    if not _per_sequence(initial_states, cu_seqlens, b):
        _shape("initial_states", initial_states, (b, h, p, B.shape[3]))
    elif tuple(initial_states.shape[1:]) != (h, p, B.shape[3]):
        raise ValueError(f"initial_states must have shape ({b}, {h}, {p}, {B.shape[3]}) or, one per packed sequence, "
                         f"({cu_seqlens.numel() - 1}, {h}, {p}, {B.shape[3]}); got {tuple(initial_states.shape)}")
    _shape("seq_idx", seq_idx, (b, l))
    check_positive_int(chunk_size, "chunk_size")
    if finite_checks_enabled() and seq_idx is not None and l > 1 and not checked_once(seq_idx, "non-decreasing", _rising):
        raise ValueError("seq_idx must be non-decreasing along the sequence (packed sequences)")
    if cu_seqlens is not None:
        _check_cu_seqlens(cu_seqlens, b, l, seq_idx)


def _per_sequence(initial_states, cu_seqlens, b: int) -> bool:
    """Whether ``initial_states`` holds one state per packed sequence (with ``cu_seqlens``, as fla accepts)."""
    return initial_states is not None and cu_seqlens is not None and initial_states.dim() == 4 and \
        initial_states.shape[0] == cu_seqlens.numel() - 1 and initial_states.shape[0] != b


def _promoted(x, B, C, dtp, A):
    """``x, B, C`` in their common dtype, the processed ``dt`` and the log decays ``dt A``."""
    common = torch.promote_types(x.dtype, torch.promote_types(B.dtype, C.dtype))
    return x.to(common), B.to(common), C.to(common), dtp, dtp * A.to(dtp.dtype)


def _sequences(initial_states, cu_seqlens, seq_idx, x):
    """``(per_sequence, seq_idx)``: with one initial state per packed sequence, the sequences restart at their
    boundaries (``seq_idx`` built from ``cu_seqlens`` where not given)."""
    per_sequence = _per_sequence(initial_states, cu_seqlens, x.shape[0])
    if per_sequence and seq_idx is None:
        seq_idx = torch.repeat_interleave(torch.arange(cu_seqlens.numel() - 1, device=x.device), cu_seqlens.diff())[None]
    return per_sequence, seq_idx


def _with_initial_states(out, final, C, log_a, initial_states, cu_seqlens, z, dtype):
    """``out`` and ``final`` plus the terms of per-sequence initial states, then the gate ``silu(z)``; also the
    initial states carried to each sequence's end."""
    extra, carried = _initial_state_terms(C, log_a, initial_states, cu_seqlens)
    out = out.to(extra.dtype) + extra
    out = (out * F.silu(z.to(out.dtype)) if z is not None else out).to(dtype)
    return out, final + carried[-1].to(final.dtype), carried


def _initial_state_terms(C, log_a, init, cu_seqlens):
    """The outputs ``C_t^T (exp(sum_{s_i <= k <= t} log_a_k) init_i)`` of per-sequence initial states, and those
    states carried to each sequence's end. Segment sums per sequence (no difference of cumulative sums)."""
    h, g = log_a.shape[2], C.shape[2]
    work = torch.float64 if C.dtype == torch.float64 else torch.float32
    y = C.new_zeros(1, C.shape[1], h, init.shape[2], dtype=work)
    carried = []
    for i, (s, e) in enumerate(zip(cu_seqlens[:-1].tolist(), cu_seqlens[1:].tolist())):
        w = torch.exp(torch.cumsum(log_a[0, s:e].to(work), 0))  # (len, h): decays from the start through t
        Ch = C[0, s:e].to(work).repeat_interleave(h // g, dim=1)
        y[0, s:e] = torch.einsum("th,thn,hpn->thp", w, Ch, init[i].to(work))
        carried.append((w[-1] if e > s else torch.ones(h, dtype=work, device=C.device))[:, None, None] * init[i].to(work))
    return y, torch.stack(carried)


def _check_cu_seqlens(cu_seqlens, b, l, seq_idx) -> None:
    if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2 or cu_seqlens.is_floating_point():
        raise ValueError(f"cu_seqlens must be an integer tensor (num_seqs + 1,); got {tuple(cu_seqlens.shape)} "
                         f"of {cu_seqlens.dtype}")
    if b != 1:
        raise ValueError(f"cu_seqlens needs batch == 1 (packed sequences); got batch {b}")
    cu = cu_seqlens.tolist()
    if cu[0] != 0 or cu[-1] != l or any(e < s for s, e in zip(cu, cu[1:])):
        raise ValueError(f"cu_seqlens must start at 0, not decrease and end at seqlen={l}; got {cu}")
    if seq_idx is not None:
        ids = seq_idx[0].tolist()
        for s, e in zip(cu, cu[1:]):
            if e > s and (len(set(ids[s:e])) != 1 or (s > 0 and ids[s - 1] == ids[s])):
                raise ValueError("cu_seqlens and seq_idx disagree: seq_idx must change exactly at the cu_seqlens boundaries")


def _rising(seq_idx: torch.Tensor) -> bool:
    return bool((seq_idx[:, 1:] >= seq_idx[:, :-1]).all())


def _a_verdict(A: torch.Tensor) -> tuple[bool, bool]:
    """``(finite, <= 0)`` of ``A``, in one host read."""
    return tuple(torch.stack([torch.isfinite(A).all(), (A <= 0).all()]).tolist())


def _dt_nonnegative(dt_softplus: bool, dt_limit) -> bool:
    """``dt >= 0`` after processing, by construction: softplus, or a clamp whose lower limit is ``>= 0``."""
    return dt_softplus or (tuple(dt_limit) != (0.0, math.inf) and dt_limit[0] >= 0)


def _decays_at_most_one(A, dt, dt_bias, log_a, dt_nonneg: bool) -> bool:
    """Whether every decay ``exp(dt A)`` is at most 1; a ``ValueError`` for a non-finite ``A``.

    Each read drains the CUDA queue, so reads are few and remembered per tensor version
    (:func:`~structmat.core.validation.checked_once`: a loop passing the same tensors pays them once):
    ``A`` alone where ``dt >= 0`` by construction (softplus, a clamp at ``>= 0``) or the raw ``dt`` is
    ``>= 0``; else ``dt A`` itself.
    """
    finite, nonpositive = checked_once(A, "ssd decays", _a_verdict)
    if not finite:
        raise ValueError("A must be finite; found NaN or inf")
    if nonpositive and (dt_nonneg or (dt_bias is None and checked_once(dt, "nonnegative", _nonnegative))):
        return True
    return bool(_decays_ok(log_a))


def _nonnegative(t: torch.Tensor) -> bool:
    return bool((t >= 0).all())


def _decays_ok(log_a: torch.Tensor) -> torch.Tensor:
    return (torch.isfinite(log_a) & (log_a <= 0)).all()


def _backend(backend: str, x, A, dt, dt_bias, log_a, B, C, dt_nonneg: bool) -> tuple[str, bool]:
    """The backend, and whether the decays were verified ``<= 1`` (the kernels then read nothing again)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}; got {backend!r}")
    if backend == "triton":
        if not x.is_cuda and os.environ.get("TRITON_INTERPRET") != "1":
            raise ValueError("backend='triton' needs CUDA tensors; use backend='torch' (or 'auto') on the CPU")
        if x.dtype == torch.float64:
            raise ValueError("the Triton kernels compute in float32; use backend='torch' for float64 inputs")
    checks = finite_checks_enabled()
    at_most_one = _decays_at_most_one(A, dt, dt_bias, log_a, dt_nonneg) if checks else True
    if backend == "auto":
        backend = "triton" if x.dtype != torch.float64 and triton_supports(x, B, C) and at_most_one else "torch"
    elif backend == "triton" and not at_most_one:
        raise ValueError("the Triton kernels need dt * A <= 0 (decays at most 1); use backend='torch'")
    return backend, checks


def _triton_chunk(chunk_size: int) -> int:
    """The Triton kernels take a power of two in ``[16, 256]``: the nearest above, capped (rounding only)."""
    return min(256, max(16, 1 << (chunk_size - 1).bit_length()))


def ssd(x, dt, A, B, C, chunk_size: int = 256, D=None, z=None, dt_bias=None, initial_states=None, seq_idx=None,
        cu_seqlens=None, dt_softplus: bool = False, dt_limit=(0.0, math.inf), return_final_states: bool = False,
        return_varlen_states: bool = False, *, backend: str = "auto"):
    """Mamba-2's SSD layer (``mamba_chunk_scan_combined``): 1-SS structured masked attention.

    With ``dt`` processed (bias, softplus, limit), per head and batch (``sma(C, B, x * dt, OneSS(dt A))``
    plus the ``D`` and ``z`` terms)::

        h_t = exp(dt_t A) h_{t-1} + dt_t x_t B_t^T,    y_t = h_t C_t + D x_t,    out = y * silu(z)

    Returns ``out`` (like ``x``), then ``final_states`` and ``varlen_states`` if asked (float32 states;
    float64 for float64 inputs). ``O(b l h L (n + p))`` work, ``O(b l h p)`` memory.

    Parameters
    ----------
    x : ``(batch, seqlen, nheads, headdim)``
    dt : ``(batch, seqlen, nheads)``
    A : ``(nheads,)``; the Triton kernels need ``dt A <= 0`` (``auto`` falls back to torch)
    B, C : ``(batch, seqlen, ngroups, dstate)``; heads share groups as in Mamba-2
    chunk_size : int, block length (Triton: rounded up to a power of two in ``[16, 256]``; torch: at most the
        device's ``TORCH_CHUNK``, 64 on the CPU); the result does not depend on it.
    D : ``(nheads,)`` or ``(nheads, headdim)``, optional skip
    z : like ``x``, optional gate ``silu(z)``
    dt_bias : ``(nheads,)``, optional, added to ``dt``
    dt_softplus : bool, ``dt = softplus(dt)`` (after the bias)
    dt_limit : ``(min, max)``, ``dt`` clamped to it
    initial_states : ``(batch, nheads, headdim, dstate)``, or with ``cu_seqlens`` one per packed sequence ``(num_seqs, ...)``
    seq_idx : ``(batch, seqlen)`` int, non-decreasing ids of packed sequences: the state restarts at 0 where the id changes
    cu_seqlens : ``(num_seqs + 1,)`` cumulative lengths (batch 1); as in mamba_ssm it does not reset the state
    return_final_states : the state after the last step, ``(batch, nheads, headdim, dstate)``.
    return_varlen_states : the state after each packed sequence, ``(num_seqs, nheads, headdim, dstate)``, not differentiated
    backend : {"auto", "torch", "triton"}, keyword only; ``auto``: Triton for CUDA tensors with ``dt A <= 0``, else torch

    Examples
    --------
    >>> import torch, structmat as sm
    >>> b, l, h, p, n = 1, 10, 2, 4, 3
    >>> x, dt = torch.randn(b, l, h, p), torch.rand(b, l, h)
    >>> B, C = torch.randn(b, l, 1, n), torch.randn(b, l, 1, n)
    >>> out, final = sm.ssd(x, dt, -torch.ones(h), B, C, 4, return_final_states=True)
    >>> out.shape, final.shape
    (torch.Size([1, 10, 2, 4]), torch.Size([1, 2, 4, 3]))
    """
    _check(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, cu_seqlens, dt_limit, return_varlen_states)
    x, B, C, dtp, log_a = _promoted(x, B, C, process_dt(dt, dt_bias, dt_softplus, dt_limit), A)
    backend, checked = _backend(backend, x, A, dt, dt_bias, log_a, B, C, _dt_nonnegative(dt_softplus, dt_limit))
    chunk = _triton_chunk(chunk_size) if backend == "triton" else torch_chunk(chunk_size, x.device)
    per_sequence, seq_idx = _sequences(initial_states, cu_seqlens, seq_idx, x)
    out, final, *states = chunked_decay(x, log_a, B, C, scale=dtp, D=D, z=None if per_sequence else z,
                                        initial_state=None if per_sequence else initial_states, seq_idx=seq_idx,
                                        chunk_size=chunk, backend=backend, return_chunk_states=return_varlen_states,
                                        decays_checked=checked)
    carried = None
    if per_sequence:
        out, final, carried = _with_initial_states(out, final, C, log_a, initial_states, cu_seqlens, z, x.dtype)
    result = [out] + ([final] if return_final_states else [])
    if return_varlen_states:
        varlen = _varlen_states(x, log_a, B, states[0], cu_seqlens, dtp, seq_idx, chunk)
        result.append(varlen if carried is None else varlen + carried.to(varlen.dtype))
    return result[0] if len(result) == 1 else tuple(result)


@torch.no_grad()
def _varlen_states(x, log_a, B, chunk_states, cu_seqlens, dtp, seq_idx, chunk: int) -> torch.Tensor:
    """The state after the last step of each packed sequence (not differentiated, as in mamba_ssm)."""
    bounds = list(zip(cu_seqlens[:-1].tolist(), cu_seqlens[1:].tolist()))
    ends = [e - 1 for s, e in bounds if e > s]
    after = states_after(x, log_a, B, chunk_states, ends, scale=dtp, seq_idx=seq_idx, chunk_size=chunk)
    out = after.new_zeros(len(bounds), *after.shape[1:])  # an empty sequence ends in the zero state
    out[[i for i, (s, e) in enumerate(bounds) if e > s]] = after
    return out


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


def _check_step(state, x, dt, A, B, C, D, z, dt_bias) -> None:
    """Types, devices and the layout (with or without the heads axis) that ``state`` sets for the others."""
    _check_types(dict(state=state, x=x, dt=dt, A=A, B=B, C=C), dict(D=D, z=z, dt_bias=dt_bias))
    if not (state.is_floating_point() or state.is_complex()):  # the new state is written into it
        raise TypeError(f"state must be a floating tensor (updated in place); got {state.dtype}")
    if state.dim() not in (3, 4) or x.dim() != state.dim() - 1:
        raise ValueError(f"state must have shape (batch, nheads, headdim, dstate) with x (batch, nheads, headdim), or "
                         f"(batch, dim, dstate) with x (batch, dim); got state {tuple(state.shape)} and x {tuple(x.shape)}")


def ssd_step(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus: bool = False, *, backend: str = "auto"):
    """One decoding step with ``selective_state_update``'s arguments; ``state`` is updated in place.

    ``state (batch, nheads, headdim, dstate)``, ``x, dt, z (batch, nheads, headdim)``,
    ``A (nheads, headdim, dstate)``, ``B, C (batch, ngroups, dstate)``, ``D, dt_bias (nheads, headdim)``
    (Mamba-2 passes broadcast views of per-head values); the forms without the heads axis
    (``state (batch, dim, dstate)``, ``x (batch, dim)``, ...) work too. Returns ``out`` like ``x``::

        state <- exp(dt A) state + dt x B^T,    out = (state C + D x) * silu(z)

    ``backend`` (keyword only): ``auto`` runs one Triton kernel for CUDA tensors (not float64 or complex, and no
    gradient wanted: :mod:`structmat.kernels.ssd_step_triton`) and the torch form below elsewhere; ``torch`` or ``triton``
    force one. ``O(batch nheads headdim dstate)``.

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
    _check_step(state, x, dt, A, B, C, D, z, dt_bias)
    heads = state.dim() == 4
    lift = lambda t, dim: None if t is None else (t if heads else t.unsqueeze(dim))  # noqa: E731
    st, x_, dt_, A_, B_, C_ = lift(state, 1), lift(x, 1), lift(dt, 1), lift(A, 0), lift(B, 1), lift(C, 1)
    D_, z_, bias_ = lift(D, 0), lift(z, 1), lift(dt_bias, 0)
    b, h, p, n = st.shape
    _shape("x", x_, (b, h, p))
    _shape("dt", dt_, (b, h, p))
    _shape("A", A_, (h, p, n))
    if B_.dim() != 3 or B_.shape[0] != b or B_.shape[2] != n or B_.shape[1] == 0 or h % B_.shape[1] or C_.shape != B_.shape:
        raise ValueError(f"B and C must have shape ({b}, ngroups, {n}) with nheads={h} a multiple of ngroups; "
                         f"got {tuple(B_.shape)} and {tuple(C_.shape)}")
    _shape("D", D_, (h, p))
    _shape("z", z_, (b, h, p))
    _shape("dt_bias", bias_, (h, p))
    run = step_backend(backend, st, x_, B_, dt_, A_, C_, D_, z_, bias_)
    out = step_unchecked(st, x_, dt_, A_, B_, C_, D_, z_, bias_, dt_softplus, run)
    return out if heads else out.squeeze(1)


def step_unchecked(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus: bool, backend: str) -> torch.Tensor:
    """:func:`ssd_step` on arguments already checked, in the layout with heads, ``backend`` ``"triton"`` or ``"torch"``
    (a decoding layer whose own shapes guarantee the arguments calls it once per token: no checks per step)."""
    if backend == "triton":
        from structmat.kernels.ssd_step_triton import ssd_step_triton

        return ssd_step_triton(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus)
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
