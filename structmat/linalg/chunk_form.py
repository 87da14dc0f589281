"""Semiseparable matrices in chunks, kept for products and solves of moderate length: dense diagonal blocks and
one low-rank coupling between the chunks.

Cut the sequence into ``n`` chunks of ``L``. A lower SSS (generators ``A, B, C, D``) is then

    M = blockdiag(M_c) + W Q R^T,        Q[c, d] = P_{c-1} ... P_{d+1}  (c > d, zero else)

with the dense ``L x L`` diagonal blocks ``M_c``, per chunk the output maps ``W_c[i] = C_i^T A_i ... A_start``
(the state entering chunk ``c`` to its outputs), the input maps ``R_d[j] = A_end ... A_{j+1} B_j`` (the inputs of
chunk ``d`` to the state leaving it) and the chunk transitions ``P_c = A_end ... A_start``
(:func:`~structmat.linalg.block_solve.chunk_maps`). ``Q`` is an ``(n N) x (n N)`` matrix: the chunk-level
recurrence written out, so a product is four batched matrix products whatever ``T`` -- no scan, no Python step per
chunk or per time index -- in ``O(T L K + T N K + (T N / L)^2 K)``. A quasiseparable matrix stacks the states of
both triangles (the upper one transposed: ``W`` and ``R`` trade places, ``Q`` is transposed); a transpose is the
same form with ``blocks^T``, ``R``, ``Q^T``, ``W``.

The inverse of a lower SSS has the same form: block forward substitution ``X_c = M_c^{-1} (Y_c - W_c h_c)``,
``h_{c+1} = P_c h_c + R_c^T X_c`` written as a matrix gives blocks ``M_c^{-1}``, ``W' = -M_c^{-1} W_c``,
``R'^T = R_c^T M_c^{-1}`` and the chunk transitions ``P'_c = P_c - R'^T_c W_c`` (dense ``N x N``).

The form costs ``T L + (T r / L)^2 + 2 T r`` entries (``r`` states): it is built once and kept with the matrix
(:func:`structmat.core.small.keep_when_used`, once it has paid for itself) up to :data:`MAX_ENTRIES`; longer sequences take the banded paths
(:mod:`structmat.linalg.banded`), linear in ``T``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from structmat.core.validation import SingularMatrixError
from structmat.linalg.block_solve import chunk_maps
from structmat.linalg.semiseparable import Generators

__all__ = ["ChunkForm", "FORM_CHUNK", "MAX_ENTRIES", "FORM_AFTER_COLUMNS_PER_STEP", "REBUILT_MAPS_STEPS_PER_COLUMN",
           "REBUILT_MAPS_COLUMNS",
           "after_columns", "applies",
           "entries",
           "chunk_length", "lower_form", "quasiseparable_form", "lower_inverse_form", "apply"]

#: Shortest chunk ``L``: below it the blocks' products are too small for the batched calls to pay. Longer chunks
#: are taken where they make the form smaller (:func:`chunk_length`). Measured (one thread, T = 1024, float64, a
#: quasiseparable matrix of orders 2 + 2): L = 16 / 32 / 64 build in 0.7 / 1.2 / 4.2 ms; one-column products 84-131 /
#: 67-100 / 103-127 us against 164-230 us for the dense one.
FORM_CHUNK = 32

#: Most entries of a kept form (batch included): 2^21 (16 MiB in float64), as for a kept band
#: (:data:`structmat.linalg.banded.KEEP_MAX_ENTRIES`). SSS(4) stays within it up to T = 15680, SSS(16) to 7424, SSS(64) to 3328.
MAX_ENTRIES = 2**21

#: Columns multiplied (or solved) through a matrix's other paths before its form is built, per step of the chunk
#: length: the build's segment products have ``r T L`` entries, a column of the other paths costs in proportion to
#: ``r T``, so the form is bought once the calls have spent about as much (the rent-or-buy rule) and a matrix used once
#: or a few times never pays for it. Measured (one thread, float64, ``benchmarks/chunk_form_orders.py``): SSS(16) at
#: T = 4096 (L = 128) builds in 395 ms, 256 products through the scans take 354 ms; SSS(32) at T = 1024 (L = 128)
#: 221 ms against 348 ms.
FORM_AFTER_COLUMNS_PER_STEP = 2

#: Steps of the chunk length per column solved before the inverse's form is built where the other path rebuilds
#: its chunk maps (of 32 steps) on every call (a solve outside the band): such a call costs about ``32 / L`` of the
#: build's ``r T L`` work times 1.3-3 (measured, as above: SSS(16) at T = 1024, L = 64, 8 against 20 ms; SSS(16) at
#: T = 4096, L = 128, 67 against 387 ms; SSS(32) at T = 1024, 19 against 227 ms), so the form is bought after
#: ``L / 16`` such columns.
REBUILT_MAPS_STEPS_PER_COLUMN = 16

#: Columns of a solve outside the band that cost about as much as the chunk maps it rebuilds at every call: such a
#: call counts ``1 + columns / REBUILT_MAPS_COLUMNS`` towards :func:`after_columns`, since its cost is mostly per
#: call (measured, SSS(16) at T = 4096, two threads: the maps 38 ms of a 64-column solve's 50-55 ms, each column about
#: 0.25 ms). Counted by columns, one 64-column solve bought the form (220 ms) at the next call: 55 + 220 + 4 ms for
#: three solves where three without it cost 165.
REBUILT_MAPS_COLUMNS = 128

_DTYPES = (torch.float32, torch.float64, torch.complex64, torch.complex128)


@dataclass(frozen=True)
class ChunkForm:
    """``M = blockdiag(blocks) + W Q R^T`` (module docstring): ``blocks (*, n, L, L)``, ``W (*, n, L, r)``,
    ``Q (*, n r, n r)``, ``Rt (*, n, r, L)`` (``R^T`` per chunk), and the length ``T <= n L``."""

    blocks: torch.Tensor
    W: torch.Tensor
    Q: torch.Tensor
    Rt: torch.Tensor
    length: int

    @property
    def T(self) -> ChunkForm:
        """The form of the transpose."""
        return ChunkForm(self.blocks.mT, self.Rt.mT, self.Q.mT, self.W.mT, self.length)


@functools.lru_cache(maxsize=256)
def chunk_length(T: int, r: int) -> int:
    """``L`` for ``T`` steps and ``r`` states in all: the power of two from :data:`FORM_CHUNK` that makes the form
    smallest, its blocks' ``T L`` entries against the coupling's ``(T r / L)^2`` (a product's work per column is the
    same sum). Measured (one thread, float64, 64 columns; the previous paths in brackets): SSS(16) at T = 4096 8.5 ms
    (182 ms), SSS(64) at T = 512 6.3 ms (51 ms).

    Examples
    --------
    >>> chunk_length(1024, 4), chunk_length(4096, 4), chunk_length(2048, 32)
    (32, 64, 128)
    """
    lengths = [FORM_CHUNK << k for k in range(max(1, T.bit_length())) if k == 0 or FORM_CHUNK << k < 2 * T]
    sizes = {L: _entries(T, r, L) for L in lengths}
    return min(sizes, key=lambda L: (sizes[L], L))


def _entries(T: int, r: int, L: int) -> int:
    n = -(-T // L)
    return n * L * L + (n * r) ** 2 + 2 * n * L * r


def after_columns(T: int, r: int, maps_rebuilt: bool = False) -> int:
    """Columns through the other paths before the form of a ``T x T`` matrix with ``r`` states is built
    (:data:`FORM_AFTER_COLUMNS_PER_STEP` per step of :func:`chunk_length`; ``maps_rebuilt``: where those paths build
    chunk maps on every call, one per :data:`REBUILT_MAPS_STEPS_PER_COLUMN` steps)."""
    L = chunk_length(T, r)
    return max(1, L // REBUILT_MAPS_STEPS_PER_COLUMN) if maps_rebuilt else FORM_AFTER_COLUMNS_PER_STEP * L


def entries(T: int, r: int, batch: int = 1) -> int:
    """Entries of the form of a ``T x T`` matrix with ``r`` states in all, ``batch`` matrices."""
    return batch * _entries(T, r, chunk_length(T, r))


def applies(dtype: torch.dtype, X: torch.Tensor, T: int, r: int, batch: int) -> bool:
    """Whether a ``T x T`` matrix of ``dtype`` with ``r`` states (``batch`` matrices) takes its form for ``X``: on the
    CPU (where it was measured), ``X`` in the matrix's dtype (one of float32/64, complex64/128), more than one
    chunk, at most :data:`MAX_ENTRIES`, not while ``torch.compile`` traces. (Where a gradient of the parameters is
    wanted nothing is kept: :func:`structmat.core.small.keep_when_used`.)"""
    if X.device.type != "cpu" or X.dtype != dtype or dtype not in _DTYPES or T <= FORM_CHUNK or X.shape[-1] == 0:
        return False
    return entries(T, r, batch) <= MAX_ENTRIES and not torch.compiler.is_compiling()


def _coupling(P: torch.Tensor) -> torch.Tensor:
    """``Q (*, n N, n N)`` from the chunk transitions ``P (*, n, N, N)``: block ``(c, d)`` is ``P_{c-1} ... P_{d+1}``
    for ``c > d`` (the identity at ``d = c - 1``), zero else. One small product per chunk, at build time."""
    n, N = P.shape[-3], P.shape[-1]
    row = P.new_zeros(*P.shape[:-3], N, n * N)
    eye = torch.eye(N, dtype=P.dtype, device=P.device)
    rows = [row]
    for c in range(1, n):
        row = P[..., c - 1, :, :] @ row
        row[..., (c - 1) * N:c * N] = eye
        rows.append(row)
    return torch.cat(rows, dim=-2)


def _lower_parts(G: Generators, L: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(blocks, W, R, P)`` of the lower ``G`` at its batch shape, ``P`` as dense ``(*, n, N, N)``."""
    maps = chunk_maps(G.expand(G.batch_shape), L)
    dtype = maps.W.dtype
    return maps.blocks.to(dtype), maps.W, maps.R, maps.P.matrices(G.order, dtype)


def lower_form(G: Generators, L: int | None = None) -> ChunkForm:
    """The :class:`ChunkForm` of the lower SSS with generators ``G`` (its diagonal included).

    Examples
    --------
    >>> from structmat.core.transitions import Transitions
    >>> G = Generators(Transitions(torch.full((5,), 0.5, dtype=torch.float64), "scalar"),
    ...                torch.ones(5, 1, dtype=torch.float64), torch.ones(5, 1, dtype=torch.float64))
    >>> apply(lower_form(G, L=2), torch.ones(5, 1, dtype=torch.float64))[:, 0].tolist()
    [1.0, 1.5, 1.75, 1.875, 1.9375]
    """
    blocks, W, R, P = _lower_parts(G, chunk_length(G.length, G.order) if L is None else L)
    return ChunkForm(blocks, W, _coupling(P), R.mT, G.length)


def quasiseparable_form(lower: Generators, upper: Generators, diag: torch.Tensor, L: int | None = None) -> ChunkForm:
    """The :class:`ChunkForm` of ``strict(lower) + diag(diag) + strict(upper)^T`` (the generators' own diagonals
    are not used), at the broadcast batch shape of the three; the states of both triangles side by side."""
    L = chunk_length(diag.shape[-1], lower.order + upper.order) if L is None else L
    zero = diag.new_zeros(())
    bl, Wl, Rl, Pl = _lower_parts(lower.with_diagonal(zero.expand(*lower.batch_shape, lower.length)), L)
    bu, Wu, Ru, Pu = _lower_parts(upper.with_diagonal(zero.expand(*upper.batch_shape, upper.length)), L)
    n, L, nl = *bl.shape[-3:-1], lower.order  # (L: at most T)
    d = torch.nn.functional.pad(diag, (0, n * L - diag.shape[-1])).unflatten(-1, (n, L))
    blocks = bl + bu.mT + torch.diag_embed(d)
    Ql, Qu = _coupling(Pl), _coupling(Pu).mT
    r = nl + upper.order
    batch = torch.broadcast_shapes(Ql.shape[:-2], Qu.shape[:-2], diag.shape[:-1])
    Q = Ql.new_zeros(*batch, n, r, n, r)
    Q[..., :, :nl, :, :nl] = Ql.unflatten(-1, (n, nl)).unflatten(-3, (n, nl))
    Q[..., :, nl:, :, nl:] = Qu.unflatten(-1, (n, r - nl)).unflatten(-3, (n, r - nl))
    at = lambda t: t.expand(*batch, *t.shape[-3:])  # noqa: E731
    W = torch.cat([at(Wl), at(Ru)], dim=-1)  # the upper triangle is a transpose: its W and R trade places
    R = torch.cat([at(Rl), at(Wu)], dim=-1)
    return ChunkForm(at(blocks), W, Q.flatten(-4, -3).flatten(-2, -1), R.mT, diag.shape[-1])


def lower_inverse_form(G: Generators, L: int | None = None) -> ChunkForm | None:
    """The :class:`ChunkForm` of ``M^{-1}`` for the lower SSS ``M`` with generators ``G`` (module docstring): the chunk
    maps in ``G``'s dtype, the blocks' inverses and the coupling in float64 (complex128), then rounded to ``G``'s dtype;
    None where an entry overflows it.
    :class:`~structmat.SingularMatrixError` for a zero diagonal entry."""
    if bool((G.diagonal() == 0).any()):
        raise SingularMatrixError("SSS is singular: a diagonal entry is zero")
    dtype = G.B.dtype
    wide = torch.complex128 if dtype.is_complex else torch.float64
    blocks, W, R, P = (t.to(wide) for t in _lower_parts(G, chunk_length(G.length, G.order) if L is None else L))
    eye = torch.eye(blocks.shape[-1], dtype=wide, device=blocks.device)
    inverse = torch.linalg.solve_triangular(blocks, eye, upper=False)
    Wi = -(inverse @ W)
    Rt = R.mT @ inverse
    Q = _coupling(P - Rt @ W)  # P'_c = P_c - R_c^T M_c^{-1} W_c
    form = ChunkForm(inverse.to(dtype), Wi.to(dtype), Q.to(dtype), Rt.to(dtype), G.length)
    if not all(bool(torch.isfinite(t).all()) for t in (form.blocks, form.W, form.Q, form.Rt)):
        return None
    return form


def apply(F: ChunkForm, X: torch.Tensor) -> torch.Tensor:
    """``M X`` for the form ``F`` of ``M`` and ``X (*, T, K)`` (batch dims broadcast), in four batched products."""
    T, K = X.shape[-2:]
    n, L = F.blocks.shape[-3], F.blocks.shape[-1]
    if n * L != T:
        X = torch.nn.functional.pad(X, (0, 0, 0, n * L - T))
    Xc = X.unflatten(-2, (n, L))
    s = F.Q @ (F.Rt @ Xc).flatten(-3, -2)  # the states entering the chunks, (*, n r, K)
    # one column: as rows (a batched row-times-matrix product took 15 us where the column product took 40, T = 1024)
    Y = (Xc.mT @ F.blocks.mT).mT if K == 1 else F.blocks @ Xc
    Y += F.W @ s.unflatten(-2, (n, F.W.shape[-1]))
    Y = Y.flatten(-3, -2)
    return Y if n * L == T else Y[..., :T, :]
