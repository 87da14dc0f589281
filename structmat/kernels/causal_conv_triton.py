"""The causal depthwise convolution of Mamba-style blocks, fused with its SiLU, as Triton kernels.

Per channel ``d`` (``W`` taps, ``x (B, T, D)`` channels last, as the input projection writes it)::

    y[b, t, d] = silu(bias[d] + sum_w weight[d, w] x[b, t - W + 1 + w, d])

where inputs before the start, or (with ``seq_idx``) from another packed sequence, count as zero.
:func:`causal_conv_silu_triton` is differentiable in ``x``, ``weight`` and ``bias``: the backward
recomputes the pre-activations from ``x`` (nothing but ``x`` is kept) and sums ``d weight``/``d bias``
over per-program partials. :func:`causal_conv_step_triton` is one decoding step on a ``(B, D, W)``
state, updated in place. The torch forms in :mod:`structmat.nn.conv` are the reference.
"""

from __future__ import annotations

import torch

from structmat.kernels.triton_modules import tl, triton

__all__ = ["causal_conv_silu_triton", "causal_conv_step_triton"]

# Tile of (time steps, channels) per program: 64 x 64 keeps the W shifted loads of a tile in L1/L2,
# and the channel-last rows are 128-byte segments in 16-bit.
BLOCK_T = 64
BLOCK_D = 64


@triton.jit
def _pre(x_base, w_ptr, bias, seq_base, t, d, T, D, st, HAS_SEQ: tl.constexpr, W: tl.constexpr, BT: tl.constexpr,
         BD: tl.constexpr):
    """Pre-activations at rows ``t`` (a vector; outside ``[0, T)`` they are never used) for channels ``d``."""
    mask_d = d < D
    acc = tl.zeros((BT, BD), dtype=tl.float32) + bias[None, :]
    if HAS_SEQ:
        own = tl.load(seq_base + t, mask=(t >= 0) & (t < T), other=-1)
    for w in tl.static_range(W):
        src = t - (W - 1 - w)
        ok = (src >= 0) & (src < T)
        if HAS_SEQ:
            ok = ok & (tl.load(seq_base + src, mask=ok, other=-2) == own)
        xv = tl.load(x_base + src[:, None] * st + d[None, :], mask=ok[:, None] & mask_d[None, :], other=0.0)
        acc += xv.to(tl.float32) * tl.load(w_ptr + d * W + w, mask=mask_d, other=0.0).to(tl.float32)[None, :]
    return acc


@triton.jit
def conv_fwd_kernel(x_ptr, w_ptr, b_ptr, seq_ptr, y_ptr, T, D, sb, st, syb, syt,
                    W: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr, HAS_SEQ: tl.constexpr,
                    HAS_BIAS: tl.constexpr):
    t = tl.program_id(0) * BT + tl.arange(0, BT)
    d = tl.program_id(1) * BD + tl.arange(0, BD)
    b = tl.program_id(2).to(tl.int64)
    mask_d = d < D
    bias = tl.load(b_ptr + d, mask=mask_d, other=0.0).to(tl.float32) if HAS_BIAS else tl.zeros((BD,), tl.float32)
    pre = _pre(x_ptr + b * sb, w_ptr, bias, seq_ptr + b * T, t, d, T, D, st, HAS_SEQ, W, BT, BD)
    y = pre * tl.sigmoid(pre)
    tl.store(y_ptr + b * syb + t[:, None] * syt + d[None, :], y.to(y_ptr.dtype.element_ty),
             mask=(t < T)[:, None] & mask_d[None, :])


@triton.jit
def conv_bwd_kernel(x_ptr, w_ptr, b_ptr, seq_ptr, dy_ptr, dx_ptr, dw_ptr, db_ptr, T, D, sb, st, sdyb, sdyt,
                    sdxb, sdxt, NTB,
                    W: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr, HAS_SEQ: tl.constexpr,
                    HAS_BIAS: tl.constexpr):
    """``dx`` of a (time, channel) tile; ``d weight`` and ``d bias`` partials per program."""
    pid_t = tl.program_id(0)
    t = pid_t * BT + tl.arange(0, BT)
    d = tl.program_id(1) * BD + tl.arange(0, BD)
    b = tl.program_id(2).to(tl.int64)
    mask_d = d < D
    x_base = x_ptr + b * sb
    seq_base = seq_ptr + b * T
    bias = tl.load(b_ptr + d, mask=mask_d, other=0.0).to(tl.float32) if HAS_BIAS else tl.zeros((BD,), tl.float32)
    if HAS_SEQ:
        own = tl.load(seq_base + t, mask=t < T, other=-1)
    dx = tl.zeros((BT, BD), dtype=tl.float32)
    part = (b * NTB + pid_t) * D
    for s in tl.static_range(W):
        # rows t + s read x_t through tap W - 1 - s: their d pre-activation flows back to x_t
        r = t + s
        live = r < T
        if HAS_SEQ:
            live = live & (tl.load(seq_base + r, mask=live, other=-2) == own)
        pre = _pre(x_base, w_ptr, bias, seq_base, r, d, T, D, st, HAS_SEQ, W, BT, BD)
        sig = tl.sigmoid(pre)
        dy = tl.load(dy_ptr + b * sdyb + r[:, None] * sdyt + d[None, :], mask=live[:, None] & mask_d[None, :],
                     other=0.0).to(tl.float32)
        dpre = dy * sig * (1.0 + pre * (1.0 - sig))
        dx += dpre * tl.load(w_ptr + d * W + (W - 1 - s), mask=mask_d, other=0.0).to(tl.float32)[None, :]
        if s == 0:  # this tile's own rows: d weight and d bias partials
            if HAS_BIAS:
                tl.store(db_ptr + part + d, tl.sum(dpre, axis=0), mask=mask_d)
            for w in tl.static_range(W):
                src = t - (W - 1 - w)
                ok = (src >= 0) & (t < T)
                if HAS_SEQ:
                    ok = ok & (tl.load(seq_base + src, mask=ok, other=-2) == own)
                xv = tl.load(x_base + src[:, None] * st + d[None, :], mask=ok[:, None] & mask_d[None, :], other=0.0)
                tl.store(dw_ptr + (part + d) * W + w, tl.sum(dpre * xv.to(tl.float32), axis=0), mask=mask_d)
    tl.store(dx_ptr + b * sdxb + t[:, None] * sdxt + d[None, :], dx.to(dx_ptr.dtype.element_ty),
             mask=(t < T)[:, None] & mask_d[None, :])


@triton.jit
def conv_step_kernel(x_ptr, state_ptr, w_ptr, b_ptr, y_ptr, D, sxb, ssb, ssd, ssw, syb,
                     W: tl.constexpr, BD: tl.constexpr, HAS_BIAS: tl.constexpr):
    """Shift ``x_t`` into the state (in place) and write ``silu(conv)`` for a block of channels."""
    b = tl.program_id(1).to(tl.int64)
    d = tl.program_id(0) * BD + tl.arange(0, BD)
    mask = d < D
    acc = tl.load(b_ptr + d, mask=mask, other=0.0).to(tl.float32) if HAS_BIAS else tl.zeros((BD,), tl.float32)
    base = state_ptr + b * ssb + d * ssd
    for w in tl.static_range(W):
        if w < W - 1:
            v = tl.load(base + (w + 1) * ssw, mask=mask, other=0.0)
        else:
            v = tl.load(x_ptr + b * sxb + d, mask=mask, other=0.0).to(state_ptr.dtype.element_ty)
        tl.store(base + w * ssw, v, mask=mask)
        acc += v.to(tl.float32) * tl.load(w_ptr + d * W + w, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + b * syb + d, (acc * tl.sigmoid(acc)).to(y_ptr.dtype.element_ty), mask=mask)


def _grid(B, T, D):
    return (-(-T // BLOCK_T), -(-D // BLOCK_D), B)


class _ConvSilu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, seq_idx):
        B, T, D = x.shape
        y = torch.empty(B, T, D, device=x.device, dtype=x.dtype)
        seq = seq_idx if seq_idx is not None else x
        if x.numel():
            conv_fwd_kernel[_grid(B, T, D)](x, weight, bias if bias is not None else weight, seq, y, T, D,
                                            x.stride(0), x.stride(1), y.stride(0), y.stride(1), W=weight.shape[1],
                                            BT=BLOCK_T, BD=BLOCK_D, HAS_SEQ=seq_idx is not None,
                                            HAS_BIAS=bias is not None)
        ctx.save_for_backward(x, weight, bias, seq_idx)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, bias, seq_idx = ctx.saved_tensors
        B, T, D = x.shape
        W = weight.shape[1]
        ntb = -(-T // BLOCK_T)
        dx = torch.empty(B, T, D, device=x.device, dtype=x.dtype)
        dw = torch.empty(B * ntb, D, W, device=x.device, dtype=torch.float32)
        db = torch.empty(B * ntb, D, device=x.device, dtype=torch.float32)
        if x.numel():
            conv_bwd_kernel[_grid(B, T, D)](x, weight, bias if bias is not None else weight,
                                            seq_idx if seq_idx is not None else x, dy, dx, dw, db, T, D,
                                            x.stride(0), x.stride(1), dy.stride(0), dy.stride(1), dx.stride(0),
                                            dx.stride(1), ntb, W=W, BT=BLOCK_T, BD=BLOCK_D,
                                            HAS_SEQ=seq_idx is not None, HAS_BIAS=bias is not None)
        dbias = db.sum(0).to(bias.dtype) if bias is not None else None
        return dx, dw.sum(0).to(weight.dtype), dbias, None


def _channels_last(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def causal_conv_silu_triton(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                            seq_idx: torch.Tensor | None = None) -> torch.Tensor:
    """``silu(causal_conv1d(x))`` of the module docstring: ``x (B, T, D)`` (any strides with unit channel
    stride, e.g. a slice of the input projection), ``weight (D, W)``, ``bias (D,)``, ``seq_idx (B, T)``.
    Returns ``(B, T, D)`` in ``x``'s dtype. ``O(B T D W)``; no intermediate is kept for the backward."""
    seq = seq_idx.to(torch.int32).contiguous() if seq_idx is not None else None
    return _ConvSilu.apply(_channels_last(x), weight.contiguous(), bias, seq)


def causal_conv_step_triton(x_t: torch.Tensor, state: torch.Tensor, weight: torch.Tensor,
                            bias: torch.Tensor | None = None) -> torch.Tensor:
    """One token: ``x_t (B, D)`` shifted into ``state (B, D, W)`` in place; returns ``silu(conv) (B, D)``."""
    B, D = x_t.shape
    W = weight.shape[1]
    y = torch.empty(B, D, device=x_t.device, dtype=x_t.dtype)
    x_t = _channels_last(x_t)
    if B and D:
        conv_step_kernel[(-(-D // 256), B)](x_t, state, weight.contiguous(), bias if bias is not None else weight, y, D,
                                             x_t.stride(0), state.stride(0), state.stride(1), state.stride(2),
                                             y.stride(0), W=W, BD=256, HAS_BIAS=bias is not None)
    return y
