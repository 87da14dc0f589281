"""Quasiseparable matrices in chunks: dense diagonal blocks and the low-rank maps between chunks.

Cut the sequence into ``m`` chunks of ``L``. A strictly-lower SSS (generators ``A, B, C``) is then a
block matrix with dense strictly-lower diagonal blocks ``M_cc`` and, below them,
``M_cd = W_c P_{c-1} ... P_{d+1} R_d^T`` (``c > d``): ``W_c[i] = C_i^T A_i ... A_start`` maps the
state entering chunk ``c`` to its outputs, ``R_d[j] = A_end ... A_{j+1} B_j`` the inputs of chunk
``d`` to the state leaving it, and ``P_c = A_end ... A_start`` is the chunk's transition
(:class:`ChunkSide`). The blocked solve (:mod:`structmat.linalg.quasiseparable_solve`) works on these
pieces.

For scalar and diagonal transitions every product inside a chunk is a masked cumulative product of at
most ``L`` factors (no ratios, zeros stay exact), computed for both triangles in one pass; dense
transitions take ``L`` batched steps (all chunks at once).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from structmat.core.transitions import Transitions
from structmat.core.validation import broadcast_shapes
from structmat.linalg.semiseparable import Generators

__all__ = ["ChunkSide", "chunk", "chunk_sides", "strictly_lower", "SEGMENT_BUDGET"]

#: Elements of the ``(state, L, L)`` segment-product tensors built at once for the diagonal blocks of
#: diagonal transitions (about 128 MB in float64); more chunks are taken in groups.
SEGMENT_BUDGET = 1 << 24


@dataclass(frozen=True)
class ChunkSide:
    """One triangle of a quasiseparable matrix in chunks: ``blocks (*, m, L, L)`` whose strictly-lower parts
    are the diagonal blocks of its lower SSS (what lies on and above their diagonals is not part of the
    matrix), ``W`` and ``R`` ``(*, m, L, N)``, dense ``P`` ``(*, m, N, N)``."""

    blocks: torch.Tensor
    W: torch.Tensor
    R: torch.Tensor
    P: torch.Tensor


def chunk(t: torch.Tensor, tail: int, m: int, L: int, fill: float = 0.0) -> torch.Tensor:
    """``(*, T, ...)`` (time ``tail`` dims from the end) padded with ``fill`` to ``m L`` and cut into ``(*, m, L, ...)``."""
    axis = t.dim() - tail
    pad = m * L - t.shape[axis]
    if pad:
        shape = list(t.shape)
        shape[axis] = pad
        t = torch.cat([t, t.new_full(shape, fill)], dim=axis)
    return t.reshape(*t.shape[:axis], m, L, *t.shape[axis + 1 :])


@functools.lru_cache(maxsize=32)
def strictly_lower(L: int, device: torch.device) -> torch.Tensor:
    """The strictly-lower ``L x L`` boolean mask (cached: every solve of a size needs it; never written to)."""
    with torch.inference_mode(False):  # made under inference_mode it could never be saved for a later backward
        return torch.ones(L, L, dtype=torch.bool, device=device).tril(-1)


@functools.lru_cache(maxsize=32)
def _masks(L: int, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(strictly lower, on and above the diagonal)`` as ``L x L`` numbers (cached, never written to)."""
    with torch.inference_mode(False):  # as strictly_lower: cached tensors must serve autograd later
        below = strictly_lower(L, device).to(dtype)
        return below, 1 - below


def _segment_products(a: torch.Tensor) -> torch.Tensor:
    """``out[..., i, j] = a[..., j+1] ... a[..., i]`` for ``i > j`` (1 elsewhere) from ``a (*, L)``: a masked
    cumulative product down each column. Every entry is its own product of at most ``L`` factors (no
    ratio), so zeros stay exact and no ``exp``/``log`` of ``L^2`` entries is needed."""
    below, rest = _masks(a.shape[-1], a.dtype, a.device)
    return torch.cumprod(torch.addcmul(rest, a[..., :, None], below), dim=-2)


def _step_diagonals(A: Transitions, B: torch.Tensor) -> torch.Tensor | None:
    """``(*, T, 1)`` for one scalar per step (decays or signed scalars), ``(*, T, N)`` for diagonal
    transitions, None for dense ones."""
    a = A.actual()
    return a[..., None] if a.dim() == B.dim() - 1 else A.diagonals(B.shape[-1])


def _diagonal_sides(a: list[torch.Tensor], B: list[torch.Tensor], C: list[torch.Tensor], first: bool) -> list[ChunkSide]:
    """:class:`ChunkSide` of each triangle from its chunked step diagonals ``a (*, m, L, N')`` (``N' = 1`` or
    ``N``) and chunked maps, the segment products of all of them in one pass: they give the blocks, and
    their first column and last row the chunks' prefix and suffix products. ``first``: the chunks start
    the sequence, whose first transition is unused by the matrix (set to 1 to keep it harmless)."""
    dtype = B[0].dtype
    widths = [x.shape[-1] for x in a]
    steps = torch.cat(a, dim=-1).movedim(-1, -2)  # (*, m, sum N', L), a new tensor
    if first:
        steps[..., 0, :, 0] = 1.0
    E = _segment_products(steps).to(dtype)  # (*, m, sum N', L, L)
    prefix = (E[..., :, 0] * steps[..., :1]).mT  # (*, m, L, sum N'): A_i ... A_start
    suffix = E[..., -1, :].mT  # A_end ... A_{j+1}
    sides, start = [], 0
    for w, Bk, Ck in zip(widths, B, C):
        Ek, pre, suf = E[..., start : start + w, :, :], prefix[..., start : start + w], suffix[..., start : start + w]
        if w == 1:
            blocks = Ek[..., 0, :, :] * (Ck @ Bk.mT)
        else:
            blocks = (Ck.mT[..., :, :, None] * Ek * Bk.mT[..., :, None, :]).sum(-3)
        total = torch.diag_embed(pre[..., -1, :].expand(*pre.shape[:-2], Bk.shape[-1]))
        sides.append(ChunkSide(blocks, Ck * pre, Bk * suf, total))
        start += w
    return sides


def _dense_side(A: torch.Tensor, B: torch.Tensor, C: torch.Tensor) -> ChunkSide:
    """:class:`ChunkSide` from chunked dense transitions ``A (*, m, L, N, N)`` and maps, in ``L`` steps of two
    batched products: the state ``S_i = [A_i ... A_{j+1} B_j (j < i) | A_i ... A_0]`` (``N x (L + N)``)
    holds a row of the block, the prefix product, and at the end the suffix products and the total."""
    N, L = B.shape[-1], B.shape[-2]
    eye_L = torch.eye(L, dtype=B.dtype, device=B.device)
    inputs = B[..., :, :, None] * eye_L[:, None, :]  # inputs[..., i, :, k] = B_i if k == i
    inputs = torch.cat([inputs, inputs.new_zeros(*inputs.shape[:-1], N)], dim=-1)
    S = torch.cat([inputs.new_zeros(*A.shape[:-3], N, L), torch.eye(N, dtype=B.dtype, device=B.device).expand_as(A[..., 0, :, :])], -1)
    states = []
    for i in range(L):
        S = A[..., i, :, :] @ (S if i == 0 else S + inputs[..., i - 1, :, :])
        states.append(S)
    rows = (C[..., :, None, :] @ torch.stack(states, dim=-3))[..., 0, :]  # (*, m, L, L + N)
    R = (S[..., :L] + inputs[..., -1, :, :L]).mT
    return ChunkSide(rows[..., :L], rows[..., L:], R, S[..., L:])


def _expanded(G: Generators, batch) -> Generators:
    """``G`` with every parameter at ``batch`` (as it is unless some part has a smaller batch)."""
    parts = (G.A.batch_shape, G.B.shape[:-2], G.C.shape[:-2]) + (() if G.D is None else (G.D.shape[:-1],))
    return G if all(p == batch for p in parts) else G.expand(batch)


def chunk_sides(lower: Generators, upper: Generators, L: int, m: int) -> list[ChunkSide]:
    """The :class:`ChunkSide` of the strictly-lower matrices with generators ``lower`` and ``upper``, ``m`` chunks
    of ``L``, at their broadcast batch shape. Scalar and diagonal transitions of both share one pass (in groups
    of chunks within :data:`SEGMENT_BUDGET`); dense ones take :func:`_dense_side`."""
    batch = broadcast_shapes(lower.batch_shape, upper.batch_shape)
    lower, upper = _expanded(lower, batch), _expanded(upper, batch)
    Bs = [chunk(G.B, 2, m, L) for G in (lower, upper)]
    Cs = [chunk(G.C, 2, m, L) for G in (lower, upper)]
    diagonals = [_step_diagonals(G.A, G.B) for G in (lower, upper)]
    # the first transition is unused by the matrix: the identity keeps garbage there harmless
    sides = [None if a is not None else _dense_side(G.A.with_identity_first().chunked(L).matrices(G.order, G.B.dtype), B, C)
             for a, G, B, C in zip(diagonals, (lower, upper), Bs, Cs)]
    fused = [k for k in range(2) if sides[k] is None]
    if fused:
        dtype = functools.reduce(torch.promote_types, [diagonals[k].dtype for k in fused])
        a = [chunk(diagonals[k].to(dtype), 2, m, L, 1.0) for k in fused]
        per_chunk = Bs[0][..., 0, 0, 0].numel() * sum(x.shape[-1] for x in a) * L * L
        g = max(1, SEGMENT_BUDGET // max(1, per_chunk))
        groups = [_diagonal_sides([x[..., i : i + g, :, :] for x in a], [Bs[k][..., i : i + g, :, :] for k in fused],
                                  [Cs[k][..., i : i + g, :, :] for k in fused], i == 0) for i in range(0, m, g)]
        for j, k in enumerate(fused):
            parts = [group[j] for group in groups]
            sides[k] = parts[0] if len(parts) == 1 else ChunkSide(
                *(torch.cat(f, dim=-3) for f in zip(*((p.blocks, p.W, p.R, p.P) for p in parts))))
    return sides

