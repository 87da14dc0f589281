"""Tile helpers shared by the backward Triton kernels of :mod:`decay_triton_bwd` and :mod:`decay_triton_bwd_dx`.

Per (batch, head) rows of ``cs`` (chunk-local cumulative sums of ``log_a``; for float32 inputs summed in fp64 and
kept as their fp32 rounding ``cs`` and the rest ``cl``) and the scale, the masks of ``seq_idx`` (a row pairs only
with rows of its own sequence), the launch order of the group kernels' blocks, and a product whose fp32 left operand
is split into two 16-bit parts.
"""

from __future__ import annotations

from structmat.kernels.triton_modules import tl, triton


@triton.jit
def head_vectors(cs_ptr, s_ptr, b, H, h, T, tA, mA, tB, mB, ref, HAS_SCALE: tl.constexpr):
    """One head's ``cs`` over rows ``tA`` and ``tB``, ``cs[ref]``, the scale over ``tB`` (0 when absent)."""
    row = (b * H + h) * T
    csA = tl.load(cs_ptr + row + tA, mask=mA, other=0.0)
    csB = tl.load(cs_ptr + row + tB, mask=mB, other=0.0)
    r = tl.load(cs_ptr + row + ref)
    if HAS_SCALE:
        sB = tl.load(s_ptr + row + tB, mask=mB, other=0.0)
    else:
        sB = tl.zeros_like(csB)
    return csA, csB, r, sB


@triton.jit
def dx_vectors(cs_row, s_row, t0, T, has_start, BM: tl.constexpr, HAS_SCALE: tl.constexpr):
    """``cs`` and the scale of rows ``t0 ..`` of one head, and ``cs`` just before them (0 at a chunk start)."""
    t = t0 + tl.arange(0, BM)
    mt = t < T
    cs = tl.load(cs_row + t, mask=mt, other=0.0)
    if HAS_SCALE:
        s = tl.load(s_row + t, mask=mt, other=0.0)
    else:
        s = tl.where(mt, 1.0, 0.0)
    start = tl.load(cs_row + tl.minimum(t0 - 1, T - 1), mask=has_start, other=0.0)
    return cs, s, start


@triton.jit
def head_rests(cl_ptr, b, H, h, T, tA, mA, tB, mB, ref):
    """One head's rests ``cl`` over rows ``tA`` and ``tB`` and at ``ref`` (the exact decays' second parts: a
    difference ``cs_a - cs_b`` is ``(cs_a - cs_b) + (cl_a - cl_b)``, exact to fp32 however large ``cs`` grows)."""
    row = (b * H + h) * T
    return (tl.load(cl_ptr + row + tA, mask=mA, other=0.0), tl.load(cl_ptr + row + tB, mask=mB, other=0.0),
            tl.load(cl_ptr + row + ref))


@triton.jit
def dx_rests(cl_row, t0, T, has_start, BM: tl.constexpr):
    """The rests ``cl`` of rows ``t0 ..`` of one head and the rest just before them (0 at a chunk start)."""
    t = t0 + tl.arange(0, BM)
    return (tl.load(cl_row + t, mask=t < T, other=0.0),
            tl.load(cl_row + tl.minimum(t0 - 1, T - 1), mask=has_start, other=0.0))


@triton.jit
def seq_at(seq_ptr, b, T, t):
    """The sequence id of position ``t``, clamped into ``[0, T)``."""
    return tl.load(seq_ptr + b * T + tl.minimum(tl.maximum(t, 0), T - 1))


@triton.jit
def seq_keep(seq_ptr, b, T, t, ref, HAS_SEQ: tl.constexpr):
    """1.0 where row ``t`` belongs to the sequence of position ``ref`` (clamped into ``[0, T)``), else 0."""
    if HAS_SEQ:
        return tl.where(tl.load(seq_ptr + b * T + t, mask=t < T, other=-1) == seq_at(seq_ptr, b, T, ref), 1.0, 0.0)
    return tl.where(t < T, 1.0, 0.0)


@triton.jit
def diag_mask(seq_ptr, b, T, t, BM: tl.constexpr, HAS_SEQ: tl.constexpr):
    """``i >= j`` inside one block (and one sequence): the pairs of a diagonal tile."""
    idx = tl.arange(0, BM)
    keep = idx[:, None] >= idx[None, :]
    if HAS_SEQ:
        sq = tl.load(seq_ptr + b * T + t, mask=t < T, other=-1)
        keep = keep & (sq[:, None] == sq[None, :])
    return keep


@triton.jit
def block_order(NBLK: tl.constexpr, NC, LAST_HEAVIEST: tl.constexpr, HEAVY_FIRST: tl.constexpr):
    """``(chunk, block)`` of this program: every chunk's heaviest block first with ``HEAVY_FIRST`` (the last wave
    then holds light programs), else a chunk's blocks adjacent."""
    c, K = tl.program_id(0) // NBLK, tl.program_id(0) % NBLK
    if HEAVY_FIRST:
        c, K = tl.program_id(0) % NC, tl.program_id(0) // NC
        if LAST_HEAVIEST:
            K = NBLK - 1 - K
    return c, K


@triton.jit
def dot_two_parts(acc, M, Y, LO: tl.constexpr, PREC: tl.constexpr):
    """``acc + M @ Y`` with the fp32 ``M`` as ``hi + lo``, two 16-bit parts: ``M`` rounded once to 16 bits
    (relative 2^-9) made up about a third of ``dB`` / ``dC``'s error at bf16 (NOTES_ssd.md, session 11)."""
    M_hi = M.to(LO)
    acc = tl.dot(M_hi, Y, acc, input_precision=PREC)
    return tl.dot((M - M_hi.to(tl.float32)).to(LO), Y, acc, input_precision=PREC)
