"""The arguments :func:`~structmat.ssd` and :func:`~structmat.ssd_step` share: ``dt``'s processing (bias,
softplus, limit), the backends, and the checks of types, devices, dtypes and shapes with errors naming the argument.
"""

from __future__ import annotations

import math
import numbers

import torch
import torch.nn.functional as F

from structmat.core.validation import check_same_device, check_tensor, checked_once, finite_checks_enabled

__all__ = ["BACKENDS", "process_dt", "check_shape", "check_types", "check_limit", "check_cu_seqlens", "check_seq_idx",
           "check_finite_parameters"]

BACKENDS = ("auto", "torch", "triton")


def process_dt(dt, dt_bias=None, dt_softplus=False, dt_limit=(0.0, math.inf)) -> torch.Tensor:
    """``dt + dt_bias``, then ``softplus`` (identity above 20, as Mamba-2), then clamped to ``dt_limit`` (always, as
    mamba_ssm's ``_chunk_cumsum_fwd``: the default ``(0, inf)`` makes a negative ``dt`` 0; None: no clamp, as
    ``selective_state_update``); float32 (float64 stays float64)."""
    work = torch.float64 if dt.dtype == torch.float64 else torch.float32
    dt = dt.to(work)
    if dt_bias is not None:
        dt = dt + dt_bias.to(work)
    if dt_softplus:
        dt = torch.where(dt <= 20.0, F.softplus(dt), dt)
    if dt_limit is not None:
        dt = dt.clamp(min=dt_limit[0], max=dt_limit[1])
    return dt


def check_shape(name: str, t, shape) -> None:
    if t is not None and tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}; got {tuple(t.shape)}")


#: Arguments holding indices (integer tensors); every other tensor argument holds values (floating or complex).
_INDEX_ARGUMENTS = ("seq_idx", "cu_seqlens", "state_batch_indices")


def check_types(required: dict, optional: dict) -> None:
    """Every argument a tensor (the optional ones may be None) on the device of the first, of a floating or complex
    dtype (an integer ``x`` would give an integer output, its values truncated), or an integer one for indices."""
    first_name, first = next(iter(required.items()))
    for name, t in (*required.items(), *optional.items()):
        check_tensor(t, name, optional=name in optional)
        if t is None:
            continue
        check_same_device(t, name, first, first_name)
        if name in _INDEX_ARGUMENTS:
            if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
                raise TypeError(f"{name} must be an integer tensor; got {t.dtype}")
        elif not (t.is_floating_point() or t.is_complex()):
            raise TypeError(f"{name} must be a floating-point tensor; got {t.dtype}")


def check_limit(dt_limit) -> None:
    if not (isinstance(dt_limit, (tuple, list)) and len(dt_limit) == 2 and all(isinstance(d, numbers.Real) for d in dt_limit)):
        raise TypeError(f"dt_limit must be a pair (min, max) of numbers; got {dt_limit!r}")
    if not dt_limit[0] <= dt_limit[1]:
        raise ValueError(f"dt_limit must be (min, max) with min <= max; got {tuple(dt_limit)}")


def check_cu_seqlens(cu_seqlens, b: int, l: int, seq_idx=None) -> None:
    """``cu_seqlens (num_seqs + 1,)``: integer bounds of the packed sequences of one batch row of length ``l``
    (``b == 1``), agreeing with ``seq_idx`` where given."""
    check_tensor(cu_seqlens, "cu_seqlens", "an integer tensor (num_seqs + 1,)")
    check_tensor(seq_idx, "seq_idx", "an integer tensor (batch, seqlen)", optional=True)
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


def check_seq_idx(seq_idx, shape) -> None:
    """``seq_idx`` (or None): an integer tensor of ``shape`` ``(batch, seqlen)``, non-decreasing along the sequence
    (a host read, once per tensor version, where finiteness checks are on: the layers check it before they run
    :func:`~structmat.ssd` without host syncs)."""
    check_tensor(seq_idx, "seq_idx", "an integer tensor (batch, seqlen)", optional=True)
    if seq_idx is None:
        return
    if seq_idx.is_floating_point() or seq_idx.is_complex() or seq_idx.dtype == torch.bool:
        raise TypeError(f"seq_idx must be an integer tensor; got {seq_idx.dtype}")
    check_shape("seq_idx", seq_idx, shape)
    if shape[1] > 1 and finite_checks_enabled() and not checked_once(seq_idx, "non-decreasing", _rising):
        raise ValueError("seq_idx must be non-decreasing along the sequence (packed sequences)")


def _rising(seq_idx: torch.Tensor) -> bool:
    return bool((seq_idx[:, 1:] >= seq_idx[:, :-1]).all())


def check_finite_parameters(**parameters) -> None:
    """The tensors named (None skipped) finite, read once per tensor version (a decoding loop passing the same ones
    reads them once; a NaN parameter would turn every later output, and a decoding state, to NaN)."""
    if not finite_checks_enabled():
        return
    for name, t in parameters.items():
        if t is not None and not checked_once(t, "finite", _finite):
            raise ValueError(f"{name} must be finite; found NaN or inf")


def _finite(t: torch.Tensor) -> bool:
    return bool(torch.isfinite(t).all())
