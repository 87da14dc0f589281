"""The structured LU factorisation of a quasiseparable matrix (Eidelman and Gohberg's generator recursion).

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
and ``U^T``'s generators ``(Au, g, Cu)``. ``F_k`` is the coupling of the leading ``k x k`` Schur
complement to the rest. Each step needs ``delta_k != 0`` (the leading principal minors).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from structmat.core.validation import SingularMatrixError
from structmat.linalg.semiseparable import Generators

__all__ = ["DenseParts", "LUFactors", "dense_parts", "host_steps_apply", "lu_recurrence", "quasiseparable_lu",
           "schur_steps_host", "steps_first"]


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


def dense_parts(lower: Generators, upper: Generators, d: torch.Tensor, batch) -> DenseParts:
    """:class:`DenseParts` of ``strict(lower) + diag(d) + strict(upper)^T`` expanded to ``batch``."""
    T, nl, nu = d.shape[-1], lower.order, upper.order
    A = lower.A.matrices(nl, d.dtype).expand(*batch, T, nl, nl)
    Au = upper.A.matrices(nu, d.dtype).expand(*batch, T, nu, nu)
    return DenseParts(A, lower.B.expand(*batch, T, nl), lower.C.expand(*batch, T, nl),
                      Au, upper.B.expand(*batch, T, nu), upper.C.expand(*batch, T, nu), d.expand(*batch, T))


_HOST_DTYPES = (torch.float32, torch.float64, torch.complex64, torch.complex128)


def host_steps_apply(*tensors: torch.Tensor) -> bool:
    """Whether the Python steps of a recurrence on ``tensors`` run in numpy: on the CPU, where no gradient is wanted
    (numpy keeps no graph) and outside ``torch.compile``. A step multiplies matrices of a few rows, where a torch
    operation costs about 5 us and a numpy one about 1 us (measured, one thread: the LU step of an order-1 pair
    costs 40-75 us in torch, 15 us in numpy); the arithmetic and the dtype are the same."""
    grad = torch.is_grad_enabled()
    return all(t.device.type == "cpu" and t.dtype in _HOST_DTYPES and not (grad and t.requires_grad) for t in tensors) \
        and not torch.compiler.is_compiling()


def _host(t: torch.Tensor) -> np.ndarray:
    """``t`` as a numpy array (a view where torch allows)."""
    return t.detach().resolve_conj().resolve_neg().numpy()


def steps_first(x: np.ndarray) -> np.ndarray:
    """``x (*, T, r, c)`` with the step axis first (itself without batch dims: ``np.moveaxis`` costs microseconds)."""
    return x if x.ndim == 3 else np.moveaxis(x, -3, 0)


def schur_steps_host(left: np.ndarray, right: np.ndarray, corner: np.ndarray, F: np.ndarray) -> np.ndarray:
    """The steps of :func:`lu_recurrence` on numpy arrays (steps along axis ``-3``), ``Y_k`` stacked along ``-3``; a
    zero pivot gives inf or NaN, as in torch, and the caller raises."""
    Ys = []
    with np.errstate(divide="ignore", invalid="ignore"):
        for Lk, Rk, Ck in zip(steps_first(left), steps_first(right), steps_first(corner)):
            Y = Lk @ F @ Rk - Ck
            u = Y[..., :, -1:]
            F = Y - (u @ Y[..., -1:, :]) / u[..., -1:, :]
            Ys.append(Y)
    return np.stack(Ys, axis=-3)


def _schur_steps(left: torch.Tensor, right: torch.Tensor, corner: torch.Tensor, F: torch.Tensor) -> torch.Tensor:
    """:func:`schur_steps_host` of torch tensors (:func:`host_steps_apply`)."""
    return torch.from_numpy(schur_steps_host(_host(left), _host(right), _host(corner), _host(F)))


def _schur_steps_torch(left: torch.Tensor, right: torch.Tensor, corner: torch.Tensor, F: torch.Tensor) -> torch.Tensor:
    """The steps of :func:`lu_recurrence` in torch (differentiable), ``Y_k`` stacked along ``-3``."""
    nl, nu = F.shape[-2] - 1, F.shape[-1] - 1
    last_col = F.new_zeros(nu + 1, 1)
    last_col[-1] = 1
    last_row = F.new_zeros(1, nl + 1)
    last_row[0, -1] = 1
    Ys = []
    for Lk, Rk, Ck in zip(left.unbind(-3), right.unbind(-3), corner.unbind(-3)):
        Y = Lk @ F @ Rk - Ck
        u = Y @ last_col
        F = Y - (u @ (last_row @ Y)) / (last_row @ u)
        Ys.append(Y)
    return torch.stack(Ys, dim=-3)


def lu_recurrence(parts: DenseParts) -> LUFactors:
    """The recurrence of the module docstring, one Python step per position: ``O(T n_l n_u (n_l + n_u))``.

    A step works on ``F`` bordered by a zero row and column, ``F^ = [[F, 0], [0, 0]]``, with whole-matrix operations
    only (slicing small tensors costs more than multiplying them)::

        Y_k = [[A_k, 0], [p_k^T, 0]] F^_k [[Au_k^T, h_k], [0, 0]] - [[0, B_k], [Bu_k^T, d_k]]
        F^_{k+1} = Y_k - Y_k e e^T Y_k / (e^T Y_k e)      (e the last unit vector)

    so that ``delta_k = -Y_k[-1, -1]``, ``s_k = Y_k[:-1, -1] / Y_k[-1, -1]``, ``g_k = -Y_k[-1, :-1]`` and the Schur
    complement of ``Y_k``'s corner is ``F_{k+1} = A_k F_k Au_k^T + s_k g_k^T``. Raises
    :class:`~structmat.SingularMatrixError` when a leading principal minor vanishes (checked once, after the steps).
    """
    A, B, Au, Bu, d = parts.A, parts.B, parts.Au, parts.Bu, parts.d
    batch, T, nl, nu = d.shape[:-1], d.shape[-1], A.shape[-1], Au.shape[-1]
    if T == 0:
        return LUFactors(B.clone(), Bu.clone(), d.clone())
    p = (A.mT @ parts.C[..., None])[..., 0]
    h = (Au.mT @ parts.Cu[..., None])[..., 0]
    pad = torch.nn.functional.pad
    left = pad(torch.cat([A, p[..., None, :]], dim=-2), (0, 1))  # [[A_k, 0], [p_k^T, 0]]
    right = pad(torch.cat([Au.mT, h[..., :, None]], dim=-1), (0, 0, 0, 1))  # [[Au_k^T, h_k], [0, 0]]
    corner = torch.cat([torch.cat([B.new_zeros(*B.shape, nu), B[..., None]], -1),
                        torch.cat([Bu, d[..., None]], -1)[..., None, :]], -2)  # [[0, B_k], [Bu_k^T, d_k]]
    F = d.new_zeros(*batch, nl + 1, nu + 1)
    Y = (_schur_steps if host_steps_apply(left, right, corner) else _schur_steps_torch)(left, right, corner, F)
    delta = -Y[..., nl, nu]
    zero = (delta == 0).reshape(-1, T).any(0)
    if bool(zero.any()):
        k = int(zero.nonzero()[0, 0])
        raise SingularMatrixError(f"quasiseparable LU: leading principal minor {k + 1} is zero")
    return LUFactors(Y[..., :nl, nu] / Y[..., nl, nu, None], -Y[..., nl, :nu], delta)


def quasiseparable_lu(lower: Generators, upper: Generators, d: torch.Tensor, batch) -> tuple[Generators, Generators]:
    """``M = L U`` for ``M = strict(lower) + diag(d) + strict(upper)^T``, without pivoting.

    Returns the generators of the unit lower ``L`` (order ``n_l``) and of ``U^T`` (order ``n_u``,
    diagonal ``delta``); see the module docstring. ``O(T n_l n_u (n_l + n_u))`` with a Python step
    per position. Raises :class:`~structmat.SingularMatrixError` when a leading principal minor vanishes.

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
