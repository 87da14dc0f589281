"""The ``dx`` kernel of the chunked decay recurrence's backward: per (chunk, batch, head), the chunk's blocks from
the last to the first with the adjoint state in fp32 registers. Notation and launch order:
:mod:`structmat.kernels.decay_triton_bwd`.
"""

from __future__ import annotations

from structmat.kernels.decay_triton_tiles import diag_mask, dx_rests, dx_vectors, seq_at, seq_keep
from structmat.kernels.triton_modules import tl, triton


@triton.jit
def decay_bwd_dx_kernel(
    x_ptr, dy_ptr, cs_ptr, cl_ptr, s_ptr, B_ptr, C_ptr, D_ptr, seq_ptr, glo_ptr,
    dx_ptr, ds_ptr, dDp_ptr,
    T, H, HPG, NC, P, N,
    sx_b, sx_t, sx_h, sx_p,
    sdy_b, sdy_t, sdy_h, sdy_p,
    sB_b, sB_t, sB_g, sB_n,
    sC_b, sC_t, sC_g, sC_n,
    sD_h, sD_p,
    CHUNK: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BP: tl.constexpr,
    HAS_SCALE: tl.constexpr, HAS_D: tl.constexpr, HAS_SEQ: tl.constexpr, PREC: tl.constexpr,
    PS: tl.constexpr, SPLIT_STATE: tl.constexpr, EXACT_DECAYS: tl.constexpr,
):
    """``dx = s du (+ D dy)`` and ``d scale = x . du`` of chunk ``c`` (axis 0) for a (batch, head,
    ``P / PS`` columns) (axis 1), ``du_j = sum_{i >= j in chunk} decay (C_i . B_j) dy_i +
    exp(cs_end - cs_j) G_c B_j``; ``d scale`` and ``sum dy o x`` (for ``dD``) as partials over the columns."""
    NBLK: tl.constexpr = CHUNK // BM
    LO = x_ptr.dtype.element_ty
    c = tl.program_id(0)
    bh = tl.program_id(1) // PS
    half = tl.program_id(1) % PS
    b = (bh // H).to(tl.int64)
    h = bh % H
    g = h // HPG
    PN = P * N
    idx = tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_p = half * BP + tl.arange(0, BP)
    mask_n = offs_n < N
    mask_p = offs_p < P
    c0 = c * CHUNK
    x_base = x_ptr + b * sx_b + h * sx_h
    dy_base = dy_ptr + b * sdy_b + h * sdy_h
    B_base = B_ptr + b * sB_b + g * sB_g
    C_base = C_ptr + b * sC_b + g * sC_g
    cs_row = cs_ptr + (b * H + h) * T
    if EXACT_DECAYS:
        cl_row = cl_ptr + (b * H + h) * T
    R = tl.load(glo_ptr + ((b * NC + c) * H + h) * PN + offs_n[:, None] + offs_p[None, :] * N,
                mask=mask_n[:, None] & mask_p[None, :], other=0.0).to(tl.float32)
    dD = tl.zeros((BP,), dtype=tl.float32)
    end = tl.load(cs_row + tl.minimum(c0 + CHUNK, T) - 1)  # cs at the end of the block being processed
    t0n = c0 + (NBLK - 1) * BM
    cs_n, s_n, start_n = dx_vectors(cs_row, s_ptr + (b * H + h) * T, t0n, T, t0n > c0, BM, HAS_SCALE)
    if EXACT_DECAYS:
        end_l = tl.load(cl_row + tl.minimum(c0 + CHUNK, T) - 1)
        cl_n, startl_n = dx_rests(cl_row, t0n, T, t0n > c0, BM)
    for i in range(NBLK):
        blk = NBLK - 1 - i
        t0 = c0 + blk * BM
        t = t0 + idx
        mt = t < T
        mask_tp = mt[:, None] & mask_p[None, :]
        mask_tn = mt[:, None] & mask_n[None, :]
        cs, s, start = cs_n, s_n, start_n  # loaded one block ahead: off the critical path
        t0n = c0 + tl.maximum(blk - 1, 0) * BM
        cs_n, s_n, start_n = dx_vectors(cs_row, s_ptr + (b * H + h) * T, t0n, T, t0n > c0, BM, HAS_SCALE)
        if EXACT_DECAYS:
            cl, start_l = cl_n, startl_n
            cl_n, startl_n = dx_rests(cl_row, t0n, T, t0n > c0, BM)
            end_l = tl.where(start < end, start_l, end_l)
        end = tl.minimum(end, start)  # a block wholly past T: no decay
        keep_end = seq_keep(seq_ptr, b, T, t, t0 + BM - 1, HAS_SEQ)
        keep_start = seq_keep(seq_ptr, b, T, t, t0 - 1, HAS_SEQ)
        xb = tl.load(x_base + t[:, None] * sx_t + offs_p[None, :] * sx_p, mask=mask_tp, other=0.0)
        dyb = tl.load(dy_base + t[:, None] * sdy_t + offs_p[None, :] * sdy_p, mask=mask_tp, other=0.0).to(LO)
        Bb = tl.load(B_base + t[:, None] * sB_t + offs_n[None, :] * sB_n, mask=mask_tn, other=0.0).to(LO)
        Cb = tl.load(C_base + t[:, None] * sC_t + offs_n[None, :] * sC_n, mask=mask_tn, other=0.0).to(LO)
        if EXACT_DECAYS:
            f = tl.exp(tl.minimum((end - cs) + (end_l - cl), 0.0)) * keep_end
        else:
            f = tl.exp(tl.minimum(end - cs, 0.0)) * keep_end
        R_hi = R.to(LO)  # the adjoint state in two 16-bit parts, as in the forward's C S
        du = tl.dot(Bb, R_hi, input_precision=PREC)
        if SPLIT_STATE:
            du = tl.dot(Bb, (R - R_hi.to(tl.float32)).to(LO), du, input_precision=PREC)
        du = du * f[:, None]  # pairs with i after the block
        CBt = tl.dot(Bb, tl.trans(Cb), input_precision=PREC)  # [j, i] = C_i . B_j
        keep_t = tl.trans(diag_mask(seq_ptr, b, T, t, BM, HAS_SEQ))
        A = CBt * tl.where(keep_t, tl.exp(tl.minimum(cs[None, :] - cs[:, None], 0.0)), 0.0)
        if EXACT_DECAYS:  # [j, i]: the rests as row and column factors
            A = A * (tl.exp(-cl)[:, None] * tl.exp(cl)[None, :])
        du += tl.dot(A.to(LO), dyb, input_precision=PREC)
        xf = xb.to(tl.float32)
        dx = du * s[:, None]
        if HAS_D:
            Dv = tl.load(D_ptr + h * sD_h + offs_p * sD_p, mask=mask_p, other=0.0).to(tl.float32)
            dx += Dv[None, :] * dyb.to(tl.float32)
            dD += tl.sum(dyb.to(tl.float32) * xf, axis=0)
        tl.store(dx_ptr + ((b * T + t[:, None]) * H + h) * P + offs_p[None, :], dx.to(dx_ptr.dtype.element_ty),
                 mask=mask_tp)
        if HAS_SCALE:
            tl.store(ds_ptr + ((half * (tl.num_programs(1) // (H * PS)) + b) * H + h) * T + t, tl.sum(xf * du, axis=1),
                     mask=mt)
        if EXACT_DECAYS:
            dec = tl.exp(tl.minimum((end - start) + (end_l - start_l), 0.0))
        else:
            dec = tl.exp(tl.minimum(end - start, 0.0))
        if HAS_SEQ:  # the state entering the block reaches its end only within one sequence
            dec = tl.where(seq_at(seq_ptr, b, T, t0 - 1) == seq_at(seq_ptr, b, T, t0 + BM - 1), dec, 0.0)
        if EXACT_DECAYS:
            e = tl.exp(tl.minimum((cs - start) + (cl - start_l), 0.0)) * keep_start
        else:
            e = tl.exp(tl.minimum(cs - start, 0.0)) * keep_start
        R = R * dec + tl.dot(tl.trans((Cb.to(tl.float32) * e[:, None]).to(LO)), dyb, input_precision=PREC)
        end = start
        if EXACT_DECAYS:
            end_l = start_l
    if HAS_D:
        tl.store(dDp_ptr + ((b * NC + c) * H + h) * P + offs_p, dD, mask=mask_p)
