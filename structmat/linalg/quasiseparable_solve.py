"""Blocked solve of quasiseparable systems ``M X = Y``: a block LU with dense, pivoted work inside blocks.

Cut the sequence into ``m`` chunks of ``L``. In chunk coordinates ``M`` is block quasiseparable with
the same orders: dense ``L x L`` diagonal blocks ``M_cc``, strictly-lower blocks
``M_cd = W_c P_{c-1} ... P_{d+1} R_d^T`` (``W_c`` maps the state entering chunk ``c`` to its
outputs, ``R_d`` the inputs of chunk ``d`` to the state leaving it, ``P_c`` is the chunk's
transition) and strictly-upper blocks of the same form for ``M^T`` (``Wu, Ru, Pu``). The
Eidelman-Gohberg recurrence of :mod:`structmat.linalg.quasiseparable_lu` runs on blocks, with the
forward substitution folded in (Schur state ``F`` and forward state ``sigma``, both ``0`` at the start)::

    Delta_c = M_cc - W_c F Wu_c^T                     (LU with partial pivoting)
    [Y_c, zeta_c] = Delta_c^{-1} [Ru_c - W_c F Pu_c^T, y_c - W_c sigma]
    [F, sigma] <- P_c [F Pu_c^T, sigma] + (R_c^T - P_c F Wu_c^T) [Y_c, zeta_c]

then the backward substitution ``x_c = zeta_c - Y_c tau``, ``tau <- Pu_c^T tau + Wu_c^T x_c`` from
``tau = 0`` (backwards over the chunks). Work ``O(T L (L + n) + T n^2 K)`` in ``O(T / L)`` Python
steps; the blocks' LUs pivot, so only the leading principal submatrices of orders ``L, 2L, ...``
must be nonsingular, and inside a block the solve is as accurate as a dense LU.

The diagonal blocks and chunk maps come from the generators without a loop over time for scalar and
diagonal transitions (masked cumulative products inside a block: no ratios, no ``exp``), and in
``L`` batched steps (all chunks at once) for dense ones.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from structmat.core.transitions import Transitions
from structmat.core.validation import SingularMatrixError
from structmat.linalg.semiseparable import Generators

__all__ = ["ChunkSide", "chunk_side", "quasiseparable_solve", "SOLVE_BLOCK", "SEGMENT_BUDGET"]

#: Chunk length of the blocked solve. Each chunk costs about ten small tensor operations (a fixed
#: cost on the CPU) plus an ``L x L`` LU and ``O(L^2 N)`` work to build its block; 64 keeps the LU
#: near the fixed cost.
SOLVE_BLOCK = 64

#: Elements of the ``(state, L, L)`` segment-product tensors built at once for the diagonal blocks of
#: diagonal transitions (about 128 MB in float64); larger state sizes are taken in slices.
SEGMENT_BUDGET = 1 << 24


@dataclass(frozen=True)
class ChunkSide:
    """One triangle of a quasiseparable matrix in chunks: the strictly-lower diagonal blocks
    ``(*, m, L, L)`` of its lower SSS, ``W`` and ``R`` ``(*, m, L, N)``, dense ``P`` ``(*, m, N, N)``."""

    blocks: torch.Tensor
    W: torch.Tensor
    R: torch.Tensor
    P: torch.Tensor


def _chunks(t: torch.Tensor, tail: int, m: int, L: int, fill: float = 0.0) -> torch.Tensor:
    """``(*, T, ...)`` (time ``tail`` dims from the end) padded with ``fill`` to ``m L`` and cut into ``(*, m, L, ...)``."""
    axis = t.dim() - tail
    pad = m * L - t.shape[axis]
    if pad:
        shape = list(t.shape)
        shape[axis] = pad
        t = torch.cat([t, t.new_full(shape, fill)], dim=axis)
    return t.reshape(*t.shape[:axis], m, L, *t.shape[axis + 1 :])


def _segment_products(a: torch.Tensor) -> torch.Tensor:
    """``out[..., i, j] = a[..., j+1] ... a[..., i]`` for ``i > j`` (1 elsewhere) from ``a (*, L)``: a masked
    cumulative product down each column. Every entry is its own product of at most ``L`` factors (no
    ratio), so zeros stay exact and no ``exp``/``log`` of ``L^2`` entries is needed."""
    L = a.shape[-1]
    below = torch.ones(L, L, dtype=torch.bool, device=a.device).tril(-1)
    return torch.cumprod(torch.where(below, a[..., :, None], torch.ones((), dtype=a.dtype, device=a.device)), dim=-2)


def _step_diagonals(A: Transitions, B: torch.Tensor) -> torch.Tensor | None:
    """``(*, T, 1)`` for one scalar per step (decays or signed scalars), ``(*, T, N)`` for diagonal
    transitions, None for dense ones."""
    a = A.actual()
    return a[..., None] if a.dim() == B.dim() - 1 else A.diagonals(B.shape[-1])


def _diagonal_side(a: torch.Tensor, B: torch.Tensor, C: torch.Tensor) -> ChunkSide:
    """:class:`ChunkSide` from chunked step diagonals ``a (*, m, L, N')`` (``N' = 1`` or ``N``) and chunked
    maps: the segment products give the blocks, and their first column and last row give the
    chunks' prefix and suffix products."""
    N, L, dtype = B.shape[-1], B.shape[-2], B.dtype
    a = a.movedim(-1, -2)  # (*, m, N', L)
    step = a.shape[-2] if a.shape[-2] == 1 else max(1, SEGMENT_BUDGET // max(1, a[..., 0, :].numel() * L))
    blocks, prefix, suffix = 0, [], []
    for n in range(0, a.shape[-2], step):
        E = _segment_products(a[..., n : n + step, :]).to(dtype)  # (*, m, n', L, L)
        prefix.append(E[..., :, 0] * a[..., n : n + step, :1])
        suffix.append(E[..., -1, :])
        if a.shape[-2] == 1:
            blocks = E[..., 0, :, :] * (C @ B.mT)
        else:
            Cn, Bn = C[..., n : n + step].mT, B[..., n : n + step].mT
            blocks = blocks + (Cn[..., :, :, None] * E * Bn[..., :, None, :]).sum(-3)
    prefix, suffix = torch.cat(prefix, -2).mT, torch.cat(suffix, -2).mT  # (*, m, L, N')
    total = torch.diag_embed(prefix[..., -1, :] * torch.ones(N, dtype=dtype, device=B.device))
    return ChunkSide(torch.tril(blocks, -1), C * prefix, B * suffix, total)


def _dense_side(A: torch.Tensor, B: torch.Tensor, C: torch.Tensor) -> ChunkSide:
    """:class:`ChunkSide` from chunked dense transitions ``A (*, m, L, N, N)`` and maps, in ``L`` steps of two
    batched products: the state ``S_i = [A_i ... A_{j+1} B_j (j < i) | A_i ... A_0]`` (``N x (L + N)``)
    holds a row of the block, the prefix product, and at the end the suffix products and the total."""
    N, L = B.shape[-1], B.shape[-2]
    eye_L = torch.eye(L, dtype=B.dtype, device=B.device)
    inputs = B[..., :, :, None] * eye_L[:, None, :]  # inputs[..., i, :, k] = B_i if k == i
    inputs = torch.cat([inputs, inputs.new_zeros(*inputs.shape[:-1], N)], dim=-1)
    S = torch.cat([inputs.new_zeros(*A.shape[:-3], N, L), torch.eye(N, dtype=B.dtype, device=B.device).expand_as(A[..., 0, :, :])], -1)
    states = []
    for i in range(L):
        S = A[..., i, :, :] @ (S if i == 0 else S + inputs[..., i - 1, :, :])
        states.append(S)
    rows = (C[..., :, None, :] @ torch.stack(states, dim=-3))[..., 0, :]  # (*, m, L, L + N)
    R = (S[..., :L] + inputs[..., -1, :, :L]).mT
    return ChunkSide(rows[..., :L], rows[..., L:], R, S[..., L:])


def chunk_side(G: Generators, L: int, m: int) -> ChunkSide:
    """The :class:`ChunkSide` of the strictly-lower matrix with generators ``G`` (batch expanded), ``m`` chunks of ``L``."""
    A = G.A.with_identity_first()  # the first transition is unused by the matrix: keep it harmless
    B, C = _chunks(G.B, 2, m, L), _chunks(G.C, 2, m, L)
    diagonals = _step_diagonals(A, G.B)
    if diagonals is not None:
        return _diagonal_side(_chunks(diagonals, 2, m, L, 1.0), B, C)
    return _dense_side(A.chunked(L).matrices(G.order, B.dtype), B, C)


def _forward(MGR: torch.Tensor, WP: torch.Tensor, HB: torch.Tensor, n_u: int):
    """The block LU with the forward substitution (module docstring), chunk by chunk. ``MGR_c`` stacks
    ``[[M_cc, Ru_c, y_c], [R_c^T, 0]]``, ``WP_c`` stacks ``[W_c; P_c]``, ``HB_c = [Wu_c^T, Pu_c^T]``;
    the state is ``[F, sigma]``. Returns the stacked solutions ``[Y_c, zeta_c]`` and the solve infos."""
    L = MGR.shape[-2] - WP.shape[-1]
    state, sols, infos = None, [], []
    for c in range(MGR.shape[-3]):
        D = MGR[..., c, :, :]
        if state is not None:  # the first chunk has F = 0, sigma = 0
            X = torch.cat([state[..., :n_u] @ HB[..., c, :, :], state[..., n_u:]], dim=-1)  # [F Wu^T, F Pu^T, sigma]
            D = D - WP[..., c, :, :] @ X  # [[Delta_c, rhs_c], [R_c^T - P_c F Wu_c^T, -P_c [F Pu_c^T, sigma]]]
        sol, info = torch.linalg.solve_ex(D[..., :L, :L], D[..., :L, L:])
        state = D[..., L:, :L] @ sol - D[..., L:, L:]
        sols.append(sol)
        infos.append(info)
    return torch.stack(sols, dim=-3), torch.stack(infos, dim=-1)


def _backward(sol: torch.Tensor, HB: torch.Tensor, n_u: int) -> torch.Tensor:
    """``x_c = zeta_c - Y_c tau_c`` with ``tau_{c-1} = (Pu_c^T - Wu_c^T Y_c) tau_c + Wu_c^T zeta_c``, ``tau_{m-1} = 0``:
    the chunk maps are formed for all chunks at once, so each Python step is one product and one sum."""
    L = HB.shape[-1] - n_u
    Ymat, zeta = sol[..., :n_u], sol[..., n_u:]
    H = HB[..., :L]
    G = HB[..., L:] - H @ Ymat
    h = H @ zeta
    tau = torch.zeros_like(h[..., 0, :, :])
    taus = [tau]
    for c in range(sol.shape[-3] - 1, 0, -1):
        tau = G[..., c, :, :] @ tau + h[..., c, :, :]
        taus.append(tau)
    return zeta - Ymat @ torch.stack(taus[::-1], dim=-3)


def quasiseparable_solve(lower: Generators, upper: Generators, d: torch.Tensor, Y: torch.Tensor,
                         block: int = SOLVE_BLOCK) -> torch.Tensor:
    """Solve ``M X = Y`` for ``M = strict(lower) + diag(d) + strict(upper)^T`` (``upper`` holds the generators
    of the transposed strictly-upper part) and ``Y (*, T, K)``; batch dims broadcast. See the module docstring.

    ``O(T L (L + n) + T n^2 K)`` work, ``O(T / L)`` Python steps, ``L = min(block, T)``. Raises
    :class:`~structmat.SingularMatrixError` when a leading principal submatrix of order ``L, 2L, ...``
    (or ``M``) is singular.

    Examples
    --------
    >>> G = Generators(Transitions(torch.full((3,), 0.5), "scalar"), torch.ones(3, 1), torch.ones(3, 1))
    >>> M = torch.tensor([[2, .5, .25], [.5, 2, .5], [.25, .5, 2]])
    >>> X = quasiseparable_solve(G, G, torch.full((3,), 2.0), torch.eye(3), block=2)
    >>> torch.allclose(X, torch.linalg.inv(M))
    True
    """
    T, K = Y.shape[-2:]
    batch = torch.broadcast_shapes(lower.batch_shape, upper.batch_shape, d.shape[:-1], Y.shape[:-2])
    if T == 0 or K == 0:
        return Y.expand(*batch, T, K).clone()
    m = -(-T // max(1, block))
    L = -(-T // m)  # as even as the chunks can be: at most m - 1 padded steps
    lo, up = chunk_side(lower.expand(batch), L, m), chunk_side(upper.expand(batch), L, m)
    n_l, n_u = lo.P.shape[-1], up.P.shape[-1]
    Mb = lo.blocks + up.blocks.mT + torch.diag_embed(_chunks(d.expand(*batch, T), 1, m, L, 1.0))
    top = torch.cat([Mb, up.R, _chunks(Y.expand(*batch, T, K), 2, m, L)], dim=-1)
    bottom = torch.cat([lo.R.mT, top.new_zeros(*top.shape[:-2], n_l, n_u + K)], dim=-1)
    HB = torch.cat([up.W.mT, up.P.mT], dim=-1)
    sol, info = _forward(torch.cat([top, bottom], dim=-2), torch.cat([lo.W, lo.P], dim=-2), HB, n_u)
    if bool((info > 0).any()):
        c = int((info > 0).reshape(-1, m).any(0).nonzero()[0])
        raise SingularMatrixError(f"Quasiseparable.solve: the leading principal submatrix of order {min((c + 1) * L, T)} "
                                  f"is singular (the blocked LU pivots within blocks of {L} only)")
    X = _backward(sol, HB, n_u)
    return X.reshape(*X.shape[:-3], m * L, K)[..., :T, :]
