"""Block forward substitution for lower SSS systems: ``M X = Y`` in ``O(T (L + N) K)`` work.

The sequence is cut into chunks of ``L``. With ``h`` the state entering chunk ``c``::

    X_c = M_cc^{-1} (Y_c - W_c h),      h <- P_c h + R_c X_c

where ``M_cc`` is the dense ``L x L`` diagonal block, ``W_c[t] = C_t^T A_t ... A_start`` maps the
entering state to the outputs, ``R_c[i] = A_end ... A_{i+1} B_i`` maps inputs to the leaving state,
and ``P_c = A_end ... A_start``. Products come from prefix and suffix cumulative products (or
cumulative sums of log decays), never from ratios. Each triangular block solve is backward stable.
Unlike the inverse realization (whose transitions are dense ``N x N``), this keeps diagonal
transitions diagonal.
"""

from __future__ import annotations

import torch

from structmat.base import SingularMatrixError
from structmat.scan import apply_transition
from structmat.sss import SSS, _neutral_first, flip_params

__all__ = ["sss_solve", "chunk_maps"]

_TAIL = {"log": 1, "scalar": 1, "diag": 2, "dense": 3}


def _chunked(t: torch.Tensor, tail: int, n: int, L: int, pad_value: float) -> torch.Tensor:
    T = t.shape[t.dim() - tail]
    pad = n * L - T
    if pad:
        shape = list(t.shape)
        shape[t.dim() - tail] = pad
        fill = torch.full(shape, pad_value, dtype=t.dtype, device=t.device)
        if tail == 3:  # dense transitions pad with the identity
            fill = torch.eye(t.shape[-1], dtype=t.dtype, device=t.device).expand(shape).clone()
        t = torch.cat([t, fill], dim=t.dim() - tail)
    return t.reshape(*t.shape[: t.dim() - tail], n, L, *t.shape[t.dim() - tail + 1 :])


def _products(A: torch.Tensor, kind: str):
    """Per chunk: prefix ``A_t...A_start``, suffix ``A_end...A_{t+1}`` (time axis -tail)."""
    if kind == "log":
        pre = torch.exp(torch.cumsum(A, dim=-1))
        suf = torch.exp(torch.flip(torch.cumsum(torch.flip(A[..., 1:], (-1,)), -1), (-1,)))  # sums over (t, end]
        return pre, torch.cat([suf, torch.ones_like(A[..., :1])], dim=-1)
    if kind in ("scalar", "diag"):
        axis = -1 if kind == "scalar" else -2
        pre = torch.cumprod(A, dim=axis)
        shifted = A.narrow(axis, 1, A.shape[axis] - 1)
        suf = torch.flip(torch.cumprod(torch.flip(shifted, (axis,)), dim=axis), (axis,))
        suf = torch.cat([suf, torch.ones_like(A.narrow(axis, 0, 1))], dim=axis)
        return pre, suf
    L = A.shape[-3]
    pre = [A[..., 0, :, :]]
    for t in range(1, L):
        pre.append(A[..., t, :, :] @ pre[-1])
    suf = [torch.eye(A.shape[-1], dtype=A.dtype, device=A.device).expand_as(A[..., 0, :, :])]
    for t in range(L - 1, 0, -1):
        suf.append(suf[-1] @ A[..., t, :, :])
    return torch.stack(pre, dim=-3), torch.stack(suf[::-1], dim=-3)


def chunk_maps(M: SSS, chunk: int):
    """Per-chunk pieces of a lower SSS: the dense diagonal blocks ``(*, c, L, L)``, the output maps
    ``W`` and input maps ``R`` (``(*, c, L, n)``), the chunk transitions ``P`` (time axis = chunks),
    the kind of ``P`` (``log`` chunks give plain scalar products) and ``L``."""
    kind, T, N = M.kind, M.shape[-1], M.order
    batch = M.batch_shape
    L = min(chunk, T)
    n = -(-T // L)
    tail = _TAIL[kind]
    A = _neutral_first(M._A.expand(*batch, *M._A.shape[M._A.dim() - tail :]), kind)
    B, C = M.B.expand(*batch, T, N), M.C.expand(*batch, T, N)
    d = M.diag_values().expand(*batch, T)
    Ac = _chunked(A, tail, n, L, 0.0 if kind == "log" else 1.0)
    Bc, Cc = _chunked(B, 2, n, L, 0.0), _chunked(C, 2, n, L, 0.0)
    blocks = SSS(torch.exp(Ac) if kind == "log" else Ac, Bc, Cc, _chunked(d, 1, n, L, 0.0)).to_dense()
    pre, suf = _products(Ac, kind)
    return blocks, _out_map(pre, Cc, kind), _in_map(suf, Bc, kind), pre.select(pre.dim() - tail, L - 1), kind, L


def sss_solve(M: SSS, Y: torch.Tensor, chunk: int = 32) -> torch.Tensor:
    """Solve ``M X = Y`` for an SSS ``M`` and ``Y`` of shape ``(*, T, K)`` (batch broadcast)."""
    if not M.lower:
        A, B, C, D = flip_params(M._A, M.B, M.C, M.D, M.kind)
        lower = SSS(torch.exp(A) if M.kind == "log" else A, B, C, M.diag_values().flip(-1) if D is None else D)
        return torch.flip(sss_solve(lower, torch.flip(Y, (-2,)), chunk), (-2,))
    kind, T, N = M.kind, M.shape[-1], M.order
    if bool((M.diag_values() == 0).any()):
        raise SingularMatrixError("SSS is singular: a diagonal entry is zero")
    batch = torch.broadcast_shapes(M.batch_shape, Y.shape[:-2])
    L = min(chunk, T)
    n = -(-T // L)
    tail = _TAIL[kind]
    A = M._A.expand(*batch, *M._A.shape[M._A.dim() - tail :])
    A = _neutral_first(A, kind)
    B, C = M.B.expand(*batch, T, N), M.C.expand(*batch, T, N)
    d = M.diag_values().expand(*batch, T)
    Ac = _chunked(A, tail, n, L, 0.0 if kind == "log" else 1.0)
    Bc, Cc = _chunked(B, 2, n, L, 0.0), _chunked(C, 2, n, L, 0.0)
    dc = _chunked(d, 1, n, L, 1.0)
    blocks = SSS(torch.exp(Ac) if kind == "log" else Ac, Bc, Cc, dc).to_dense()  # (*, n, L, L)
    pre, suf = _products(Ac, kind)
    W = _out_map(pre, Cc, kind)  # (*, n, L, N): C_t^T A_t ... A_start
    R = _in_map(suf, Bc, kind)  # (*, n, L, N): A_end ... A_{i+1} B_i
    P = pre.select(pre.dim() - tail, L - 1)  # chunk transitions
    Yc = _chunked(Y.expand(*batch, *Y.shape[-2:]).to(M.dtype), 2, n, L, 0.0)  # (*, n, L, K)
    h = torch.zeros(*batch, N, Y.shape[-1], dtype=M.dtype, device=M.device)
    out = []
    for c in range(n):
        rhs = Yc[..., c, :, :] - W[..., c, :, :] @ h
        X = torch.linalg.solve_triangular(blocks[..., c, :, :], rhs, upper=False)
        h = apply_transition(P.select(P.dim() - tail, c), h, "scalar" if kind == "log" else kind) + R[..., c, :, :].mT @ X
        out.append(X)
    return torch.cat(out, dim=-2)[..., :T, :]


def _out_map(pre, C, kind):
    if kind in ("log", "scalar"):
        return C * pre[..., None]
    if kind == "diag":
        return C * pre
    return (C[..., None, :] @ pre)[..., 0, :]


def _in_map(suf, B, kind):
    if kind in ("log", "scalar"):
        return B * suf[..., None]
    if kind == "diag":
        return B * suf
    return (suf @ B[..., :, None])[..., 0]
