"""Mamba-2's SSD layer on the chunked-decay primitive: ``ssd`` (training, prefill; decoding: :mod:`structmat.ssd_step`).

``ssd`` has the positional order, argument names, shapes, return values and semantics of mamba_ssm's
``mamba_chunk_scan_combined``, so swapping it in means changing the import; ``ssd_step`` those of
``selective_state_update``. With ``dt`` processed (bias, softplus, limit) both are the recurrence
``h_t = exp(dt_t A) h_{t-1} + dt_t x_t B_t^T``, ``y_t = h_t C_t + D x_t``, ``out = y * silu(z)``:
the primitive of :mod:`structmat.kernels.chunked_decay` with log decays ``dt A`` and input scale ``dt``.
"""

from __future__ import annotations

import math
import os

import torch
import torch.nn.functional as F

from structmat.core.validation import check_flag, check_positive_int, checked_once, finite_checks_enabled
from structmat.kernels.chunked_decay import chunked_decay, states_after, torch_chunk, triton_supports
from structmat.ssd_arguments import (
    BACKENDS,
    check_cu_seqlens,
    check_finite_parameters,
    check_limit,
    check_seq_idx,
    check_shape,
    check_types,
    process_dt,
)

__all__ = ["ssd", "process_dt"]


def _check(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, cu_seqlens, dt_limit, flags: dict):
    check_types(dict(x=x, dt=dt, A=A, B=B, C=C), dict(D=D, z=z, dt_bias=dt_bias, initial_states=initial_states,
                                                      seq_idx=seq_idx, cu_seqlens=cu_seqlens))
    for name, flag in flags.items():
        check_flag(flag, name)
    if flags["return_varlen_states"] and cu_seqlens is None:
        raise ValueError("return_varlen_states needs cu_seqlens")
    if x.dim() != 4:
        raise ValueError(f"x must have shape (batch, seqlen, nheads, headdim); got {tuple(x.shape)}")
    check_limit(dt_limit)
    b, l, h, p = x.shape
    check_shape("dt", dt, (b, l, h))
    check_shape("A", A, (h,))
    if B.dim() != 4 or B.shape[:2] != (b, l) or C.shape != B.shape:
        raise ValueError(f"B and C must have shape ({b}, {l}, ngroups, dstate); got {tuple(B.shape)} and {tuple(C.shape)}")
    if B.shape[2] == 0 or h % B.shape[2]:
        raise ValueError(f"nheads={h} must be a multiple of ngroups={B.shape[2]}")
    if D is not None and tuple(D.shape) not in ((h,), (h, p)):
        raise ValueError(f"D must have shape ({h},) or ({h}, {p}); got {tuple(D.shape)}")
    check_shape("z", z, x.shape)
    check_shape("dt_bias", dt_bias, (h,))
    if not _per_sequence(initial_states, cu_seqlens, b):
        check_shape("initial_states", initial_states, (b, h, p, B.shape[3]))
    elif tuple(initial_states.shape[1:]) != (h, p, B.shape[3]):
        raise ValueError(f"initial_states must have shape ({b}, {h}, {p}, {B.shape[3]}) or, one per packed sequence, "
                         f"({cu_seqlens.numel() - 1}, {h}, {p}, {B.shape[3]}); got {tuple(initial_states.shape)}")
    check_seq_idx(seq_idx, (b, l))
    check_positive_int(chunk_size, "chunk_size")
    if cu_seqlens is not None and (flags["return_varlen_states"] or _per_sequence(initial_states, cu_seqlens, b)):
        check_cu_seqlens(cu_seqlens, b, l, seq_idx)  # (mamba_ssm reads it only for the varlen states)
    check_finite_parameters(dt_bias=dt_bias, D=D)


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


def _owned_initial_states(initial_states, seq_idx):
    """The initial state of each batch row where its first packed sequence has id 0, else zeros: as in mamba_ssm, the
    initial state belongs to the sequence with id 0 (one that starts at another id starts from zero)."""
    if initial_states is None or seq_idx is None or seq_idx.shape[1] == 0:
        return initial_states
    return torch.where((seq_idx[:, 0] == 0)[:, None, None, None], initial_states, 0)


def _with_initial_states(out, final, C, log_a, initial_states, cu_seqlens, z, dtype):
    """``out`` and ``final`` plus the terms of per-sequence initial states, then the gate ``silu(z)``; also the
    initial states carried to each sequence's end. ``final`` is the state after the last step: that of the last
    sequence that has steps (the last sequence's initial state where none has)."""
    extra, carried = _initial_state_terms(C, log_a, initial_states, cu_seqlens)
    out = out.to(extra.dtype) + extra
    out = (out * F.silu(z.to(out.dtype)) if z is not None else out).to(dtype)
    lengths = cu_seqlens.diff().tolist()
    last = max((i for i, n in enumerate(lengths) if n > 0), default=len(lengths) - 1)
    return out, final + carried[last].to(final.dtype), carried


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


def _a_verdict(A: torch.Tensor) -> tuple[bool, bool]:
    """``(finite, <= 0)`` of ``A``, in one host read."""
    return tuple(torch.stack([torch.isfinite(A).all(), (A <= 0).all()]).tolist())


def _dt_nonnegative(dt_softplus: bool, dt_limit) -> bool:
    """``dt >= 0`` after processing, by construction: softplus, or the clamp with a lower limit ``>= 0``."""
    return dt_softplus or dt_limit[0] >= 0


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
        return_varlen_states: bool = False, state_dtype: torch.dtype | None = None, *, backend: str = "auto"):
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
    dt_limit : ``(min, max)``, ``dt`` clamped to it (always, as mamba_ssm: the default makes a negative ``dt`` 0)
    initial_states : ``(batch, nheads, headdim, dstate)``, the state before the sequence with id 0 (with ``seq_idx``
        starting at another id, before nothing), or with ``cu_seqlens`` one per packed sequence ``(num_seqs, ...)``
    seq_idx : ``(batch, seqlen)`` int, non-decreasing ids of packed sequences: the state restarts at 0 where the id changes
    cu_seqlens : ``(num_seqs + 1,)`` cumulative lengths (batch 1); as in mamba_ssm it does not reset the state
    return_final_states : the state after the last step, ``(batch, nheads, headdim, dstate)``.
    return_varlen_states : the state after each packed sequence, ``(num_seqs, nheads, headdim, dstate)``, not differentiated
    state_dtype : the dtype of the returned states (None: float32, float64 for float64 inputs); the states are
        computed in float32 (float64) whatever it is
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
    _check(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, cu_seqlens, dt_limit,
           dict(dt_softplus=dt_softplus, return_final_states=return_final_states,
                return_varlen_states=return_varlen_states))
    if state_dtype is not None and not isinstance(state_dtype, torch.dtype):
        raise TypeError(f"state_dtype must be a torch.dtype or None; got {state_dtype!r}")
    # the output in x's dtype, as mamba_ssm's (wider real B, C widen the computation only; complex ones the output)
    x_dtype = x.dtype if not (B.is_complex() or C.is_complex()) else torch.promote_types(x.dtype, B.dtype)
    x, B, C, dtp, log_a = _promoted(x, B, C, process_dt(dt, dt_bias, dt_softplus, dt_limit), A)
    backend, checked = _backend(backend, x, A, dt, dt_bias, log_a, B, C, _dt_nonnegative(dt_softplus, dt_limit))
    chunk = _triton_chunk(chunk_size) if backend == "triton" else torch_chunk(chunk_size, x.device)
    per_sequence, seq_idx = _sequences(initial_states, cu_seqlens, seq_idx, x)
    initial_states = initial_states if per_sequence else _owned_initial_states(initial_states, seq_idx)
    out, final, *states = chunked_decay(x, log_a, B, C, scale=dtp, D=D, z=None if per_sequence else z,
                                        initial_state=None if per_sequence else initial_states, seq_idx=seq_idx,
                                        chunk_size=chunk, backend=backend, return_chunk_states=return_varlen_states,
                                        decays_checked=checked)
    carried = None
    if per_sequence:
        out, final, carried = _with_initial_states(out, final, C, log_a, initial_states, cu_seqlens, z, x.dtype)
    as_state = (lambda t: t) if state_dtype is None else (lambda t: t.to(state_dtype))  # noqa: E731
    result = [out.to(x_dtype)] + ([as_state(final)] if return_final_states else [])
    if return_varlen_states:
        varlen = _varlen_states(x, log_a, B, states[0], cu_seqlens, dtp, seq_idx, chunk)
        result.append(as_state(varlen if carried is None else (varlen + carried.to(varlen.dtype)).detach()))
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


