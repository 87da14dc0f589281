"""The backward's scans over time, Triton kernels of the chunked decay recurrence: the adjoint states
(:func:`decay_bwd_chain_kernel`), ``d log_a`` from straddle sums (:func:`decay_bwd_dla_kernel`) and the
gate (:func:`decay_gate_bwd_kernel`). Notation and launch order: :mod:`structmat.kernels.decay_triton_bwd`.
"""

from __future__ import annotations

from structmat.kernels.decay_triton_fwd import _lookback, _publish
from structmat.kernels.triton_modules import tl, triton


@triton.jit
def decay_bwd_chain_kernel(
    dy_ptr, la_ptr, C_ptr, seq_ptr, dfinal_ptr, slo_ptr,
    glo_ptr, dinit_ptr, cs_ptr, cl_ptr, jump_ptr, g32_ptr, agg_ptr, adec_ptr, sync_ptr,
    T, H, HPG, NC, BH, P, N,
    sla_b, sla_t, sla_h,
    sdy_b, sdy_t, sdy_h, sdy_p,
    sC_b, sC_t, sC_g, sC_n,
    sf_b, sf_h, sf_p, sf_n,
    CHUNK: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BP: tl.constexpr,
    HAS_SEQ: tl.constexpr, HAS_DFINAL: tl.constexpr, WRITE_DINIT: tl.constexpr, PREC: tl.constexpr,
    PS: tl.constexpr, EXACT_DECAYS: tl.constexpr,
):
    """One (chunk, batch, head, ``P / PS`` columns) per program, from the last chunk down.

    Writes ``glo[b, c, h] = G_c`` (input dtype, ``(P, N)``), ``dinit = dh_0`` (fp32), ``cs[b, h, t]`` (with
    ``EXACT_DECAYS`` summed in fp64: ``cs`` its fp32 rounding, ``cl[b, h, t]`` the rest) and
    ``jump[b, c, h, half] = a_c <G_c, h_c>`` over this program's columns. ``g32[b, c - 1, h] = dh_c``
    (fp32) and ``agg``/``adec`` (``Lambda_c = sum_i exp(cs_i) C_i dy_i^T``, ``a_c``) serve the look-back."""
    NBLK: tl.constexpr = CHUNK // BM
    LO = glo_ptr.dtype.element_ty
    ticket = tl.atomic_add(sync_ptr, 1)
    c = NC - 1 - ticket // (BH * PS)
    rem = ticket % (BH * PS)
    bh = rem // PS
    half = rem % PS
    b = (bh // H).to(tl.int64)
    h = bh % H
    g = h // HPG
    PN = P * N
    offs_n = tl.arange(0, BN)
    offs_p = half * BP + tl.arange(0, BP)
    mask_n = offs_n < N
    mask_p = offs_p < P
    tile_off = offs_n[:, None] + offs_p[None, :] * N
    tile_mask = mask_n[:, None] & mask_p[None, :]
    c0 = c * CHUNK
    dy_base = dy_ptr + b * sdy_b + h * sdy_h
    C_base = C_ptr + b * sC_b + g * sC_g
    fl0 = (b * NC * H + h) * PS + half
    fstride = H * PS
    tl0 = (b * NC * H + h) * PN
    tstride = H * PN
    if HAS_SEQ:
        seq_prev = tl.load(seq_ptr + b * T + tl.maximum(c0 - 1, 0))

    # Lambda_c from the chunk's rows (chunk-local cumulative decays, kept for the kernels after this one)
    R = tl.zeros((BN, BP), dtype=tl.float32)
    if EXACT_DECAYS:
        carry = tl.zeros((), dtype=tl.float64)
    else:
        carry = tl.zeros((), dtype=tl.float32)
    for blk in range(NBLK):
        t = c0 + blk * BM + tl.arange(0, BM)
        mt = t < T
        if EXACT_DECAYS:  # (the fp64 sum: every decay difference exact to fp32 as cs + cl, decay_triton_tiles)
            cs64 = carry + tl.cumsum(tl.load(la_ptr + b * sla_b + t * sla_t + h * sla_h, mask=mt, other=0.0)
                                     .to(tl.float64), axis=0)
            carry = tl.min(cs64, axis=0)
            cs = cs64.to(tl.float32)
            cl = (cs64 - cs.to(tl.float64)).to(tl.float32)
            if half == 0:
                tl.store(cs_ptr + (b * H + h) * T + t, cs, mask=mt)
                tl.store(cl_ptr + (b * H + h) * T + t, cl, mask=mt)
            e = tl.exp(tl.minimum(cs, 0.0)) * tl.exp(cl)
        else:
            cs = carry + tl.cumsum(tl.load(la_ptr + b * sla_b + t * sla_t + h * sla_h, mask=mt, other=0.0), axis=0)
            carry = tl.min(cs, axis=0)
            if half == 0:
                tl.store(cs_ptr + (b * H + h) * T + t, cs, mask=mt)
            e = tl.exp(tl.minimum(cs, 0.0))
        if HAS_SEQ:
            e = tl.where(tl.load(seq_ptr + b * T + t, mask=mt, other=-1) == seq_prev, e, 0.0)
        dyb = tl.load(dy_base + t[:, None] * sdy_t + offs_p[None, :] * sdy_p, mask=mt[:, None] & mask_p[None, :],
                      other=0.0).to(LO)
        Cb = tl.load(C_base + t[:, None] * sC_t + offs_n[None, :] * sC_n, mask=mt[:, None] & mask_n[None, :],
                     other=0.0)
        R += tl.dot(tl.trans((Cb.to(tl.float32) * e[:, None]).to(LO)), dyb, input_precision=PREC)
    if EXACT_DECAYS:
        carry32 = carry.to(tl.float32)
        a_c = tl.exp(tl.minimum(carry32, 0.0)) * tl.exp((carry - carry32.to(tl.float64)).to(tl.float32))
    else:
        a_c = tl.exp(tl.minimum(carry, 0.0))
    if HAS_SEQ:
        a_c = tl.where(tl.load(seq_ptr + b * T + tl.minimum(c0 + CHUNK, T) - 1) == seq_prev, a_c, 0.0)
    fidx = fl0 + c * fstride
    flags_ptr = sync_ptr + 2
    if c > 0:
        tl.store(agg_ptr + tl0 + c * tstride + tile_off, R, mask=tile_mask)
        tl.store(adec_ptr + fidx, a_c)
        _publish(flags_ptr + fidx, 1)
    G, mult, k = _lookback(sync_ptr, agg_ptr, g32_ptr, adec_ptr, fl0, fstride, tl0, tstride, c, NC, tile_off,
                           tile_mask, BN, BP, True)
    if HAS_DFINAL:
        if k >= NC:
            G += mult * tl.load(dfinal_ptr + b * sf_b + h * sf_h + offs_n[:, None] * sf_n + offs_p[None, :] * sf_p,
                                mask=tile_mask, other=0.0)
    Glo = G.to(LO)
    tl.store(glo_ptr + tl0 + c * tstride + tile_off, Glo, mask=tile_mask)
    dh = a_c * G + R
    if c > 0:
        tl.store(g32_ptr + tl0 + (c - 1) * tstride + tile_off, dh, mask=tile_mask)
        _publish(flags_ptr + fidx, 2)
    else:
        if WRITE_DINIT:
            tl.store(dinit_ptr + (b * H + h) * PN + tile_off, dh, mask=tile_mask)
    h_in = tl.load(slo_ptr + ((b * (NC + 1) + c) * H + h) * PN + tile_off, mask=tile_mask, other=0.0)
    tl.store(jump_ptr + fidx, a_c * tl.sum(tl.sum(Glo.to(tl.float32) * h_in.to(tl.float32), axis=1), axis=0))


@triton.jit
def _excl_cumsum(v, BM: tl.constexpr):
    """``sum_{j < k} v_j`` for every ``k`` as a masked sum (no subtraction, so no cancellation)."""
    idx = tl.arange(0, BM)
    return tl.sum(tl.where(idx[None, :] < idx[:, None], v[None, :], 0.0), axis=1)


@triton.jit
def _slot(rpart_ptr, q, NB, b, H, h, T, rows):
    return rpart_ptr + ((q * NB + b) * H + h) * T + rows


@triton.jit
def decay_bwd_dla_kernel(
    rpart_ptr, jump_ptr, dla_ptr, T, H, NB, NC,
    CHUNK: tl.constexpr, BM: tl.constexpr, PS: tl.constexpr,
):
    """``d log_a[b, h, k]`` of chunk ``c`` (axis 0), (batch, head) (axis 1) from the per-row sums of
    the dB/dC kernels: for ``k`` in block ``m``, suffix sums (``i >= k``) of the row sums from earlier
    sources, prefix sums (``j < k``) of the column sums to later rows, the 2-D sums inside block ``m``,
    the totals of the pairs that jump over block ``m`` and ``a_c <G_c, h_c>`` (over the whole chunk).
    Every term is a sum of straddling pairs: nothing cancels."""
    NBLK: tl.constexpr = CHUNK // BM
    c = tl.program_id(0)
    b = (tl.program_id(1) // H).to(tl.int64)
    h = tl.program_id(1) % H
    fidx = (b * NC + c) * H + h
    jump = tl.sum(tl.load(jump_ptr + fidx * PS + tl.arange(0, PS)), axis=0)
    for m in range(NBLK):
        t = c * CHUNK + m * BM + tl.arange(0, BM)
        mt = t < T
        rows_in = tl.load(_slot(rpart_ptr, NBLK, NB, b, H, h, T, t), mask=mt, other=0.0)  # sources before the chunk
        for J in range(0, m):
            rows_in += tl.load(_slot(rpart_ptr, J, NB, b, H, h, T, t), mask=mt, other=0.0)
        cols_out = tl.load(_slot(rpart_ptr, NBLK + 1, NB, b, H, h, T, t), mask=mt, other=0.0)  # rows after the chunk
        for I in range(m + 1, NBLK):
            cols_out += tl.load(_slot(rpart_ptr, I, NB, b, H, h, T, t), mask=mt, other=0.0)
        over = jump
        for K in range(m + 1, NBLK):  # rows in a later block, sources before block m
            tK = c * CHUNK + K * BM + tl.arange(0, BM)
            src = tl.load(_slot(rpart_ptr, NBLK, NB, b, H, h, T, tK), mask=tK < T, other=0.0)
            for J in range(0, m):
                src += tl.load(_slot(rpart_ptr, J, NB, b, H, h, T, tK), mask=tK < T, other=0.0)
            over += tl.sum(src, axis=0)
        for J in range(0, m):  # sources in an earlier block, rows after the chunk
            tJ = c * CHUNK + J * BM + tl.arange(0, BM)
            over += tl.sum(tl.load(_slot(rpart_ptr, NBLK + 1, NB, b, H, h, T, tJ), mask=tJ < T, other=0.0), axis=0)
        v = tl.cumsum(rows_in, axis=0, reverse=True) + _excl_cumsum(cols_out, BM) + over
        v += tl.load(_slot(rpart_ptr, m, NB, b, H, h, T, t), mask=mt, other=0.0)  # pairs inside block m
        tl.store(dla_ptr + (b * H + h) * T + t, v, mask=mt)


@triton.jit
def decay_gate_bwd_kernel(
    dout_ptr, z_ptr, ypre_ptr, dy_ptr, dz_ptr, T, H, P,
    so_b, so_t, so_h, so_p,
    sz_b, sz_t, sz_h, sz_p,
    ROWS: tl.constexpr, BP: tl.constexpr,
):
    """Rows of ``(b, t, h)``: ``dy = dout silu(z)`` and ``dz = dout y_pre sigmoid(z) (1 + z (1 - sigmoid(z)))``."""
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)  # (t, h) rows of batch entry program_id(1)
    bb = tl.program_id(1).to(tl.int64)
    t = r // H
    h = r % H
    offs_p = tl.arange(0, BP)
    m = (r < T * H)[:, None] & (offs_p[None, :] < P)
    do = tl.load(dout_ptr + bb * so_b + t[:, None] * so_t + h[:, None] * so_h + offs_p[None, :] * so_p, mask=m,
                 other=0.0).to(tl.float32)
    zz = tl.load(z_ptr + bb * sz_b + t[:, None] * sz_t + h[:, None] * sz_h + offs_p[None, :] * sz_p, mask=m,
                 other=0.0).to(tl.float32)
    off = ((bb * T + t[:, None]) * H + h[:, None]) * P + offs_p[None, :]
    yp = tl.load(ypre_ptr + off, mask=m, other=0.0).to(tl.float32)
    sig = tl.sigmoid(zz)
    tl.store(dy_ptr + off, (do * zz * sig).to(dy_ptr.dtype.element_ty), mask=m)
    tl.store(dz_ptr + off, (do * yp * sig * (1.0 + zz * (1.0 - sig))).to(dz_ptr.dtype.element_ty), mask=m)
