"""The inverse of a quasiseparable matrix straight from its generators (Eidelman and Gohberg's recursion).

With the LU recurrence of :mod:`structmat.linalg.quasiseparable_lu` (``M = L U``; ``s``, ``g``,
``delta``; ``p_k = A_k^T C_k``, ``h_k = Au_k^T Cu_k``) and ``v_k = g_k / delta_k``, the closed-loop
transitions of the two factors' inverses are ``ell_k = (I - s_k C_k^T) A_k`` and
``beta_k = Au_k^T (I - Cu_k v_k^T)``. One backward recurrence for the ``n_u x n_l`` state

    Z_{T-1} = 0,      Z_{k-1} = h_k p_k^T / delta_k + beta_k Z_k ell_k

(``Z_k`` sums the paths through ``U^{-1}`` and ``L^{-1}`` that turn round after ``k``) gives
``M^{-1}`` directly:

* diagonal ``lambda_k = 1 / delta_k + v_k^T Z_k s_k``;
* strictly lower ``M^{-1}[i, j] = c_i^T A_i P_{i-1} A_{i-1} ... P_{j+1} A_{j+1} s_j`` with
  ``c_k = Z_k^T v_k - lambda_k C_k`` and ``P_k = I - s_k C_k^T``;
* strictly upper, the same form for the transpose: ``(Au, Cu, v, cu_k = Z_k s_k - lambda_k Cu_k)``.

Forming ``U^{-1}`` and ``L^{-1}`` separately and multiplying them loses accuracy: either factor's
inverse can be far larger than ``M^{-1}`` and the product cancels. Here every quantity is a piece of
``M^{-1}`` itself (the recursion tinygp uses for its quasiseparable solver).

In the SSS convention every entry passes through the transition at its row, so the entries above are
an SSS of order ``n`` when ``P_j`` can absorb the input map (``B'_j = s_j / (1 - C_j^T s_j)``,
transitions ``A_k P_{k-1}``), else of order ``n + 1`` (``docs/deviations.md``, item 1).
"""

from __future__ import annotations

import torch

from structmat.core.transitions import Transitions
from structmat.core.validation import check_overflow
from structmat.linalg.quasiseparable_inverse_host import host_inverse
from structmat.linalg.quasiseparable_lu import DenseParts, LUFactors, dense_parts, host_steps_apply, lu_recurrence
from structmat.linalg.semiseparable import Generators

__all__ = ["quasiseparable_inverse"]


def _backward_states(parts: DenseParts, f: LUFactors, v: torch.Tensor) -> torch.Tensor:
    """``Z_k`` for every ``k``, shape ``(*, T, n_u, n_l)``: ``O(T n_l n_u (n_l + n_u))``, a Python step per position."""
    A, C, Au, Cu, delta = parts.A, parts.C, parts.Au, parts.Cu, f.delta
    eye_l = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device)
    eye_u = torch.eye(Au.shape[-1], dtype=A.dtype, device=A.device)
    ell = (eye_l - f.s[..., :, None] * C[..., None, :]) @ A
    beta = Au.mT @ (eye_u - Cu[..., :, None] * v[..., None, :])
    p = (A.mT @ C[..., None])[..., 0]
    h = (Au.mT @ Cu[..., None])[..., 0]
    base = h[..., :, None] * p[..., None, :] / delta[..., None, None]
    T = delta.shape[-1]
    if T == 0:
        return base.clone()
    bases, betas, ells = base.unbind(-3), beta.unbind(-3), ell.unbind(-3)
    Z = torch.zeros_like(bases[0])
    out = [Z]
    for k in range(T - 1, 0, -1):
        Z = bases[k] + betas[k] @ Z @ ells[k]
        out.append(Z)
    return torch.stack(out[::-1], dim=-3)


def _realize(A: torch.Tensor, C: torch.Tensor, s: torch.Tensor, c: torch.Tensor) -> Generators:
    """Strictly-lower SSS generators of ``[i, j] -> c_i^T A_i P_{i-1} A_{i-1} ... P_{j+1} A_{j+1} s_j``
    (``P_k = I - s_k C_k^T``): order ``n`` by folding ``P_j`` into the input map, order ``n + 1`` where
    ``1 - C_j^T s_j`` is too close to 0 for that (the fold divides by it)."""
    T, n = s.shape[-2], s.shape[-1]
    eye = torch.eye(n, dtype=s.dtype, device=s.device)
    P = eye - s[..., :, None] * C[..., None, :]
    gap = 1 - (C * s).sum(-1)
    scale = 1 + (C.abs() * s.abs()).sum(-1)
    zeros = torch.zeros_like(gap)
    used = slice(0, max(T - 1, 0))  # the last input map never reaches an output
    if bool((gap[..., used].abs() > torch.finfo(s.dtype).eps ** 0.5 * scale[..., used]).all()):
        P_prev = torch.cat([eye.expand_as(P[..., :1, :, :]), P[..., :-1, :, :]], dim=-3)
        gap = torch.cat([gap[..., :-1], torch.ones_like(gap[..., -1:])], dim=-1)
        return Generators(Transitions(A @ P_prev, "dense"), s / gap[..., None], c, zeros)
    # state [sum of the closed-loop paths; the last input]: no division at all
    top = torch.cat([P @ A, s[..., :, None]], dim=-1)
    step = torch.cat([top, torch.zeros_like(top[..., :1, :])], dim=-2)
    A_new = torch.cat([torch.zeros_like(step[..., :1, :, :]), step[..., :-1, :, :]], dim=-3)
    e = torch.zeros(n + 1, dtype=s.dtype, device=s.device)
    e[-1] = 1
    out_map = (A.mT @ c[..., None])[..., 0]
    return Generators(Transitions(A_new, "dense"), e.expand(*s.shape[:-1], n + 1),
                      torch.cat([out_map, torch.zeros_like(out_map[..., :1])], dim=-1), zeros)


def quasiseparable_inverse(lower: Generators, upper: Generators, d: torch.Tensor, batch) -> tuple[Generators, Generators, torch.Tensor]:
    """``M^{-1}`` for ``M = strict(lower) + diag(d) + strict(upper)^T``, as generators: of its strictly-lower
    part (order ``n_l``, or ``n_l + 1``), of its transposed strictly-upper part (order ``n_u``, or
    ``n_u + 1``), and its diagonal ``(*, T)``. See the module docstring.

    ``O(T n_l n_u (n_l + n_u))`` with two Python steps per position (in numpy where no gradient is wanted on the CPU:
    :mod:`structmat.linalg.quasiseparable_inverse_host`). No pivoting: raises
    :class:`~structmat.SingularMatrixError` when a leading principal minor vanishes, or when the
    inverse overflows.

    Examples
    --------
    >>> import torch
    >>> G = Generators(Transitions(torch.full((3,), 0.5), "scalar"), torch.ones(3, 1), torch.ones(3, 1))
    >>> lower, upper, diag = quasiseparable_inverse(G, G, torch.full((3,), 2.0), ())
    >>> M = torch.tensor([[2, .5, .25], [.5, 2, .5], [.25, .5, 2]])
    >>> torch.allclose(diag, torch.linalg.inv(M).diagonal())
    True
    """
    parts = dense_parts(lower, upper, d, batch)
    if d.shape[-1] and host_steps_apply(parts.A, parts.B, parts.C, parts.Au, parts.Bu, parts.Cu, parts.d):
        return host_inverse(parts)
    f = lu_recurrence(parts)
    v = f.g / f.delta[..., None]
    Z = _backward_states(parts, f, v)
    lam = check_overflow(1 / f.delta + (v[..., None, :] @ Z @ f.s[..., :, None])[..., 0, 0], "Quasiseparable.inv() diagonal")
    c = check_overflow((Z.mT @ v[..., None])[..., 0] - lam[..., None] * parts.C, "Quasiseparable.inv() lower part")
    cu = check_overflow((Z @ f.s[..., None])[..., 0] - lam[..., None] * parts.Cu, "Quasiseparable.inv() upper part")
    return _realize(parts.A, parts.C, f.s, c), _realize(parts.Au, parts.Cu, v, cu), lam
