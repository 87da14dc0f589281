"""Mamba-2's gated RMSNorm as two Triton kernels: :func:`gated_rms_norm_triton` (forward and backward).

Per row ``r`` and group ``g`` of ``group_size`` features, with ``s = silu(z)``::

    norm_before_gate = False:  h = x s,  y = h w / rms(h)
    norm_before_gate = True:   y = (x w / rms(x)) s,        rms(u) = sqrt(mean_g(u^2) + eps)

computed in float32, ``y`` in ``x``'s dtype. Autograd keeps ``x``, ``z`` and ``1 / rms`` (fp32, one per
row and group) and recomputes the rest: ``O(rows x features)`` work and no float32 copies of the
activations, against the six float32 tensors the torch form keeps. The torch form
(:class:`structmat.nn.GatedRMSNorm` on the CPU) is the reference.
"""

from __future__ import annotations

import torch

from structmat.kernels.triton_modules import tl, triton

__all__ = ["gated_rms_norm_triton"]

# Rows per program of the backward: each program sums its rows' share of dw in registers, so the
# partial sums it writes (rows / BWD_ROWS of them, summed by torch) stay a few MiB at 64K rows.
BWD_ROWS = 64


@triton.jit
def _gate(z):
    return z * tl.sigmoid(z)


@triton.jit
def gated_norm_fwd_kernel(x_ptr, z_ptr, w_ptr, y_ptr, rstd_ptr, M, HID, GS, sx, sz, sy, eps,
                          BLOCK: tl.constexpr, HAS_Z: tl.constexpr, BEFORE: tl.constexpr):
    """One (row, group) per program."""
    row = tl.program_id(0).to(tl.int64)
    grp = tl.program_id(1)
    cols = grp * GS + tl.arange(0, BLOCK)
    mask = tl.arange(0, BLOCK) < GS
    x = tl.load(x_ptr + row * sx + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_Z:
        s = _gate(tl.load(z_ptr + row * sz + cols, mask=mask, other=0.0).to(tl.float32))
        if not BEFORE:
            x = x * s
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / GS + eps)
    y = x * rstd * tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_Z and BEFORE:
        y = y * s
    tl.store(y_ptr + row * sy + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(rstd_ptr + row * (HID // GS) + grp, rstd)


@triton.jit
def gated_norm_bwd_kernel(x_ptr, z_ptr, w_ptr, rstd_ptr, dy_ptr, dx_ptr, dz_ptr, dw_ptr, M, HID, GS,
                          sx, sz, sdy, sdx, sdz,
                          BLOCK: tl.constexpr, ROWS: tl.constexpr, HAS_Z: tl.constexpr, BEFORE: tl.constexpr):
    """``ROWS`` rows of one group per program; ``dw`` partial sums per program ``(programs, HID)``."""
    pid = tl.program_id(0)
    grp = tl.program_id(1)
    cols = grp * GS + tl.arange(0, BLOCK)
    mask = tl.arange(0, BLOCK) < GS
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    dw = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in range(ROWS):
        row = (pid * ROWS + i).to(tl.int64)
        m = mask & ((tl.zeros((BLOCK,), dtype=tl.int64) + row) < M)
        x = tl.load(x_ptr + row * sx + cols, mask=m, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + row * sdy + cols, mask=m, other=0.0).to(tl.float32)
        rstd = tl.load(rstd_ptr + tl.minimum(row, M - 1) * (HID // GS) + grp)  # rows past M: loads clamped, stores masked
        if HAS_Z:
            z = tl.load(z_ptr + row * sz + cols, mask=m, other=0.0).to(tl.float32)
            sig = tl.sigmoid(z)
            s = z * sig
            ds_dz = sig * (1.0 + z * (1.0 - sig))
            h = x if BEFORE else x * s
        else:
            h = x
        xhat = h * rstd
        if HAS_Z and BEFORE:
            dz = dy * xhat * w * ds_dz
            dy = dy * s
        dw += dy * xhat
        g = dy * w
        dh = rstd * (g - xhat * (tl.sum(g * xhat, axis=0) / GS))
        if HAS_Z and not BEFORE:
            dz = dh * x * ds_dz
            dh = dh * s
        tl.store(dx_ptr + row * sdx + cols, dh.to(dx_ptr.dtype.element_ty), mask=m)
        if HAS_Z:
            tl.store(dz_ptr + row * sdz + cols, dz.to(dz_ptr.dtype.element_ty), mask=m)
    tl.store(dw_ptr + pid * HID + cols, dw, mask=mask)


def _rows(t: torch.Tensor) -> torch.Tensor:
    """``(rows, features)`` with unit feature stride (a view where the layout allows)."""
    t = t.reshape(-1, t.shape[-1])
    return t if t.stride(-1) == 1 else t.contiguous()


def _forward(x, z, weight, eps, group_size, before):
    M, HID = x.shape
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    rstd = torch.empty(M, HID // group_size, device=x.device, dtype=torch.float32)
    zz = z if z is not None else x
    if M:
        gated_norm_fwd_kernel[(M, HID // group_size)](
            x, zz, weight, y, rstd, M, HID, group_size, x.stride(0), zz.stride(0), y.stride(0), eps,
            BLOCK=max(16, 1 << (group_size - 1).bit_length()), HAS_Z=z is not None, BEFORE=before,
            num_warps=_warps(group_size))
    return y, rstd


def _backward(dy, x, z, weight, rstd, group_size, before):
    M, HID = x.shape
    dx = torch.empty_like(x, memory_format=torch.contiguous_format)
    dz = torch.empty_like(z, memory_format=torch.contiguous_format) if z is not None else None
    progs = -(-M // BWD_ROWS)
    dw = torch.empty(progs, HID, device=x.device, dtype=torch.float32)
    zz, dzz = (z, dz) if z is not None else (x, dx)
    if M:
        gated_norm_bwd_kernel[(progs, HID // group_size)](
            x, zz, weight, rstd, dy, dx, dzz, dw, M, HID, group_size,
            x.stride(0), zz.stride(0), dy.stride(0), dx.stride(0), dzz.stride(0),
            BLOCK=max(16, 1 << (group_size - 1).bit_length()), ROWS=BWD_ROWS, HAS_Z=z is not None, BEFORE=before,
            num_warps=_warps(group_size))
    return dx, dz, dw.sum(0).to(weight.dtype)


def _warps(group_size: int) -> int:
    # one feature per thread up to 1K features, then more per thread: registers, not occupancy, bind
    return 4 if group_size <= 1024 else 8


class _GatedNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, z, weight, eps, group_size, before):
        y, rstd = _forward(x, z, weight, eps, group_size, before)
        ctx.save_for_backward(x, z, weight, rstd)
        ctx.meta = (group_size, before)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, z, weight, rstd = ctx.saved_tensors
        dx, dz, dw = _backward(_rows(dy), x, z, weight, rstd, *ctx.meta)
        return dx, dz, dw, None, None, None


def gated_rms_norm_triton(x: torch.Tensor, z: torch.Tensor | None, weight: torch.Tensor, eps: float,
                          group_size: int, norm_before_gate: bool) -> torch.Tensor:
    """The gated RMSNorm of the module docstring; ``x, z (*, hidden)``, ``weight (hidden,)``; ``y`` like ``x``.

    Real floating inputs on CUDA (or CPU tensors under ``TRITON_INTERPRET=1``); ``hidden`` a multiple of
    ``group_size``. ``O(numel)`` work, one read of ``x`` and ``z`` and one write of ``y``.
    """
    shape = x.shape
    rows = _rows(x)
    zr = _rows(z) if z is not None else None
    if not (torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, z, weight))):
        return _forward(rows, zr, weight, eps, group_size, norm_before_gate)[0].view(shape)  # (decoding: no autograd node)
    return _GatedNorm.apply(rows, zr, weight, eps, group_size, norm_before_gate).view(shape)
