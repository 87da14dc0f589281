"""One SSD decoding step as a single Triton kernel: :func:`ssd_step_triton`.

Per batch ``b``, head ``h`` (group ``g = h // (H / G)``) and state row ``p``, with ``d`` the processed
``dt`` (bias, softplus)::

    state[b, h, p, :] <- exp(d A[h, p, :]) state[b, h, p, :] + d x[b, h, p] B[b, g, :]
    out[b, h, p] = (<state[b, h, p, :], C[b, g, :]> + D[h, p] x[b, h, p]) silu(z[b, h, p])

The state is updated in place in its own dtype; arithmetic in float32. With ``state_batch_indices`` the batch row
``b`` steps ``state[state_batch_indices[b]]``; a negative index marks a padding row (output 0, no state touched, as
``selective_state_update``), an index past the state's rows writes nothing and gives NaN (the check would wait for the
device at every token). Every per-head argument is read
through its strides, so the broadcast views Mamba-2 passes (``dt[..., None].expand(...)``,
``A[:, None, None].expand(...)``) cost nothing. :func:`structmat.ssd_step` in torch is the reference.
"""

from __future__ import annotations

import torch

from structmat.kernels.triton_modules import tl, triton

__all__ = ["ssd_step_triton"]

# State rows per program: 16 rows x N <= 256 columns of fp32 stay in registers with 4 warps.
BLOCK_P = 16


@triton.jit
def ssd_step_kernel(state_ptr, x_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, D_ptr, z_ptr, bias_ptr, idx_ptr, out_ptr,
                    H, HPG, P, N, ROWS, s_idx,
                    ss_b, ss_h, ss_p, ss_n, sx_b, sx_h, sx_p, sdt_b, sdt_h, sdt_p, sA_h, sA_p, sA_n,
                    sB_b, sB_g, sB_n, sC_b, sC_g, sC_n, sD_h, sD_p, sz_b, sz_h, sz_p, sbias_h, sbias_p,
                    so_b, so_h, so_p,
                    BP: tl.constexpr, BN: tl.constexpr, HAS_D: tl.constexpr, HAS_Z: tl.constexpr,
                    HAS_BIAS: tl.constexpr, SOFTPLUS: tl.constexpr, HAS_IDX: tl.constexpr):
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)
    h = bh % H
    g = h // HPG
    p = tl.program_id(0) * BP + tl.arange(0, BP)
    n = tl.arange(0, BN)
    mp = p < P
    mn = n < N
    m2 = mp[:, None] & mn[None, :]
    row = b
    ms = m2  # (the state's mask: none of its rows for an index out of range)
    if HAS_IDX:
        row = tl.load(idx_ptr + b * s_idx).to(tl.int64)
        ms = (p < tl.where((row >= 0) & (row < ROWS), P, 0))[:, None] & mn[None, :]
    x = tl.load(x_ptr + b * sx_b + h * sx_h + p * sx_p, mask=mp, other=0.0).to(tl.float32)
    d = tl.load(dt_ptr + b * sdt_b + h * sdt_h + p * sdt_p, mask=mp, other=0.0).to(tl.float32)
    if HAS_BIAS:
        d += tl.load(bias_ptr + h * sbias_h + p * sbias_p, mask=mp, other=0.0).to(tl.float32)
    if SOFTPLUS:
        d = tl.where(d <= 20.0, tl.log(1.0 + tl.exp(d)), d)
    A = tl.load(A_ptr + h * sA_h + p[:, None] * sA_p + n[None, :] * sA_n, mask=m2, other=0.0).to(tl.float32)
    Bv = tl.load(B_ptr + b * sB_b + g * sB_g + n * sB_n, mask=mn, other=0.0).to(tl.float32)
    Cv = tl.load(C_ptr + b * sC_b + g * sC_g + n * sC_n, mask=mn, other=0.0).to(tl.float32)
    st_ptrs = state_ptr + row * ss_b + h * ss_h + p[:, None] * ss_p + n[None, :] * ss_n
    s = tl.load(st_ptrs, mask=ms, other=0.0).to(tl.float32)
    s = tl.exp(d[:, None] * A) * s + (d * x)[:, None] * Bv[None, :]
    tl.store(st_ptrs, s.to(state_ptr.dtype.element_ty), mask=ms)
    out = tl.sum(s * Cv[None, :], axis=1)
    if HAS_D:
        out += x * tl.load(D_ptr + h * sD_h + p * sD_p, mask=mp, other=0.0).to(tl.float32)
    if HAS_Z:
        z = tl.load(z_ptr + b * sz_b + h * sz_h + p * sz_p, mask=mp, other=0.0).to(tl.float32)
        out = out * z * tl.sigmoid(z)
    if HAS_IDX:
        out = tl.where(row < 0, 0.0, tl.where(row < ROWS, out, float("nan")))
    tl.store(out_ptr + b * so_b + h * so_h + p * so_p, out.to(out_ptr.dtype.element_ty), mask=mp)


def ssd_step_triton(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus: bool = False,
                    state_batch_indices=None) -> torch.Tensor:
    """``selective_state_update``'s step with heads: ``state (rows, h, p, n)`` (updated in place), ``x, dt, z
    (b, h, p)``, ``A (h, p, n)``, ``B, C (b, g, n)``, ``D, dt_bias (h, p)``, ``state_batch_indices (b,)`` (or None:
    ``rows = b``); returns ``out (b, h, p)`` like ``x``. Shapes are the caller's to check (:func:`structmat.ssd_step`
    does). ``O(b h p n)``."""
    rows, h, p, n = state.shape
    b = x.shape[0]
    out = torch.empty(b, h, p, device=x.device, dtype=x.dtype)
    if out.numel() == 0:
        return out
    zero2 = (0, 0)
    Dt, zt, bt = (D if D is not None else x), (z if z is not None else x), (dt_bias if dt_bias is not None else x)
    idx = state_batch_indices if state_batch_indices is not None else x
    ssd_step_kernel[(-(-p // BLOCK_P), b * h)](
        state, x, dt, A, B, C, Dt, zt, bt, idx, out, h, h // B.shape[1], p, n, rows,
        state_batch_indices.stride(0) if state_batch_indices is not None else 0,
        *state.stride(), *x.stride(), *dt.stride(), *A.stride(), *B.stride(), *C.stride(),
        *(D.stride() if D is not None else zero2), *(z.stride() if z is not None else (0, 0, 0)),
        *(dt_bias.stride() if dt_bias is not None else zero2), *out.stride(),
        BP=BLOCK_P, BN=max(16, 1 << (n - 1).bit_length()), HAS_D=D is not None, HAS_Z=z is not None,
        HAS_BIAS=dt_bias is not None, SOFTPLUS=dt_softplus, HAS_IDX=state_batch_indices is not None, num_warps=4)
    return out
