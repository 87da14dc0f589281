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

from dataclasses import replace

import torch

from structmat.core.host import host_steps_apply
from structmat.core.transitions import Transitions
from structmat.core.validation import check_overflow
from structmat.linalg.quasiseparable_inverse_host import host_inverse
from structmat.linalg.quasiseparable_lu import (
    LU_BLOCK,
    DenseParts,
    LUFactors,
    Unbalanced,
    check_growth,
    chunked_steps,
    dense_parts,
    lu_recurrence,
    rescaled_inverse,
)
from structmat.linalg.semiseparable import Generators

__all__ = ["quasiseparable_inverse"]


def _affine_scan(b: torch.Tensor, beta: torch.Tensor, ell: torch.Tensor, L: int) -> torch.Tensor:
    """``h_j = b_j + beta_j h_{j-1} ell_j`` (``h_{-1} = 0``) along ``-3``, in chunks of ``L``: every chunk scans from 0
    at once (``L`` Python steps, keeping its products ``beta_j ... beta_start`` and ``ell_start ... ell_j``), the
    states entering the chunks follow in ``m - 1`` steps, and each chunk adds its entering state through its
    products. Inside a chunk the sums nest as in the plain recurrence."""
    n = b.shape[-3]
    if n == 0:
        return b.clone()
    L = min(L, n)
    m = -(-n // L)
    eye_u, eye_l = (torch.eye(x.shape[-1], dtype=x.dtype, device=x.device) for x in (beta, ell))
    b, beta, ell = chunked_steps(b, 2, m, L, b.new_zeros(())), chunked_steps(beta, 2, m, L, eye_u), chunked_steps(ell, 2, m, L, eye_l)
    hs, lefts, rights = _local_scans(b, beta, ell, eye_u, eye_l)
    h, left, right = hs[-1], lefts[-1], rights[-1]
    H = torch.zeros_like(h[..., 0, :, :])
    entering = [H]
    for c in range(m - 1):
        H = h[..., c, :, :] + left[..., c, :, :] @ H @ right[..., c, :, :]
        entering.append(H)
    H = torch.stack(entering, dim=-3)[..., None, :, :]
    out = torch.stack(hs, dim=-3) + torch.stack(lefts, dim=-3) @ H @ torch.stack(rights, dim=-3)
    return out.flatten(-4, -3)[..., :n, :, :]


def _local_scans(b, beta, ell, eye_u, eye_l) -> tuple[list[torch.Tensor], ...]:
    """The chunk-local steps of :func:`_affine_scan` (``L`` Python steps): the states, and the products of ``beta``
    and ``ell``."""
    h, left, right = torch.zeros_like(b[..., 0, :, :]), eye_u, eye_l
    hs, lefts, rights = [], [], []
    for t in range(b.shape[-3]):
        h = b[..., t, :, :] + beta[..., t, :, :] @ h @ ell[..., t, :, :]
        left, right = beta[..., t, :, :] @ left, right @ ell[..., t, :, :]
        hs.append(h)
        lefts.append(left)
        rights.append(right)
    return hs, lefts, rights


def _backward_states(parts: DenseParts, f: LUFactors, v: torch.Tensor) -> torch.Tensor:
    """``Z_k`` for every ``k``, shape ``(*, T, n_u, n_l)``: ``O(T n_l n_u (n_l + n_u))`` in ``L + T / L`` Python steps
    (:func:`_affine_scan` in reversed time, ``L`` the LU's chunk)."""
    A, C, Au, Cu, delta = parts.A, parts.C, parts.Au, parts.Cu, f.delta
    eye_l = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device)
    eye_u = torch.eye(Au.shape[-1], dtype=A.dtype, device=A.device)
    ell = (eye_l - f.s[..., 1:, :, None] * C[..., 1:, None, :]) @ A[..., 1:, :, :]
    beta = Au[..., 1:, :, :].mT @ (eye_u - Cu[..., 1:, :, None] * v[..., 1:, None, :])
    p = (A[..., 1:, :, :].mT @ C[..., 1:, :, None])[..., 0]
    h = (Au[..., 1:, :, :].mT @ Cu[..., 1:, :, None])[..., 0]
    base = h[..., :, None] * p[..., None, :] / delta[..., 1:, None, None]
    flip = lambda x: torch.flip(x, (-3,))  # noqa: E731
    Z = flip(_affine_scan(flip(base), flip(beta), flip(ell), LU_BLOCK))
    return torch.cat([Z, Z.new_zeros(*Z.shape[:-3], min(delta.shape[-1], 1), *Z.shape[-2:])], dim=-3)


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


def quasiseparable_inverse(lower: Generators, upper: Generators, d: torch.Tensor,
                           batch) -> tuple[Generators, Generators, torch.Tensor, float]:
    """``M^{-1}`` for ``M = strict(lower) + diag(d) + strict(upper)^T``, as generators: of its strictly-lower
    part (order ``n_l``, or ``n_l + 1``), of its transposed strictly-upper part (order ``n_u``, or
    ``n_u + 1``), its diagonal ``(*, T)``, and the growth of the LU's factors
    (:func:`~structmat.linalg.quasiseparable_lu.check_growth`). See the module docstring.

    The LU in blocks (:func:`~structmat.linalg.quasiseparable_lu.lu_recurrence`, ``T / L`` Python steps), the
    backward states by a blocked scan (``L + T / L`` steps); all of it in numpy where
    :func:`~structmat.core.host.host_steps_apply` (:mod:`structmat.linalg.quasiseparable_inverse_host`). No pivoting: raises
    :class:`~structmat.SingularMatrixError` when a leading principal minor vanishes, or when the
    inverse overflows.

    Examples
    --------
    >>> import torch
    >>> G = Generators(Transitions(torch.full((3,), 0.5), "scalar"), torch.ones(3, 1), torch.ones(3, 1))
    >>> lower, upper, diag, growth = quasiseparable_inverse(G, G, torch.full((3,), 2.0), ())
    >>> M = torch.tensor([[2, .5, .25], [.5, 2, .5], [.25, .5, 2]])
    >>> torch.allclose(diag, torch.linalg.inv(M).diagonal())
    True
    """
    parts = dense_parts(lower, upper, d, batch)
    if d.shape[-1] and host_steps_apply(*vars(parts).values()):
        return host_inverse(parts)
    return _inverse(parts)


def _inverse(parts: DenseParts, scale: float = 1.0) -> tuple[Generators, Generators, torch.Tensor, float]:
    """:func:`quasiseparable_inverse` in torch, of ``scale M`` scaled back (:class:`~structmat.linalg.quasiseparable_lu.Unbalanced`)."""
    scaled = parts if scale == 1.0 else replace(parts, d=parts.d * scale, B=parts.B * scale, Bu=parts.Bu * scale)
    f = lu_recurrence(scaled)
    try:
        growth = check_growth(f.s, f.g, f.delta, vars(scaled))
    except Unbalanced as unbalanced:
        return _inverse(parts, unbalanced.scale)
    v = f.g / f.delta[..., None]
    Z = _backward_states(scaled, f, v)
    lam = check_overflow(1 / f.delta + (v[..., None, :] @ Z @ f.s[..., :, None])[..., 0, 0], "Quasiseparable.inv() diagonal")
    c = check_overflow((Z.mT @ v[..., None])[..., 0] - lam[..., None] * scaled.C, "Quasiseparable.inv() lower part")
    cu = check_overflow((Z @ f.s[..., None])[..., 0] - lam[..., None] * scaled.Cu, "Quasiseparable.inv() upper part")
    lower, upper = _realize(scaled.A, scaled.C, f.s, c), _realize(scaled.Au, scaled.Cu, v, cu)
    if scale != 1.0:
        lower, upper, lam = rescaled_inverse(lower, upper, lam, scale)
    return lower, upper, lam, growth
