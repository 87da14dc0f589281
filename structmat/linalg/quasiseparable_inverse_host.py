"""The blocked inverse of :mod:`structmat.linalg.quasiseparable_inverse` in numpy, on the CPU where no gradient is wanted
(:func:`~structmat.core.host.host_steps_apply`).

The same chunks, recursions and formulas, function for function (each names its torch original), in the same dtype;
the torch modules hold the mathematics and are the reference (they run whenever a gradient is wanted). Besides its
Python steps the blocked inverse is about 150 operations on arrays of a few rows: a torch operation costs 5-20 us
there, a numpy one 1-3 us (measured, one thread, order-1 sides: at T = 16 the inverse took 3.8 ms with only its steps
in numpy, 1.35 ms all in numpy).
"""

from __future__ import annotations

import numpy as np
import torch

from structmat.core.host import host
from structmat.core.transitions import Transitions
from structmat.core.validation import SingularMatrixError, check_overflow
from structmat.linalg.quasiseparable_inverse_scalar import SCALAR_SCAN_MAX, scalar_backward_states, scalar_lu
from structmat.linalg.quasiseparable_lu import DenseParts, Unbalanced, check_growth, rescaled_inverse
from structmat.linalg.semiseparable import Generators

__all__ = ["HOST_BLOCK", "host_inverse"]

#: Rows per chunk here (the torch path's :data:`~structmat.linalg.quasiseparable_lu.LU_BLOCK` is 32): a numpy step
#: costs about the same whatever its chunks hold, so fewer rows a chunk pay off sooner. Measured (one thread, float32,
#: ``inv()`` of orders (1, 1)) at T = 16, 64, 256, 1024: L = 8 took 1.8, 2.4, 4.4, 12.8 ms; 16: 1.3, 2.5, 3.6, 8.7;
#: 32: 1.3, 3.4, 4.0, 7.9.
HOST_BLOCK = 16


def _mT(x: np.ndarray) -> np.ndarray:
    return np.swapaxes(x, -1, -2)


def _steps(x: np.ndarray) -> np.ndarray:
    """``x (*, T, r, c)`` with time first: a loop over it yields the steps' views for less than ``x[..., t, :, :]``
    costs (a transpose by its axes: ``np.moveaxis`` normalises them at several times the cost)."""
    k = x.ndim - 3
    return x.transpose((k, *range(k), k + 1, k + 2))


def _chunked(x: np.ndarray, tail: int, m: int, L: int, fill) -> np.ndarray:
    """:func:`~structmat.linalg.quasiseparable_lu.chunked_steps` (filled in place: ``np.broadcast_to`` costs more than
    the copy)."""
    axis = x.ndim - tail - 1
    if m * L == x.shape[axis]:
        return x.reshape(x.shape[:axis] + (m, L) + x.shape[axis + 1 :])
    out = np.empty(x.shape[:axis] + (m * L,) + x.shape[axis + 1 :], x.dtype)
    head = (Ellipsis, slice(None, x.shape[axis])) + (slice(None),) * tail
    out[head], out[(Ellipsis, slice(x.shape[axis], None)) + (slice(None),) * tail] = x, fill
    return out.reshape(x.shape[:axis] + (m, L) + x.shape[axis + 1 :])


def _chunked_transitions(A: np.ndarray, m: int, L: int) -> np.ndarray:
    """The transitions of :func:`~structmat.linalg.quasiseparable_lu._chunked_parts`: step 0 and the padding the
    identity."""
    out = np.empty(A.shape[:-3] + (m * L,) + A.shape[-2:], A.dtype)
    out[..., 1 : A.shape[-3], :, :] = A[..., 1:, :, :]
    eye = np.eye(A.shape[-1], dtype=A.dtype)
    out[..., :1, :, :], out[..., A.shape[-3] :, :, :] = eye, eye
    return out.reshape(A.shape[:-3] + (m, L) + A.shape[-2:])


def _side(A: np.ndarray, B: np.ndarray, C: np.ndarray) -> tuple[np.ndarray, ...]:
    """``E, X, blocks, W`` of :func:`~structmat.linalg.quasiseparable_lu._side`: its unit-lower-triangular solve as
    the forward substitution it is, ``Y_k = rhs_k + A_k Y_{k-1}`` (numpy has no batched triangular solve)."""
    L, n = A.shape[-3], A.shape[-1]
    rhs = np.zeros(A.shape[:-3] + (L, n, L + n), A.dtype)
    idx = np.arange(L)
    rhs[..., idx, :, idx] = np.moveaxis(B, -2, 0)  # E's diagonal: B_k in column k
    rhs[..., 0, :, L:] = A[..., 0, :, :]
    for k in range(1, L):  # in place: row k reads row k - 1, already final
        rhs[..., k, :, :] += A[..., k, :, :] @ rhs[..., k - 1, :, :]
    E, X = rhs[..., :L], rhs[..., L:]
    return E, X, (C[..., :, :, None] * E).sum(-2), (C[..., :, :, None] * X).sum(-2)


def _solve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a^{-1} b`` as ``torch.linalg.solve_ex`` gives it: numpy raises on an exactly singular ``a``, torch leaves
    non-finite values that the LU reports as a zero minor (so that case goes through torch)."""
    try:
        return np.linalg.solve(a, b)
    except np.linalg.LinAlgError:
        return torch.linalg.solve_ex(torch.from_numpy(a), torch.from_numpy(b))[0].numpy()


def _boundary_states(A, B, C, Au, Bu, Cu, d) -> np.ndarray:
    """:func:`~structmat.linalg.quasiseparable_lu._boundary_states` of the chunked generators: ``F`` entering every
    chunk (with the diagonal blocks ``Mcc`` that :func:`~structmat.linalg.quasiseparable_lu.lu_recurrence` forms)."""
    (E, X, lower, W), (Eu, Xu, upper, Wu) = _side(A, B, C), _side(Au, Bu, Cu)
    L = d.shape[-1]
    strict = np.tri(L, L, -1, dtype=bool)
    Mcc = np.where(strict, lower, _mT(np.where(strict, upper, 0)))
    Mcc[..., np.arange(L), np.arange(L)] = d
    P, Pu, Rt, Ru = X[..., -1, :, :], Xu[..., -1, :, :], E[..., -1, :, :], _mT(Eu[..., -1, :, :])
    F = np.zeros(Mcc.shape[:-3] + (P.shape[-1], Pu.shape[-1]), Mcc.dtype)
    states = [F]
    for c in range(Mcc.shape[-3] - 1):
        WF, PF = W[..., c, :, :] @ F, P[..., c, :, :] @ F
        Delta = Mcc[..., c, :, :] - WF @ _mT(Wu[..., c, :, :])
        right = Ru[..., c, :, :] - WF @ _mT(Pu[..., c, :, :])
        left = Rt[..., c, :, :] - PF @ _mT(Wu[..., c, :, :])
        F = PF @ _mT(Pu[..., c, :, :]) + left @ _solve(Delta, right)
        states.append(F)
    return np.stack(states, -3)


def _bordered_steps(left: np.ndarray, right: np.ndarray, corner: np.ndarray, F: np.ndarray) -> np.ndarray:
    """:func:`~structmat.linalg.quasiseparable_lu._bordered_steps`: ``Y_k`` stacked along ``-3``."""
    Ys = np.empty_like(corner)
    for lk, rk, ck, yk in zip(*(_steps(x) for x in (left, right, corner, Ys))):
        Y = yk[...] = lk @ F @ rk - ck
        u = Y[..., :, -1:]
        F = Y - u * Y[..., -1:, :] / u[..., -1:, :]  # u Y[-1] by broadcasting: the same products as torch's matmul
    return Ys


def _lu(p: dict[str, np.ndarray], L: int) -> tuple[np.ndarray, ...]:
    """``s, g, delta`` of :func:`~structmat.linalg.quasiseparable_lu.lu_recurrence` (``T >= 1``) in chunks of ``L``;
    raises :class:`~structmat.SingularMatrixError` as it does."""
    T, nl, nu = p["d"].shape[-1], p["A"].shape[-1], p["Au"].shape[-1]
    L = min(L, T)
    m = -(-T // L)
    A, Au = _chunked_transitions(p["A"], m, L), _chunked_transitions(p["Au"], m, L)
    B, C, Bu, Cu = (_chunked(p[k], 1, m, L, 0) for k in ("B", "C", "Bu", "Cu"))
    d = _chunked(p["d"], 0, m, L, 1)
    F = np.zeros(d.shape[:-1] + (nl + 1, nu + 1), A.dtype)  # the bordered states entering the chunks
    if m > 1:  # else the one chunk enters with F = 0 (the torch path's chunk solves have no step then)
        F[..., :nl, :nu] = _boundary_states(A, B, C, Au, Bu, Cu, d)
    left = np.zeros(A.shape[:-2] + (nl + 1, nl + 1), A.dtype)  # [[A_k, 0], [p_k^T, 0]]
    left[..., :nl, :nl], left[..., nl, :nl] = A, (_mT(A) @ C[..., None])[..., 0]
    right = np.zeros(Au.shape[:-2] + (nu + 1, nu + 1), A.dtype)  # [[Au_k^T, h_k], [0, 0]]
    right[..., :nu, :nu], right[..., :nu, nu] = _mT(Au), (_mT(Au) @ Cu[..., None])[..., 0]
    corner = np.zeros(d.shape + (nl + 1, nu + 1), A.dtype)  # [[0, B_k], [Bu_k^T, d_k]]
    corner[..., :nl, nu], corner[..., nl, :nu], corner[..., nl, nu] = B, Bu, d
    Y = _bordered_steps(left, right, corner, F)
    Y = Y.reshape(Y.shape[:-4] + (m * L,) + Y.shape[-2:])[..., :T, :, :]
    delta = -Y[..., nl, nu]
    bad = ((delta == 0) | ~np.isfinite(delta)).reshape(-1, T).any(0)
    if bad.any():
        raise SingularMatrixError(f"quasiseparable LU: leading principal minor {int(bad.nonzero()[0][0]) + 1} is zero")
    return Y[..., :nl, nu] / Y[..., nl, nu, None], -Y[..., nl, :nu], delta


def _affine_scan(b: np.ndarray, beta: np.ndarray, ell: np.ndarray, L: int) -> np.ndarray:
    """:func:`structmat.linalg.quasiseparable_inverse._affine_scan` (with its chunk-local steps)."""
    n = b.shape[-3]
    if n == 0:
        return b.copy()
    L = min(L, n)
    m = -(-n // L)
    eye_u, eye_l = (np.eye(x.shape[-1], dtype=x.dtype) for x in (beta, ell))
    b, beta, ell = _chunked(b, 2, m, L, 0), _chunked(beta, 2, m, L, eye_u), _chunked(ell, 2, m, L, eye_l)
    hs = np.empty_like(b)
    h = np.zeros_like(b[..., 0, :, :])
    for bt, betat, ellt, ht in zip(*(_steps(x) for x in (b, beta, ell, hs))):
        h = ht[...] = bt + betat @ h @ ellt
    if m > 1:  # else the one chunk enters with 0 and its products are not needed
        lefts, rights = _chunk_products(beta, eye_u), _chunk_products(ell, eye_l, True)
        hs += lefts @ _entering(hs[..., -1, :, :], lefts[..., -1, :, :], rights[..., -1, :, :]) @ rights
    return hs.reshape(hs.shape[:-4] + (m * L,) + hs.shape[-2:])[..., :n, :, :]


def _chunk_products(x: np.ndarray, eye: np.ndarray, right: bool = False) -> np.ndarray:
    """The running products in every chunk of :func:`_affine_scan`: ``x_t ... x_start`` (``x_start ... x_t`` where
    ``right``)."""
    out = np.empty_like(x)
    prod = eye
    for t in range(x.shape[-3]):
        prod = out[..., t, :, :] = prod @ x[..., t, :, :] if right else x[..., t, :, :] @ prod
    return out


def _entering(h: np.ndarray, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """The states entering the chunks of :func:`_affine_scan`, ``(*, m, 1, n_u, n_l)``, from each chunk's last local
    state and products (``m - 1`` steps)."""
    H = np.zeros_like(h)
    for c in range(h.shape[-3] - 1):
        H[..., c + 1, :, :] = h[..., c, :, :] + left[..., c, :, :] @ H[..., c, :, :] @ right[..., c, :, :]
    return H[..., None, :, :]


def _backward_states(p: dict[str, np.ndarray], s: np.ndarray, v: np.ndarray, delta: np.ndarray, L: int) -> np.ndarray:
    """:func:`structmat.linalg.quasiseparable_inverse._backward_states`: ``Z_k`` for every ``k``."""
    A, C, Au, Cu = (p[k][..., 1:, :, :] if k.startswith("A") else p[k][..., 1:, :] for k in ("A", "C", "Au", "Cu"))
    ell = (np.eye(A.shape[-1], dtype=A.dtype) - s[..., 1:, :, None] * C[..., None, :]) @ A
    beta = _mT(Au) @ (np.eye(Au.shape[-1], dtype=A.dtype) - Cu[..., :, None] * v[..., 1:, None, :])
    base = (_mT(Au) @ Cu[..., None]) * _mT(_mT(A) @ C[..., None]) / delta[..., 1:, None, None]  # h p^T / delta
    Z = _affine_scan(base[..., ::-1, :, :], beta[..., ::-1, :, :], ell[..., ::-1, :, :], L)[..., ::-1, :, :]
    return np.concatenate([Z, np.zeros(Z.shape[:-3] + (1,) + Z.shape[-2:], Z.dtype)], -3)


def _realize(A: np.ndarray, C: np.ndarray, s: np.ndarray, c: np.ndarray) -> Generators:
    """:func:`structmat.linalg.quasiseparable_inverse._realize`: order ``n`` by folding ``P_j`` into the input map,
    ``n + 1`` where ``1 - C_j^T s_j`` is too close to 0."""
    T, n = s.shape[-2], s.shape[-1]
    eye = np.eye(n, dtype=s.dtype)
    P = eye - s[..., :, None] * C[..., None, :]
    gap = 1 - np.vecdot(C.conj(), s)  # C^T s (vecdot conjugates its first argument)
    scale = 1 + np.vecdot(np.abs(C), np.abs(s))
    zeros = torch.from_numpy(np.zeros_like(gap))
    used = slice(0, max(T - 1, 0))  # the last input map never reaches an output
    if (np.abs(gap[..., used]) > np.finfo(s.dtype).eps ** 0.5 * scale[..., used]).all():
        P_prev = np.empty_like(P)
        P_prev[..., 0, :, :], P_prev[..., 1:, :, :] = eye, P[..., :-1, :, :]
        gap[..., -1] = 1
        return Generators(Transitions(torch.from_numpy(A @ P_prev), "dense"), torch.from_numpy(s / gap[..., None]),
                          torch.from_numpy(c), zeros)
    # state [sum of the closed-loop paths; the last input]: no division at all
    A_new = np.zeros(A.shape[:-2] + (n + 1, n + 1), A.dtype)
    A_new[..., 1:, :n, :n], A_new[..., 1:, :n, n] = (P @ A)[..., :-1, :, :], s[..., :-1, :]
    e = torch.zeros(n + 1, dtype=zeros.dtype)
    e[-1] = 1
    C_new = np.zeros(c.shape[:-1] + (n + 1,), c.dtype)
    C_new[..., :n] = (_mT(A) @ c[..., None])[..., 0]
    return Generators(Transitions(torch.from_numpy(A_new), "dense"), e.expand(*s.shape[:-1], n + 1),
                      torch.from_numpy(C_new), zeros)


def _checked(x: np.ndarray, what: str) -> np.ndarray:
    """``x``, through :func:`~structmat.core.validation.check_overflow` where it is not all finite (numpy tells that
    in a microsecond; the torch check costs a sum and a host read)."""
    if not np.isfinite(x).all():
        check_overflow(torch.from_numpy(x), what)
    return x


def host_inverse(parts: DenseParts, scale: float = 1.0) -> tuple[Generators, Generators, torch.Tensor, float]:
    """:func:`structmat.linalg.quasiseparable_inverse.quasiseparable_inverse` of ``parts`` (``T >= 1``) in numpy, in
    chunks of :data:`HOST_BLOCK` (sides of order 1 of at most
    :data:`~structmat.linalg.quasiseparable_inverse_scalar.SCALAR_SCAN_MAX` steps by the scans of
    :mod:`structmat.linalg.quasiseparable_inverse_scalar`): the generators of the strictly-lower part, of the
    transposed strictly-upper part, the diagonal ``(*, T)`` and the LU's growth (of ``scale M``, inverted and scaled
    back, where ``M``'s entries are far from 1: :class:`~structmat.linalg.quasiseparable_lu.Unbalanced`). Raises
    :class:`~structmat.SingularMatrixError` as that function does."""
    p = {k: host(getattr(parts, k)) for k in ("A", "B", "C", "Au", "Bu", "Cu", "d")}
    if scale != 1.0:  # (the inverse of scale M, scaled back: Unbalanced)
        p = {**p, "d": p["d"] * scale, "B": p["B"] * scale, "Bu": p["Bu"] * scale}
    with np.errstate(all="ignore"):  # an overflow or a zero pivot is reported after the steps, as in torch
        scans = p["A"].shape[-1] == p["Au"].shape[-1] == 1 and p["d"].shape[-1] <= SCALAR_SCAN_MAX
        factors = scalar_lu(p) if scans else None
        scans = factors is not None
        s, g, delta = factors if scans else _lu(p, HOST_BLOCK)
        try:
            growth = check_growth(s, g, delta, p)
        except Unbalanced as unbalanced:
            return host_inverse(parts, unbalanced.scale)
        v = g / delta[..., None]
        Z = scalar_backward_states(p, s, v, delta) if scans else _backward_states(p, s, v, delta, HOST_BLOCK)
        lam = _checked(1 / delta + (v[..., None, :] @ Z @ s[..., :, None])[..., 0, 0], "Quasiseparable.inv() diagonal")
        c = _checked((_mT(Z) @ v[..., None])[..., 0] - lam[..., None] * p["C"], "Quasiseparable.inv() lower part")
        cu = _checked((Z @ s[..., None])[..., 0] - lam[..., None] * p["Cu"], "Quasiseparable.inv() upper part")
        lower, upper, lam = _realize(p["A"], p["C"], s, c), _realize(p["Au"], p["Cu"], v, cu), torch.from_numpy(lam)
    if scale != 1.0:
        lower, upper, lam = rescaled_inverse(lower, upper, lam, scale)
    return lower, upper, lam, growth
