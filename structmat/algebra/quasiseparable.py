"""Sums, products and inverses of quasiseparable matrices in structured form (orders add / are kept).

Write ``M = L + D + U`` (strictly lower SSS, diagonal, strictly upper SSS). The only new objects
in ``M1 M2`` are the cross terms ``L1 U2`` and ``U1 L2``; each is quasiseparable and its generators
come from one matrix-valued recurrence:

* ``W_i = sum_{k<i} Phi1(i,k) B1_k B2_k^T Phi2(i,k)^T``, forwards: ``(L1 U2)`` has lower part
  ``(A1, W C2, C1)`` and upper part ``(A2, W^T C1, C2)``;
* ``V_j = sum_{k>j} Phi1(k,j)^T C1_k C2_k^T Phi2(k,j)``, backwards: ``(U1 L2)`` has lower part
  ``(A2, B2, V^T B1)`` and upper part ``(A1, B1, V B2)``.

The lower cross part joins the input map of the ``L1`` block of ``(L1 + D1)(L2 + D2)`` and the output
map of its ``L2`` block, so the orders are ``(n_l1 + n_l2, n_u1 + n_u2)``. The upper part of ``M1 M2`` is that
of ``(M2^T M1^T)^T``, whose pair states are ``W^T`` and ``V^T``: each is formed once. Operands whose four sides are
1-SS decays (LION) add and multiply by :mod:`structmat.algebra.quasiseparable_decay`. The inverse comes from the
generators by Eidelman and Gohberg's recursion (:mod:`structmat.linalg.quasiseparable_inverse`):
every quantity it forms is a piece of ``M^{-1}`` (never the two triangular factors' inverses, whose
product cancels), orders unchanged.
"""

from __future__ import annotations

import torch

from structmat.algebra.quasiseparable_decay import decay_add, decay_matmul, decay_sides
from structmat.algebra.semiseparable import (
    batch_of,
    build,
    fit,
    generators_in,
    join_states,
    matmul_lower,
    scale_maps,
    sss_add,
    sss_hadamard,
)
from structmat.core.dtypes import compute_dtype
from structmat.core.joined_transitions import block_diagonal, kron
from structmat.core.transitions import Transitions
from structmat.core.validation import SingularMatrixError, broadcast_shapes
from structmat.linalg.quasiseparable_inverse import quasiseparable_inverse
from structmat.linalg.scan import linear_scan
from structmat.linalg.segsum import segment_products
from structmat.linalg.semiseparable import Generators
from structmat.matrices.diagonal import Diagonal
from structmat.matrices.quasiseparable import Quasiseparable, strict_part
from structmat.matrices.sss import SSS

__all__ = ["as_quasiseparable", "qs_add", "qs_add_sss", "qs_add_diagonal", "sss_add_mixed", "sss_matmul_mixed",
           "qs_matmul_sss", "sss_matmul_qs", "qs_matmul", "qs_matmul_diagonal", "diagonal_matmul_qs", "qs_inverse",
           "qs_hadamard", "qs_hadamard_sss"]


def _zero_part(like: SSS, lower: bool) -> SSS:
    """An order-0 SSS of the shape of ``like``: the missing triangle of a one-sided operand."""
    T, batch = like.shape[-1], like.batch_shape
    empty = like.B.new_zeros(*batch, T, 0)
    ones, zeros = (torch.full((), v, dtype=like.dtype, device=like.device).expand(*batch, T) for v in (1.0, 0.0))
    return SSS._assemble(Generators(Transitions(ones, "scalar"), empty, empty, zeros), lower, batch)


def as_quasiseparable(m: SSS) -> Quasiseparable:
    """A lower or upper SSS (or OneSS) as a quasiseparable matrix (order 0 on the other side)."""
    parts = (strict_part(m), _zero_part(m, lower=False)) if m.lower else (_zero_part(m, lower=True), strict_part(m))
    return Quasiseparable._of(*parts, m.diagonal(), m.batch_shape)


def _strict_sum(p1: SSS, p2: SSS, batch) -> SSS:
    """The sum of two strict parts (explicit zero diagonals, :func:`strict_part`): :func:`sss_add` without adding
    the zeros (a part's zeros are reused where they have the batch)."""
    G1, G2 = p1.generators, p2.generators
    T = G1.B.shape[-2]
    A = block_diagonal(G1.A, G2.A, G1.order, G2.order)
    B, C = join_states(G1.B, G2.B), join_states(G1.C, G2.C)
    own = broadcast_shapes(A.batch_shape, B.shape[:-2], C.shape[:-2], G1.D.shape[:-1])
    if not A.batch_shape == B.shape[:-2] == C.shape[:-2] == own:  # one batch for all (a part may be narrower than
        A, B, C = A.expand(own), B.expand(*own, *B.shape[-2:]), C.expand(*own, *C.shape[-2:])  # its matrix)
    zeros = G1.D if G1.D.shape[:-1] == own else G1.D.expand(*own, T)
    return SSS._assemble(Generators(A, B, C, zeros), p1.lower, batch)


def qs_add(a: Quasiseparable, b: Quasiseparable) -> Quasiseparable:
    """Parts and diagonals add: orders ``(n_l1 + n_l2, n_u1 + n_u2)``."""
    if (sides := decay_sides(a, b)) is not None:
        return decay_add(a, b, sides)
    batch = batch_of(a, b)
    return Quasiseparable._of(_strict_sum(a.lower_part, b.lower_part, batch), _strict_sum(a.upper_part, b.upper_part, batch),
                              a.diag + b.diag, batch)


def qs_add_sss(a: Quasiseparable, m: SSS) -> Quasiseparable:
    """A lower (upper) SSS joins the lower (upper) part; its diagonal joins the diagonal."""
    part = strict_part(m)
    diag, batch = a.diag + m.diagonal(), batch_of(a, m)
    if m.lower:
        return Quasiseparable._of(sss_add(a.lower_part, part), a.upper_part, diag, batch)
    return Quasiseparable._of(a.lower_part, sss_add(a.upper_part, part), diag, batch)


def qs_add_diagonal(a: Quasiseparable, d: Diagonal) -> Quasiseparable:
    """The diagonal changes, the orders do not."""
    return Quasiseparable._of(a.lower_part, a.upper_part, a.diag + d.d, batch_of(a, d))


def sss_add_mixed(a: SSS, b: SSS) -> Quasiseparable:
    """A lower plus an upper SSS: a quasiseparable matrix."""
    lo, up = (a, b) if a.lower else (b, a)
    return Quasiseparable._of(strict_part(lo), strict_part(up), lo.diagonal() + up.diagonal(), batch_of(a, b))


def sss_matmul_mixed(a: SSS, b: SSS) -> Quasiseparable:
    """A lower times an upper SSS (or the reverse): a quasiseparable product, orders add."""
    return qs_matmul(as_quasiseparable(a), as_quasiseparable(b))


def qs_matmul_sss(a: Quasiseparable, b: SSS) -> Quasiseparable:
    return qs_matmul(a, as_quasiseparable(b))


def sss_matmul_qs(a: SSS, b: Quasiseparable) -> Quasiseparable:
    return qs_matmul(as_quasiseparable(a), b)


def qs_matmul_diagonal(a: Quasiseparable, d: Diagonal) -> Quasiseparable:
    """``M diag(d)``: both parts and the diagonal scale; same orders."""
    return Quasiseparable._of(scale_maps(a.lower_part, d, output=False), scale_maps(a.upper_part, d, output=False),
                              a.diag * d.d, batch_of(a, d))


def diagonal_matmul_qs(d: Diagonal, a: Quasiseparable) -> Quasiseparable:
    """``diag(d) M``: both parts and the diagonal scale; same orders."""
    return Quasiseparable._of(scale_maps(a.lower_part, d, output=True), scale_maps(a.upper_part, d, output=True),
                              d.d * a.diag, batch_of(a, d))


def qs_hadamard(a: Quasiseparable, b: Quasiseparable) -> Quasiseparable:
    """``a * b`` elementwise: the strictly-lower parts, the strictly-upper parts and the diagonals multiply
    separately, each part by Kronecker products of the states (:func:`sss_hadamard`): orders
    ``(n_l1 n_l2, n_u1 n_u2)``, log decays add (two LION masks give a LION mask). ``O(T n^2)`` to form
    for scalar and diagonal transitions, ``O(T n^4)`` for dense ones (``n`` the product order).

    Examples
    --------
    >>> import structmat as sm
    >>> M = sm.Quasiseparable.bidirectional(sm.OneSS.decay(0.5, 3), sm.OneSS.decay(0.5, 3))
    >>> H = M.hadamard(M)
    >>> H.order, H.to_dense()[0]
    ((1, 1), tensor([1.0000, 0.2500, 0.0625]))
    """
    return Quasiseparable._of(sss_hadamard(a.lower_part, b.lower_part), sss_hadamard(a.upper_part, b.upper_part),
                              a.diag * b.diag, batch_of(a, b))


def qs_hadamard_sss(a: Quasiseparable, m: SSS) -> SSS:
    """``a * m`` for a lower (upper) SSS or OneSS ``m``: it meets only the strictly-lower (upper) part of ``a``
    and the diagonal, so the product is an SSS of the orientation of ``m``, order ``n_l N`` (``n_u N``),
    with the explicit diagonal ``diag(a) diag(m)``.

    Examples
    --------
    >>> import structmat as sm
    >>> M = sm.Quasiseparable.bidirectional(sm.OneSS.decay(0.5, 3), sm.OneSS.decay(0.5, 3))
    >>> H = M.hadamard(sm.OneSS.causal(3))  # keeps the lower triangle
    >>> type(H).__name__, H.to_dense()[2]
    ('SSS', tensor([0.2500, 0.5000, 1.0000]))
    """
    strict = sss_hadamard(a.lower_part if m.lower else a.upper_part, m)
    batch = batch_of(a, m)
    G = generators_in(strict, batch)
    diag = fit(a.diag * m.diagonal(), *batch, a.shape[-1])
    return build(Generators(G.A, G.B, G.C, diag), m.lower, batch)


#: Longest sequence whose pair states (:func:`_pair_states`) come from the ``T x T`` segment products of scalar
#: or diagonal transitions (``O(T^2 n_1 n_2)``, a few tensor operations) instead of a scan with a Python step
#: per position up to 64 and per block beyond (``O(T n_1 n_2)``). Measured (one thread, orders 1-4): the
#: segment products take 0.05-0.3 ms at T <= 256, the scans 0.5-3 ms; at T = 1024 the products cost more.
PAIRS_DENSE_MAX_T = 256


def _pair_states(Aa: Transitions, Ba: torch.Tensor, Ab: Transitions, Bb: torch.Tensor, batch,
                 backward: bool) -> torch.Tensor:
    """Forwards, ``W_i = sum_{k<i} Phi_a(i,k) Ba_k Bb_k^T Phi_b(i,k)^T``; backwards (``backward``, with the output
    maps in the place of ``Ba, Bb``), ``V_j = sum_{k>j} Phi_a(k,j)^T Ba_k Bb_k^T Phi_b(k,j)``. Shape
    ``(*, T, na, nb)``: the states of a recurrence with the Kronecker transitions ``Aa (x) Ab``."""
    na, nb, T = Ba.shape[-1], Bb.shape[-1], Ba.shape[-2]
    K = kron(Aa, Ab, na, nb, batch)
    U = (Ba[..., :, None] * Bb[..., None, :]).flatten(-2)  # (*, T, na nb)
    P = segment_products(K) if T <= PAIRS_DENSE_MAX_T else None
    if P is not None:  # P[..., i, k] (per state for diagonal transitions): the steps k+1 .. i
        P = P.tril(-1).to(U.dtype)
        if backward:
            P = P.mT  # Phi(k, j)^T = Phi(k, j) for scalar and diagonal steps
        W = (P * U.mT[..., :, None, :]).sum(-1).mT if K.kind == "diag" else P @ U
        return W.reshape(*W.shape[:-1], na, nb)
    if backward:  # a forward recurrence in reversed time
        return torch.flip(_pair_states(Aa.reversed(), torch.flip(Ba, (-2,)), Ab.reversed(), torch.flip(Bb, (-2,)), batch,
                                       False), (-3,))
    G = linear_scan(K, U[..., None])  # G_i = W_i + U_i
    prev = torch.cat([torch.zeros_like(G[..., :1, :, :]), G[..., :-1, :, :]], dim=-3)
    W = K.apply(prev)[..., 0]
    return W.reshape(*W.shape[:-1], na, nb)


def _product_lower(M1: Quasiseparable, M2: Quasiseparable, batch, pairs: tuple | None = None) -> tuple[SSS, tuple]:
    """Lower SSS (explicit diagonal) of ``M1 @ M2``: ``(L1 + D1)(L2 + D2)`` with the cross terms ``L1 U2`` and ``U1 L2``
    (module docstring) joining its input and output maps and its diagonal; and the pair states ``(W, V)`` of the
    cross terms (given as ``pairs`` where known: those of ``M2^T M1^T`` are their transposes)."""
    L1, L2 = generators_in(M1.lower_part, batch), generators_in(M2.lower_part, batch)
    U1, U2 = generators_in(M1.upper_part, batch), generators_in(M2.upper_part, batch)
    T, n1 = M1.shape[-1], L1.order
    base = matmul_lower(L1.with_diagonal(fit(M1.diag, *batch, T)), L2.with_diagonal(fit(M2.diag, *batch, T)))
    if pairs is None:
        pairs = (_pair_states(L1.A, L1.B, U2.A, U2.B, batch, False), _pair_states(U1.A, U1.C, L2.A, L2.C, batch, True))
    W, V = pairs  # of L1 U2 and U1 L2
    w = (W @ U2.C[..., None])[..., 0]
    cv = (V.mT @ U1.B[..., None])[..., 0]
    B = torch.cat([base.B[..., :n1] + w, base.B[..., n1:]], -1)
    C = torch.cat([base.C[..., :n1], base.C[..., n1:] + cv], -1)
    diag = base.D + (L1.C * w).sum(-1) + (U1.B[..., None, :] @ V @ L2.B[..., :, None])[..., 0, 0]
    return SSS._assemble(Generators(base.A, B, C, diag), True, batch), pairs


def _flipped(M: SSS) -> SSS:
    """``M.T`` without what :attr:`SSS.T` keeps with ``M`` (a closure operation's operand is fresh: keeping costs)."""
    return SSS._assemble(M.generators, not M.lower, M.batch_shape)


def qs_matmul(M1: Quasiseparable, M2: Quasiseparable) -> Quasiseparable:
    """``M1 @ M2`` for quasiseparable matrices: orders ``(n_l1 + n_l2, n_u1 + n_u2)``."""
    if (sides := decay_sides(M1, M2)) is not None:
        return decay_matmul(M1, M2, sides)
    batch = batch_of(M1, M2)
    lower, (W, V) = _product_lower(M1, M2, batch)
    transpose = lambda M: Quasiseparable._of(_flipped(M.upper_part), _flipped(M.lower_part), M.diag, M.batch_shape)  # noqa: E731
    upper_t, _ = _product_lower(transpose(M2), transpose(M1), batch, (W.mT, V.mT))  # (M1 M2)^T = M2^T M1^T
    return Quasiseparable._of(strict_part(lower), strict_part(_flipped(upper_t)), lower.D, batch)


def qs_inverse(M: Quasiseparable) -> Quasiseparable:
    """``M^{-1}`` from the generators by Eidelman and Gohberg's inversion recursion (no pivoting: needs
    nonzero leading principal minors); orders unchanged (``n + 1`` on a side whose realization needs it,
    ``docs/deviations.md`` item 1). See :mod:`structmat.linalg.quasiseparable_inverse`. Half precisions invert in
    float32 (its triangular solves have none), the generators rounded back."""
    if (work := compute_dtype(M.dtype)) != M.dtype:
        return qs_inverse(M.to(work)).to(M.dtype)
    batch = M.batch_shape
    lower, upper, diag, growth = quasiseparable_inverse(M.lower_part.generators, M.upper_part.generators, M.diag, batch)
    R = Quasiseparable._of(SSS._assemble(lower, True, batch), SSS._assemble(upper, False, batch), diag, batch)
    if growth > torch.finfo(M.dtype).eps ** PROBE_GROWTH_POWER:
        _check_by_probe(M, R, growth)
    return R


#: The LU's growth (:func:`~structmat.linalg.quasiseparable_lu.check_growth`) from which ``inv()`` checks its result on
#: a probe vector: ``eps^(-1/3)`` (1.7e5 in float64, 2e2 in float32). The inverses measured below it were accurate to
#: about the growth times ``eps``; above it the products of the factors' inverses can cancel by far more than their
#: growth shows (condition 203, ``d[0] = 1e-11``, order 2: growth 4e9, the inverse off by 40 relative, session 23).
PROBE_GROWTH_POWER = -1 / 3


def _check_by_probe(M: Quasiseparable, R: Quasiseparable, growth: float) -> None:
    """A :class:`~structmat.SingularMatrixError` where ``R`` is not the inverse of ``M`` to ``eps^(1/3)``: the residual
    ``|M (R g) - g|`` against ``|M| |R g|`` (``|M|`` estimated by ``|M g| / |g|``) for one probe ``g``, the backward
    error of the inverse, which does not grow with ``M``'s condition. Three matvecs, ``O(T n)``."""
    with torch.no_grad():
        T = M.shape[-1]
        g = torch.sin(GOLDEN_ANGLE * torch.arange(1, T + 1, device=M.device)).to(M.dtype)[:, None]
        y = R @ g
        residual = (M @ y - g).norm(dim=(-2, -1))
        scale = (M @ g).norm(dim=(-2, -1)) / g.norm() * y.norm(dim=(-2, -1))
        worst = float((residual / scale).max()) if residual.numel() else 0.0
    if not worst <= torch.finfo(M.dtype).eps ** (1 / 3):  # (NaN included)
        raise SingularMatrixError(f"Quasiseparable.inv(): the LU without pivoting is unstable here (its factors grow by "
                                  f"{growth:.1e}; a probe's residual {worst:.1e} relative): a leading principal minor "
                                  f"is nearly zero; solve() pivots")


#: The probe's angle step (radians): the golden angle, whose multiples mod 2 pi spread evenly (no period a structure
#: of the matrix could share).
GOLDEN_ANGLE = 2.399963229728653
