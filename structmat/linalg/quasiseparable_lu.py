"""The structured LU factorisation of a quasiseparable matrix (Eidelman and Gohberg's generator recursion), in blocks.

Write ``M = strict(lower) + diag(d) + strict(upper)^T`` where ``lower`` holds the generators
``(A, B, C)`` of the strictly-lower part and ``upper`` those ``(Au, Bu, Cu)`` of the transposed
strictly-upper part::

    M[j, i] = C_j^T A_j ... A_{i+1} B_i          (j > i)
    M[i, j] = Bu_i^T Au_{i+1}^T ... Au_j^T Cu_j  (i < j)

With ``p_k = A_k^T C_k``, ``h_k = Au_k^T Cu_k`` and the ``n_l x n_u`` Schur state ``F_0 = 0``::

    delta_k = d_k - p_k^T F_k h_k
    s_k     = (B_k - A_k F_k h_k) / delta_k
    g_k     = Bu_k - Au_k F_k^T p_k
    F_{k+1} = A_k F_k Au_k^T + s_k g_k^T

gives ``M = L U``: ``L`` unit lower with generators ``(A, s, C)``, ``U`` upper with diagonal ``delta``
and ``U^T``'s generators ``(Au, g, Cu)``. ``F_k = R_k M_{<k}^{-1} Ru_k^T`` (``R_k[:, i] = A_{k-1} ... A_{i+1}
B_i``, ``Ru_k`` alike) couples the leading ``k x k`` block to the rest. Each step needs ``delta_k != 0``
(the leading principal minors).

**In blocks.** The recursion is Riccati-like (nonlinear in ``F``), so it is not stepped row by row along the
sequence: cut it into ``m`` chunks of ``L`` rows (:data:`LU_BLOCK`). With ``F`` at a chunk's start, the chunk's
Schur complement ``Delta = M_cc - W F Wu^T`` (``W[k] = C_k^T A_k ... A_start``) is an ``L x L`` dense block, and

    F <- P F Pu^T + (R^T - P F Wu^T) Delta^{-1} (Ru - W F Pu^T)        (``P = A_end ... A_start``)

carries ``F`` to the next chunk by one pivoted dense solve (``m - 1`` Python steps). Then the row steps above run
in every chunk at once from its entering ``F`` (``L`` Python steps on ``m`` chunks). Forming each row's
quantities independently instead (Schur complements of the leading blocks of ``Delta``, one batched LU) was
tried and dropped: their rounding errors do not cancel in the inverse as those of one recursion do (measured
on order-5 matrices of condition 1e3: the inverse 20x less accurate in float64, 10x in float32).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from structmat.core.host import host, host_steps_apply
from structmat.core.validation import SingularMatrixError, check_overflow
from structmat.linalg.semiseparable import Generators

__all__ = ["DenseParts", "LUFactors", "LU_BLOCK", "Unbalanced", "chunked_steps", "check_growth", "dense_parts",
           "lu_recurrence", "rescaled_inverse",
           "quasiseparable_lu"]

#: Rows per chunk of the blocked LU and of the inverse's blocked scan: ``T / L`` chunk steps plus ``L`` row steps
#: on all chunks. Measured (one thread, float64, ``inv()`` of orders (1, 1) / (4, 4)): at T = 1024 L = 8, 16,
#: 32, 64 took 37 / 41, 21 / 30, 15 / 28, 14 / 38 ms; at T = 256 12 / 13, 8.6 / 10, 7.3 / 10, 8.1 / 14 ms.
LU_BLOCK = 32


@dataclass(frozen=True)
class DenseParts:
    """The generators of both sides with dense transitions, expanded to one batch: ``A (*, T, n_l, n_l)``,
    ``B, C (*, T, n_l)``, ``Au (*, T, n_u, n_u)``, ``Bu, Cu (*, T, n_u)``, ``d (*, T)``."""

    A: torch.Tensor
    B: torch.Tensor
    C: torch.Tensor
    Au: torch.Tensor
    Bu: torch.Tensor
    Cu: torch.Tensor
    d: torch.Tensor


@dataclass(frozen=True)
class LUFactors:
    """``s (*, T, n_l)``, ``g (*, T, n_u)`` and ``delta (*, T)`` of the recurrence in the module docstring."""

    s: torch.Tensor
    g: torch.Tensor
    delta: torch.Tensor


@dataclass(frozen=True)
class _ChunkSide:
    """One triangle in chunks of ``L``: ``E (*, m, L, n, L)`` (``E[k, :, i] = A_k ... A_{i+1} B_i`` for ``i < k``,
    ``B_k`` for ``i = k``, 0 above), ``X (*, m, L, n, n)`` the prefix products ``A_k ... A_start``, and from them
    the strictly-lower block entries ``C_k^T E[k, :, i]`` and ``W[k] = C_k^T X_k``."""

    E: torch.Tensor
    X: torch.Tensor
    blocks: torch.Tensor
    W: torch.Tensor


def dense_parts(lower: Generators, upper: Generators, d: torch.Tensor, batch) -> DenseParts:
    """:class:`DenseParts` of ``strict(lower) + diag(d) + strict(upper)^T`` expanded to ``batch``."""
    T, nl, nu = d.shape[-1], lower.order, upper.order
    A = lower.A.matrices(nl, d.dtype).expand(*batch, T, nl, nl)
    Au = upper.A.matrices(nu, d.dtype).expand(*batch, T, nu, nu)
    return DenseParts(A, lower.B.expand(*batch, T, nl), lower.C.expand(*batch, T, nl),
                      Au, upper.B.expand(*batch, T, nu), upper.C.expand(*batch, T, nu), d.expand(*batch, T))


def chunked_steps(x: torch.Tensor, tail: int, m: int, L: int, fill: torch.Tensor) -> torch.Tensor:
    """``x (*, T, ...)`` (``tail`` dims after time) padded with ``fill`` to ``m L`` steps and cut into ``(*, m, L, ...)``."""
    axis = x.dim() - tail - 1
    pad = m * L - x.shape[axis]
    if pad:
        x = torch.cat([x, fill.expand(*x.shape[:axis], pad, *x.shape[axis + 1 :])], dim=axis)
    return x.reshape(*x.shape[:axis], m, L, *x.shape[axis + 1 :])


def _side(A: torch.Tensor, B: torch.Tensor, C: torch.Tensor) -> _ChunkSide:
    """:class:`_ChunkSide` of chunked generators ``A (*, m, L, n, n)``, ``B, C (*, m, L, n)``, from one unit-lower-
    triangular solve per chunk: ``I - S`` with ``A_k`` at block ``(k, k-1)`` inverts to the segment products
    ``A_k ... A_{i+1}``, and forward substitution forms them as the row recursion does (a product of at most ``L``
    factors, no ratio: zeros stay exact)."""
    L, n = A.shape[-3], A.shape[-1]
    steps = A.new_zeros(*A.shape[:-3], L, n, L, n)
    steps.diagonal(-1, -4, -2).copy_(-A[..., 1:, :, :].movedim(-3, -1))
    rhs = A.new_zeros(*A.shape[:-3], L, n, L + n)
    rhs[..., :L].diagonal(0, -3, -1).copy_(B.mT)
    rhs[..., 0, :, L:] = A[..., 0, :, :]
    Y = torch.linalg.solve_triangular(steps.flatten(-4, -3).flatten(-2), rhs.flatten(-3, -2), upper=False,
                                      unitriangular=True).unflatten(-2, (L, n))
    E, X = Y[..., :L], Y[..., L:]
    return _ChunkSide(E, X, (C[..., :, :, None] * E).sum(-2), (C[..., :, :, None] * X).sum(-2))


def _boundary_states(Mcc: torch.Tensor, lo: _ChunkSide, up: _ChunkSide) -> torch.Tensor:
    """``F`` entering every chunk, ``(*, m, n_l, n_u)``: the chunk step of the module docstring, ``m - 1`` Python
    steps of one pivoted ``L x L`` solve each (a singular ``Delta`` leaves non-finite states behind it: its chunk
    ends with a zero leading minor, which the caller reports)."""
    P, Pu, Rt, Ru = lo.X[..., -1, :, :], up.X[..., -1, :, :], lo.E[..., -1, :, :], up.E[..., -1, :, :].mT
    F = Mcc.new_zeros(*Mcc.shape[:-3], P.shape[-1], Pu.shape[-1])
    states = [F]
    for c in range(Mcc.shape[-3] - 1):
        WF, PF = lo.W[..., c, :, :] @ F, P[..., c, :, :] @ F
        Delta = Mcc[..., c, :, :] - WF @ up.W[..., c, :, :].mT
        right = Ru[..., c, :, :] - WF @ Pu[..., c, :, :].mT
        left = Rt[..., c, :, :] - PF @ up.W[..., c, :, :].mT
        F = PF @ Pu[..., c, :, :].mT + left @ torch.linalg.solve_ex(Delta, right)[0]
        states.append(F)
    return torch.stack(states, dim=-3)


def _bordered_steps(left: torch.Tensor, right: torch.Tensor, corner: torch.Tensor, F: torch.Tensor) -> torch.Tensor:
    """The row steps of :func:`lu_recurrence` along ``-3`` (every chunk at once: chunks are a batch dim), ``Y_k``
    stacked along ``-3``, from the bordered states ``F (*, n_l + 1, n_u + 1)`` entering the chunks (in numpy where
    :func:`~structmat.core.host.host_steps_apply`; a zero pivot gives inf or NaN there as in torch, and the callers raise)."""
    on_host = host_steps_apply(left, right, corner, F)
    if on_host:
        left, right, corner, F = host(left), host(right), host(corner), host(F)
    Ys = []
    with np.errstate(all="ignore"):  # an overflow or a zero pivot is reported after the steps, as in torch
        for k in range(left.shape[-3]):
            Y = left[..., k, :, :] @ F @ right[..., k, :, :] - corner[..., k, :, :]
            u = Y[..., :, -1:]
            F = Y - (u @ Y[..., -1:, :]) / u[..., -1:, :]
            Ys.append(Y)
    return torch.from_numpy(np.stack(Ys, axis=-3)) if on_host else torch.stack(Ys, dim=-3)


def _chunked_parts(parts: DenseParts, L: int, m: int) -> DenseParts:
    """``parts`` in ``m`` chunks of ``L`` steps, ``(*, m, L, ...)``: padded with neutral steps (``A = I``, ``B = C = 0``,
    ``d = 1``), step 0 of the sequence (unused by the matrix) the identity."""
    def transitions(A):
        eye = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device)
        return chunked_steps(torch.cat([eye.expand_as(A[..., :1, :, :]), A[..., 1:, :, :]], dim=-3), 2, m, L, eye)

    zero, one = parts.d.new_zeros(()), parts.d.new_ones(())
    maps = [chunked_steps(x, 1, m, L, zero) for x in (parts.B, parts.C, parts.Bu, parts.Cu)]
    return DenseParts(transitions(parts.A), maps[0], maps[1], transitions(parts.Au), maps[2], maps[3],
                      chunked_steps(parts.d, 0, m, L, one))


def lu_recurrence(parts: DenseParts) -> LUFactors:
    """The recurrence of the module docstring in chunks of :data:`LU_BLOCK` rows: ``T / L`` Python steps carry ``F``
    from chunk to chunk, then ``L`` bordered row steps run in every chunk at once. Raises
    :class:`~structmat.SingularMatrixError` when a leading principal minor vanishes (checked once, after the steps;
    a non-finite pivot counts: it follows a singular chunk).

    A row step works on ``F`` bordered by a zero row and column, ``F^ = [[F, 0], [0, 0]]``, with whole-matrix
    operations only (slicing small tensors costs more than multiplying them)::

        Y_k = [[A_k, 0], [p_k^T, 0]] F^_k [[Au_k^T, h_k], [0, 0]] - [[0, B_k], [Bu_k^T, d_k]]
        F^_{k+1} = Y_k - Y_k e e^T Y_k / (e^T Y_k e)      (e the last unit vector)

    so that ``delta_k = -Y_k[-1, -1]``, ``s_k = Y_k[:-1, -1] / Y_k[-1, -1]``, ``g_k = -Y_k[-1, :-1]`` and the Schur
    complement of ``Y_k``'s corner is ``F_{k+1} = A_k F_k Au_k^T + s_k g_k^T``.
    """
    T, nl, nu = parts.d.shape[-1], parts.A.shape[-1], parts.Au.shape[-1]
    if T == 0:
        return LUFactors(parts.B.clone(), parts.Bu.clone(), parts.d.clone())
    L = min(LU_BLOCK, T)
    m = -(-T // L)
    c = _chunked_parts(parts, L, m)
    lo, up = _side(c.A, c.B, c.C), _side(c.Au, c.Bu, c.Cu)
    strict = torch.ones(L, L, dtype=torch.bool, device=c.d.device).tril(-1)
    Mcc = torch.where(strict, lo.blocks, torch.diag_embed(c.d) + torch.where(strict, up.blocks, 0).mT)
    F = torch.nn.functional.pad(_boundary_states(Mcc, lo, up), (0, 1, 0, 1))[..., None, :, :]  # (*, m, 1, nl+1, nu+1)
    p = (c.A.mT @ c.C[..., None])[..., 0]
    h = (c.Au.mT @ c.Cu[..., None])[..., 0]
    pad = torch.nn.functional.pad
    left = pad(torch.cat([c.A, p[..., None, :]], dim=-2), (0, 1))  # [[A_k, 0], [p_k^T, 0]]
    right = pad(torch.cat([c.Au.mT, h[..., :, None]], dim=-1), (0, 0, 0, 1))  # [[Au_k^T, h_k], [0, 0]]
    corner = torch.cat([torch.cat([c.B.new_zeros(*c.B.shape, nu), c.B[..., None]], -1),
                        torch.cat([c.Bu, c.d[..., None]], -1)[..., None, :]], -2)  # [[0, B_k], [Bu_k^T, d_k]]
    Y = _bordered_steps(left, right, corner, F[..., 0, :, :]).flatten(-4, -3)[..., :T, :, :]
    delta = -Y[..., nl, nu]
    bad = ((delta == 0) | ~torch.isfinite(delta)).reshape(-1, T).any(0)
    if bool(bad.any()):
        k = int(bad.nonzero()[0, 0])
        raise SingularMatrixError(f"quasiseparable LU: leading principal minor {k + 1} is zero")
    return LUFactors(Y[..., :nl, nu] / Y[..., nl, nu, None], -Y[..., nl, :nu], delta)


#: The growth of the unpivoted LU's factors (:func:`check_growth`) past which ``Quasiseparable.inv()`` raises:
#: ``eps^(-2/3)`` (2.8e10 in float64, 4e4 in float32): errors up to about growth times ``eps`` pass, 6e-6 and 5e-3
#: (a matrix of condition 83 with ``d[0] = 1e-12``: growth 2.1e10, an inverse off by 2.3e-6; ``1e-14``: 2.1e12 and
#: 5e-4, raises). A first estimate that took its maxima at different times raised on matrices of condition 2 (the
#: audit of session 21's changes).
GROWTH_POWER = -2 / 3

#: Smallest log of a transition's norm in :func:`check_growth`'s bound: a zero transition counts as ``e^-1000`` (the
#: cumulative sums of the logs stay finite; a bound of entries below ``e^-1000`` is no tighter for that).
LOG_NORM_FLOOR = -1000.0


def _log_reach(A: np.ndarray, C: np.ndarray) -> np.ndarray:
    """``log max_{j > k} |C_j| |A_j| ... |A_{k+1}|`` for every ``k`` (``(*, T)``, ``-inf`` at the last): the largest
    factor an entry ``C_j^T A_j ... A_{k+1} x_k`` puts on ``|x_k|`` (spectral norms: exact for order 1, a bound above), by a
    reversed running maximum of ``log |C_j| + S_j`` less ``S_k``, ``S`` the cumulative sums of ``log |A_i|``."""
    norms = np.abs(A[..., 0, 0]) if A.shape[-1] == 1 else np.linalg.norm(A, ord=2, axis=(-2, -1))  # (spectral)
    S = np.cumsum(np.maximum(np.log(norms), LOG_NORM_FLOOR), -1)
    x = np.log(np.sqrt((np.abs(C) ** 2).sum(-1))) + S
    m = np.maximum.accumulate(x[..., ::-1], -1)[..., ::-1]  # max over j >= k
    return np.concatenate([m[..., 1:], np.full(m.shape[:-1] + (1,), -np.inf)], -1) - S


def check_growth(s, g, delta, parts: dict) -> float:
    """A :class:`~structmat.SingularMatrixError` where the unpivoted LU's factors grow past ``eps^GROWTH_POWER``: a
    leading principal minor nearly zero, not only zero (the inverse's error is about the growth times ``eps``:
    ``d[0] = 1e-14`` on a matrix of condition 83 gave an inverse off by 5e-4).

    The growth is that of ``|L| |U|`` over ``M``'s entries: at each ``k`` the largest entry of ``L``'s column ``k``
    (``C_j^T A_j ... A_{k+1} s_k``, below :func:`_log_reach` times ``|s_k|``) times the largest of ``U``'s row ``k`` (its
    pivot ``delta_k`` or ``Cu_i^T Au_i ... Au_{k+1} g_k``), against ``M``'s largest entry (its diagonal, and the same
    reach times ``|B_k|``: exact for order 1, which holds growing transitions' far entries too). ``s, g, delta`` and the
    dense parts ``A, B, C, Au, Bu, Cu, d`` (a dict, :class:`DenseParts`' fields) as numpy arrays or tensors (read on
    the host), any batch. ``O(T n^3)`` (spectral norms of the transitions). Returns the growth (0 for empty factors);
    raises :class:`Unbalanced` first where ``M``'s entries are far from 1."""
    s, g, delta = (host(x) if isinstance(x, torch.Tensor) else x for x in (s, g, delta))
    p = {k: host(v) if isinstance(v, torch.Tensor) else v for k, v in parts.items()}
    if not (s.size and delta.size):
        return 0.0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        log_l = np.maximum(np.log(np.sqrt((np.abs(s) ** 2).sum(-1))) + _log_reach(p["A"], p["C"]), 0.0)
        log_u = np.maximum(np.log(np.sqrt((np.abs(g) ** 2).sum(-1))) + _log_reach(p["Au"], p["Cu"]), np.log(np.abs(delta)))
        log_scale = max(float(np.log(np.abs(p["d"]).max())),  # M's largest entry (for order 1; above it else)
                        float((_log_reach(p["A"], p["C"]) + np.log(np.sqrt((np.abs(p["B"]) ** 2).sum(-1)))).max()),
                        float((_log_reach(p["Au"], p["Cu"]) + np.log(np.sqrt((np.abs(p["Bu"]) ** 2).sum(-1)))).max()))
        growth = float(np.exp((log_l + log_u).max() - log_scale)) if np.isfinite(log_scale) else 0.0
    eps = np.finfo(delta.dtype).eps
    if np.isfinite(log_scale) and abs(log_scale) > -np.log(eps):  # (before the growth: underflowed factors mislead it)
        raise Unbalanced(2.0 ** max(-1000, min(1000, -round(log_scale / np.log(2)))))
    if growth > eps ** GROWTH_POWER:  # (NaN: the checks of the inverse report it)
        k = int((log_l + log_u).reshape(-1, delta.shape[-1]).max(0).argmax())
        raise SingularMatrixError(f"quasiseparable LU without pivoting: the factors grow by {growth:.1e} (leading "
                                  f"principal minor {k + 1} is nearly zero): the inverse could be off by up to about "
                                  f"{growth * eps:.0e} relative; solve() pivots")
    return growth


class Unbalanced(Exception):
    """Raised by :func:`check_growth` where ``M``'s largest entry (its estimate) lies outside ``[eps, 1 / eps]``:
    ``scale``, a power of two, brings it near 1. Inverting ``scale M`` and scaling that inverse by ``scale`` is exact,
    and no product of entries on the way under- or overflows (session 23: a float32 matrix of entries 1e-22 and
    condition 14 gave an inverse off by 3e-2, float64 at 1e-170 by 7e2, without an error)."""

    def __init__(self, scale: float):
        super().__init__(scale)
        self.scale = scale


def rescaled_inverse(lower: Generators, upper: Generators, lam: torch.Tensor, c: float):
    """The inverse of ``M`` from that of ``c M`` (:class:`Unbalanced`): ``M^{-1} = c (c M)^{-1}``, the output maps and
    the diagonal scaled (an overflow there raises, as in the inverse itself)."""
    return (replace(lower, C=lower.C * c), replace(upper, C=upper.C * c),
            check_overflow(lam * c, "Quasiseparable.inv() diagonal"))


def quasiseparable_lu(lower: Generators, upper: Generators, d: torch.Tensor, batch) -> tuple[Generators, Generators]:
    """``M = L U`` for ``M = strict(lower) + diag(d) + strict(upper)^T``, without pivoting.

    Returns the generators of the unit lower ``L`` (order ``n_l``) and of ``U^T`` (order ``n_u``,
    diagonal ``delta``); see the module docstring. ``O(T L^3)`` work in ``T / L`` Python steps
    (:data:`LU_BLOCK`). Raises :class:`~structmat.SingularMatrixError` when a leading principal minor vanishes.

    Examples
    --------
    >>> import torch
    >>> from structmat.core.transitions import Transitions
    >>> G = Generators(Transitions(torch.full((3,), 0.5), "scalar"), torch.ones(3, 1), torch.ones(3, 1))
    >>> L, Ut = quasiseparable_lu(G, G, torch.full((3,), 2.0), ())
    >>> Ut.D  # the pivots: ratios of consecutive leading minors of [[2, .5, .25], [.5, 2, .5], [.25, .5, 2]]
    tensor([2.0000, 1.8750, 1.8667])
    """
    parts = dense_parts(lower, upper, d, batch)
    f = lu_recurrence(parts)
    L = Generators(lower.A.expand(batch), f.s, parts.C, torch.ones_like(parts.d))
    U = Generators(upper.A.expand(batch), f.g, parts.Cu, f.delta)
    return L, U
