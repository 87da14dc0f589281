"""Closed-form algebra of SSS matrices: sums, products, Hadamard products, inverses, diagonal scalings.

Each rule works on the stored generators ``(A, B, C, D)``: of the matrix when it is lower, of its
transpose when it is upper. Sums and Hadamard products of two uppers are the transposes of those
of the lowers; a product of uppers is ``U1 U2 = (L2 L1)^T``. Results are :class:`~structmat.OneSS`
when they are still 1-SS with log decays and no explicit diagonal, else :class:`~structmat.SSS`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from structmat.algebra.semiseparable_host import host_matmul_lower
from structmat.core.joined_transitions import block_diagonal, block_triangular, coupling, kron
from structmat.core.joins import join_states, pad
from structmat.core.transitions import Transitions
from structmat.core.validation import SingularMatrixError, check_overflow
from structmat.linalg.semiseparable import Generators
from structmat.matrices.diagonal import Diagonal
from structmat.matrices.one_ss import OneSS
from structmat.matrices.sss import SSS, SSSInverse

__all__ = ["same_orientation", "different_orientation", "build", "batch_of", "fit", "generators_in", "join_states",
           "operand_generators", "matmul_lower", "scale_maps", "sss_add", "sss_matmul", "sss_hadamard", "sss_inverse",
           "sss_add_diagonal", "diagonal_matmul_sss", "sss_matmul_diagonal", "lower_times_upper_diagonal"]


def same_orientation(a, b) -> bool:
    """Both lower or both upper (SSS or Bidiagonal operands)."""
    return a.lower == b.lower


def different_orientation(a, b) -> bool:
    """One lower, one upper."""
    return a.lower != b.lower


def build(G: Generators, lower: bool, batch: tuple[int, ...]) -> SSS:
    """An ``OneSS`` where the generators allow one, else an ``SSS`` (unchecked: the operands were checked)."""
    return OneSS._assemble(G, lower, batch)


def batch_of(*Ms) -> torch.Size:
    """The broadcast batch shape of the operands (equal shapes without torch's helper)."""
    first = Ms[0]._shape
    if len(Ms) == 2 and Ms[1]._shape == first:  # (whole shapes compare in a fifth of a batch shape's slice)
        return first[:-2]
    first = first[:-2]
    return first if all(M.batch_shape == first for M in Ms[1:]) else torch.broadcast_shapes(*(M.batch_shape for M in Ms))


def fit(t: torch.Tensor, *shape: int) -> torch.Tensor:
    """``t.expand(*shape)`` where the shapes differ (an expand costs more than the comparison)."""
    return t if t.shape == shape else t.expand(*shape)


def generators_in(M: SSS, batch) -> Generators:
    """The stored generators of ``M`` expanded to ``batch``."""
    return M.generators.expand(batch)


def operand_generators(M1: SSS, M2: SSS) -> tuple[Generators, Generators, torch.Size]:
    """The stored generators of two operands with parameters of one batch rank (expanded to the common batch where the
    operands' shapes differ; else as stored, their sizes broadcast), and the common batch shape."""
    if M1._shape == M2._shape:  # (the common case costs one comparison)
        return M1.generators, M2.generators, M1._shape[:-2]
    batch = batch_of(M1, M2)
    return generators_in(M1, batch), generators_in(M2, batch), batch


def sss_add(M1: SSS, M2: SSS) -> SSS:
    """``SSS(N1) + SSS(N2) = SSS(N1 + N2)`` with block-diagonal ``A`` (diagonal if both are)."""
    G1, G2, batch = operand_generators(M1, M2)
    D = None if G1.D is None and G2.D is None else G1.diagonal() + G2.diagonal()
    A = block_diagonal(G1.A, G2.A, G1.B.shape[-1], G2.B.shape[-1])
    return build(Generators(A, join_states(G1.B, G2.B), join_states(G1.C, G2.C), D), M1.lower, batch)


def _one_ss_product(M1: OneSS, M2: OneSS) -> SSS | None:
    """``M1 @ M2`` for two lower ``OneSS`` of one shape: the generators of :func:`matmul_lower` (``A = [[a1, b1 c2 a2],
    [0, a2]]``, ``B = [b1 c2 b2, b2]``, ``C = [c1, 0]``) stacked from the ``(*, T)`` scalings in about ten operations
    (unit scalings skip their products); None for other operands."""
    if not (type(M1) is type(M2) is OneSS and M1.lower and M2.lower):
        return None
    shape = M1.shape[:-1]
    if not all(t is None or t.shape == shape for t in (M1.log_a, M2.log_a, M1.b, M1.c, M2.b, M2.c)):
        return None
    dtype = M1.dtype
    a1, a2 = (a if a.dtype == dtype else a.to(dtype) for a in (M1.transitions.actual(), M2.transitions.actual()))
    b2 = torch.ones_like(a2) if M2.b is None else M2.b
    c1 = torch.ones_like(a1) if M1.c is None else M1.c
    b1c2 = M2.c if M1.b is None else M1.b if M2.c is None else M1.b * M2.c  # None: both are ones
    zero = torch.zeros_like(a1)
    A = torch.stack([a1, a2 if b1c2 is None else b1c2 * a2, zero, a2], -1).view(*a1.shape, 2, 2)  # (contiguous)
    B = torch.stack([b2 if b1c2 is None else b1c2 * b2, b2], -1)
    C = torch.stack([c1, zero], -1)
    return SSS._assemble(Generators(Transitions(A, "dense"), B, C), True, M1.batch_shape)


def matmul_lower(G1: Generators, G2: Generators) -> Generators:
    """``L1 L2`` with ``A = [[A1, B1 C2^T A2], [0, A2]]``, ``B = [B1 d2; B2]``, ``C = [C1; (D1 - C1^T B1) C2]``,
    ``D = D1 D2`` (no explicit ``D1``: ``C = [C1; 0]``, no ``D``). The parameters of both have one batch rank; their
    sizes broadcast."""
    A = block_triangular(G1.A, G2.A, coupling(G2.A, G1.B, G2.C))
    d2 = G2.diagonal()
    B = join_states(G1.B * d2.unsqueeze(-1), G2.B)
    if G1.D is None:
        return Generators(A, B, pad(G1.C, (0, G2.B.shape[-1])))
    gap = G1.D - _dot(G1.C, G1.B)
    return Generators(A, B, join_states(G1.C, gap.unsqueeze(-1) * G2.C), G1.D * d2)


def _dot(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``sum(x * y, -1)`` without conjugation: one ``vecdot`` for real tensors (it conjugates ``x``)."""
    return (x * y).sum(-1) if x.is_complex() else torch.linalg.vecdot(x, y)


def sss_matmul(M1: SSS, M2: SSS) -> SSS:
    """``SSS(N1) @ SSS(N2) = SSS(N1 + N2)`` with block upper-triangular ``A`` (``U1 U2 = (L2 L1)^T``); the generators in
    numpy where no gradient is wanted on the CPU (:mod:`structmat.algebra.semiseparable_host`)."""
    product = _one_ss_product(M1, M2)
    if product is not None:
        return product
    if M1._shape == M2._shape:  # (the common case: the stored parameters, no Generators built)
        shape, parts = M1._shape, [(M.transitions, M.B, M.C, M.D) for M in (M1, M2)]
    else:
        batch = batch_of(M1, M2)
        Gs = [generators_in(M, batch) for M in (M1, M2)]
        shape, parts = torch.Size((*batch, *M1._shape[-2:])), [(G.A, G.B, G.C, G.D) for G in Gs]
    first, second = parts if M1.lower else parts[::-1]
    product = host_matmul_lower(first, second)
    if product is not None:  # (one dtype: the maps')
        return SSS._of_one_dtype(*product, M1.lower, shape, product[1].dtype, M1._device)
    return build(matmul_lower(Generators(*first), Generators(*second)), M1.lower, shape[:-2])


def sss_hadamard(M1: SSS, M2: SSS) -> SSS:
    """``SSS(N1) * SSS(N2) = SSS(N1 N2)``: Kronecker products of the states (log decays add)."""
    batch = batch_of(M1, M2)
    G1, G2 = generators_in(M1, batch), generators_in(M2, batch)
    states = lambda x, y: (x[..., :, None] * y[..., None, :]).flatten(-2)  # noqa: E731
    D = None
    if G1.D is not None or G2.D is not None:
        D = G1.diagonal() * G2.diagonal()
    A = kron(G1.A, G2.A, G1.order, G2.order, batch)
    return build(Generators(A, states(G1.B, G2.B), states(G1.C, G2.C), D), M1.lower, batch)


def lower_times_upper_diagonal(M1: SSS, M2: SSS) -> Diagonal:
    """A lower and an upper triangular matrix overlap on the diagonal only: ``diag(d1 d2)``."""
    return Diagonal._of(M1.diagonal() * M2.diagonal())


def _rescaled(M: SSS, batch, *, B=None, C=None, D=None) -> SSS:
    G = generators_in(M, batch)
    return build(Generators(G.A, G.B if B is None else B, G.C if C is None else C, D), M.lower, batch)


def scale_maps(M: SSS, Dg: Diagonal, output: bool) -> SSS:
    """``diag(d) M`` (``output``) or ``M diag(d)``: the output map of a lower matrix (input map of an upper one)
    scales, or the other; an explicit diagonal scales too. Same order."""
    batch = batch_of(Dg, M)
    G, d = generators_in(M, batch), fit(Dg.diagonal(), *batch, M.shape[-1])
    D = None if G.D is None else G.D * d
    if output == M.lower:
        return _rescaled(M, batch, C=G.C * d[..., None], D=D)
    return _rescaled(M, batch, B=G.B * d[..., None], D=D)


def diagonal_matmul_sss(Dg: Diagonal, M: SSS) -> SSS:
    """``diag(d) @ M`` scales the output map (lower) or the input map (upper); same order."""
    return scale_maps(M, Dg, output=True)


def sss_matmul_diagonal(M: SSS, Dg: Diagonal) -> SSS:
    """``M @ diag(d)`` scales the input map (lower) or the output map (upper); same order."""
    return scale_maps(M, Dg, output=False)


def sss_add_diagonal(M: SSS, Dg: Diagonal) -> SSS:
    """``M + diag(d)``: an explicit ``D``; same order."""
    batch = batch_of(Dg, M)
    return _rescaled(M, batch, D=generators_in(M, batch).diagonal() + fit(Dg.diagonal(), *batch, M.shape[-1]))


def sss_inverse(M: SSS) -> SSS:
    """Inverse by the state-space inversion recurrence (``(L^T)^{-1} = (L^{-1})^T`` for uppers).

    From ``y_t = C_t^T A_t h_{t-1} + D_t x_t``: ``x_t = (y_t - C_t^T A_t h_{t-1}) / D_t`` and
    ``h_t = P_t A_t h_{t-1} + B_t y_t / D_t`` with ``P_t = I - B_t C_t^T / D_t``. With
    ``delta_t = D_t - C_t^T B_t`` nonzero this is ``SSS(N)``: ``A'_t = A_t P_{t-1}``,
    ``B' = B / delta``, ``C' = -C / D``, ``D' = 1 / D``. Otherwise an ``SSS(N + 1)`` realization
    ``A'_t = [[P_{t-1} A_{t-1}, B_{t-1} / D_{t-1}], [0, 0]]``, ``B' = e``, ``C'_t = [-A_t^T C_t / D_t; 0]``.
    Raises :class:`~structmat.SingularMatrixError` for a zero diagonal entry.
    """
    batch, N = M.batch_shape, M.order
    G = generators_in(M, batch)
    d = G.diagonal()
    if bool((d == 0).any()):
        raise SingularMatrixError("SSS is singular: a diagonal entry is zero")
    check_overflow(1.0 / d, "SSS.inv() diagonal")
    CB = G.C * G.B
    delta = d - CB.sum(-1)
    if bool((delta.abs() > torch.finfo(M.dtype).eps ** 0.5 * (d.abs() + CB.abs().sum(-1))).all()):
        return SSSInverse(M, _inverse_builder(M, augmented=False), N)
    return SSSInverse(M, _inverse_builder(M, augmented=True), N + 1)


def _inverse_builder(M: SSS, augmented: bool) -> Callable[[], Generators]:
    """The builder of the inverse's generators from ``M``'s generators as they are when it runs (a builder over the
    values read by ``inv()`` mixed them with later in-place changes, and kept their graph for one backward only)."""
    def build() -> Generators:
        G = generators_in(M, M.batch_shape)
        d = G.diagonal()
        return _inverse_generators_augmented(G, d) if augmented else _inverse_generators(G, d, d - (G.C * G.B).sum(-1))

    return build


def _transfer(G: Generators, d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Dense transitions ``A_t`` and ``P_t = I - B_t C_t^T / D_t``, both ``(*, T, N, N)``."""
    N = G.B.shape[-1]
    A = G.A.matrices(N, G.B.dtype).expand(*G.B.shape[:-1], N, N)
    eye = torch.eye(N, dtype=G.B.dtype, device=G.B.device)
    return A, eye - G.B[..., :, None] * G.C[..., None, :] / d[..., None, None]


def _inverse_generators(G: Generators, d: torch.Tensor, delta: torch.Tensor) -> Generators:
    A, P = _transfer(G, d)
    P_prev = torch.cat([torch.eye(P.shape[-1], dtype=P.dtype, device=P.device).expand_as(P[..., :1, :, :]),
                        P[..., :-1, :, :]], dim=-3)
    return Generators(Transitions(A @ P_prev, "dense"), G.B / delta[..., None], -G.C / d[..., None], 1.0 / d)


def _inverse_generators_augmented(G: Generators, d: torch.Tensor) -> Generators:
    A, P = _transfer(G, d)
    N = P.shape[-1]
    Q_prev = torch.cat([torch.zeros_like(P[..., :1, :, :]), (P @ A)[..., :-1, :, :]], dim=-3)  # Q_t = P_t A_t, a step late
    g = G.B / d[..., None]
    g_prev = torch.cat([torch.zeros_like(g[..., :1, :]), g[..., :-1, :]], dim=-2)
    top = torch.cat([Q_prev, g_prev[..., None]], dim=-1)
    A_new = torch.cat([top, torch.zeros_like(top[..., :1, :])], dim=-2)
    e = torch.zeros(N + 1, dtype=P.dtype, device=P.device)
    e[-1] = 1
    out_map = -(A.transpose(-1, -2) @ G.C[..., None])[..., 0] / d[..., None]
    C_new = torch.cat([out_map, torch.zeros_like(out_map[..., :1])], dim=-1)
    return Generators(Transitions(A_new, "dense"), e.expand(*G.B.shape[:-1], N + 1), C_new, 1.0 / d)
