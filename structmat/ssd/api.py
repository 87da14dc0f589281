"""``structmat.ssd``: Mamba-2's ``mamba_chunk_scan_combined`` contract on structmat's backends."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from structmat.ssd.chunked import ssd_chunked

__all__ = ["ssd", "process_dt", "seq_idx_from_cu_seqlens"]

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


def seq_idx_from_cu_seqlens(cu_seqlens: torch.Tensor, length: int) -> torch.Tensor:
    """``(1, length)`` int32 sequence ids from cumulative lengths ``[0, l_1, l_1 + l_2, ...]``."""
    positions = torch.arange(length, device=cu_seqlens.device)
    return (torch.searchsorted(cu_seqlens[1:].contiguous(), positions, right=True)).to(torch.int32)[None]


def _check(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, cu_seqlens, chunk_size):
    if x.dim() != 4:
        raise ValueError(f"x must have shape (batch, seqlen, nheads, headdim); got {tuple(x.shape)}")
    b, l, h, p = x.shape
    if dt.shape != (b, l, h):
        raise ValueError(f"dt must have shape {(b, l, h)}; got {tuple(dt.shape)}")
    if A.shape != (h,):
        raise ValueError(f"A must have shape ({h},); got {tuple(A.shape)}")
    if B.dim() != 4 or B.shape[:2] != (b, l) or C.shape != B.shape:
        raise ValueError(f"B and C must have shape ({b}, {l}, ngroups, dstate); got {tuple(B.shape)} and {tuple(C.shape)}")
    if h % B.shape[2]:
        raise ValueError(f"nheads={h} must be a multiple of ngroups={B.shape[2]}")
    if D is not None and D.shape not in ((h,), (h, p)):
        raise ValueError(f"D must have shape ({h},) or ({h}, {p}); got {tuple(D.shape)}")
    if z is not None and z.shape != x.shape:
        raise ValueError(f"z must have the shape of x {tuple(x.shape)}; got {tuple(z.shape)}")
    if dt_bias is not None and dt_bias.shape != (h,):
        raise ValueError(f"dt_bias must have shape ({h},); got {tuple(dt_bias.shape)}")
    n = B.shape[3]
    if initial_states is not None and initial_states.shape != (b, h, p, n):
        raise ValueError(f"initial_states must have shape {(b, h, p, n)}; got {tuple(initial_states.shape)}")
    if seq_idx is not None and seq_idx.shape != (b, l):
        raise ValueError(f"seq_idx must have shape {(b, l)}; got {tuple(seq_idx.shape)}")
    if cu_seqlens is not None and (cu_seqlens.dim() != 1 or b != 1):
        raise ValueError("cu_seqlens must be 1-D (num_seqs + 1,) and needs batch == 1 (packed sequences)")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be positive; got {chunk_size}")
    for name, t in (("x", x), ("dt", dt), ("A", A), ("B", B), ("C", C)):
        if t.device != x.device:
            raise ValueError(f"{name} is on {t.device} but x is on {x.device}")


def _varlen_final_states(x, dt, A, B, entering, seq_idx, cu_seqlens, chunk):
    """Final state of each packed sequence, from the states entering its last chunk (the Triton
    backend computes these without autograd)."""
    h = x.shape[2]
    Bh = B.repeat_interleave(h // B.shape[2], dim=2).float()
    out = []
    for end in cu_seqlens[1:].tolist():
        t = end - 1
        c, start = t // chunk, (t // chunk) * chunk
        sl = slice(start, t + 1)
        same = seq_idx[0, sl] == seq_idx[0, t]
        dA = dt[0, sl] * A  # (k, h)
        tail = torch.flip(torch.cumsum(torch.flip(dA, (0,)), 0), (0,)) - dA  # sum over (j, t]
        w = torch.exp(tail.clamp(max=0)) * dt[0, sl] * same[:, None]
        state = torch.einsum("kh,khp,khn->hpn", w, x[0, sl].float(), Bh[0, sl])
        if seq_idx[0, max(start - 1, 0)] == seq_idx[0, t]:  # the entering state belongs to this sequence
            state = state + torch.exp(dA.sum(0).clamp(max=0))[:, None, None] * entering[0, c].float()
        out.append(state)
    return torch.stack(out)


def ssd(
    x, dt, A, B, C, chunk_size: int = 256, D=None, z=None, dt_bias=None, dt_softplus: bool = False,
    dt_limit=(0.0, math.inf), initial_states=None, seq_idx=None, cu_seqlens=None,
    return_final_states: bool = False, backend: str = "auto",
):
    """Mamba-2's SSD layer (``mamba_chunk_scan_combined``): 1-SS structured masked attention.

    With ``dt`` processed (bias, softplus, limit), per head and batch::

        h_t = exp(dt_t A) h_{t-1} + dt_t x_t B_t^T,    y_t = h_t C_t + D x_t,    out = y * silu(z)

    i.e. ``sma(C, B, x * dt, OneSS(dt A))`` plus the ``D`` and ``z`` terms.

    Parameters
    ----------
    x : Tensor ``(batch, seqlen, nheads, headdim)``
    dt : Tensor ``(batch, seqlen, nheads)``
    A : Tensor ``(nheads,)``, negative for decays (the Triton kernels assume ``A <= 0``)
    B, C : Tensor ``(batch, seqlen, ngroups, dstate)``; heads share groups as in Mamba-2
    chunk_size : int
        Block length (any positive value for ``torch``; the Triton kernels use a power of two
        between 16 and 256 and round other values). It changes rounding only.
    D : Tensor ``(nheads,)`` or ``(nheads, headdim)``, optional skip connection.
    z : Tensor like ``x``, optional gate: ``out = y * silu(z)``.
    dt_bias, dt_softplus, dt_limit : as Mamba-2.
    initial_states : Tensor ``(batch, nheads, headdim, dstate)``, optional.
    seq_idx : Tensor ``(batch, seqlen)`` int, optional non-decreasing ids of packed sequences; the
        state is reset where the id changes (``initial_states`` feed the first sequence only).
    cu_seqlens : Tensor ``(num_seqs + 1,)``, optional cumulative lengths (batch 1). Defines
        ``seq_idx`` when that is not given; with ``return_final_states`` the final states are
        returned per sequence, shape ``(num_seqs, nheads, headdim, dstate)``.
    return_final_states : bool
    backend : {"auto", "torch", "triton"}
        ``auto`` takes ``triton`` for CUDA tensors, ``torch`` otherwise.

    Returns
    -------
    out : Tensor like ``x`` (``x.dtype``), or ``(out, final_states)`` (float32 states).

    Examples
    --------
    >>> import torch, structmat as sm
    >>> b, l, h, p, n = 1, 10, 2, 4, 3
    >>> x, dt = torch.randn(b, l, h, p), torch.rand(b, l, h)
    >>> B, C = torch.randn(b, l, 1, n), torch.randn(b, l, 1, n)
    >>> out, final = sm.ssd(x, dt, -torch.ones(h), B, C, chunk_size=4, return_final_states=True)
    >>> out.shape, final.shape
    (torch.Size([1, 10, 2, 4]), torch.Size([1, 2, 4, 3]))
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}; got {backend!r}")
    _check(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, cu_seqlens, chunk_size)
    dtp = process_dt(dt, dt_bias, dt_softplus, dt_limit)
    if cu_seqlens is not None and seq_idx is None:
        seq_idx = seq_idx_from_cu_seqlens(cu_seqlens, x.shape[1])
    if backend == "auto":
        backend = "triton" if x.is_cuda else "torch"
    if backend == "triton":
        from structmat.triton.ssd import run_states, ssd_triton

        chunk = min(256, max(16, 1 << (int(chunk_size) - 1).bit_length()))
        out, final = ssd_triton(x, dtp, A, B, C, chunk, D=D, z=z, initial_states=initial_states, seq_idx=seq_idx)
        if cu_seqlens is not None and return_final_states:
            with torch.no_grad():
                entering = run_states(x.contiguous(), dtp.contiguous(), A.float(), B.contiguous(),
                                      initial_states, seq_idx, chunk)[0].transpose(-1, -2)
            final = _varlen_final_states(x, dtp, A.float(), B, entering, seq_idx, cu_seqlens, chunk)
    else:
        y, final, entering = ssd_chunked(x, dtp, A, B, C, chunk_size, initial_states=initial_states, seq_idx=seq_idx)
        if D is not None:
            y = y + x.to(y.dtype) * (D[:, None] if D.dim() == 1 else D).to(y.dtype)
        if z is not None:
            y = y * F.silu(z.to(y.dtype))
        out = y.to(x.dtype)
        if cu_seqlens is not None and return_final_states:
            final = _varlen_final_states(x, dtp, A.float(), B, entering, seq_idx, cu_seqlens, chunk_size)
    return (out, final) if return_final_states else out
