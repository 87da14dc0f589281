"""Sums and products of SSS matrices from pieces that each operand keeps.

On a CPU every whole-tensor operation costs 3-8 us below a few thousand entries, so a sum or product of
two small SSS matrices costs what its count of operations costs. Most of the work depends on one operand
and the other's order only, so each operand keeps it (:func:`structmat.core.small.keep`, which builds
again where a gradient is wanted or a parameter changed in place): its states and transitions padded with
zeros to the joined order, and the factors below. A sum is then an addition of the padded pieces (joining
by ``torch.cat`` along the states copies them one short row at a time: twice as slow at ``T = 256``), a
product one multiplication per generator:

    A = [[A_1, B_1 w_2^T], [0, A_2]] = [[A_1, B_1 1^T], [0, 1 1^T]] * [[1 1^T, 1 w_2^T], [0, A_2]],
    B = [B_1 d_2, B_2] = [B_1, 1] * [d_2, B_2],     C = [C_1, g_1 C_2] = [C_1, g_1] * [1, C_2],

with ``w_2 = A_2^T C_2``, ``d_2`` the second factor's diagonal and ``g_1 = D_1 - C_1^T B_1`` (zero without an
explicit ``D_1``, then no ``D``; else ``D = D_1 d_2``): the left factors kept by the first operand, the right
ones by the second (:func:`structmat.algebra.semiseparable.matmul_lower` is the same product, computed
directly). The pieces of large operands are built each time, not kept (:data:`KEEP_MAX_ENTRIES`): there the
operations' own time dominates.
"""

from __future__ import annotations

import torch

from structmat.core import small
from structmat.core.transitions import Transitions
from structmat.matrices.sss import SSS

__all__ = ["KEEP_MAX_ENTRIES", "sum_of", "product_of"]

#: Most entries (batch included) of one set of pieces an operand keeps: 1 MiB in float64, which holds an
#: order-4 operand's pieces up to T = 2048. Beyond, a sum or product costs 0.1 ms and more in its operations
#: and building the pieces again adds a few percent.
KEEP_MAX_ENTRIES = 2**17


def _full(t: torch.Tensor, *shape: int) -> torch.Tensor:
    return t if t.shape == shape else t.expand(*shape)


def _dense_transitions(M: SSS) -> torch.Tensor:
    """``(*batch, T, N, N)`` transitions of ``M``'s stored generators, in its dtype."""
    N = M.order
    return _full(M.transitions.matrices(N, M.dtype), *M.shape[:-1], N, N)


def _sum_pieces(M: SSS, other: int, first: bool, dense: bool) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """``M``'s part of a sum with an operand of order ``other`` (``M`` the ``first`` operand or the second): the
    diagonal transitions (zeros where ``dense``), ``B`` and ``C`` padded to the joined order, ``(*batch, 3, T, n)``;
    where ``dense``, its transitions padded into a block of ``(*batch, T, n, n)``, else None; and its diagonal."""
    def build():
        G, N, shape = M.generators, M.order, M.shape[:-1]
        pad = (0, other) if first else (other, 0)
        A = None if dense else G.A.diagonals(N, M.dtype)
        states = [G.B.new_zeros(*shape, N) if A is None else _full(A, *shape, N), _full(G.B, *shape, N),
                  _full(G.C, *shape, N)]
        block = torch.nn.functional.pad(_dense_transitions(M), pad + pad) if dense else None
        return torch.nn.functional.pad(torch.stack(states, -3), pad), block, _full(G.diagonal(), *shape)

    return small.keep(M, ("sum", other, first, dense), build, limit=KEEP_MAX_ENTRIES)


def sum_of(M1: SSS, M2: SSS, batch) -> SSS:
    """``M1 + M2`` of one orientation: ``SSS(N1 + N2)``, diagonal ``A`` where both are diagonal, else block-diagonal
    dense ``A``; ``batch`` the broadcast batch."""
    n1, n2 = M1.order, M2.order
    dense = M1.transitions.kind == "dense" or M2.transitions.kind == "dense"
    S1, A1, d1 = _sum_pieces(M1, n2, True, dense)
    S2, A2, d2 = _sum_pieces(M2, n1, False, dense)
    A, B, C = (S1 + S2).unbind(-3)  # (sums of pieces of the operands' batches have the broadcast batch)
    D = None if M1.D is None and M2.D is None else d1 + d2
    transitions = Transitions(A1 + A2, "dense") if dense else Transitions(A, "diag")
    return SSS._parts(transitions, B, C, D, M1.lower, batch)


def _left_pieces(M: SSS, other: int) -> tuple[torch.Tensor, ...]:
    """``M``'s factors as the first of a product of lower generators with a factor of order ``other``:
    ``[[A, B 1^T], [0, 1 1^T]]``, ``[B, 1]``, ``[C, g]`` and ``D`` (or None), see the module docstring."""
    def build():
        G, N, shape = M.generators, M.order, M.shape[:-1]
        B, C = _full(G.B, *shape, N), _full(G.C, *shape, N)
        top = torch.cat([_dense_transitions(M), B[..., :, None].expand(*shape, N, other)], -1)
        bottom = torch.nn.functional.pad(B.new_ones(*shape, other, other), (N, 0))
        gap = B.new_zeros(*shape, 1) if G.D is None else (G.D - (C * B).sum(-1))[..., None]
        return (torch.cat([top, bottom], -2), torch.cat([B, B.new_ones(*shape, other)], -1),
                torch.cat([C, gap.expand(*shape, other)], -1), None if G.D is None else _full(G.D, *shape))

    return small.keep(M, ("product", other, True), build, limit=KEEP_MAX_ENTRIES)


def _right_pieces(M: SSS, other: int) -> tuple[torch.Tensor, ...]:
    """``M``'s factors as the second of a product of lower generators with a factor of order ``other``:
    ``[[1 1^T, 1 w^T], [0, A]]``, ``[d, B]``, ``[1, C]`` and ``d``, see the module docstring."""
    def build():
        G, N, shape = M.generators, M.order, M.shape[:-1]
        B, C, d = _full(G.B, *shape, N), _full(G.C, *shape, N), _full(G.diagonal(), *shape)
        w = G.A.left_apply(C).to(M.dtype)
        top = torch.cat([B.new_ones(*shape, other), _full(w, *shape, N)], -1)[..., None, :].expand(*shape, other, other + N)
        bottom = torch.nn.functional.pad(_dense_transitions(M), (other, 0))
        return (torch.cat([top, bottom], -2), torch.cat([d[..., None].expand(*shape, other), B], -1),
                torch.cat([B.new_ones(*shape, other), C], -1), d)

    return small.keep(M, ("product", other, False), build, limit=KEEP_MAX_ENTRIES)


def product_of(M1: SSS, M2: SSS, batch) -> SSS:
    """``M1 @ M2`` of one orientation: ``SSS(N1 + N2)`` with block upper-triangular dense ``A`` (of uppers, the
    transpose of ``L2 L1``); ``batch`` the broadcast batch."""
    first, second = (M1, M2) if M1.lower else (M2, M1)
    A1, B1, C1, D1 = _left_pieces(first, second.order)  # (products of pieces of the operands' batches have theirs)
    A2, B2, C2, d2 = _right_pieces(second, first.order)
    D = None if D1 is None else D1 * d2
    return SSS._parts(Transitions(A1 * A2, "dense"), B1 * B2, C1 * C2, D, M1.lower, batch)
