"""Triton kernels of the chunked SSD (1-SS structured masked attention).

Forward, two kernels:

* :func:`state_kernel` -- one program per (batch, head, state tile) walks the chunks in order,
  computing each chunk's state contribution ``B^T (w o x)`` with a tensor-core dot and passing the
  running state on, so chunk states and state passing are one pass over ``x``. It writes the state
  *entering* every chunk and the chunk-local cumulative log decays. With ``REVERSE`` it walks
  backwards and computes the states flowing from the future (the adjoint), used by the backward.
* :func:`chunk_out_kernel` -- one program per (chunk, row block, batch, head): the intra-chunk
  quadratic form ``(C B^T o decay) (dt x)`` plus ``C h_in`` from the entering state, fused with
  the ``D`` skip and the ``silu(z)`` gate.

Backward, two more: :func:`dc_kernel` (row-oriented: ``dC`` summed over the heads of a group) and
:func:`dx_db_kernel` (column-oriented: ``dx``, ``dB``, ``d dt``). Each program takes a few heads of
a group and adds its share of ``dB``/``dC`` atomically (fp32, so their rounding is not bitwise
deterministic from run to run). Decay exponents are clamped at
0 (they are sums of ``dt A <= 0``); ``seq_idx`` masks every pair in different sequences.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _input_scale(ptrs, mask, DT_IS_DA: tl.constexpr):
    """``dt_j``, or 1 where ``dt`` carries log decays (a OneSS mask from ``sma``)."""
    if DT_IS_DA:
        return tl.where(mask, 1.0, 0.0)
    return tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)


@triton.jit
def _tile(inner, CHUNK: tl.constexpr, BLOCK_M: tl.constexpr):
    """Grid coordinates of a row-block program: chunk ``c``, block ``m`` in it, batch ``b`` and the
    inner index (head or group) from axes 0 and 1, with the block's sequence positions."""
    blocks: tl.constexpr = CHUNK // BLOCK_M
    c = tl.program_id(0) // blocks
    m = tl.program_id(0) % blocks
    b = (tl.program_id(1) // inner).to(tl.int64)
    offs = c * CHUNK + m * BLOCK_M + tl.arange(0, BLOCK_M)
    return c, m, b, tl.program_id(1) % inner, offs


@triton.jit
def state_kernel(
    x_ptr, dt_ptr, A_ptr, B_ptr, init_ptr, seq_ptr, states_ptr, final_ptr, cs_ptr,
    L, H, heads_per_group, n_chunks, P, N,
    sx_b, sx_l, sx_h, sx_p,
    sdt_b, sdt_l, sdt_h,
    sB_b, sB_l, sB_g, sB_n,
    si_b, si_h, si_p, si_n,
    sq_b, sq_l,
    ss_b, ss_c, ss_h, ss_n, ss_p,
    sf_b, sf_h, sf_p, sf_n,
    CHUNK: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_P: tl.constexpr,
    HAS_INIT: tl.constexpr, HAS_SEQ: tl.constexpr, REVERSE: tl.constexpr, WRITE_CS: tl.constexpr,
    DOT_PRECISION: tl.constexpr, DT_IS_DA: tl.constexpr = False,
):
    """Forward (``REVERSE=False``): ``h <- exp(sum dA) h + B^T (exp(total - cs) dt o x)``,
    storing ``h`` before each chunk. Reverse: ``g <- exp(sum dA) g + C^T (exp(cs) o dy)`` from the
    last chunk down, storing ``g`` before each chunk (``B`` is ``C`` and ``x`` is ``dy`` then)."""
    pid_bh = tl.program_id(0)
    b = (pid_bh // H).to(tl.int64)
    h = pid_bh % H
    g = h // heads_per_group
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_p = tl.program_id(2) * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_l = tl.arange(0, CHUNK)
    mask_np = (offs_n[:, None] < N) & (offs_p[None, :] < P)
    A = tl.load(A_ptr + h).to(tl.float32)

    state = tl.zeros((BLOCK_N, BLOCK_P), dtype=tl.float32)
    if HAS_INIT:
        state = tl.load(init_ptr + b * si_b + h * si_h + offs_n[:, None] * si_n + offs_p[None, :] * si_p,
                        mask=mask_np, other=0.0).to(tl.float32)
    if HAS_SEQ:
        edge = (L - 1) if REVERSE else 0
        carried = tl.load(seq_ptr + b * sq_b + edge * sq_l)
    for i in range(n_chunks):
        if REVERSE:
            c = n_chunks - 1 - i
        else:
            c = i
        t = c * CHUNK + offs_l
        mask_t = t < L
        dt = tl.load(dt_ptr + b * sdt_b + t * sdt_l + h * sdt_h, mask=mask_t, other=0.0).to(tl.float32)
        if DT_IS_DA:  # dt holds the log decays themselves and inputs are not scaled
            dA = dt
            dt = tl.where(mask_t, 1.0, 0.0)
        else:
            dA = dt * A
        cs = tl.cumsum(dA, axis=0)
        total = tl.sum(dA, axis=0)
        if WRITE_CS:
            if (tl.program_id(1) == 0) & (tl.program_id(2) == 0):
                tl.store(cs_ptr + (b * H + h) * L + t, cs, mask=mask_t)
        if REVERSE:
            w = tl.exp(tl.minimum(cs, 0.0))
        else:
            w = tl.exp(tl.minimum(total - cs, 0.0)) * dt
        decay = tl.exp(tl.minimum(total, 0.0))
        if HAS_SEQ:
            seq = tl.load(seq_ptr + b * sq_b + t * sq_l, mask=mask_t, other=0)
            if REVERSE:
                anchor = tl.load(seq_ptr + b * sq_b + (c * CHUNK) * sq_l)
            else:
                anchor = tl.load(seq_ptr + b * sq_b + tl.minimum(c * CHUNK + CHUNK - 1, L - 1) * sq_l)
            w = tl.where(seq == anchor, w, 0.0)
            decay = tl.where(anchor == carried, decay, 0.0)
            carried = anchor
        tl.store(states_ptr + b * ss_b + c * ss_c + h * ss_h + offs_n[:, None] * ss_n + offs_p[None, :] * ss_p,
                 state.to(states_ptr.dtype.element_ty), mask=mask_np)
        Bc = tl.load(B_ptr + b * sB_b + t[:, None] * sB_l + g * sB_g + offs_n[None, :] * sB_n,
                     mask=mask_t[:, None] & (offs_n[None, :] < N), other=0.0)
        xc = tl.load(x_ptr + b * sx_b + t[:, None] * sx_l + h * sx_h + offs_p[None, :] * sx_p,
                     mask=mask_t[:, None] & (offs_p[None, :] < P), other=0.0)
        xw = (xc.to(tl.float32) * w[:, None]).to(xc.dtype)  # the P tile is the narrower one: fewer registers
        state = state * decay + tl.dot(tl.trans(Bc.to(xc.dtype)), xw, input_precision=DOT_PRECISION)
    tl.store(final_ptr + b * sf_b + h * sf_h + offs_n[:, None] * sf_n + offs_p[None, :] * sf_p, state, mask=mask_np)


@triton.jit
def chunk_out_kernel(
    x_ptr, dt_ptr, cs_ptr, B_ptr, C_ptr, states_ptr, D_ptr, z_ptr, seq_ptr, y_ptr,
    L, H, heads_per_group, P, N,
    sx_b, sx_l, sx_h, sx_p,
    sdt_b, sdt_l, sdt_h,
    sB_b, sB_l, sB_g, sB_n,
    sC_b, sC_l, sC_g, sC_n,
    ss_b, ss_c, ss_h, ss_n, ss_p,
    sD_h, sD_p,
    sz_b, sz_l, sz_h, sz_p,
    sq_b, sq_l,
    sy_b, sy_l, sy_h, sy_p,
    CHUNK: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_P: tl.constexpr,
    HAS_D: tl.constexpr, HAS_Z: tl.constexpr, HAS_SEQ: tl.constexpr, DOT_PRECISION: tl.constexpr,
    DT_IS_DA: tl.constexpr = False,
):
    """``y_i = sum_{j <= i in chunk} (C_i . B_j) exp(cs_i - cs_j) dt_j x_j + exp(cs_i) C_i h_in``."""
    c, m, b, h, offs_i = _tile(H, CHUNK, BLOCK_M)
    g = h // heads_per_group
    offs_n = tl.arange(0, BLOCK_N)
    offs_p = tl.arange(0, BLOCK_P)
    mask_i = offs_i < L
    mask_p = offs_p < P
    cs_row = cs_ptr + (b * H + h) * L
    cs_i = tl.load(cs_row + offs_i, mask=mask_i, other=0.0)
    C_i = tl.load(C_ptr + b * sC_b + offs_i[:, None] * sC_l + g * sC_g + offs_n[None, :] * sC_n,
                  mask=mask_i[:, None] & (offs_n[None, :] < N), other=0.0)
    x_i = tl.load(x_ptr + b * sx_b + offs_i[:, None] * sx_l + h * sx_h + offs_p[None, :] * sx_p,
                  mask=mask_i[:, None] & mask_p[None, :], other=0.0)
    h_in = tl.load(states_ptr + b * ss_b + c * ss_c + h * ss_h + offs_n[:, None] * ss_n + offs_p[None, :] * ss_p,
                   mask=(offs_n[:, None] < N) & mask_p[None, :], other=0.0).to(x_i.dtype)
    scale_i = tl.exp(tl.minimum(cs_i, 0.0))
    if HAS_SEQ:
        seq_i = tl.load(seq_ptr + b * sq_b + offs_i * sq_l, mask=mask_i, other=-1)
        prev = tl.load(seq_ptr + b * sq_b + tl.maximum(c * CHUNK - 1, 0) * sq_l)
        scale_i = tl.where(seq_i == prev, scale_i, 0.0)
    acc = tl.dot(C_i, h_in, input_precision=DOT_PRECISION) * scale_i[:, None]
    for k in range(0, m + 1):
        offs_j = c * CHUNK + k * BLOCK_M + tl.arange(0, BLOCK_M)
        mask_j = offs_j < L
        B_j = tl.load(B_ptr + b * sB_b + offs_j[:, None] * sB_l + g * sB_g + offs_n[None, :] * sB_n,
                      mask=mask_j[:, None] & (offs_n[None, :] < N), other=0.0)
        x_j = tl.load(x_ptr + b * sx_b + offs_j[:, None] * sx_l + h * sx_h + offs_p[None, :] * sx_p,
                      mask=mask_j[:, None] & mask_p[None, :], other=0.0)
        dt_j = _input_scale(dt_ptr + b * sdt_b + offs_j * sdt_l + h * sdt_h, mask_j, DT_IS_DA)
        cs_j = tl.load(cs_row + offs_j, mask=mask_j, other=0.0)
        CB = tl.dot(C_i, tl.trans(B_j), input_precision=DOT_PRECISION)
        keep = offs_i[:, None] >= offs_j[None, :]
        if HAS_SEQ:
            seq_j = tl.load(seq_ptr + b * sq_b + offs_j * sq_l, mask=mask_j, other=-2)
            keep = keep & (seq_i[:, None] == seq_j[None, :])
        decay = tl.where(keep, tl.exp(tl.minimum(cs_i[:, None] - cs_j[None, :], 0.0)), 0.0) * dt_j[None, :]
        acc += tl.dot((CB * decay).to(x_j.dtype), x_j, input_precision=DOT_PRECISION)
    if HAS_D:  # D is (H, P); a per-head D arrives with a zero P stride
        Dh = tl.load(D_ptr + h * sD_h + offs_p * sD_p, mask=mask_p, other=0.0).to(tl.float32)
        acc += Dh[None, :] * x_i.to(tl.float32)
    if HAS_Z:
        z = tl.load(z_ptr + b * sz_b + offs_i[:, None] * sz_l + h * sz_h + offs_p[None, :] * sz_p,
                    mask=mask_i[:, None] & mask_p[None, :], other=0.0).to(tl.float32)
        acc = acc * z * tl.sigmoid(z)
    tl.store(y_ptr + b * sy_b + offs_i[:, None] * sy_l + h * sy_h + offs_p[None, :] * sy_p,
             acc.to(y_ptr.dtype.element_ty), mask=mask_i[:, None] & mask_p[None, :])


@triton.jit
def dc_kernel(
    x_ptr, dy_ptr, dt_ptr, cs_ptr, B_ptr, C_ptr, states_ptr, seq_ptr, dC_ptr, dda_ptr,
    L, H, heads_per_group, G, P, N,
    sx_b, sx_l, sx_h, sx_p,
    sdt_b, sdt_l, sdt_h,
    sB_b, sB_l, sB_g, sB_n,
    sC_b, sC_l, sC_g, sC_n,
    ss_b, ss_c, ss_h, ss_n, ss_p,
    sq_b, sq_l,
    sdc_b, sdc_l, sdc_g, sdc_n,
    CHUNK: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_P: tl.constexpr,
    HEADS_PER_PROGRAM: tl.constexpr, HAS_SEQ: tl.constexpr, DOT_PRECISION: tl.constexpr,
    DT_IS_DA: tl.constexpr = False,
):
    """``dC_i = sum_h [sum_{j <= i} exp(cs_i - cs_j) dt_j (dy_i . x_j) B_j + exp(cs_i) h_in dy_i]``.

    Also adds to ``ddA_k`` (per head, atomically) the pairs ``j < k <= i`` with ``i`` in the chunk
    and ``j`` before it (through ``h_in``): sums of straddling pairs only, so nothing cancels
    (``dy``, ``x`` share strides)."""
    c, m, b, g, offs_i = _tile(G, CHUNK, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_p = tl.arange(0, BLOCK_P)
    mask_i = offs_i < L
    mask_p = offs_p < P
    mask_in = mask_i[:, None] & (offs_n[None, :] < N)
    C_i = tl.load(C_ptr + b * sC_b + offs_i[:, None] * sC_l + g * sC_g + offs_n[None, :] * sC_n, mask=mask_in, other=0.0)
    if HAS_SEQ:
        seq_i = tl.load(seq_ptr + b * sq_b + offs_i * sq_l, mask=mask_i, other=-1)
        prev = tl.load(seq_ptr + b * sq_b + tl.maximum(c * CHUNK - 1, 0) * sq_l)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for hh in range(HEADS_PER_PROGRAM):
        h = g * heads_per_group + tl.program_id(2) * HEADS_PER_PROGRAM + hh
        cs_row = cs_ptr + (b * H + h) * L
        cs_i = tl.load(cs_row + offs_i, mask=mask_i, other=0.0)
        dy_i = tl.load(dy_ptr + b * sx_b + offs_i[:, None] * sx_l + h * sx_h + offs_p[None, :] * sx_p,
                       mask=mask_i[:, None] & mask_p[None, :], other=0.0)
        h_in = tl.load(states_ptr + b * ss_b + c * ss_c + h * ss_h + offs_n[:, None] * ss_n + offs_p[None, :] * ss_p,
                       mask=(offs_n[:, None] < N) & mask_p[None, :], other=0.0).to(dy_i.dtype)
        scale_i = tl.exp(tl.minimum(cs_i, 0.0))
        if HAS_SEQ:
            scale_i = tl.where(seq_i == prev, scale_i, 0.0)
        dC_state = tl.dot(dy_i, tl.trans(h_in), input_precision=DOT_PRECISION) * scale_i[:, None]
        dda_row = dda_ptr + (b * H + h) * L
        r_state = tl.sum(dC_state * C_i.to(tl.float32), axis=1)  # pairs (i, j before the chunk)
        acc += dC_state
        own = tl.sum(r_state, axis=0) - tl.cumsum(r_state, axis=0) + r_state  # k in this block, k <= i
        for kk in range(0, m):  # k in earlier blocks of the chunk: every i here is >= k
            offs_k = c * CHUNK + kk * BLOCK_M + tl.arange(0, BLOCK_M)
            tl.atomic_add(dda_row + offs_k, tl.zeros((BLOCK_M,), dtype=tl.float32) + tl.sum(r_state, axis=0),
                          mask=offs_k < L)
        for k in range(0, m + 1):
            offs_j = c * CHUNK + k * BLOCK_M + tl.arange(0, BLOCK_M)
            mask_j = offs_j < L
            x_j = tl.load(x_ptr + b * sx_b + offs_j[:, None] * sx_l + h * sx_h + offs_p[None, :] * sx_p,
                          mask=mask_j[:, None] & mask_p[None, :], other=0.0)
            B_j = tl.load(B_ptr + b * sB_b + offs_j[:, None] * sB_l + g * sB_g + offs_n[None, :] * sB_n,
                          mask=mask_j[:, None] & (offs_n[None, :] < N), other=0.0)
            dt_j = _input_scale(dt_ptr + b * sdt_b + offs_j * sdt_l + h * sdt_h, mask_j, DT_IS_DA)
            cs_j = tl.load(cs_row + offs_j, mask=mask_j, other=0.0)
            keep = offs_i[:, None] >= offs_j[None, :]
            if HAS_SEQ:
                seq_j = tl.load(seq_ptr + b * sq_b + offs_j * sq_l, mask=mask_j, other=-2)
                keep = keep & (seq_i[:, None] == seq_j[None, :])
            W = tl.dot(dy_i, tl.trans(x_j), input_precision=DOT_PRECISION)
            W = W * tl.where(keep, tl.exp(tl.minimum(cs_i[:, None] - cs_j[None, :], 0.0)), 0.0) * dt_j[None, :]
            acc += tl.dot(W.to(B_j.dtype), B_j, input_precision=DOT_PRECISION)
        tl.atomic_add(dda_row + offs_i, own, mask=mask_i)
    tl.atomic_add(dC_ptr + b * sdc_b + offs_i[:, None] * sdc_l + g * sdc_g + offs_n[None, :] * sdc_n, acc, mask=mask_in)


@triton.jit
def dx_db_kernel(
    x_ptr, dy_ptr, dt_ptr, cs_ptr, B_ptr, C_ptr, rstates_ptr, D_ptr, seq_ptr,
    dx_ptr, dB_ptr, dda_ptr, ddt_ptr,
    L, H, heads_per_group, G, P, N,
    sx_b, sx_l, sx_h, sx_p,
    sdt_b, sdt_l, sdt_h,
    sB_b, sB_l, sB_g, sB_n,
    sC_b, sC_l, sC_g, sC_n,
    ss_b, ss_c, ss_h, ss_n, ss_p,
    sD_h, sD_p,
    sq_b, sq_l,
    sdx_b, sdx_l, sdx_h, sdx_p,
    sdb_b, sdb_l, sdb_g, sdb_n,
    CHUNK: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_P: tl.constexpr,
    HEADS_PER_PROGRAM: tl.constexpr, HAS_D: tl.constexpr, HAS_SEQ: tl.constexpr, DOT_PRECISION: tl.constexpr,
    DT_IS_DA: tl.constexpr = False,
):
    """For source positions ``j``: ``q_j = sum_{i >= j} exp(cs_i - cs_j) (C_i . B_j) dy_i +
    exp(total - cs_j) g^T B_j`` gives ``dx_j = dt_j q_j (+ D dy_j)`` and ``d dt_j = x_j . q_j``;
    ``dB_j = sum_h dt_j [sum_i exp(cs_i - cs_j) (dy_i . x_j) C_i + exp(total - cs_j) g x_j]``,
    ``g`` is the adjoint state entering from the right. Adds to ``ddA_k`` the straddling pairs
    ``j < k <= i`` with ``j`` in the chunk: ``i`` in it too (from the fp32 tiles
    ``V = (C B^T) o (dy x^T) o decay o dt``) or after it (through ``g``)."""
    blocks: tl.constexpr = CHUNK // BLOCK_M
    c, k, b, g, offs_j = _tile(G, CHUNK, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_p = tl.arange(0, BLOCK_P)
    mask_j = offs_j < L
    mask_p = offs_p < P
    mask_jn = mask_j[:, None] & (offs_n[None, :] < N)
    mask_jp = mask_j[:, None] & mask_p[None, :]
    last = tl.minimum(c * CHUNK + CHUNK - 1, L - 1)
    B_j = tl.load(B_ptr + b * sB_b + offs_j[:, None] * sB_l + g * sB_g + offs_n[None, :] * sB_n, mask=mask_jn, other=0.0)
    if HAS_SEQ:
        seq_j = tl.load(seq_ptr + b * sq_b + offs_j * sq_l, mask=mask_j, other=-1)
        nxt = tl.load(seq_ptr + b * sq_b + tl.minimum(c * CHUNK + CHUNK, L - 1) * sq_l)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for hh in range(HEADS_PER_PROGRAM):
        h = g * heads_per_group + tl.program_id(2) * HEADS_PER_PROGRAM + hh
        cs_row = cs_ptr + (b * H + h) * L
        cs_j = tl.load(cs_row + offs_j, mask=mask_j, other=0.0)
        total = tl.load(cs_row + last)
        dt_j = _input_scale(dt_ptr + b * sdt_b + offs_j * sdt_l + h * sdt_h, mask_j, DT_IS_DA)
        x_j = tl.load(x_ptr + b * sx_b + offs_j[:, None] * sx_l + h * sx_h + offs_p[None, :] * sx_p, mask=mask_jp, other=0.0)
        g_in = tl.load(rstates_ptr + b * ss_b + c * ss_c + h * ss_h + offs_n[:, None] * ss_n + offs_p[None, :] * ss_p,
                       mask=(offs_n[:, None] < N) & mask_p[None, :], other=0.0).to(x_j.dtype)
        to_end = tl.exp(tl.minimum(total - cs_j, 0.0))
        if HAS_SEQ:
            to_end = tl.where(seq_j == nxt, to_end, 0.0)
        q = tl.dot(B_j, g_in, input_precision=DOT_PRECISION) * to_end[:, None]
        dB_future = tl.dot(x_j, tl.trans(g_in), input_precision=DOT_PRECISION) * (to_end * dt_j)[:, None]
        s_future = tl.sum(dB_future * B_j.to(tl.float32), axis=1)  # pairs (i after the chunk, j)
        acc += dB_future
        dda_row = dda_ptr + (b * H + h) * L
        own = tl.cumsum(s_future, axis=0) - s_future
        later = tl.zeros((BLOCK_M,), dtype=tl.float32) + tl.sum(s_future, axis=0)
        for kk in range(k + 1, blocks):
            offs_k = c * CHUNK + kk * BLOCK_M + tl.arange(0, BLOCK_M)
            tl.atomic_add(dda_row + offs_k, later, mask=offs_k < L)
        for mi in range(k, blocks):
            offs_i = c * CHUNK + mi * BLOCK_M + tl.arange(0, BLOCK_M)
            mask_i = offs_i < L
            C_i = tl.load(C_ptr + b * sC_b + offs_i[:, None] * sC_l + g * sC_g + offs_n[None, :] * sC_n,
                          mask=mask_i[:, None] & (offs_n[None, :] < N), other=0.0)
            dy_i = tl.load(dy_ptr + b * sx_b + offs_i[:, None] * sx_l + h * sx_h + offs_p[None, :] * sx_p,
                           mask=mask_i[:, None] & mask_p[None, :], other=0.0)
            cs_i = tl.load(cs_row + offs_i, mask=mask_i, other=0.0)
            keep = offs_i[None, :] >= offs_j[:, None]
            if HAS_SEQ:
                seq_i = tl.load(seq_ptr + b * sq_b + offs_i * sq_l, mask=mask_i, other=-2)
                keep = keep & (seq_i[None, :] == seq_j[:, None])
            decay = tl.where(keep, tl.exp(tl.minimum(cs_i[None, :] - cs_j[:, None], 0.0)), 0.0)
            BC = tl.dot(B_j, tl.trans(C_i), input_precision=DOT_PRECISION) * decay
            q += tl.dot(BC.to(dy_i.dtype), dy_i, input_precision=DOT_PRECISION)
            XD = tl.dot(x_j, tl.trans(dy_i), input_precision=DOT_PRECISION)
            VT = BC * XD * dt_j[:, None]  # V_ij = (C_i . B_j) decay dt_j (dy_i . x_j), transposed
            XD = XD * decay * dt_j[:, None]
            acc += tl.dot(XD.to(C_i.dtype), C_i, input_precision=DOT_PRECISION)
            if mi == k:  # S_kk = sum_{i >= kk} sum_{j < kk} V_ij inside the diagonal tile
                before = tl.cumsum(VT, axis=0) - VT
                idx = tl.arange(0, BLOCK_M)
                own += tl.sum(tl.where(idx[None, :] >= idx[:, None], before, 0.0), axis=1)
            else:
                per_j = tl.sum(VT, axis=1)
                own += tl.cumsum(per_j, axis=0) - per_j
                per_i = tl.sum(VT, axis=0)
                tl.atomic_add(dda_row + offs_i, tl.sum(per_i, axis=0) - tl.cumsum(per_i, axis=0) + per_i, mask=mask_i)
                everything = tl.zeros((BLOCK_M,), dtype=tl.float32) + tl.sum(per_i, axis=0)
                for kk in range(k + 1, mi):
                    offs_k = c * CHUNK + kk * BLOCK_M + tl.arange(0, BLOCK_M)
                    tl.atomic_add(dda_row + offs_k, everything, mask=offs_k < L)
        tl.atomic_add(dda_row + offs_j, own, mask=mask_j)
        tl.store(ddt_ptr + (b * H + h) * L + offs_j, tl.sum(q * x_j.to(tl.float32), axis=1), mask=mask_j)
        dx = q * dt_j[:, None]
        if HAS_D:
            dy_j = tl.load(dy_ptr + b * sx_b + offs_j[:, None] * sx_l + h * sx_h + offs_p[None, :] * sx_p,
                           mask=mask_jp, other=0.0).to(tl.float32)
            dx += tl.load(D_ptr + h * sD_h + offs_p * sD_p, mask=mask_p, other=0.0).to(tl.float32)[None, :] * dy_j
        tl.store(dx_ptr + b * sdx_b + offs_j[:, None] * sdx_l + h * sdx_h + offs_p[None, :] * sdx_p,
                 dx.to(dx_ptr.dtype.element_ty), mask=mask_jp)
    tl.atomic_add(dB_ptr + b * sdb_b + offs_j[:, None] * sdb_l + g * sdb_g + offs_n[None, :] * sdb_n, acc, mask=mask_jn)
