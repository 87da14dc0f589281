"""What every SMA order shares: checking ``q, k, v``, grouped heads, the mask's ``(B, H)`` batch, time blocks."""

from __future__ import annotations

import operator

import torch

from structmat.attention.tuning import Tuning
from structmat.core.base import StructuredMatrix
from structmat.core.validation import check_matrix, check_same_device, trusted_parameters

__all__ = ["LOW_PRECISION", "result_dtype", "check_qkv", "check_kv", "check_activations", "check_mask", "expand_heads",
           "mask_to_bh", "mask_as_bh", "out_dtype", "add_diagonal", "time_blocks", "time_tile"]


def _shape_of(name: str, t, shapes: bool) -> tuple[int, ...]:
    """The shape of a 4-D tensor ``t`` (or, where ``shapes``, of a shape given as 4 sizes)."""
    what = "a 4-D tensor (batch, length, heads, features)" + (" or its shape" if shapes else "")
    if isinstance(t, torch.Tensor):
        shape = tuple(t.shape)
    elif shapes and isinstance(t, (tuple, list, torch.Size)) and all(_is_size(n) for n in t):
        shape = tuple(operator.index(n) for n in t)
    else:
        raise TypeError(f"{name} must be {what}" + (" (of sizes >= 0)" if shapes else "") + f"; got {type(t).__name__}")
    if len(shape) != 4:
        raise ValueError(f"{name} must be {what}; got shape {shape}")
    return shape


def _is_size(n) -> bool:
    """An integer size (numpy's included) of at least 0."""
    if isinstance(n, bool):
        return False
    try:
        return operator.index(n) >= 0
    except TypeError:
        return False


def check_kv(k, v) -> None:
    """Tensors ``k (B, S, Hk, N)`` and ``v (B, S, H, P)`` with ``H % Hk == 0`` on one device (a prefill's)."""
    (Bk, S, Hk, _), (Bv, Sv, H, _) = _shape_of("k", k, False), _shape_of("v", v, False)
    check_same_device(v, "v", k, "k")
    if Bv != Bk or Sv != S:
        raise ValueError(f"k and v must share the batch size and the sequence length; got {(Bk, S)} and {(Bv, Sv)}")
    if (H % Hk if Hk else H):
        raise ValueError(f"v heads H={H} must be a multiple of k heads H_k={Hk}")


def check_qkv(q, k, v, *, shapes: bool = False) -> None:
    """Shapes ``q (B, T, H|Hk, N)``, ``k (B, S, Hk, N)``, ``v (B, S, H, P)`` with ``H % Hk == 0``, tensors on one
    device (``shapes``: each may be given by its shape instead, as :func:`~structmat.sma_plan` takes them)."""
    if type(q) is type(k) is type(v) is torch.Tensor and q.dim() == k.dim() == v.dim() == 4:  # the usual call
        (Bsz, _, Hq, N), (Bk, S, Hk, Nk), (Bv, Sv, H, _) = q.shape, k.shape, v.shape
        if not q.device == k.device == v.device:
            check_same_device(k, "k", q, "q")
            check_same_device(v, "v", q, "q")
    else:
        (Bsz, _, Hq, N), (Bk, S, Hk, Nk), (Bv, Sv, H, _) = (_shape_of(n, t, shapes) for n, t in (("q", q), ("k", k), ("v", v)))
        for name, t in (("k", k), ("v", v)):
            if isinstance(t, torch.Tensor) and isinstance(q, torch.Tensor):
                check_same_device(t, name, q, "q")
    if Bk != Bsz or Bv != Bsz:
        raise ValueError(f"q, k, v must share the batch size; got {Bsz}, {Bk}, {Bv}")
    if Nk != N:
        raise ValueError(f"q and k must share the last dim N; got {N} and {Nk}")
    if Sv != S:
        raise ValueError(f"k and v must share the sequence length S; got {S} and {Sv}")
    if (H % Hk if Hk else H):  # (no heads at all is an empty call)
        raise ValueError(f"v heads H={H} must be a multiple of k heads H_k={Hk}")
    if Hq not in (H, Hk):
        raise ValueError(f"q must have as many heads as v (H={H}) or as k (H_k={Hk}); got {Hq}")


def check_activations(**tensors: torch.Tensor) -> None:
    """Each a floating-point or complex tensor (an integer attention would truncate)."""
    for name, t in tensors.items():
        if not (t.is_floating_point() or t.is_complex()):
            raise TypeError(f"{name} must be a floating-point or complex tensor; got {t.dtype}")


def check_mask(mask, T: int, S: int, B: int, H: int, device: torch.device | None) -> None:
    """``mask`` a structured ``(*, T, S)`` matrix with batch broadcasting to ``(B, H)``, on the device of ``q``."""
    check_matrix(mask, "mask")
    if tuple(mask.shape[-2:]) != (T, S):
        raise ValueError(f"mask must have shape (*, {T}, {S}) for T={T}, S={S}; got {tuple(mask.shape)}")
    mask_to_bh(mask, B, H)
    if device is not None and mask.device != device:
        raise ValueError(f"mask is on {mask.device} but q is on {device}")


def expand_heads(q, k, v):
    """``q, k`` with grouped heads repeated to the ``H`` heads of ``v`` (after :func:`check_qkv`)."""
    H = v.shape[2]
    if H == 0:
        return q, k, v
    k = k.repeat_interleave(H // k.shape[2], dim=2) if k.shape[2] != H else k
    q = q.repeat_interleave(H // q.shape[2], dim=2) if q.shape[2] != H else q
    return q, k, v


def mask_to_bh(mask: StructuredMatrix, B: int, H: int) -> tuple[int, int]:
    """The mask's batch shape as a 2-D ``(B|1, H|1)`` pair (validated)."""
    batch = tuple(mask.batch_shape)
    full = (1,) * (2 - len(batch)) + batch
    if len(batch) > 2 or full[0] not in (1, B) or full[1] not in (1, H):
        raise ValueError(f"mask batch shape {batch} must broadcast to (B, H) = ({B}, {H})")
    return full


def mask_as_bh(mask: StructuredMatrix, B: int, H: int) -> StructuredMatrix:
    """The mask with batch ``(B|1, H|1)``: a parameter map that adds leading dims (no copy)."""
    bh = mask_to_bh(mask, B, H)
    extra = len(bh) - len(mask.batch_shape)
    if extra == 0:
        return mask
    with trusted_parameters():  # the same values: nothing to check again
        return mask._map(lambda t: t.reshape(*(1,) * extra, *t.shape) if t.dim() > 0 else t)


#: Activations' dtypes that accumulate in float32 and come back in their own dtype beside a real mask.
LOW_PRECISION = (torch.bfloat16, torch.float16)


def result_dtype(activations: torch.dtype, mask: torch.dtype) -> torch.dtype:
    """The output dtype of :func:`~structmat.sma` and of its decoding: the promotion of the activations' and the
    mask's, but 16-bit activations stay 16-bit beside a real mask."""
    if activations in LOW_PRECISION and not mask.is_complex:
        return activations
    return torch.promote_types(activations, mask)


def out_dtype(q, k, v, mask: StructuredMatrix) -> torch.dtype:
    return torch.promote_types(torch.promote_types(q.dtype, k.dtype), torch.promote_types(v.dtype, mask.dtype))


def add_diagonal(out: torch.Tensor, diag: torch.Tensor, mask: StructuredMatrix, q, k, v, weight: float) -> torch.Tensor:
    """``out[b, t, h] + weight * diag[t] (q_t . k_t) v_t`` (a new tensor), ``diag`` a diagonal of ``mask``."""
    Bsz, T, H, _ = q.shape
    d = diag.expand(*mask.batch_shape, T).reshape(*mask_to_bh(mask, Bsz, H), T)
    d = d.expand(Bsz, H, T).transpose(1, 2)[..., None].to(out.dtype)
    return torch.addcmul(out, weight * d * (q * k).sum(-1, keepdim=True).to(out.dtype), v.to(out.dtype))


def time_tile(tuning: Tuning, T: int, per_step: int) -> int:
    """Steps per block when a long sequence runs block by block with a carried state: every block's
    tensors under ``tuning.tile_elements`` (``per_step`` elements per step), or one block."""
    if not tuning.time_blocks:
        return max(T, 1)
    return max(1, min(T, tuning.tile_elements // max(1, per_step)))


def time_blocks(T: int, tile: int, reverse: bool):
    """``(steps, src, take)`` per time block: ``steps`` in the (possibly reversed) time of the
    recurrence, ``src`` the same steps in the inputs' time, ``take`` cuts an input ``(B, T, ...)``
    to the block in the recurrence's order."""
    for t0 in range(0, T, tile):
        steps = slice(t0, min(T, t0 + tile))
        src = slice(T - steps.stop, T - steps.start) if reverse else steps
        yield steps, src, (lambda t, src=src: torch.flip(t[:, src], (1,))) if reverse else (lambda t, src=src: t[:, src])
