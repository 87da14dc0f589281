"""The quasiseparable inverse of :mod:`structmat.linalg.quasiseparable_inverse` in numpy, on the CPU where no gradient
is wanted (:func:`~structmat.linalg.quasiseparable_lu.host_steps_apply`).

The same recursions and formulas, line for line, in the same dtype; that module holds the mathematics and is the
reference (it runs whenever a gradient is wanted). The inverse is about seventy operations on arrays of a few rows
besides its Python steps: measured (one thread, order-1 sides, T = 16) a torch operation costs 5-10 us there, a numpy
one 1-2 us, so the whole inverse took 2.4 ms in torch and takes a fraction of it here.
"""

from __future__ import annotations

import numpy as np
import torch

from structmat.core.transitions import Transitions
from structmat.core.validation import SingularMatrixError, check_overflow
from structmat.linalg.quasiseparable_lu import DenseParts, schur_steps_host, steps_first
from structmat.linalg.semiseparable import Generators

__all__ = ["host_inverse"]


def _mT(x: np.ndarray) -> np.ndarray:
    return np.swapaxes(x, -1, -2)


def _lu(A, B, C, Au, Bu, Cu, d) -> tuple[np.ndarray, ...]:
    """``s, g, delta`` of :func:`~structmat.linalg.quasiseparable_lu.lu_recurrence` (its bordered steps), and
    ``p = A^T C``, ``h = Au^T Cu``."""
    nl, nu, T = A.shape[-1], Au.shape[-1], d.shape[-1]
    left = np.zeros(A.shape[:-2] + (nl + 1, nl + 1), A.dtype)  # [[A_k, 0], [p_k^T, 0]]
    p, h = (_mT(A) @ C[..., None])[..., 0], (_mT(Au) @ Cu[..., None])[..., 0]
    left[..., :nl, :nl], left[..., nl, :nl] = A, p
    right = np.zeros(Au.shape[:-2] + (nu + 1, nu + 1), A.dtype)  # [[Au_k^T, h_k], [0, 0]]
    right[..., :nu, :nu], right[..., :nu, nu] = _mT(Au), h
    corner = np.zeros(d.shape + (nl + 1, nu + 1), A.dtype)  # [[0, B_k], [Bu_k^T, d_k]]
    corner[..., :nl, nu], corner[..., nl, :nu], corner[..., nl, nu] = B, Bu, d
    Y = schur_steps_host(left, right, corner, np.zeros(d.shape[:-1] + (nl + 1, nu + 1), A.dtype))
    delta = -Y[..., nl, nu]
    zero = (delta == 0).reshape(-1, T).any(0)
    if zero.any():
        raise SingularMatrixError(f"quasiseparable LU: leading principal minor {int(zero.nonzero()[0][0]) + 1} is zero")
    return Y[..., :nl, nu] / Y[..., nl, nu, None], -Y[..., nl, :nu], delta, p, h


def _backward_states(A, C, Au, Cu, s, v, delta, p, h) -> np.ndarray:
    """``Z_k`` of :func:`structmat.linalg.quasiseparable_inverse._backward_states`."""
    ell = (np.eye(A.shape[-1], dtype=A.dtype) - s[..., :, None] * C[..., None, :]) @ A
    beta = _mT(Au) @ (np.eye(Au.shape[-1], dtype=A.dtype) - Cu[..., :, None] * v[..., None, :])
    base = h[..., :, None] * p[..., None, :] / delta[..., None, None]
    bases, betas, ells = steps_first(base), steps_first(beta), steps_first(ell)
    Z = np.zeros_like(bases[0])
    out = [Z]
    for k in range(bases.shape[0] - 1, 0, -1):
        Z = bases[k] + betas[k] @ Z @ ells[k]
        out.append(Z)
    return np.stack(out[::-1], axis=-3)


def _realize(A: np.ndarray, C: np.ndarray, s: np.ndarray, c: np.ndarray) -> Generators:
    """:func:`structmat.linalg.quasiseparable_inverse._realize`: order ``n`` by folding ``P_j`` into the input map,
    ``n + 1`` where ``1 - C_j^T s_j`` is too close to 0."""
    T, n = s.shape[-2], s.shape[-1]
    P = np.eye(n, dtype=s.dtype) - s[..., :, None] * C[..., None, :]
    gap = 1 - (C * s).sum(-1)
    scale = 1 + (np.abs(C) * np.abs(s)).sum(-1)
    zeros = torch.from_numpy(np.zeros_like(gap))
    used = slice(0, max(T - 1, 0))  # the last input map never reaches an output
    if (np.abs(gap[..., used]) > np.finfo(s.dtype).eps ** 0.5 * scale[..., used]).all():
        P_prev = np.concatenate([np.broadcast_to(np.eye(n, dtype=s.dtype), P[..., :1, :, :].shape), P[..., :-1, :, :]], -3)
        gap = np.concatenate([gap[..., :-1], np.ones_like(gap[..., -1:])], -1)
        return Generators(Transitions(torch.from_numpy(A @ P_prev), "dense"), torch.from_numpy(s / gap[..., None]),
                          torch.from_numpy(c), zeros)
    top = np.concatenate([P @ A, s[..., :, None]], -1)
    step = np.concatenate([top, np.zeros_like(top[..., :1, :])], -2)
    A_new = np.concatenate([np.zeros_like(step[..., :1, :, :]), step[..., :-1, :, :]], -3)
    e = torch.zeros(n + 1, dtype=zeros.dtype)
    e[-1] = 1
    out_map = (_mT(A) @ c[..., None])[..., 0]
    C_new = np.concatenate([out_map, np.zeros_like(out_map[..., :1])], -1)
    return Generators(Transitions(torch.from_numpy(A_new), "dense"), e.expand(*s.shape[:-1], n + 1), torch.from_numpy(C_new),
                      zeros)


def host_inverse(parts: DenseParts) -> tuple[Generators, Generators, torch.Tensor]:
    """:func:`structmat.linalg.quasiseparable_inverse.quasiseparable_inverse` of ``parts`` (``T >= 1``) in numpy:
    the generators of the strictly-lower part, of the transposed strictly-upper part, and the diagonal ``(*, T)``.
    Raises :class:`~structmat.SingularMatrixError` as that function does."""
    A, B, C, Au, Bu, Cu, d = (t.detach().resolve_conj().resolve_neg().numpy() for t in
                              (parts.A, parts.B, parts.C, parts.Au, parts.Bu, parts.Cu, parts.d))
    with np.errstate(all="ignore"):  # an overflow or a zero pivot is reported as the torch path reports it
        s, g, delta, p, h = _lu(A, B, C, Au, Bu, Cu, d)
        v = g / delta[..., None]
        Z = _backward_states(A, C, Au, Cu, s, v, delta, p, h)
        lam = _checked(1 / delta + (v[..., None, :] @ Z @ s[..., :, None])[..., 0, 0], "Quasiseparable.inv() diagonal")
        c = _checked((_mT(Z) @ v[..., None])[..., 0] - lam[..., None] * C, "Quasiseparable.inv() lower part")
        cu = _checked((Z @ s[..., None])[..., 0] - lam[..., None] * Cu, "Quasiseparable.inv() upper part")
        return _realize(A, C, s, c), _realize(Au, Cu, v, cu), torch.from_numpy(lam)


def _checked(x: np.ndarray, what: str) -> np.ndarray:
    """``x``, through :func:`~structmat.core.validation.check_overflow` where it is not all finite (numpy tells that
    in a microsecond; the torch check costs a sum and a host read)."""
    if not np.isfinite(x).all():
        check_overflow(torch.from_numpy(x), what)
    return x
