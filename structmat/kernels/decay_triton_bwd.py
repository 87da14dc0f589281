"""Backward Triton kernels of the chunked decay recurrence (see :mod:`decay_triton_fwd` for the forward).

Notation per (batch, head), chunk ``c``: ``u_j = s_j x_j`` (scaled input), ``dy`` the gradient of
``y`` (after the gate's chain rule), ``cs`` the chunk-local inclusive cumulative sum of ``log_a``,
``h_c`` the state entering chunk ``c`` and ``G_c`` the gradient of the state leaving it (``dfinal``
for the last chunk). ``V_ij = decay(i, j) (C_i . B_j) (dy_i . u_j)`` for ``j <= i`` is the pair
(i, j)'s share of the loss; ``d log_a_k`` is the sum of ``V`` over the pairs that straddle ``k``
(``j < k <= i``), accumulated here from sums of such pairs only (nothing cancels). With ``EXACT_DECAYS``
(float32 inputs) ``cs`` is summed in fp64 and kept as its fp32 rounding and a rest ``cl``: a decay's exponent
``cs_i - cs_j`` is ``(cs_i - cs_j) + (cl_i - cl_j)``, and a diagonal tile takes ``exp(cl_i)``, ``exp(-cl_j)`` as row
and column factors (:mod:`decay_triton_tiles`); 16-bit inputs compile without (``cl`` is None).

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
* ``decay_triton_bwd_dx``'s ``decay_bwd_dx_kernel`` -- one (chunk, batch, head) per program, blocks from the last
  to the first with the adjoint state in fp32 registers from ``G_c``: ``du``, hence ``dx`` and ``d scale``.
* ``decay_triton_bwd_scan``'s ``decay_bwd_dla_kernel`` (``d log_a`` from the straddle sums of the two group
  kernels) and ``decay_gate_bwd_kernel`` (with ``z``: ``dy = dout silu(z)``, ``dz = dout y_pre silu'(z)``).
"""

from __future__ import annotations

from structmat.kernels.decay_triton_tiles import (
    block_order,
    diag_mask,
    dot_two_parts,
    head_rests,
    head_vectors,
    seq_keep,
)
from structmat.kernels.triton_modules import tl, triton


@triton.jit
def decay_bwd_dc_kernel(
    x_ptr, dy_ptr, cs_ptr, cl_ptr, s_ptr, B_ptr, C_ptr, seq_ptr, slo_ptr,
    dC_ptr, rpart_ptr,
    T, H, HPG, G, NB, NC, P, N,
    sx_b, sx_t, sx_h, sx_p,
    sdy_b, sdy_t, sdy_h, sdy_p,
    sB_b, sB_t, sB_g, sB_n,
    sC_b, sC_t, sC_g, sC_n,
    CHUNK: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BP: tl.constexpr,
    HAS_SCALE: tl.constexpr, HAS_SEQ: tl.constexpr, PREC: tl.constexpr, HEAVY_FIRST: tl.constexpr,
    EXACT_DECAYS: tl.constexpr,
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
        if EXACT_DECAYS:
            clK_n, clJ_n, clr_n = head_rests(cl_ptr, b, H, h0, T, tK, mK, tJ, mJ, refpos)
        for hh in range(HPG):
            h = h0 + hh
            csK, csJ, ref, sJ = csK_n, csJ_n, ref_n, sJ_n  # loaded one head ahead: off the critical path
            csK_n, csJ_n, ref_n, sJ_n = head_vectors(cs_ptr, s_ptr, b, H, h0 + tl.minimum(hh + 1, HPG - 1), T, tK,
                                                      mK, tJ, mJ, refpos, HAS_SCALE)
            if EXACT_DECAYS:
                clK, clJ, clr = clK_n, clJ_n, clr_n
                clK_n, clJ_n, clr_n = head_rests(cl_ptr, b, H, h0 + tl.minimum(hh + 1, HPG - 1), T, tK, mK, tJ, mJ,
                                                 refpos)
            dyK = tl.load(dy_ptr + b * sdy_b + h * sdy_h + tK[:, None] * sdy_t + offs_p[None, :] * sdy_p,
                          mask=mask_Kp, other=0.0).to(LO)
            xJ = tl.load(x_ptr + b * sx_b + h * sx_h + tJ[:, None] * sx_t + offs_p[None, :] * sx_p,
                         mask=mJ[:, None] & mask_p[None, :], other=0.0).to(LO)
            if not HAS_SCALE:
                sJ = keepJ
            W = tl.dot(dyK, tl.trans(xJ), input_precision=PREC)
            if EXACT_DECAYS:
                e = tl.exp(tl.minimum((csK - ref) + (clK - clr), 0.0)) * keepK
                f = tl.exp(tl.minimum((ref - csJ) + (clr - clJ), 0.0)) * (sJ * keepJ)
            else:
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
    if EXACT_DECAYS:
        clK_n, _u3, _u4 = head_rests(cl_ptr, b, H, h0, T, tK, mK, tK, mK, 0)
    for hh in range(HPG):
        h = h0 + hh
        csK, sK = csK_n, sK_n
        csK_n, _u1, _u2, sK_n = head_vectors(cs_ptr, s_ptr, b, H, h0 + tl.minimum(hh + 1, HPG - 1), T, tK, mK, tK,
                                              mK, 0, HAS_SCALE)
        if EXACT_DECAYS:
            clK = clK_n
            clK_n, _u3, _u4 = head_rests(cl_ptr, b, H, h0 + tl.minimum(hh + 1, HPG - 1), T, tK, mK, tK, mK, 0)
        if not HAS_SCALE:
            sK = tl.where(mK, 1.0, 0.0)
        dyK = tl.load(dy_ptr + b * sdy_b + h * sdy_h + tK[:, None] * sdy_t + offs_p[None, :] * sdy_p,
                      mask=mask_Kp, other=0.0).to(LO)
        xK = tl.load(x_ptr + b * sx_b + h * sx_h + tK[:, None] * sx_t + offs_p[None, :] * sx_p,
                     mask=mask_Kp, other=0.0).to(LO)
        hc = tl.load(slo_ptr + ((b * (NC + 1) + c) * H + h) * PN + st_off, mask=st_mask, other=0.0).to(LO)
        W = tl.dot(dyK, tl.trans(xK), input_precision=PREC)
        if EXACT_DECAYS:  # the rests as row and column factors: no second term in the tile
            rK = tl.exp(clK)
            Ws = W * rK[:, None] * tl.where(keep, tl.exp(tl.minimum(csK[:, None] - csK[None, :], 0.0)), 0.0) \
                * (sK / rK)[None, :]
        else:
            Ws = W * tl.where(keep, tl.exp(tl.minimum(csK[:, None] - csK[None, :], 0.0)), 0.0) * sK[None, :]
        M += Ws
        V = tl.where(strict, CB * Ws, 0.0)  # the pairs j < i (the diagonal straddles nothing)
        V = tl.cumsum(V, axis=1) - V  # [i, k] = sum_{j < k} V_ij
        tl.store(rpart_ptr + ((K * NB + b) * H + h) * T + tK, tl.sum(tl.where(lower, V, 0.0), axis=0), mask=mK)
        if EXACT_DECAYS:
            dCs = tl.dot(dyK, hc, input_precision=PREC) * (tl.exp(tl.minimum(csK, 0.0)) * rK * keepc)[:, None]
        else:
            dCs = tl.dot(dyK, hc, input_precision=PREC) * (tl.exp(tl.minimum(csK, 0.0)) * keepc)[:, None]
        accC += dCs
        tl.store(rpart_ptr + ((NBLK * NB + b) * H + h) * T + tK, tl.sum(dCs * CK.to(tl.float32), axis=1), mask=mK)
    accC = dot_two_parts(accC, M, BK, LO, PREC)
    tl.store(dC_ptr + ((b * T + tK[:, None]) * G + g) * N + offs_n[None, :], accC.to(dC_ptr.dtype.element_ty),
             mask=mK[:, None] & mask_n[None, :])


@triton.jit
def decay_bwd_db_kernel(
    x_ptr, dy_ptr, cs_ptr, cl_ptr, s_ptr, B_ptr, C_ptr, seq_ptr, glo_ptr,
    dB_ptr, rpart_ptr,
    T, H, HPG, G, NB, NC, P, N,
    sx_b, sx_t, sx_h, sx_p,
    sdy_b, sdy_t, sdy_h, sdy_p,
    sB_b, sB_t, sB_g, sB_n,
    sC_b, sC_t, sC_g, sC_n,
    CHUNK: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BP: tl.constexpr,
    HAS_SCALE: tl.constexpr, HAS_SEQ: tl.constexpr, PREC: tl.constexpr, HEAVY_FIRST: tl.constexpr,
    EXACT_DECAYS: tl.constexpr,
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
        if EXACT_DECAYS:
            clI_n, clK_n, clr_n = head_rests(cl_ptr, b, H, h0, T, tI, mI, tK, mK, refpos)
        for hh in range(HPG):
            h = h0 + hh
            csI, csK, ref, sK = csI_n, csK_n, ref_n, sK_n
            csI_n, csK_n, ref_n, sK_n = head_vectors(cs_ptr, s_ptr, b, H, h0 + tl.minimum(hh + 1, HPG - 1), T, tI,
                                                      mI, tK, mK, refpos, HAS_SCALE)
            if EXACT_DECAYS:
                clI, clK, clr = clI_n, clK_n, clr_n
                clI_n, clK_n, clr_n = head_rests(cl_ptr, b, H, h0 + tl.minimum(hh + 1, HPG - 1), T, tI, mI, tK, mK,
                                                 refpos)
            xK = tl.load(x_ptr + b * sx_b + h * sx_h + tK[:, None] * sx_t + offs_p[None, :] * sx_p,
                         mask=mask_Kp, other=0.0).to(LO)
            dyI = tl.load(dy_ptr + b * sdy_b + h * sdy_h + tI[:, None] * sdy_t + offs_p[None, :] * sdy_p,
                          mask=mI[:, None] & mask_p[None, :], other=0.0).to(LO)
            if not HAS_SCALE:
                sK = keepK
            Wt = tl.dot(xK, tl.trans(dyI), input_precision=PREC)
            if EXACT_DECAYS:
                f = tl.exp(tl.minimum((ref - csK) + (clr - clK), 0.0)) * (sK * keepK)
                e = tl.exp(tl.minimum((csI - ref) + (clI - clr), 0.0)) * keepI
            else:
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
    if EXACT_DECAYS:
        clK_n, _u2, cltot_n = head_rests(cl_ptr, b, H, h0, T, tK, mK, tK, mK, chunk_last)
    for hh in range(HPG):
        h = h0 + hh
        csK, total, sK = csK_n, tot_n, sK_n
        csK_n, _u1, tot_n, sK_n = head_vectors(cs_ptr, s_ptr, b, H, h0 + tl.minimum(hh + 1, HPG - 1), T, tK, mK,
                                                tK, mK, chunk_last, HAS_SCALE)
        if EXACT_DECAYS:
            clK, cltot = clK_n, cltot_n
            clK_n, _u2, cltot_n = head_rests(cl_ptr, b, H, h0 + tl.minimum(hh + 1, HPG - 1), T, tK, mK, tK, mK,
                                             chunk_last)
        if not HAS_SCALE:
            sK = tl.where(mK, 1.0, 0.0)
        xK = tl.load(x_ptr + b * sx_b + h * sx_h + tK[:, None] * sx_t + offs_p[None, :] * sx_p,
                     mask=mask_Kp, other=0.0).to(LO)
        dyK = tl.load(dy_ptr + b * sdy_b + h * sdy_h + tK[:, None] * sdy_t + offs_p[None, :] * sdy_p,
                      mask=mask_Kp, other=0.0).to(LO)
        Gc = tl.load(glo_ptr + ((b * NC + c) * H + h) * PN + st_off, mask=st_mask, other=0.0).to(LO)
        Wt = tl.dot(xK, tl.trans(dyK), input_precision=PREC)
        if EXACT_DECAYS:  # [j, i]: the rests as row and column factors
            rK = tl.exp(clK)
            Mt += Wt * rK[None, :] * tl.where(keep_t, tl.exp(tl.minimum(csK[None, :] - csK[:, None], 0.0)), 0.0) \
                * (sK / rK)[:, None]
            dBs = tl.dot(xK, Gc, input_precision=PREC) \
                * (tl.exp(tl.minimum((total - csK) + (cltot - clK), 0.0)) * sK * keepc)[:, None]
        else:
            Mt += Wt * tl.where(keep_t, tl.exp(tl.minimum(csK[None, :] - csK[:, None], 0.0)), 0.0) * sK[:, None]
            dBs = tl.dot(xK, Gc, input_precision=PREC) * (tl.exp(tl.minimum(total - csK, 0.0)) * sK * keepc)[:, None]
        accB += dBs
        tl.store(rpart_ptr + (((NBLK + 1) * NB + b) * H + h) * T + tK, tl.sum(dBs * BK.to(tl.float32), axis=1),
                 mask=mK)
    accB = dot_two_parts(accB, Mt, CK, LO, PREC)
    tl.store(dB_ptr + ((b * T + tK[:, None]) * G + g) * N + offs_n[None, :], accB.to(dB_ptr.dtype.element_ty),
             mask=mK[:, None] & mask_n[None, :])
