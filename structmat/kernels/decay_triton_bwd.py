"""Backward Triton kernels of the chunked decay recurrence (see :mod:`decay_triton_fwd` for the forward).

Notation per (batch, head), chunk ``c``: ``u_j = s_j x_j`` (scaled input), ``dy`` the gradient of
``y`` (after the gate's chain rule), ``cs`` the chunk-local inclusive cumulative sum of ``log_a``,
``h_c`` the state entering chunk ``c`` and ``G_c`` the gradient of the state leaving it (``dfinal``
for the last chunk). ``V_ij = decay(i, j) (C_i . B_j) (dy_i . u_j)`` for ``j <= i`` is the pair
(i, j)'s share of the loss; ``d log_a_k`` is the sum of ``V`` over the pairs that straddle ``k``
(``j < k <= i``), accumulated here from sums of such pairs only (nothing cancels).

Kernels, in launch order (blocks of ``BM`` rows inside a chunk):

* :func:`~structmat.kernels.decay_triton_bwd_scan.decay_bwd_chain_kernel` -- per (chunk, batch, head), the
  forward's look-back from the last chunk down, ``dh_c = a_c G_c + sum_i exp(cs_i) C_i dy_i^T``; writes ``G_c``,
  ``d initial_state``, ``cs`` (``(b, h, T)``) and ``a_c <G_c, h_c>`` (the pairs over the whole chunk).
* :func:`decay_bwd_dc_kernel` / :func:`decay_bwd_db_kernel` -- ``dC`` / ``dB`` of one (chunk, block,
  batch, group), summed over the group's heads in registers: per tile pair, the score gradient
  ``M = sum_h decay_h o (dy u^T)_h`` (one product per head on the unscaled inputs, the decays in fp32 as
  ``e f^T`` off the diagonal), then one product with ``B`` (or ``C``) per group, ``M`` in two 16-bit
  parts; the state terms per head; the row (dC) and column (dB) sums of ``V`` for ``d log_a``. A
  block's work grows (dC) or shrinks (dB) with its index: the heaviest blocks launch first.
* :func:`decay_bwd_dx_kernel` -- one (chunk, batch, head) per program, blocks from the last to the
  first with the adjoint state in fp32 registers from ``G_c``: ``du``, hence ``dx`` and ``d scale``.
* ``decay_triton_bwd_scan``'s ``decay_bwd_dla_kernel`` (``d log_a`` from the straddle sums of the two group
  kernels) and ``decay_gate_bwd_kernel`` (with ``z``: ``dy = dout silu(z)``, ``dz = dout y_pre silu'(z)``).
"""

from __future__ import annotations

import triton
import triton.language as tl

from structmat.kernels.decay_triton_tiles import (
    block_order,
    diag_mask,
    dot_two_parts,
    dx_vectors,
    head_vectors,
    seq_at,
    seq_keep,
)


@triton.jit
def decay_bwd_dc_kernel(
    x_ptr, dy_ptr, cs_ptr, s_ptr, B_ptr, C_ptr, seq_ptr, slo_ptr,
    dC_ptr, rpart_ptr,
    T, H, HPG, G, NB, NC, P, N,
    sx_b, sx_t, sx_h, sx_p,
    sdy_b, sdy_t, sdy_h, sdy_p,
    sB_b, sB_t, sB_g, sB_n,
    sC_b, sC_t, sC_g, sC_n,
    CHUNK: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BP: tl.constexpr,
    HAS_SCALE: tl.constexpr, HAS_SEQ: tl.constexpr, PREC: tl.constexpr, HEAVY_FIRST: tl.constexpr,
):
    """``dC`` of the rows of block ``K`` of chunk ``c`` (axis 0) for a (batch, group) (axis 1):
    ``sum_h [sum_{j <= i in chunk} decay (dy_i . u_j) B_j + exp(cs_i) h_c^T dy_i]``.

    For ``d log_a``, per head and row ``i`` of ``K`` (``rpart[m, b, h, i]``): ``m < K`` the row sums
    ``sum_{j in block m} V_ij``, ``m = K`` the pairs inside the block that straddle ``k = i`` (2-D sums,
    final), ``m = NBLK`` ``sum_{j before the chunk} V_ij`` (through ``h_c``)."""
    NBLK: tl.constexpr = CHUNK // BM
    LO = x_ptr.dtype.element_ty
    c, K = block_order(NBLK, NC, True, HEAVY_FIRST)
    b = (tl.program_id(1) // G).to(tl.int64)
    g = tl.program_id(1) % G
    PN = P * N
    idx = tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_p = tl.arange(0, BP)
    mask_n = offs_n < N
    mask_p = offs_p < P
    c0 = c * CHUNK
    K0 = c0 + K * BM
    tK = K0 + idx
    mK = tK < T
    mask_Kp = mK[:, None] & mask_p[None, :]
    B_base = B_ptr + b * sB_b + g * sB_g
    C_base = C_ptr + b * sC_b + g * sC_g
    CK = tl.load(C_base + tK[:, None] * sC_t + offs_n[None, :] * sC_n, mask=mK[:, None] & mask_n[None, :],
                 other=0.0).to(LO)
    accC = tl.zeros((BM, BN), dtype=tl.float32)
    keepK = seq_keep(seq_ptr, b, T, tK, K0 - 1, HAS_SEQ)  # rows of K that see the state entering K
    h0 = g * HPG

    # tiles (K, J), J < K: rows of K see rows of J through the state entering K, decay = e_i f_j
    for J in range(0, K):
        tJ = c0 + J * BM + idx
        mJ = tJ < T
        BJ = tl.load(B_base + tJ[:, None] * sB_t + offs_n[None, :] * sB_n, mask=mJ[:, None] & mask_n[None, :],
                     other=0.0).to(LO)
        CB = tl.dot(CK, tl.trans(BJ), input_precision=PREC)
        keepJ = seq_keep(seq_ptr, b, T, tJ, K0 - 1, HAS_SEQ)
        M = tl.zeros((BM, BM), dtype=tl.float32)
        refpos = tl.minimum(K0 - 1, T - 1)
        csK_n, csJ_n, ref_n, sJ_n = head_vectors(cs_ptr, s_ptr, b, H, h0, T, tK, mK, tJ, mJ, refpos, HAS_SCALE)
        for hh in range(HPG):
            h = h0 + hh
            csK, csJ, ref, sJ = csK_n, csJ_n, ref_n, sJ_n  # loaded one head ahead: off the critical path
            csK_n, csJ_n, ref_n, sJ_n = head_vectors(cs_ptr, s_ptr, b, H, h0 + tl.minimum(hh + 1, HPG - 1), T, tK,
                                                      mK, tJ, mJ, refpos, HAS_SCALE)
            dyK = tl.load(dy_ptr + b * sdy_b + h * sdy_h + tK[:, None] * sdy_t + offs_p[None, :] * sdy_p,
                          mask=mask_Kp, other=0.0).to(LO)
            xJ = tl.load(x_ptr + b * sx_b + h * sx_h + tJ[:, None] * sx_t + offs_p[None, :] * sx_p,
                         mask=mJ[:, None] & mask_p[None, :], other=0.0).to(LO)
            if not HAS_SCALE:
                sJ = keepJ
            W = tl.dot(dyK, tl.trans(xJ), input_precision=PREC)
            e = tl.exp(tl.minimum(csK - ref, 0.0)) * keepK
            f = tl.exp(tl.minimum(ref - csJ, 0.0)) * (sJ * keepJ)
            Ws = W * e[:, None] * f[None, :]
            M += Ws
            tl.store(rpart_ptr + ((J * NB + b) * H + h) * T + tK, tl.sum(CB * Ws, axis=1), mask=mK)
        accC = dot_two_parts(accC, M, BJ, LO, PREC)

    # the diagonal tile (K, K) and the state entering the chunk, one head at a time
    BK = tl.load(B_base + tK[:, None] * sB_t + offs_n[None, :] * sB_n, mask=mK[:, None] & mask_n[None, :],
                 other=0.0).to(LO)
    CB = tl.dot(CK, tl.trans(BK), input_precision=PREC)
    keep = diag_mask(seq_ptr, b, T, tK, BM, HAS_SEQ)
    strict = idx[:, None] > idx[None, :]
    lower = idx[:, None] >= idx[None, :]
    keepc = seq_keep(seq_ptr, b, T, tK, c0 - 1, HAS_SEQ)
    st_off = offs_p[:, None] * N + offs_n[None, :]
    st_mask = mask_p[:, None] & mask_n[None, :]
    M = tl.zeros((BM, BM), dtype=tl.float32)
    csK_n, _u1, _u2, sK_n = head_vectors(cs_ptr, s_ptr, b, H, h0, T, tK, mK, tK, mK, 0, HAS_SCALE)
    for hh in range(HPG):
        h = h0 + hh
        csK, sK = csK_n, sK_n
        csK_n, _u1, _u2, sK_n = head_vectors(cs_ptr, s_ptr, b, H, h0 + tl.minimum(hh + 1, HPG - 1), T, tK, mK, tK,
                                              mK, 0, HAS_SCALE)
        if not HAS_SCALE:
            sK = tl.where(mK, 1.0, 0.0)
        dyK = tl.load(dy_ptr + b * sdy_b + h * sdy_h + tK[:, None] * sdy_t + offs_p[None, :] * sdy_p,
                      mask=mask_Kp, other=0.0).to(LO)
        xK = tl.load(x_ptr + b * sx_b + h * sx_h + tK[:, None] * sx_t + offs_p[None, :] * sx_p,
                     mask=mask_Kp, other=0.0).to(LO)
        hc = tl.load(slo_ptr + ((b * (NC + 1) + c) * H + h) * PN + st_off, mask=st_mask, other=0.0).to(LO)
        W = tl.dot(dyK, tl.trans(xK), input_precision=PREC)
        Ws = W * tl.where(keep, tl.exp(tl.minimum(csK[:, None] - csK[None, :], 0.0)), 0.0) * sK[None, :]
        M += Ws
        V = tl.where(strict, CB * Ws, 0.0)  # the pairs j < i (the diagonal straddles nothing)
        V = tl.cumsum(V, axis=1) - V  # [i, k] = sum_{j < k} V_ij
        tl.store(rpart_ptr + ((K * NB + b) * H + h) * T + tK, tl.sum(tl.where(lower, V, 0.0), axis=0), mask=mK)
        dCs = tl.dot(dyK, hc, input_precision=PREC) * (tl.exp(tl.minimum(csK, 0.0)) * keepc)[:, None]
        accC += dCs
        tl.store(rpart_ptr + ((NBLK * NB + b) * H + h) * T + tK, tl.sum(dCs * CK.to(tl.float32), axis=1), mask=mK)
    accC = dot_two_parts(accC, M, BK, LO, PREC)
    tl.store(dC_ptr + ((b * T + tK[:, None]) * G + g) * N + offs_n[None, :], accC.to(dC_ptr.dtype.element_ty),
             mask=mK[:, None] & mask_n[None, :])


@triton.jit
def decay_bwd_db_kernel(
    x_ptr, dy_ptr, cs_ptr, s_ptr, B_ptr, C_ptr, seq_ptr, glo_ptr,
    dB_ptr, rpart_ptr,
    T, H, HPG, G, NB, NC, P, N,
    sx_b, sx_t, sx_h, sx_p,
    sdy_b, sdy_t, sdy_h, sdy_p,
    sB_b, sB_t, sB_g, sB_n,
    sC_b, sC_t, sC_g, sC_n,
    CHUNK: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BP: tl.constexpr,
    HAS_SCALE: tl.constexpr, HAS_SEQ: tl.constexpr, PREC: tl.constexpr, HEAVY_FIRST: tl.constexpr,
):
    """``dB`` of the rows of block ``K`` of chunk ``c`` (axis 0) for a (batch, group) (axis 1):
    ``sum_h s_j [sum_{i >= j in chunk} decay (dy_i . x_j) C_i + exp(cs_end - cs_j) G_c x_j]``.

    For ``d log_a``, per head and row ``j`` of ``K``: ``rpart[m]``, ``m > K``: the column sums
    ``sum_{i in block m} V_ij``; ``m = NBLK + 1``: ``sum_{i after the chunk} V_ij`` (through ``G_c``)."""
    NBLK: tl.constexpr = CHUNK // BM
    LO = x_ptr.dtype.element_ty
    c, K = block_order(NBLK, NC, False, HEAVY_FIRST)
    b = (tl.program_id(1) // G).to(tl.int64)
    g = tl.program_id(1) % G
    PN = P * N
    idx = tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_p = tl.arange(0, BP)
    mask_n = offs_n < N
    mask_p = offs_p < P
    c0 = c * CHUNK
    K0 = c0 + K * BM
    tK = K0 + idx
    mK = tK < T
    mask_Kp = mK[:, None] & mask_p[None, :]
    B_base = B_ptr + b * sB_b + g * sB_g
    C_base = C_ptr + b * sC_b + g * sC_g
    BK = tl.load(B_base + tK[:, None] * sB_t + offs_n[None, :] * sB_n, mask=mK[:, None] & mask_n[None, :],
                 other=0.0).to(LO)
    accB = tl.zeros((BM, BN), dtype=tl.float32)
    h0 = g * HPG

    # tiles (I, K), I > K, transposed: [j in K, i in I]
    for I in range(K + 1, NBLK):
        I0 = c0 + I * BM
        tI = I0 + idx
        mI = tI < T
        CI = tl.load(C_base + tI[:, None] * sC_t + offs_n[None, :] * sC_n, mask=mI[:, None] & mask_n[None, :],
                     other=0.0).to(LO)
        CBt = tl.dot(BK, tl.trans(CI), input_precision=PREC)
        keepI = seq_keep(seq_ptr, b, T, tI, I0 - 1, HAS_SEQ)
        keepK = seq_keep(seq_ptr, b, T, tK, I0 - 1, HAS_SEQ)
        Mt = tl.zeros((BM, BM), dtype=tl.float32)
        refpos = tl.minimum(I0 - 1, T - 1)
        csI_n, csK_n, ref_n, sK_n = head_vectors(cs_ptr, s_ptr, b, H, h0, T, tI, mI, tK, mK, refpos, HAS_SCALE)
        for hh in range(HPG):
            h = h0 + hh
            csI, csK, ref, sK = csI_n, csK_n, ref_n, sK_n
            csI_n, csK_n, ref_n, sK_n = head_vectors(cs_ptr, s_ptr, b, H, h0 + tl.minimum(hh + 1, HPG - 1), T, tI,
                                                      mI, tK, mK, refpos, HAS_SCALE)
            xK = tl.load(x_ptr + b * sx_b + h * sx_h + tK[:, None] * sx_t + offs_p[None, :] * sx_p,
                         mask=mask_Kp, other=0.0).to(LO)
            dyI = tl.load(dy_ptr + b * sdy_b + h * sdy_h + tI[:, None] * sdy_t + offs_p[None, :] * sdy_p,
                          mask=mI[:, None] & mask_p[None, :], other=0.0).to(LO)
            if not HAS_SCALE:
                sK = keepK
            Wt = tl.dot(xK, tl.trans(dyI), input_precision=PREC)
            f = tl.exp(tl.minimum(ref - csK, 0.0)) * (sK * keepK)
            e = tl.exp(tl.minimum(csI - ref, 0.0)) * keepI
            Ws = Wt * f[:, None] * e[None, :]
            Mt += Ws
            tl.store(rpart_ptr + ((I * NB + b) * H + h) * T + tK, tl.sum(CBt * Ws, axis=1), mask=mK)
        accB = dot_two_parts(accB, Mt, CI, LO, PREC)

    # the diagonal tile (K, K), transposed, and the state leaving the chunk, one head at a time
    CK = tl.load(C_base + tK[:, None] * sC_t + offs_n[None, :] * sC_n, mask=mK[:, None] & mask_n[None, :],
                 other=0.0).to(LO)
    keep_t = tl.trans(diag_mask(seq_ptr, b, T, tK, BM, HAS_SEQ))  # [j, i]: i >= j
    chunk_last = tl.minimum(c0 + CHUNK, T) - 1
    keepc = seq_keep(seq_ptr, b, T, tK, chunk_last, HAS_SEQ)
    st_off = offs_p[:, None] * N + offs_n[None, :]
    st_mask = mask_p[:, None] & mask_n[None, :]
    Mt = tl.zeros((BM, BM), dtype=tl.float32)
    csK_n, _u1, tot_n, sK_n = head_vectors(cs_ptr, s_ptr, b, H, h0, T, tK, mK, tK, mK, chunk_last, HAS_SCALE)
    for hh in range(HPG):
        h = h0 + hh
        csK, total, sK = csK_n, tot_n, sK_n
        csK_n, _u1, tot_n, sK_n = head_vectors(cs_ptr, s_ptr, b, H, h0 + tl.minimum(hh + 1, HPG - 1), T, tK, mK,
                                                tK, mK, chunk_last, HAS_SCALE)
        if not HAS_SCALE:
            sK = tl.where(mK, 1.0, 0.0)
        xK = tl.load(x_ptr + b * sx_b + h * sx_h + tK[:, None] * sx_t + offs_p[None, :] * sx_p,
                     mask=mask_Kp, other=0.0).to(LO)
        dyK = tl.load(dy_ptr + b * sdy_b + h * sdy_h + tK[:, None] * sdy_t + offs_p[None, :] * sdy_p,
                      mask=mask_Kp, other=0.0).to(LO)
        Gc = tl.load(glo_ptr + ((b * NC + c) * H + h) * PN + st_off, mask=st_mask, other=0.0).to(LO)
        Wt = tl.dot(xK, tl.trans(dyK), input_precision=PREC)
        Mt += Wt * tl.where(keep_t, tl.exp(tl.minimum(csK[None, :] - csK[:, None], 0.0)), 0.0) * sK[:, None]
        dBs = tl.dot(xK, Gc, input_precision=PREC) * (tl.exp(tl.minimum(total - csK, 0.0)) * sK * keepc)[:, None]
        accB += dBs
        tl.store(rpart_ptr + (((NBLK + 1) * NB + b) * H + h) * T + tK, tl.sum(dBs * BK.to(tl.float32), axis=1),
                 mask=mK)
    accB = dot_two_parts(accB, Mt, CK, LO, PREC)
    tl.store(dB_ptr + ((b * T + tK[:, None]) * G + g) * N + offs_n[None, :], accB.to(dB_ptr.dtype.element_ty),
             mask=mK[:, None] & mask_n[None, :])


@triton.jit
def decay_bwd_dx_kernel(
    x_ptr, dy_ptr, cs_ptr, s_ptr, B_ptr, C_ptr, D_ptr, seq_ptr, glo_ptr,
    dx_ptr, ds_ptr, dDp_ptr,
    T, H, HPG, NC, P, N,
    sx_b, sx_t, sx_h, sx_p,
    sdy_b, sdy_t, sdy_h, sdy_p,
    sB_b, sB_t, sB_g, sB_n,
    sC_b, sC_t, sC_g, sC_n,
    sD_h, sD_p,
    CHUNK: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BP: tl.constexpr,
    HAS_SCALE: tl.constexpr, HAS_D: tl.constexpr, HAS_SEQ: tl.constexpr, PREC: tl.constexpr,
    PS: tl.constexpr, SPLIT_STATE: tl.constexpr,
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
    R = tl.load(glo_ptr + ((b * NC + c) * H + h) * PN + offs_n[:, None] + offs_p[None, :] * N,
                mask=mask_n[:, None] & mask_p[None, :], other=0.0).to(tl.float32)
    dD = tl.zeros((BP,), dtype=tl.float32)
    end = tl.load(cs_row + tl.minimum(c0 + CHUNK, T) - 1)  # cs at the end of the block being processed
    t0n = c0 + (NBLK - 1) * BM
    cs_n, s_n, start_n = dx_vectors(cs_row, s_ptr + (b * H + h) * T, t0n, T, t0n > c0, BM, HAS_SCALE)
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
        end = tl.minimum(end, start)  # a block wholly past T: no decay
        keep_end = seq_keep(seq_ptr, b, T, t, t0 + BM - 1, HAS_SEQ)
        keep_start = seq_keep(seq_ptr, b, T, t, t0 - 1, HAS_SEQ)
        xb = tl.load(x_base + t[:, None] * sx_t + offs_p[None, :] * sx_p, mask=mask_tp, other=0.0)
        dyb = tl.load(dy_base + t[:, None] * sdy_t + offs_p[None, :] * sdy_p, mask=mask_tp, other=0.0).to(LO)
        Bb = tl.load(B_base + t[:, None] * sB_t + offs_n[None, :] * sB_n, mask=mask_tn, other=0.0).to(LO)
        Cb = tl.load(C_base + t[:, None] * sC_t + offs_n[None, :] * sC_n, mask=mask_tn, other=0.0).to(LO)
        f = tl.exp(tl.minimum(end - cs, 0.0)) * keep_end
        R_hi = R.to(LO)  # the adjoint state in two 16-bit parts, as in the forward's C S
        du = tl.dot(Bb, R_hi, input_precision=PREC)
        if SPLIT_STATE:
            du = tl.dot(Bb, (R - R_hi.to(tl.float32)).to(LO), du, input_precision=PREC)
        du = du * f[:, None]  # pairs with i after the block
        CBt = tl.dot(Bb, tl.trans(Cb), input_precision=PREC)  # [j, i] = C_i . B_j
        keep_t = tl.trans(diag_mask(seq_ptr, b, T, t, BM, HAS_SEQ))
        A = CBt * tl.where(keep_t, tl.exp(tl.minimum(cs[None, :] - cs[:, None], 0.0)), 0.0)
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
        dec = tl.exp(tl.minimum(end - start, 0.0))
        if HAS_SEQ:  # the state entering the block reaches its end only within one sequence
            dec = tl.where(seq_at(seq_ptr, b, T, t0 - 1) == seq_at(seq_ptr, b, T, t0 + BM - 1), dec, 0.0)
        e = tl.exp(tl.minimum(cs - start, 0.0)) * keep_start
        R = R * dec + tl.dot(tl.trans((Cb.to(tl.float32) * e[:, None]).to(LO)), dyb, input_precision=PREC)
        end = start
    if HAS_D:
        tl.store(dDp_ptr + ((b * NC + c) * H + h) * P + offs_p, dD, mask=mask_p)
