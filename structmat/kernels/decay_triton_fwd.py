"""Forward Triton kernel of the chunked decay recurrence (1-SS structured masked attention, Mamba-2 SSD).

Per batch ``b`` and head ``h`` (group ``g``), the state ``S_t`` is ``(P, N)``::

    S_t = exp(log_a_t) S_{t-1} + (s_t x_t) B_t^T,     y_t = S_t C_t (+ D x_t),     out = y * silu(z)

One program per (chunk, batch, head), all in :func:`decay_fwd_kernel`:

1. the chunk's own state ``L_c = sum_j exp(sum of log_a after j) s_j B_j x_j^T`` (from a zero state) is
   built block by block from the last (``BM`` rows at a time, each weight's exponent a suffix sum) and
   published with the chunk's decay ``a_c`` (flag 1);
2. the state entering the chunk is found by a decoupled look-back over the chunks before it: a chunk
   whose inclusive state is out (flag 2) ends the walk, one with only its aggregate out is folded in
   (``acc += mult L_k``, ``mult *= a_k``) and the walk goes on; the inclusive state
   ``a_c h_in + L_c`` is then written (it is the state entering the next chunk, the chunk-states
   output) and flagged;
3. the output, block by block from the entering state: ``y_I = e o (C_I S) + (C_I B_I^T o decay) (s x_I)``
   with the state carried from block to block in fp32 registers, so only the diagonal ``BM x BM``
   tiles of the chunk are quadratic and no decay is ever an exponential of a positive number.

Programs take their chunk from an atomic ticket, so a program only ever waits for chunks whose
programs started before it: the look-back cannot deadlock whatever order the hardware schedules
programs in (and under the interpreter, which runs programs one after the other, never waits).
Every decay is ``exp`` of a sum of ``log_a <= 0`` over a segment, computed from block-local
cumulative sums (for fp32 inputs in fp64, split into a float and row and column factors) or suffix
sums. ``seq_idx`` cuts every pair of positions in different sequences.
"""

from __future__ import annotations

from structmat.kernels.triton_modules import tl, triton

# A waiting program gives up after this many polls of a flag (about a second on a GPU) and raises the error
# slot of the sync buffer instead of hanging the device; a correct launch never comes near it.
SPIN_LIMIT = tl.constexpr(1 << 20)


@triton.jit
def _wait_flag(flag_ptr, err_ptr):
    """Poll a chunk's flag (acquire) until it is set; 2 (and the error slot) if it never is."""
    f = tl.atomic_add(flag_ptr, 0, sem="acquire")
    n = 0
    while (f == 0) & (n < SPIN_LIMIT):
        f = tl.atomic_add(flag_ptr, 0, sem="acquire")
        n += 1
    if f == 0:
        tl.atomic_xchg(err_ptr, 1)
        f = 2
    return f


@triton.jit
def _publish(flag_ptr, value):
    """Make this program's earlier stores visible, then set its flag (release, one thread)."""
    tl.debug_barrier()
    tl.atomic_xchg(flag_ptr, value, sem="release")


@triton.jit
def _lookback(sync_ptr, agg_ptr, incl_ptr, adec_ptr, fl0, fstride, tl0, tstride, c, NC, tile_off, tile_mask,
              BN: tl.constexpr, BP: tl.constexpr, REVERSE: tl.constexpr):
    """State (or adjoint state) reaching chunk ``c`` from the chunks before (after, ``REVERSE``) it.

    Chunk ``k`` of this stream has its flag and decay at ``fl0 + k fstride`` and its state tiles at
    ``tl0 + k tstride + tile_off``. Returns ``(acc, mult, k)``: ``k`` is outside ``[0, NC)`` when the
    walk reached the sequence edge with the factor ``mult`` left for the initial state (final-state
    gradient)."""
    err_ptr = sync_ptr + 1
    flags_ptr = sync_ptr + 2
    acc = tl.zeros((BN, BP), dtype=tl.float32)
    mult = tl.full((), 1.0, tl.float32)
    if REVERSE:
        k = c + 1
        go = k < NC
    else:
        k = c - 1
        go = k >= 0
    while go:
        fidx = fl0 + k * fstride
        f = _wait_flag(flags_ptr + fidx, err_ptr)
        if f == 1:  # only the aggregate: fold it in and keep walking
            acc += mult * tl.load(agg_ptr + tl0 + k * tstride + tile_off, mask=tile_mask, other=0.0,
                                  cache_modifier=".cg")
            mult = mult * tl.load(adec_ptr + fidx, cache_modifier=".cg")
            if REVERSE:
                k += 1
                go = (k < NC) & (mult != 0.0)
            else:
                k -= 1
                go = (k >= 0) & (mult != 0.0)
        else:  # the inclusive value is out (written to the neighbouring slot): the walk ends
            if REVERSE:
                slot = k - 1
                go = k < 0  # false: k >= 1 here
            else:
                slot = k + 1
                go = k < 0  # false: k >= 0 here
            acc += mult * tl.load(incl_ptr + tl0 + slot * tstride + tile_off, mask=tile_mask, other=0.0,
                                  cache_modifier=".cg")
    return acc, mult, k


@triton.jit
def _block_load(la_ptr, s_ptr, b, h, T, t0, sla_b, sla_t, sla_h, BM: tl.constexpr, HAS_SCALE: tl.constexpr):
    """``log_a`` and the scale of rows ``t0 .. t0 + BM - 1`` of one head (``s`` shares ``log_a``'s strides;
    the scale is 1 inside ``T`` and 0 past it when absent)."""
    t = t0 + tl.arange(0, BM)
    mt = t < T
    row = b * sla_b + t * sla_t + h * sla_h
    la = tl.load(la_ptr + row, mask=mt, other=0.0)
    if HAS_SCALE:
        s = tl.load(s_ptr + row, mask=mt, other=0.0)
    else:
        s = tl.where(mt, 1.0, 0.0)
    return la, s


@triton.jit
def _block_from(la, s, seq_ptr, b, T, t0, BM: tl.constexpr, HAS_SEQ: tl.constexpr, EXACT: tl.constexpr):
    """Block-local decays of rows ``t0 .. t0 + BM - 1`` from their ``log_a``.

    With ``EXACT`` (fp32 inputs, :data:`~structmat.kernels.decay_triton_launch.EXACT_DECAY_DTYPES`), the inclusive
    cumulative log decay from the block start is summed in fp64 and kept as ``lc + lo``: ``lc`` its
    fp32 rounding, in which every tile exponent ``lc_i - lc_j`` is a difference of two floats (exact where they are
    close), and ``lo`` the rest, which enters only as the row factor ``r_i = exp(lo_i)`` (the caller scales row ``i``
    of the output) and the column factor ``exp(-lo_j)`` (folded into ``s``): never a second term in a ``BM x BM``
    tile, which costs 70% of the N = 128 forward (lab book, session 16). A float32 sum (without ``EXACT``: ``r = 1``)
    loses ``~|lc| 2^-24`` in every short segment's exponent (relative error 1.2e-5 at dt A near -370).

    Returns ``t``, the row mask, ``lc``, ``r``, ``e_i = exp(lc_i)`` (entering state -> row ``i``, before ``r_i``),
    ``f_j`` (row ``j`` -> block end, times ``s_j`` the whole weight), ``dec`` (entering state -> block end), ``s``
    and the rows' sequence ids; with ``seq_idx``, ``e``/``f``/``dec`` are 0 across a sequence change."""
    t = t0 + tl.arange(0, BM)
    mt = t < T
    if EXACT:
        lc64 = tl.cumsum(la.to(tl.float64), axis=0)
        bt64 = tl.min(lc64, axis=0)  # lc is non-increasing: its last value, so bt - lc <= 0 exactly
        lc = lc64.to(tl.float32)
        bt = bt64.to(tl.float32)
        r = tl.exp((lc64 - lc.to(tl.float64)).to(tl.float32))
        r_end = tl.exp((bt64 - bt.to(tl.float64)).to(tl.float32))
        s = s / r
        f = tl.exp(bt - lc) * r_end
        dec = tl.exp(bt) * r_end
    else:
        lc = tl.cumsum(la, axis=0)
        bt = tl.min(lc, axis=0)
        r = tl.full((BM,), 1.0, tl.float32)  # (no rest: unused)
        f = tl.exp(bt - lc)
        dec = tl.exp(bt)
    e = tl.exp(lc)
    if HAS_SEQ:
        sq = tl.load(seq_ptr + b * T + t, mask=mt, other=-1)
        prev = tl.load(seq_ptr + b * T + tl.minimum(tl.maximum(t0 - 1, 0), T - 1))
        last = tl.load(seq_ptr + b * T + tl.minimum(t0 + BM - 1, T - 1))
        e = tl.where(sq == prev, e, 0.0)
        f = tl.where(sq == last, f, 0.0)
        dec = tl.where(last == prev, dec, 0.0)
    else:
        sq = t
    return t, mt, lc, r, e, f, dec, s, sq


@triton.jit
def _diag_decay(lc, sq, BM: tl.constexpr, HAS_SEQ: tl.constexpr, STRICT: tl.constexpr):
    """``exp(lc_i - lc_j)`` for ``i >= j`` (``i > j`` if ``STRICT``) in one sequence, else 0."""
    idx = tl.arange(0, BM)
    if STRICT:
        keep = idx[:, None] > idx[None, :]
    else:
        keep = idx[:, None] >= idx[None, :]
    if HAS_SEQ:
        keep = keep & (sq[:, None] == sq[None, :])
    return tl.where(keep, tl.exp(tl.minimum(lc[:, None] - lc[None, :], 0.0)), 0.0)


@triton.jit
def decay_fwd_kernel(
    x_ptr, la_ptr, s_ptr, B_ptr, C_ptr, D_ptr, z_ptr, init_ptr, seq_ptr,
    y_ptr, ypre_ptr, cst_ptr, slo_ptr, final_ptr, agg_ptr, adec_ptr, sync_ptr,
    T, H, HPG, NC, BH, P, N,
    sla_b, sla_t, sla_h,
    sx_b, sx_t, sx_h, sx_p,
    sB_b, sB_t, sB_g, sB_n,
    sC_b, sC_t, sC_g, sC_n,
    sz_b, sz_t, sz_h, sz_p,
    sD_h, sD_p,
    si_b, si_h, si_p, si_n,
    CHUNK: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BP: tl.constexpr,
    HAS_SCALE: tl.constexpr, HAS_D: tl.constexpr, HAS_Z: tl.constexpr, HAS_INIT: tl.constexpr,
    HAS_SEQ: tl.constexpr, SAVE_LO: tl.constexpr, WRITE_YPRE: tl.constexpr, PREC: tl.constexpr,
    PS: tl.constexpr, SPLIT_STATE: tl.constexpr, EXACT_DECAYS: tl.constexpr,
):
    """One (chunk, batch, head, ``P / PS`` columns) per program, chunk taken from the ticket in ``sync_ptr[0]``.

    Writes ``y`` (and ``ypre``, the output before the gate), the chunk states ``cst (b, nc, h, p, n)``
    fp32 (slot ``c`` = state entering chunk ``c``), ``final``, and with ``SAVE_LO`` the states in the
    input dtype ``slo (b, nc + 1, h, p, n)`` (slot ``nc`` = final) for the backward. ``agg`` and
    ``adec`` hold each chunk's own state and decay for the look-back."""
    NBLK: tl.constexpr = CHUNK // BM
    LO = x_ptr.dtype.element_ty
    ticket = tl.atomic_add(sync_ptr, 1)
    c = ticket // (BH * PS)
    rem = ticket % (BH * PS)
    bh = rem // PS
    half = rem % PS
    b = (bh // H).to(tl.int64)
    h = bh % H
    g = h // HPG
    PN = P * N
    offs_m = tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_p = half * BP + tl.arange(0, BP)
    mask_n = offs_n < N
    mask_p = offs_p < P
    tile_off = offs_n[:, None] + offs_p[None, :] * N  # (N, P) registers over the (P, N) memory layout
    tile_mask = mask_n[:, None] & mask_p[None, :]
    c0 = c * CHUNK
    x_base = x_ptr + b * sx_b + h * sx_h
    B_base = B_ptr + b * sB_b + g * sB_g
    C_base = C_ptr + b * sC_b + g * sC_g
    # this stream's flags / decays (b, k, h, half) and state tiles (b, k, h) for chunk k
    fl0 = (b * NC * H + h) * PS + half
    fstride = H * PS
    tl0 = (b * NC * H + h) * PN
    tstride = H * PN

    # 1. the chunk's own state L = sum_j exp(sum of log_a after j in the chunk) s_j B_j x_j^T and its decay, for
    #    the chunks after it; blocks from the last, so each weight's exponent is a sum of terms of one sign (a
    #    suffix sum), never the difference of two cumulative sums, which loses ~|cs| * 2^-24 (1e-4 at cs ~ -10^3)
    chunk_last = tl.minimum(c0 + CHUNK, T) - 1
    if HAS_SEQ:
        seq_last = tl.load(seq_ptr + b * T + chunk_last)
    L = tl.zeros((BN, BP), dtype=tl.float32)
    total = tl.zeros((), dtype=tl.float32)  # sum of log_a over the blocks after the current one
    for i in range(NBLK):
        t = c0 + (NBLK - 1 - i) * BM + offs_m
        mt = t < T
        row = b * sla_b + t * sla_t + h * sla_h
        la_next = tl.load(la_ptr + row + sla_t, mask=(offs_m < BM - 1) & (t + 1 < T), other=0.0)
        w = tl.exp(total + tl.cumsum(la_next, axis=0, reverse=True))
        total += tl.sum(tl.load(la_ptr + row, mask=mt, other=0.0), axis=0)
        if HAS_SCALE:
            w = w * tl.load(s_ptr + row, mask=mt, other=0.0)
        if HAS_SEQ:
            w = tl.where(tl.load(seq_ptr + b * T + t, mask=mt, other=-1) == seq_last, w, 0.0)
        xb = tl.load(x_base + t[:, None] * sx_t + offs_p[None, :] * sx_p, mask=mt[:, None] & mask_p[None, :], other=0.0)
        Bb = tl.load(B_base + t[:, None] * sB_t + offs_n[None, :] * sB_n, mask=mt[:, None] & mask_n[None, :], other=0.0)
        L += tl.dot(tl.trans(Bb.to(LO)), (xb.to(tl.float32) * w[:, None]).to(LO), input_precision=PREC)
    a_c = tl.exp(total)
    if HAS_SEQ:
        a_c = tl.where(seq_last == tl.load(seq_ptr + b * T + tl.maximum(c0 - 1, 0)), a_c, 0.0)
    fidx = fl0 + c * fstride
    flags_ptr = sync_ptr + 2
    if c < NC - 1:
        tl.store(agg_ptr + tl0 + c * tstride + tile_off, L, mask=tile_mask)
        tl.store(adec_ptr + fidx, a_c)
        _publish(flags_ptr + fidx, 1)

    # 2. the entering state by look-back; the inclusive state for the chunks after this one
    h_in, mult, k = _lookback(sync_ptr, agg_ptr, cst_ptr, adec_ptr, fl0, fstride, tl0, tstride, c, NC, tile_off,
                              tile_mask, BN, BP, False)
    if HAS_INIT:
        if k < 0:
            init = tl.load(init_ptr + b * si_b + h * si_h + offs_n[:, None] * si_n + offs_p[None, :] * si_p,
                           mask=tile_mask, other=0.0)
            h_in += mult * init
    incl = a_c * h_in + L
    lo0 = (b * (NC + 1) * H + h) * PN  # slo has one more slot (the final state)
    if c == 0:
        tl.store(cst_ptr + tl0 + tile_off, h_in, mask=tile_mask)
        if SAVE_LO:
            tl.store(slo_ptr + lo0 + tile_off, h_in.to(LO), mask=tile_mask)
    if c < NC - 1:
        tl.store(cst_ptr + tl0 + (c + 1) * tstride + tile_off, incl, mask=tile_mask)
    else:
        tl.store(final_ptr + (b * H + h) * PN + tile_off, incl, mask=tile_mask)
    if SAVE_LO:
        tl.store(slo_ptr + lo0 + (c + 1) * tstride + tile_off, incl.to(LO), mask=tile_mask)
    if c < NC - 1:
        _publish(flags_ptr + fidx, 2)

    # 3. outputs block by block, the state carried in registers from the entering one
    S = h_in
    la_n, s_n = _block_load(la_ptr, s_ptr, b, h, T, c0, sla_b, sla_t, sla_h, BM, HAS_SCALE)
    for blk in range(NBLK):
        la_b, s_b = la_n, s_n  # loaded one block ahead: off the critical path
        la_n, s_n = _block_load(la_ptr, s_ptr, b, h, T, c0 + tl.minimum(blk + 1, NBLK - 1) * BM, sla_b, sla_t,
                                sla_h, BM, HAS_SCALE)
        t, mt, lc, r, e, f, dec, s, sq = _block_from(la_b, s_b, seq_ptr, b, T, c0 + blk * BM, BM, HAS_SEQ,
                                                     EXACT_DECAYS)
        mask_tp = mt[:, None] & mask_p[None, :]
        xb = tl.load(x_base + t[:, None] * sx_t + offs_p[None, :] * sx_p, mask=mask_tp, other=0.0)
        Bb = tl.load(B_base + t[:, None] * sB_t + offs_n[None, :] * sB_n, mask=mt[:, None] & mask_n[None, :],
                     other=0.0).to(LO)
        Cb = tl.load(C_base + t[:, None] * sC_t + offs_n[None, :] * sC_n, mask=mt[:, None] & mask_n[None, :],
                     other=0.0).to(LO)
        S_hi = S.to(LO)  # the state in two 16-bit parts: C S to ~16 bits, as accurate as the fp32 state
        acc = tl.dot(Cb, S_hi, input_precision=PREC)
        if SPLIT_STATE:
            acc = tl.dot(Cb, (S - S_hi.to(tl.float32)).to(LO), acc, input_precision=PREC)
        acc = acc * e[:, None]
        CB = tl.dot(Cb, tl.trans(Bb), input_precision=PREC)
        W = CB * _diag_decay(lc, sq, BM, HAS_SEQ, False) * s[None, :]
        acc += tl.dot(W.to(LO), xb.to(LO), input_precision=PREC)
        if EXACT_DECAYS:
            acc = acc * r[:, None]
        if blk < NBLK - 1:
            S = S * dec + tl.dot(tl.trans(Bb), (xb.to(tl.float32) * (f * s)[:, None]).to(LO), input_precision=PREC)
        if HAS_D:
            Dv = tl.load(D_ptr + h * sD_h + offs_p * sD_p, mask=mask_p, other=0.0).to(tl.float32)
            acc += Dv[None, :] * xb.to(tl.float32)
        out_off = ((b * T + t[:, None]) * H + h) * P + offs_p[None, :]
        if WRITE_YPRE:
            tl.store(ypre_ptr + out_off, acc.to(ypre_ptr.dtype.element_ty), mask=mask_tp)
        if HAS_Z:
            zz = tl.load(z_ptr + b * sz_b + t[:, None] * sz_t + h * sz_h + offs_p[None, :] * sz_p, mask=mask_tp,
                         other=0.0).to(tl.float32)
            acc = acc * zz * tl.sigmoid(zz)
        tl.store(y_ptr + out_off, acc.to(y_ptr.dtype.element_ty), mask=mask_tp)
