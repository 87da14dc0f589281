"""Block forward substitution for lower SSS systems: ``M X = Y`` in ``O(T (L + N) K)`` work.

The sequence is cut into chunks of ``L``. With ``h`` the state entering chunk ``c``::

    X_c = M_cc^{-1} (Y_c - W_c h),      h <- P_c h + R_c^T X_c

where ``M_cc`` is the dense ``L x L`` diagonal block, ``W_c[t] = C_t^T A_t ... A_start`` maps the
entering state to the outputs, ``R_c[i] = A_end ... A_{i+1} B_i`` maps inputs to the leaving state,
and ``P_c = A_end ... A_start``. Products come from prefix and suffix products of the transitions
(sums of logs for decays), never from ratios. Each triangular block solve is backward stable.
Unlike the inverse realization (whose transitions are dense ``N x N``), this keeps diagonal
transitions diagonal. The same chunk maps drive the chunked order of structured masked attention.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from structmat.core.transitions import Transitions, carries_gradient
from structmat.core.validation import SingularMatrixError, broadcast_shapes
from structmat.linalg.segsum import segment_products
from structmat.linalg.semiseparable import Generators

__all__ = ["ChunkMaps", "chunk_maps", "assembles", "dense_from_maps", "block_solve", "SOLVE_CHUNK", "WIDE_COLUMNS",
           "WIDE_CHUNK", "BLOCK_PIECE"]

#: Block length of the forward substitution: the dense triangular solves cost ``O(T L K)`` and the
#: Python steps ``O(T / L)``; 32 balances them for the state sizes of sequence models (N <= 64).
SOLVE_CHUNK = 32

#: Fewest columns for which a solve whose chunk maps are kept (built once, :data:`WIDE_CHUNK`) beats the banded
#: LAPACK solve, which runs one column at a time. Measured (one thread, SSS(4, dense A), T = 1024): kept maps
#: 1.40 / 1.69 / 2.30 ms at 16 / 32 / 64 columns, the band 1.35 / 2.49 / 5.09 ms.
WIDE_COLUMNS = 24

#: Block length of a solve with kept chunk maps: the maps' construction no longer counts, so longer blocks
#: (fewer Python steps, larger triangular solves) win. Measured as above at 64 columns: 4.5 / 3.0 / 2.5 ms for
#: blocks of 32 / 64 / 128.
WIDE_CHUNK = 128


#: Length of the pieces a chunk's dense diagonal block is assembled from (:func:`dense_from_maps` of the pieces'
#: maps) where the chunk is longer: the pieces' segment products take ``T P N`` entries instead of ``T L N``, and the
#: blocks between pieces one product over the states. Measured (one thread, float64, diagonal transitions, T = 4096,
#: a solve of 64 columns in chunks of 32): SSS(16) 28.9 ms from whole blocks, 11.6 / 11.7 / 15.3 ms from pieces of
#: 4 / 8 / 16; SSS(64) 192 ms, 37.1 / 37.3 / 112 ms. On the CPU only: on an H100 (float32, SSS(16), T = 4096) the
#: pieces' extra launches cost more than the memory they save (a fresh 64-column solve 22-25 ms against 19-21, the
#: dense form 2.8-4.4 against 2.1-2.2, the chunked SMA order 13.1-13.5 against 13.3-14.2).
BLOCK_PIECE = 8


def _chunked(t: torch.Tensor, tail: int, n: int, L: int, fill: float) -> torch.Tensor:
    """``(*, T, ...)`` (time ``tail`` dims from the end) padded with ``fill`` and cut into ``(*, n, L, ...)``."""
    axis = t.dim() - tail
    pad = n * L - t.shape[axis]
    if pad:
        shape = list(t.shape)
        shape[axis] = pad
        t = torch.cat([t, t.new_full(shape, fill)], dim=axis)
    return t.reshape(*t.shape[:axis], n, L, *t.shape[axis + 1 :])


@dataclass(frozen=True)
class ChunkMaps:
    """Per chunk of a lower SSS: dense diagonal blocks ``(*, n, L, L)``, output maps ``W`` and input maps
    ``R`` (``(*, n, L, N)``), chunk transitions ``P`` (time axis = chunks), and the chunk length ``L``."""

    blocks: torch.Tensor
    W: torch.Tensor
    R: torch.Tensor
    P: Transitions
    L: int


def chunk_maps(G: Generators, chunk: int) -> ChunkMaps:
    """The :class:`ChunkMaps` of the lower SSS with generators ``G`` (chunks of ``min(chunk, T)``)."""
    batch, T = G.batch_shape, G.length
    L = max(1, min(chunk, T))
    n = -(-T // L)
    G = G.expand(batch)
    A = G.A.with_identity_first().chunked(L)
    B, C = _chunked(G.B, 2, n, L, 0.0), _chunked(G.C, 2, n, L, 0.0)
    d = _chunked(G.diagonal(), 1, n, L, 1.0)
    blocks = _diagonal_blocks(Generators(A, B, C, d))
    pre, suf = A.prefix(), A.suffix()
    W = pre.left_apply(C)
    R = suf.apply(B[..., None])[..., 0]
    return ChunkMaps(blocks, W, R, pre.last(), L)


def assembles(G: Generators) -> bool:
    """Whether the dense form of ``G`` can be assembled from chunk maps (:func:`dense_from_maps`): not for dense
    transitions (their segment products are matrices) nor for log decays whose gradient is wanted in linear space
    (exact at zero decays only through whole segment products)."""
    return G.A.kind != "dense" and not carries_gradient(G.A.decays)


def dense_from_maps(maps: ChunkMaps, T: int) -> torch.Tensor:
    """The lower matrix ``(*, T, T)`` whose :func:`chunk_maps` are ``maps``: the diagonal blocks as they are, the
    block ``(J, I)`` below them ``W_J Psi_JI R_I^T`` with ``Psi_JI`` the product of the chunk transitions strictly
    between ``I`` and ``J`` (segment products of the chunk transitions), all blocks in one contraction over the
    states. ``O(T^2 N / L)`` beside the blocks' ``O(T L)``; scalar and diagonal transitions only
    (:func:`assembles`)."""
    n, L = maps.blocks.shape[-3], maps.L
    S = segment_products(maps.P)  # S[a, b]: the chunks b+1 .. a
    Psi = torch.cat([torch.zeros_like(S[..., :1, :]), S[..., :-1, :]], -2).to(maps.W.dtype)  # chunks I+1 .. J-1
    if maps.P.kind == "diag":
        M = torch.einsum("...jtn,...nji,...isn->...jtis", maps.W, Psi, maps.R)
    else:  # one decay for every state
        WR = (maps.W.flatten(-3, -2) @ maps.R.flatten(-3, -2).mT).unflatten(-1, (n, L)).unflatten(-3, (n, L))
        M = Psi[..., :, None, :, None] * WR
    M.diagonal(dim1=-4, dim2=-2).copy_(maps.blocks.movedim(-3, -1))
    return M.flatten(-4, -3).flatten(-2, -1)[..., :T, :T]


def _diagonal_blocks(G: Generators) -> torch.Tensor:
    """The dense ``(*, L, L)`` form of the chunks' generators ``G`` (batch ``(*, n)``, length ``L``): on the CPU
    assembled from pieces of :data:`BLOCK_PIECE` where the chunks are longer and :func:`assembles` holds."""
    if G.length <= BLOCK_PIECE or G.B.device.type != "cpu" or not assembles(G) or _grows(G.A):
        return G.dense()
    return dense_from_maps(chunk_maps(G, BLOCK_PIECE), G.length)


def _grows(A: Transitions) -> bool:
    """Whether a transition has a factor above 1 in size: there the pieces' products can overflow where the whole
    block's do not (a growing piece, a zero decay, a growing piece: ``inf * 0`` in the blocks between them)."""
    values = A.values
    return bool((values > 0).any()) if A.kind == "log" else bool((values.abs() > 1).any())


def block_solve(G: Generators, Y: torch.Tensor, chunk: int = SOLVE_CHUNK, maps: ChunkMaps | None = None) -> torch.Tensor:
    """Solve ``M X = Y`` for the lower SSS ``M`` with generators ``G`` and ``Y (*, T, K)`` (batch broadcast);
    ``maps``: the :func:`chunk_maps` of ``G`` expanded to that batch, where kept (their length replaces ``chunk``).

    Raises :class:`~structmat.SingularMatrixError` if a diagonal entry is zero.
    """
    T, K = Y.shape[-2:]
    if T == 0 or K == 0:
        return Y.clone()
    if bool((G.diagonal() == 0).any()):
        raise SingularMatrixError("SSS is singular: a diagonal entry is zero")
    batch = broadcast_shapes(G.batch_shape, Y.shape[:-2])
    maps = chunk_maps(G.expand(batch), chunk) if maps is None else maps
    n = maps.blocks.shape[-3]
    Yc = _chunked(Y.expand(*batch, T, K), 2, n, maps.L, 0.0)
    h = Y.new_zeros(*batch, G.order, K)
    steps, step = maps.P.step_factors(), maps.P.stepper()  # chunk-first factors: no Transitions per chunk
    steps = steps.to(torch.promote_types(steps.dtype, h.dtype))
    out = []
    for c in range(n):
        rhs = Yc[..., c, :, :] - maps.W[..., c, :, :] @ h
        X = torch.linalg.solve_triangular(maps.blocks[..., c, :, :], rhs, upper=False)
        h = step(maps.R[..., c, :, :].mT @ X, steps[c], h.to(steps.dtype))
        out.append(X)
    return torch.cat(out, dim=-2)[..., :T, :]
