"""Sums, products and inverses of quasiseparable matrices in structured form (orders add / are kept).

Write ``M = L + D + U`` (strictly lower SSS, diagonal, strictly upper SSS). The only new objects
in ``M1 M2`` are the cross terms ``L1 U2`` and ``U1 L2``; each is quasiseparable and its generators
come from one matrix-valued recurrence:

* ``W_i = sum_{k<i} Phi1(i,k) B1_k B2_k^T Phi2(i,k)^T``, forwards: ``(L1 U2)`` has lower part
  ``(A1, W C2, C1)`` and upper part ``(A2, W^T C1, C2)``;
* ``V_j = sum_{k>j} Phi1(k,j)^T C1_k C2_k^T Phi2(k,j)``, backwards: ``(U1 L2)`` has lower part
  ``(A2, B2, V^T B1)`` and upper part ``(A1, B1, V B2)``.

The lower cross part joins the input map of the ``L1`` block of ``(L1 + D1)(L2 + D2)`` and the output
map of its ``L2`` block, so the orders are ``(n_l1 + n_l2, n_u1 + n_u2)``. The inverse comes from the
generators by Eidelman and Gohberg's recursion (:mod:`structmat.linalg.quasiseparable_inverse`):
every quantity it forms is a piece of ``M^{-1}`` (never the two triangular factors' inverses, whose
product cancels), orders unchanged.
"""

from __future__ import annotations

import torch

from structmat.algebra.semiseparable import build, sss_hadamard, sss_matmul
from structmat.core.transitions import Transitions
from structmat.linalg.quasiseparable_inverse import quasiseparable_inverse
from structmat.linalg.scan import linear_scan
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
    return SSS(like.B.new_ones(*batch, T), empty, empty, like.B.new_zeros(*batch, T), lower=lower)


def as_quasiseparable(m: SSS) -> Quasiseparable:
    """A lower or upper SSS (or OneSS) as a quasiseparable matrix (order 0 on the other side)."""
    if m.lower:
        return Quasiseparable(m, _zero_part(m, lower=False), m.diagonal())
    return Quasiseparable(_zero_part(m, lower=True), m, m.diagonal())


def qs_add(a: Quasiseparable, b: Quasiseparable) -> Quasiseparable:
    """Parts and diagonals add: orders ``(n_l1 + n_l2, n_u1 + n_u2)``."""
    return Quasiseparable(a.lower_part + b.lower_part, a.upper_part + b.upper_part, a.diagonal() + b.diagonal())


def qs_add_sss(a: Quasiseparable, m: SSS) -> Quasiseparable:
    """A lower (upper) SSS joins the lower (upper) part; its diagonal joins the diagonal."""
    part = strict_part(m)
    diag = a.diagonal() + m.diagonal()
    if m.lower:
        return Quasiseparable(a.lower_part + part, a.upper_part, diag)
    return Quasiseparable(a.lower_part, a.upper_part + part, diag)


def qs_add_diagonal(a: Quasiseparable, d: Diagonal) -> Quasiseparable:
    """The diagonal changes, the orders do not."""
    return Quasiseparable(a.lower_part, a.upper_part, a.diagonal() + d.diagonal())


def sss_add_mixed(a: SSS, b: SSS) -> Quasiseparable:
    """A lower plus an upper SSS: a quasiseparable matrix."""
    lo, up = (a, b) if a.lower else (b, a)
    return Quasiseparable(lo, up, lo.diagonal() + up.diagonal())


def sss_matmul_mixed(a: SSS, b: SSS) -> Quasiseparable:
    """A lower times an upper SSS (or the reverse): a quasiseparable product, orders add."""
    return qs_matmul(as_quasiseparable(a), as_quasiseparable(b))


def qs_matmul_sss(a: Quasiseparable, b: SSS) -> Quasiseparable:
    return qs_matmul(a, as_quasiseparable(b))


def sss_matmul_qs(a: SSS, b: Quasiseparable) -> Quasiseparable:
    return qs_matmul(as_quasiseparable(a), b)


def qs_matmul_diagonal(a: Quasiseparable, d: Diagonal) -> Quasiseparable:
    """``M diag(d)``: both parts and the diagonal scale; same orders."""
    return Quasiseparable(a.lower_part @ d, a.upper_part @ d, a.diagonal() * d.diagonal())


def diagonal_matmul_qs(d: Diagonal, a: Quasiseparable) -> Quasiseparable:
    """``diag(d) M``: both parts and the diagonal scale; same orders."""
    return Quasiseparable(d @ a.lower_part, d @ a.upper_part, d.diagonal() * a.diagonal())


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
    return Quasiseparable(sss_hadamard(a.lower_part, b.lower_part), sss_hadamard(a.upper_part, b.upper_part),
                          a.diagonal() * b.diagonal())


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
    batch = torch.broadcast_shapes(a.batch_shape, m.batch_shape)
    G = strict.generators.expand(batch)
    diag = (a.diagonal() * m.diagonal()).expand(*batch, a.shape[-1])
    return build(Generators(G.A, G.B, G.C, diag), m.lower)


def _kron(X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """``X (x) Y`` for stacks of square matrices, so that ``vec(X W Y^T) = (X (x) Y) vec(W)`` (row-major)."""
    n1, n2 = X.shape[-1], Y.shape[-1]
    return (X[..., :, None, :, None] * Y[..., None, :, None, :]).reshape(*X.shape[:-2], n1 * n2, n1 * n2)


def _forward_pairs(Aa, Ba, Ab, Bb) -> torch.Tensor:
    """``W_i = sum_{k<i} Phi_a(i,k) Ba_k Bb_k^T Phi_b(i,k)^T`` for dense ``Aa, Ab``; shape ``(*, T, na, nb)``."""
    na, nb = Ba.shape[-1], Bb.shape[-1]
    K = Transitions(_kron(Aa, Ab), "dense")
    U = (Ba[..., :, None] * Bb[..., None, :]).flatten(-2)[..., None]  # (*, T, na nb, 1)
    G = linear_scan(K, U)  # G_i = W_i + U_i
    prev = torch.cat([torch.zeros_like(G[..., :1, :, :]), G[..., :-1, :, :]], dim=-3)
    return K.apply(prev)[..., 0].reshape(*Ba.shape[:-1], na, nb)


def _backward_pairs(Aa, Ca, Ab, Cb) -> torch.Tensor:
    """``V_j = sum_{k>j} Phi_a(k,j)^T Ca_k Cb_k^T Phi_b(k,j)``, a forward recurrence in reversed time."""
    flip = lambda t: torch.flip(t, (-2,))  # noqa: E731
    Ar, Br = Transitions(Aa, "dense").reversed().values, Transitions(Ab, "dense").reversed().values
    return torch.flip(_forward_pairs(Ar, flip(Ca), Br, flip(Cb)), (-3,))


def _dense_generators(M: SSS, batch, T: int):
    """Dense ``A (*, T, n, n)``, ``B``, ``C`` of an SSS part (its stored generators, either orientation)."""
    G = M.generators.expand(batch)
    return G.A.matrices(G.order, M.dtype).expand(*batch, T, G.order, G.order), G.B, G.C


def _product_lower(M1: Quasiseparable, M2: Quasiseparable, batch) -> SSS:
    """Lower SSS (explicit diagonal) of ``M1 @ M2``."""
    T = M1.shape[-1]
    A1, B1, C1 = _dense_generators(M1.lower_part, batch, T)
    A2, B2, C2 = _dense_generators(M2.lower_part, batch, T)
    A1u, B1u, C1u = _dense_generators(M1.upper_part, batch, T)
    A2u, B2u, C2u = _dense_generators(M2.upper_part, batch, T)
    d1, d2 = M1.diagonal().expand(*batch, T), M2.diagonal().expand(*batch, T)
    base = sss_matmul(SSS(A1, B1, C1, d1), SSS(A2, B2, C2, d2))
    n1 = M1.lower_part.order
    W = _forward_pairs(A1, B1, A2u, B2u)  # L1 U2
    w = (W @ C2u[..., None])[..., 0]
    V = _backward_pairs(A1u, C1u, A2, C2)  # U1 L2
    cv = (V.mT @ B1u[..., None])[..., 0]
    B = torch.cat([base.B[..., :n1] + w, base.B[..., n1:]], -1)
    C = torch.cat([base.C[..., :n1], base.C[..., n1:] + cv], -1)
    diag = base.D + (C1 * w).sum(-1) + (B1u[..., None, :] @ V @ B2[..., :, None])[..., 0, 0]
    return SSS(base.transitions, B, C, diag)


def qs_matmul(M1: Quasiseparable, M2: Quasiseparable) -> Quasiseparable:
    """``M1 @ M2`` for quasiseparable matrices: orders ``(n_l1 + n_l2, n_u1 + n_u2)``."""
    batch = torch.broadcast_shapes(M1.batch_shape, M2.batch_shape)
    lower = _product_lower(M1, M2, batch)
    upper_t = _product_lower(M2.T, M1.T, batch)  # (M1 M2)^T = M2^T M1^T
    return Quasiseparable(lower, upper_t.T, lower.D)


def qs_inverse(M: Quasiseparable) -> Quasiseparable:
    """``M^{-1}`` from the generators by Eidelman and Gohberg's inversion recursion (no pivoting: needs
    nonzero leading principal minors); orders unchanged (``n + 1`` on a side whose realization needs it,
    ``docs/deviations.md`` item 1). See :mod:`structmat.linalg.quasiseparable_inverse`."""
    lower, upper, diag = quasiseparable_inverse(M.lower_part.generators, M.upper_part.generators, M.diag, M.batch_shape)
    return Quasiseparable(SSS._from_generators(lower, True), SSS._from_generators(upper, False), diag)
