"""The chunked decay recurrence in pure torch (the ``"torch"`` backend): any device, autograd throughout.

The sequence is cut into chunks of ``L``. Inside a chunk the output is the quadratic form
``(C B^T o exp(segsum(log_a)) o s) x``; across chunks it flows through the ``(P, N)`` states,
passed from chunk to chunk by a short recurrence. Decay products are segment sums of ``log_a``
(masked cumulative sums), never differences of long cumulative sums; ``-inf`` decays (exact cuts)
and positive log decays are allowed. Same contract as :func:`structmat.kernels.decay_naive.decay_naive`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from structmat.core.dtypes import real_dtype
from structmat.linalg.segsum import segsum

__all__ = ["decay_chunked_torch"]


def _chunks(t: torch.Tensor, L: int, *, edge: bool = False) -> torch.Tensor:
    """``(b, l, ...) -> (b, c, L, ...)``, padded at the end with zeros (or the last value)."""
    pad = (-t.shape[1]) % L
    if pad:
        fill = t[:, -1:].expand(t.shape[0], pad, *t.shape[2:]) if edge else t.new_zeros(t.shape[0], pad, *t.shape[2:])
        t = torch.cat([t, fill], dim=1)
    return t.reshape(t.shape[0], t.shape[1] // L, L, *t.shape[2:])  # (not -1: ambiguous for an empty batch)


def _cast(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t.to(dtype)`` where the dtypes differ (a no-op ``to`` costs a few microseconds: tens per short call)."""
    return t if t.dtype == dtype else t.to(dtype)


def _work_dtype(*tensors) -> torch.dtype:
    """float32 (float64 stays float64), complex where an input is complex."""
    work = torch.float64 if any(t.dtype in (torch.float64, torch.complex128) for t in tensors) else torch.float32
    for t in tensors:
        if t.dtype.is_complex:
            work = torch.promote_types(work, t.dtype)
    return work


def _masks(seq_idx, L, real):
    """Per chunk: which pairs share a sequence, which steps survive to the chunk end, and whether the
    entering state belongs to each step's sequence (all ones without ``seq_idx``)."""
    sidx = _chunks(seq_idx, L, edge=True)  # (b, c, L); padded steps continue the last sequence
    same = (sidx[:, None, :, :, None] == sidx[:, None, :, None, :])  # (b, 1, c, L, L)
    survives = (sidx[:, :, -1:] == sidx)[:, None].to(real)  # (b, 1, c, L)
    prev_end = torch.cat([sidx[:, :1, :1], sidx[:, :-1, -1:]], dim=1)
    continues = (sidx == prev_end)[:, None].to(real)  # (b, 1, c, L)
    return same, survives, continues


def _pass_states(chunk_states, chunk_decay, initial_state, work):
    """The states entering every chunk ``(b, c, h, p, n)`` and the final one, in ``work``: the state passes
    over the ``T / L`` chunks in double precision and is rounded once per chunk."""
    b, _, h, p, n = chunk_states.shape
    wide = torch.complex128 if work.is_complex else torch.float64
    state = chunk_states.new_zeros(b, h, p, n, dtype=wide) if initial_state is None else _cast(initial_state, wide)
    steps = _cast(chunk_decay, wide).movedim(2, 0)[..., None, None]  # (c, b, h, 1, 1)
    entering = []
    for c in range(chunk_states.shape[1]):
        entering.append(state)
        state = steps[c] * state + chunk_states[:, c]
    return torch.stack(entering, dim=1).to(work), state.to(work)


def decay_chunked_torch(x, log_a, B, C, *, scale=None, D=None, z=None, initial_state=None, seq_idx=None,
                        chunk_size: int = 64, return_chunk_states: bool = False):
    """Chunked decay recurrence; returns ``(out, final_state)`` (and the states entering every chunk,
    ``(b, c, h, p, n)``, with ``return_chunk_states``).

    Shapes: ``x (b, l, h, p)``, ``log_a (b, l, h)``, ``B, C (b, l, g, n)``, ``scale (b, l, h)``,
    ``D (h,)`` or ``(h, p)``, ``z`` like ``x``, ``initial_state (b, h, p, n)``, ``seq_idx (b, l)``
    non-decreasing. Computes in float32 (float64 stays float64, complex inputs make it complex);
    ``out`` has the dtype of ``x``, the states the working dtype. ``O(b h l L (n + p))`` work.
    """
    b, l, h, p = x.shape
    g, n = B.shape[2], B.shape[3]
    work = _work_dtype(x, B, C)
    if l == 0:  # no steps: the initial state passes through
        state = x.new_zeros(b, h, p, n, dtype=work) if initial_state is None else initial_state.to(work)
        out = x.new_zeros(x.shape, dtype=torch.promote_types(x.dtype, work) if work.is_complex else x.dtype)
        return (out, state, x.new_zeros(b, 0, h, p, n, dtype=work)) if return_chunk_states else (out, state)
    real = real_dtype(work)
    L = chunk_size
    Bh, Ch = (_chunks(_cast(t, work) if g == h else _cast(t, work).repeat_interleave(h // g, dim=2), L) for t in (B, C))
    xc = _chunks(_cast(x, work), L)  # (b, c, L, h, p)
    la = _chunks(_cast(log_a, real), L).permute(0, 3, 1, 2)  # (b, h, c, L)
    seg = segsum(la)  # (b, h, c, L, L)
    survives = continues = None
    if seq_idx is not None:
        same, survives, continues = _masks(seq_idx, L, real)
        seg = seg.masked_fill(~same, float("-inf"))
    decay = torch.exp(seg)
    to_end = decay[..., -1, :]  # (b, h, c, L): source step to the chunk end
    if scale is not None:  # the input scale of each source step
        sc = _chunks(_cast(scale, real), L).permute(0, 3, 1, 2)  # (b, h, c, L)
        decay, to_end = decay * sc[..., None, :], to_end * sc
    if survives is not None:
        to_end = to_end * survives
    # pairwise contractions in a fixed order: a many-operand einsum may broadcast C against B
    # before contracting n, an (L x L x N) intermediate per chunk
    scores = torch.einsum("bclhn,bcshn->bhcls", Ch, Bh) * _cast(decay, work)
    y = torch.einsum("bhcls,bcshp->bclhp", scores, xc)

    chunk_states = torch.einsum("bcshn,bcshp->bchpn", Bh, xc * _cast(to_end.permute(0, 2, 3, 1)[..., None], work))
    from_start = torch.exp(torch.cumsum(la, dim=-1))  # (b, h, c, L): chunk start to step
    if continues is not None:
        from_start = from_start * continues
    # the chunk decays multiply T / L times: in double precision (exp(-6.4e-6) in float32 is off by
    # 3e-8 absolute, and that bias compounds to 1e-4 over 10^6 steps of decays 1 - 1e-7)
    chunk_decay = torch.exp(la.to(torch.float64).sum(-1))
    if continues is not None:
        chunk_decay = chunk_decay * continues[..., -1]

    entering, state = _pass_states(chunk_states, chunk_decay, initial_state, work)
    y = y + torch.einsum("bclhn,bchpn->bclhp", Ch, entering) * _cast(from_start.permute(0, 2, 3, 1)[..., None], work)
    y = y.reshape(b, y.shape[1] * y.shape[2], h, p)[:, :l]
    if D is not None:
        y = y + _cast(x, work) * _cast(D if D.dim() == 2 else D[:, None], work)
    if z is not None:
        y = y * F.silu(_cast(z, work))
    out = _cast(y, x.dtype) if not (y.is_complex() and not x.is_complex()) else y
    return (out, state, entering) if return_chunk_states else (out, state)
