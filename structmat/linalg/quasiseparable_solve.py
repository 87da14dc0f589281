"""Solving quasiseparable systems ``M X = Y`` on the generators: two chunked algorithms, pivoting inside chunks.

Cut the sequence into ``m`` chunks of ``L`` (:mod:`structmat.linalg.quasiseparable_chunks`). In chunk
coordinates ``M`` has dense ``L x L`` diagonal blocks ``M_cc``, strictly-lower blocks
``M_cd = W_c P_{c-1} ... P_{d+1} R_d^T`` and strictly-upper blocks of the same form for ``M^T``
(``Wu, Ru, Pu``). With ``s_c`` the lower state entering chunk ``c`` and ``t_c`` the upper one,
chunk ``c`` of ``M x = y`` reads ``M_cc x_c + W_c s_c + Ru_c t_c = y_c``.

**Reduced** (a SPIKE-style reduction to the states at the chunk boundaries). All chunks at once, one
batched pivoted LU gives ``[g_c, G_c, H_c] = M_cc^{-1} [y_c, W_c, Ru_c]``, so
``x_c = g_c - G_c s_c - H_c t_c``; the state recurrences become a linear system in the
``(m - 1)(n_l + n_u)`` boundary states, solved densely with pivoting::

    s_{c+1} = (P_c - R_c^T G_c) s_c - R_c^T H_c t_c + R_c^T g_c          s_0 = 0
    t_{c-1} = (Pu_c^T - Wu_c^T H_c) t_c - Wu_c^T G_c s_c + Wu_c^T g_c    t_{m-1} = 0

No Python loop over time; work ``O(T L^2 + T n^2 K + (T n / L)^3)``. Needs nonsingular diagonal blocks.

**Blocked LU** (Eidelman and Gohberg's recurrence of :mod:`structmat.linalg.quasiseparable_lu` on
blocks, the forward substitution folded in; Schur state ``F`` and forward state ``sigma``, 0 at the start)::

    Delta_c = M_cc - W_c F Wu_c^T                     (LU with partial pivoting)
    [Y_c, zeta_c] = Delta_c^{-1} [Ru_c - W_c F Pu_c^T, y_c - W_c sigma]
    [F, sigma] <- P_c [F Pu_c^T, sigma] + (R_c^T - P_c F Wu_c^T) [Y_c, zeta_c]

then ``x_c = zeta_c - Y_c tau``, ``tau <- Pu_c^T tau + Wu_c^T x_c`` backwards from ``tau = 0``. Work
``O(T L (L + n) + T n^2 K)`` in ``O(T / L)`` Python steps; needs the leading principal submatrices of
orders ``L, 2L, ...`` nonsingular.

Inside a chunk either is as accurate as a dense LU. ``method="auto"`` takes the reduced solve with the
shortest chunk of :data:`REDUCED_BLOCKS` whose boundary system has at most :data:`REDUCED_MAX` unknowns,
else (long sequences) the blocked LU with chunks of :data:`SOLVE_BLOCK`; a singular diagonal block
sends the reduced solve to the blocked LU.
"""

from __future__ import annotations

import torch

from structmat.core.validation import SingularMatrixError, broadcast_shapes
from structmat.linalg.quasiseparable_chunks import ChunkSide, chunk, chunk_sides, strictly_lower
from structmat.linalg.semiseparable import Generators

__all__ = ["quasiseparable_solve", "SOLVE_BLOCK", "REDUCED_BLOCKS", "REDUCED_MAX"]

#: Chunk length of the blocked LU. Each chunk costs about ten small tensor operations and an ``L x L``
#: LAPACK call (a fixed cost each on the CPU) plus ``O(L^2 N)`` work to build its block; 64 keeps the
#: LU near the fixed cost.
SOLVE_BLOCK = 64

#: Chunk lengths of the reduced solve, shortest first: its diagonal blocks go through one batched LU,
#: so short chunks cost little there, and the ``O(T L N)`` work to build the blocks shrinks with ``L``.
REDUCED_BLOCKS = (16, 32, 64)

#: Most boundary-state unknowns ``(m - 1)(n_l + n_u)`` the reduced solve takes; longer sequences take
#: the blocked LU. Measured (one thread, float64, orders 2 + 2): at 508 unknowns (T = 8192) the reduced
#: solve took 0.65x the blocked LU's time, at 1020 (T = 16384) 1.0x, as its dense ``O(q^3)`` LU grows.
REDUCED_MAX = 512


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


def _boundary_system(lo: ChunkSide, up: ChunkSide, proj: torch.Tensor, K: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The linear system of the boundary states ``u_k = [s_{k+1}; t_k]`` (``k < m - 1``; module docstring) from
    ``proj = [R^T; Wu^T] [g | G | H]`` per chunk, ``(*, m, n_l + n_u, K + n_l + n_u)``. In this order it is
    block tridiagonal: row ``k`` holds ``[[I, R_k^T H_k], [Wu_{k+1}^T G_{k+1}, I]]`` on the diagonal,
    ``-(P_k - R_k^T G_k)`` acting on ``s_k`` to its left and ``-(Pu_{k+1}^T - Wu_{k+1}^T H_{k+1})`` on
    ``t_{k+1}`` to its right; the right-hand side is ``[R_k^T g_k; Wu_{k+1}^T g_{k+1}]``."""
    n_l, n_u, m = lo.P.shape[-1], up.P.shape[-1], lo.P.shape[-3]
    q, n = m - 1, n_l + n_u
    Rg, RG, RH = proj[..., :q, :n_l, :K], proj[..., :q, :n_l, K : K + n_l], proj[..., :q, :n_l, K + n_l :]
    Wg, WG, WH = proj[..., 1:, n_l:, :K], proj[..., 1:, n_l:, K : K + n_l], proj[..., 1:, n_l:, K + n_l :]
    eye_l = torch.eye(n_l, dtype=proj.dtype, device=proj.device).expand_as(RG)
    eye_u = torch.eye(n_u, dtype=proj.dtype, device=proj.device).expand_as(WH)
    diagonal = torch.cat([torch.cat([eye_l, RH], dim=-1), torch.cat([WG, eye_u], dim=-1)], dim=-2)
    left = torch.nn.functional.pad(RG[..., 1:, :, :] - lo.P[..., 1:q, :, :], (0, n_u, 0, n_u))
    right = torch.nn.functional.pad(WH[..., :-1, :, :] - up.P[..., 1:q, :, :].mT, (n_l, 0, n_l, 0))
    system = proj.new_zeros(*proj.shape[:-3], q, n, q, n)
    system.diagonal(0, -4, -2).copy_(diagonal.movedim(-3, -1))
    if q > 1:
        system.diagonal(-1, -4, -2).copy_(left.movedim(-3, -1))
        system.diagonal(1, -4, -2).copy_(right.movedim(-3, -1))
    return system.reshape(*proj.shape[:-3], q * n, q * n), torch.cat([Rg, Wg], dim=-2).flatten(-3, -2)


def _reduced(lo: ChunkSide, up: ChunkSide, Mb: torch.Tensor, Yc: torch.Tensor) -> torch.Tensor | None:
    """The reduced solve (module docstring) on chunked pieces; ``(*, m, L, K)``, or None when a diagonal
    block or the boundary system is singular."""
    K, n_l, n_u, m = Yc.shape[-1], lo.P.shape[-1], up.P.shape[-1], Mb.shape[-3]
    sol, info = torch.linalg.solve_ex(Mb, torch.cat([Yc, lo.W, up.R], dim=-1))  # [g | G | H]
    if bool((info > 0).any()):
        return None
    if m == 1:
        return sol[..., :K]
    system, rhs = _boundary_system(lo, up, torch.cat([lo.R, up.W], dim=-1).mT @ sol, K)
    u, info = torch.linalg.solve_ex(system, rhs)
    if bool((info > 0).any()):
        return None
    u = u.unflatten(-2, (m - 1, n_l + n_u))
    s = torch.cat([torch.zeros_like(u[..., :1, :n_l, :]), u[..., :n_l, :]], dim=-3)  # s_0 = 0
    t = torch.cat([u[..., n_l:, :], torch.zeros_like(u[..., :1, n_l:, :])], dim=-3)  # t_{m-1} = 0
    return sol[..., :K] - sol[..., K : K + n_l] @ s - sol[..., K + n_l :] @ t


def _blocked(lo: ChunkSide, up: ChunkSide, Mb: torch.Tensor, Yc: torch.Tensor) -> torch.Tensor:
    """The blocked LU (module docstring) on chunked pieces; ``(*, m, L, K)``."""
    K, n_l, n_u, m, L = Yc.shape[-1], lo.P.shape[-1], up.P.shape[-1], Mb.shape[-3], Mb.shape[-1]
    top = torch.cat([Mb, up.R, Yc], dim=-1)
    bottom = torch.cat([lo.R.mT, top.new_zeros(*top.shape[:-2], n_l, n_u + K)], dim=-1)
    HB = torch.cat([up.W.mT, up.P.mT], dim=-1)
    sol, info = _forward(torch.cat([top, bottom], dim=-2), torch.cat([lo.W, lo.P], dim=-2), HB, n_u)
    if bool((info > 0).any()):
        c = int((info > 0).reshape(-1, m).any(0).nonzero()[0])
        raise SingularMatrixError(f"Quasiseparable.solve: the leading principal submatrix of order {(c + 1) * L} "
                                  f"is singular (the blocked LU pivots within blocks of {L} only)")
    return _backward(sol, HB, n_u)


def _chunking(T: int, n: int, method: str, block: int | None) -> tuple[str, int]:
    """``(method, L)``: see the module docstring for ``"auto"``."""
    if method not in ("auto", "reduced", "blocked"):
        raise ValueError(f"method must be 'auto', 'reduced' or 'blocked'; got {method!r}")
    if block is not None:
        return ("reduced" if method == "auto" else method), block
    if method == "blocked":
        return method, SOLVE_BLOCK
    for L in REDUCED_BLOCKS:
        if (-(-T // L) - 1) * n <= REDUCED_MAX or method == "reduced" and L == REDUCED_BLOCKS[-1]:
            return "reduced", L
    return "blocked", SOLVE_BLOCK


def quasiseparable_solve(lower: Generators, upper: Generators, d: torch.Tensor, Y: torch.Tensor, *,
                         method: str = "auto", block: int | None = None) -> torch.Tensor:
    """Solve ``M X = Y`` for ``M = strict(lower) + diag(d) + strict(upper)^T`` (``upper`` holds the generators
    of the transposed strictly-upper part) and ``Y (*, T, K)``; batch dims broadcast. See the module docstring.

    ``method``: ``"auto"``, ``"reduced"`` or ``"blocked"``; ``block``: the chunk length (by default as
    ``"auto"`` picks it). Raises :class:`~structmat.SingularMatrixError` when ``M`` (or, for the
    blocked LU, a leading principal submatrix of order ``L, 2L, ...``) is singular.

    Examples
    --------
    >>> from structmat.core.transitions import Transitions
    >>> G = Generators(Transitions(torch.full((3,), 0.5), "scalar"), torch.ones(3, 1), torch.ones(3, 1))
    >>> M = torch.tensor([[2, .5, .25], [.5, 2, .5], [.25, .5, 2]])
    >>> X = quasiseparable_solve(G, G, torch.full((3,), 2.0), torch.eye(3), block=2)
    >>> torch.allclose(X, torch.linalg.inv(M))
    True
    """
    T, K = Y.shape[-2:]
    mbatch = broadcast_shapes(lower.batch_shape, upper.batch_shape, d.shape[:-1])
    batch = broadcast_shapes(mbatch, Y.shape[:-2])
    if T == 0 or K == 0:
        return Y.expand(*batch, T, K).clone()
    method, block = _chunking(T, lower.order + upper.order, method, block)
    m = -(-T // max(1, min(block, T)))
    L = -(-T // m)  # as even as the chunks can be: at most m - 1 padded steps
    lo, up = chunk_sides(lower, upper, L, m)  # at the matrix's batch shape, not the right-hand side's
    below = strictly_lower(L, Y.device)
    Mb = torch.where(below, lo.blocks, torch.where(below.mT, up.blocks.mT, torch.diag_embed(chunk(d.expand(*mbatch, T), 1, m, L, 1.0))))
    grow = lambda t: t if t.shape[:-3] == batch else t.expand(*batch, *t.shape[-3:])  # noqa: E731
    lo, up, Mb = ChunkSide(*map(grow, (lo.blocks, lo.W, lo.R, lo.P))), ChunkSide(*map(grow, (up.blocks, up.W, up.R, up.P))), grow(Mb)
    Yc = chunk(Y.expand(*batch, T, K), 2, m, L)
    X = _reduced(lo, up, Mb, Yc) if method == "reduced" else None
    if X is None:
        X = _blocked(lo, up, Mb, Yc)
    return X.reshape(*X.shape[:-3], m * L, K)[..., :T, :]
