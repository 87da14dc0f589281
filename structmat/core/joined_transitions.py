"""The transitions of two recurrences joined: side by side (a sum), in cascade (a product), elementwise (a Hadamard
product).

==========================  =====================================  =======================================
function                    transitions of step ``t``              closure operation
==========================  =====================================  =======================================
:func:`block_diagonal`      ``diag(A1_t, A2_t)``                   sum: the two states side by side
:func:`block_triangular`    ``[[A1_t, coupling_t], [0, A2_t]]``    product: one output feeds the other
:func:`kron`                ``A1_t (x) A2_t``                      Hadamard product: states multiply
==========================  =====================================  =======================================

A sum of dense transitions keeps them as blocks (:class:`BlockDiagonal`): writing ``(T, n1, n1)`` and ``(T, n2, n2)``
blocks into rows of ``n1 + n2`` moves runs of a few numbers, which cost more than the rest of the sum, and a sum of
sums would write every block again. Measured (one thread, float32, fresh operands, ``SSS(4, dense A) + SSS(4, dense
A)``, against the previous commit): at ``T = 256`` 71-76 -> 39-41 us (the dense sum of the ``256 x 256`` matrices:
25-29 us), at ``T = 16`` 48 -> 32 us.
"""

from __future__ import annotations

import torch

from structmat.core.joins import join_states, pad, same_batch
from structmat.core.small import in_place_stamp, unchanged
from structmat.core.transitions import Transitions, carries_gradient
from structmat.core.validation import check_finite

__all__ = ["BlockDiagonal", "block_diagonal", "block_triangular", "coupling", "kron"]


class BlockDiagonal(Transitions):
    """Dense transitions ``diag(B1_t, ..., Bk_t)`` kept as their blocks ``(*, T, n_i, n_i)`` (one batch shape, dtype
    and device): ``values`` (``(*, T, n, n)``, ``n = sum n_i``) are written where a computation reads them, and kept.

    The blocks are the operands' own tensors (views, as other closure results keep their operands' transitions): a
    block changed in place after the sum shows in the values (they are written again). Values written without a graph
    (under ``no_grad``) are written again where a block's gradient is wanted, and values written in inference mode are
    written again outside it (a later use would lose the gradient, or fail to record it).

    Examples
    --------
    >>> A = block_diagonal(Transitions(torch.ones(3, 1, 1), "dense"), Transitions(2 * torch.ones(3, 2, 2), "dense"),
    ...                    1, 2)
    >>> type(A).__name__, A.kind, tuple(A.batch_shape), A.length
    ('BlockDiagonal', 'dense', (), 3)
    >>> A.values[0]
    tensor([[1., 0., 0.],
            [0., 2., 2.],
            [0., 2., 2.]])
    """

    __slots__ = ("blocks", "_kept")

    def __init__(self, blocks: tuple[torch.Tensor, ...]):
        self.blocks, self._kept = blocks, None
        self.kind, self.decays = "dense", None

    def __reduce__(self):  # (copies and pickles keep the blocks, never written values)
        return BlockDiagonal, (self.blocks,)

    @property
    def values(self) -> torch.Tensor:
        if self._kept is not None and all(map(unchanged, self.blocks, self._kept[1])) and self._usable(self._kept[0]):
            return self._kept[0]
        sizes = [b.shape[-1] for b in self.blocks]
        n, before = sum(sizes), 0
        rows = []
        for block, size in zip(self.blocks, sizes):
            rows.append(pad(block, (before, n - before - size)))
            before += size
        values = torch.cat(rows, -2)
        if not torch.compiler.is_compiling():  # (nothing kept while tracing: the graph writes them each call)
            self._kept = (values, tuple(in_place_stamp(b) for b in self.blocks))
        return values

    def _usable(self, values: torch.Tensor) -> bool:
        """Whether written ``values`` serve here and now: with their graph, always; without one, unless a gradient is
        wanted of a block; written in inference mode, only there (or of inference blocks)."""
        if values.requires_grad:
            return True
        if values.is_inference() and not torch.is_inference_mode_enabled():
            return all(b.is_inference() for b in self.blocks)
        return not (torch.is_grad_enabled() and any(b.requires_grad for b in self.blocks))

    # the shape is read off the first block: reading it off ``values`` would write them
    @property
    def _axis(self) -> int:
        return self.blocks[0].dim() - 3

    @property
    def length(self) -> int:
        return self.blocks[0].shape[-3]

    @property
    def batch_shape(self) -> torch.Size:
        return self.blocks[0].shape[:-3]

    @property
    def dtype(self) -> torch.dtype:
        return self.blocks[0].dtype

    @property
    def device(self) -> torch.device:
        return self.blocks[0].device

    def check_finite(self, name: str) -> None:
        for b in self.blocks:
            check_finite(b, name)

    def expand(self, batch: torch.Size | tuple[int, ...]) -> BlockDiagonal:
        return BlockDiagonal(tuple(b.expand(*batch, *b.shape[-3:]) for b in self.blocks))

    def reshape_batch(self, batch: tuple[int, ...]) -> BlockDiagonal:
        return BlockDiagonal(tuple(b.reshape(*batch, *b.shape[-3:]) for b in self.blocks))

    def cast(self, dtype: torch.dtype) -> BlockDiagonal:
        return self if self.dtype == dtype else BlockDiagonal(tuple(b.to(dtype) for b in self.blocks))


def _blocks(A: Transitions, n: int, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """The diagonal blocks of ``A`` (``n`` states) in ``dtype``: its own where it keeps blocks, else its matrices."""
    if isinstance(A, BlockDiagonal):
        return A.cast(dtype).blocks
    return (A.matrices(n, dtype),)


def block_diagonal(A1: Transitions, A2: Transitions, n1: int, n2: int) -> Transitions:
    """``diag(A1_t, A2_t)``: the transitions of a sum of two recurrences of ``n1`` and ``n2`` states; diagonal where
    both are, else a :class:`BlockDiagonal` (dense blocks written into rows of ``n1 + n2`` inside ``torch.compile``,
    which traces no kept state). Batch dims of one count; their sizes broadcast."""
    if (A1.kind == A2.kind == "log" and n1 == n2 == 1 and A1.values.shape == A2.values.shape
            and not (carries_gradient(A1.decays) or carries_gradient(A2.decays))):  # (diagonals() carry them)
        return Transitions(torch.exp(torch.stack([A1.values, A2.values], -1)), "diag")  # one exp of both
    d1, d2 = A1.diagonals(n1), A2.diagonals(n2)
    if d1 is not None and d2 is not None:
        return Transitions(join_states(d1, d2), "diag")
    dtype = torch.promote_types(A1.dtype, A2.dtype)
    blocks = BlockDiagonal(same_batch(*_blocks(A1, n1, dtype), *_blocks(A2, n2, dtype)))
    return Transitions(blocks.values, "dense") if torch.compiler.is_compiling() else blocks


def block_triangular(A1: Transitions, A2: Transitions, coupling: torch.Tensor) -> Transitions:
    """``[[A1_t, coupling_t], [0, A2_t]]`` for ``coupling (*, T, n1, n2)``: the transitions of a cascade of two
    recurrences (a product), dense, in the dtype of ``coupling``. Batch dims of one count; their sizes broadcast.
    Three whole-tensor operations (on small matrices each costs microseconds)."""
    n1, n2, dtype = coupling.shape[-2], coupling.shape[-1], coupling.dtype
    d1, d2 = A1.diagonals(n1, dtype), A2.diagonals(n2, dtype)
    if d1 is not None and d2 is not None:  # the coupling in its corner, the diagonal written over the zeros
        diagonal, corner = join_states(d1, d2), pad(coupling, (n1, 0, 0, n2))
        if diagonal.shape == corner.shape[:-1]:
            return Transitions(torch.diagonal_scatter(corner, diagonal, 0, -2, -1), "dense")
        return Transitions(torch.diag_embed(diagonal) + corner, "dense")  # (sizes that broadcast)
    M1, M2, coupling = same_batch(A1.matrices(n1, dtype), A2.matrices(n2, dtype), coupling)
    return Transitions(torch.cat([torch.cat([M1, coupling], -1), pad(M2, (n1, 0))], -2), "dense")


def coupling(A: Transitions, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """``b_t (c_t^T A_t)`` of shape ``(*, T, M, N)`` for ``b (*, T, M)`` and ``c (*, T, N)``: in a cascade, the output
    of one recurrence (``c_t^T A_t h_{t-1}``) entering the state of the next through its input map ``b``."""
    if A.kind == "dense":  # the row c^T A kept as a (1, N) matrix: no squeeze and unsqueeze
        return b.unsqueeze(-1) * (c.unsqueeze(-2) @ A.actual())
    return b.unsqueeze(-1) * A.left_apply(c).unsqueeze(-2)


def kron(A1: Transitions, A2: Transitions, n1: int, n2: int, batch) -> Transitions:
    """``A1_t (x) A2_t``: the transitions of an elementwise product of two recurrences."""
    if A1.kind == "log" and A2.kind == "log":
        own = lambda A: torch.exp(A.values) if A.decays is None else A.decays  # noqa: E731
        carried = carries_gradient(A1.decays) or carries_gradient(A2.decays)
        decays = own(A1) * own(A2) if carried else None
        return Transitions(A1.values + A2.values, "log", decays)
    d1, d2 = A1.diagonals(n1), A2.diagonals(n2)
    if d1 is not None and d2 is not None:
        return Transitions((d1[..., :, None] * d2[..., None, :]).flatten(-2).expand(*batch, -1, n1 * n2), "diag")
    M1, M2 = A1.matrices(n1), A2.matrices(n2)
    K = (M1[..., :, None, :, None] * M2[..., None, :, None, :]).flatten(-4, -3).flatten(-2, -1)
    return Transitions(K.expand(*batch, *K.shape[-3:]), "dense")
