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

from structmat.core.validation import SingularMatrixError
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


def _block_matrix(X: torch.Tensor, pattern: torch.Tensor) -> torch.Tensor:
    """``(*, q a, q b)`` with ``X_r (*, q, a, b)`` in block row ``r`` at the column where ``pattern (q, q)`` has its 1."""
    q, a, b = X.shape[-3:]
    return (pattern[:, :, None, None] * X[..., :, None, :, :]).transpose(-3, -2).reshape(*X.shape[:-3], q * a, q * b)


def _boundary_system(lo: ChunkSide, up: ChunkSide, proj: torch.Tensor, K: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The linear system of the boundary states ``[s_1 .. s_{m-1}, t_0 .. t_{m-2}]`` (module docstring) from
    ``proj = [R^T; Wu^T] [g | G | H]`` per chunk, ``(*, m, n_l + n_u, K + n_l + n_u)``."""
    n_l, n_u, m = lo.P.shape[-1], up.P.shape[-1], lo.P.shape[-3]
    Rg, RG, RH = proj[..., :n_l, :K], proj[..., :n_l, K : K + n_l], proj[..., :n_l, K + n_l :]
    Wg, WG, WH = proj[..., n_l:, :K], proj[..., n_l:, K : K + n_l], proj[..., n_l:, K + n_l :]
    q, like = m - 1, proj
    eye = torch.eye(q, dtype=like.dtype, device=like.device)
    sub = torch.diag(torch.ones(q - 1, dtype=like.dtype, device=like.device), -1)
    # block row of s_{c+1}: s_{c+1} - A_c s_c + R_c^T H_c t_c = R_c^T g_c  (no s_0)
    A = torch.cat([torch.zeros_like(RG[..., :1, :, :]), (lo.P - RG)[..., 1:q, :, :]], dim=-3)
    # block row of t_{c-1}: t_{c-1} - Au_c t_c + Wu_c^T G_c s_c = Wu_c^T g_c  (no t_{m-1})
    Au = torch.cat([(up.P.mT - WH)[..., 1:q, :, :], torch.zeros_like(WH[..., :1, :, :])], dim=-3)
    ss = torch.eye(q * n_l, dtype=like.dtype, device=like.device) - _block_matrix(A, sub)
    tt = torch.eye(q * n_u, dtype=like.dtype, device=like.device) - _block_matrix(Au, sub.mT)
    system = torch.cat([torch.cat([ss, _block_matrix(RH[..., :q, :, :], eye)], dim=-1),
                        torch.cat([_block_matrix(WG[..., 1:, :, :], eye), tt], dim=-1)], dim=-2)
    return system, torch.cat([Rg[..., :q, :, :].flatten(-3, -2), Wg[..., 1:, :, :].flatten(-3, -2)], dim=-2)


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
    z, info = torch.linalg.solve_ex(system, rhs)
    if bool((info > 0).any()):
        return None
    q = m - 1
    s = torch.cat([torch.zeros_like(z[..., None, :n_l, :]), z[..., : q * n_l, :].unflatten(-2, (q, n_l))], dim=-3)
    t = torch.cat([z[..., q * n_l :, :].unflatten(-2, (q, n_u)), torch.zeros_like(z[..., None, :n_u, :])], dim=-3)
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
    batch = torch.broadcast_shapes(lower.batch_shape, upper.batch_shape, d.shape[:-1], Y.shape[:-2])
    if T == 0 or K == 0:
        return Y.expand(*batch, T, K).clone()
    method, block = _chunking(T, lower.order + upper.order, method, block)
    m = -(-T // max(1, min(block, T)))
    L = -(-T // m)  # as even as the chunks can be: at most m - 1 padded steps
    lo, up = chunk_sides(lower.expand(batch), upper.expand(batch), L, m)
    below = strictly_lower(L, Y.device)
    Mb = torch.where(below, lo.blocks, torch.where(below.mT, up.blocks.mT, torch.diag_embed(chunk(d.expand(*batch, T), 1, m, L, 1.0))))
    Yc = chunk(Y.expand(*batch, T, K), 2, m, L)
    X = _reduced(lo, up, Mb, Yc) if method == "reduced" else None
    if X is None:
        X = _blocked(lo, up, Mb, Yc)
    return X.reshape(*X.shape[:-3], m * L, K)[..., :T, :]
