"""The chunked order: the SSD block decomposition generalised to every semiseparable mask.

Inside chunks of ``L`` steps the mask is applied densely (quadratic), between chunks through
states. A ``OneSS`` mask runs on the chunked-decay primitive (the Triton kernels on CUDA); an
``SSS`` with non-negative real scalar or diagonal ``A`` as the sum of its ``n`` one-state masks
``OneSS(log A_m, b=B_m, c=C_m)`` (plus a diagonal correction for an explicit ``D``); any other
``SSS`` (dense, signed or complex transitions) with ``(n, N, P)`` states between chunks; a
``Quasiseparable`` mask as its lower part, its upper part and its diagonal.
``O(B H T L (N + P) + B H T n N P)``.
"""

from __future__ import annotations

import torch

from structmat.attention.heads import add_diagonal, mask_as_bh, mask_to_bh, out_dtype, time_blocks, time_tile
from structmat.attention.orders.registry import Cost, Order, Problem
from structmat.attention.tuning import Tuning
from structmat.core.base import StructuredMatrix
from structmat.core.transitions import carries_gradient
from structmat.kernels.chunked_decay import chunked_decay, triton_applies
from structmat.kernels.decay_adjoint import with_exact_decay_gradient
from structmat.linalg.block_solve import chunk_maps
from structmat.linalg.scan import linear_scan
from structmat.matrices.one_ss import OneSS
from structmat.matrices.quasiseparable import Quasiseparable
from structmat.matrices.sss import SSS

__all__ = ["Chunked", "chunk_terms", "TRITON_CHUNKS"]

#: Chunk lengths the Triton kernels take (powers of two); other lengths run the torch implementation.
TRITON_CHUNKS = (16, 32, 64, 128, 256)


def chunk_terms(mask: StructuredMatrix) -> list[SSS] | None:
    """The 1-SS (or general SSS) terms whose sum is the mask off its diagonal correction, or None."""
    if isinstance(mask, OneSS):
        return [mask]
    if isinstance(mask, Quasiseparable):
        lo, up = chunk_terms(mask.lower_part), chunk_terms(mask.upper_part)
        return None if lo is None or up is None else lo + up
    if not isinstance(mask, SSS):
        return None
    G = mask.generators
    log_a = None if mask.dtype.is_complex else G.A.log_diagonals(mask.order)
    if log_a is None:
        return [mask]
    first = lambda t, one: torch.cat([torch.full_like(t[..., :1, :], one), t[..., 1:, :]], dim=-2)  # noqa: E731
    log_a, decays = first(log_a, 0.0), G.A.decay_diagonals(mask.order)  # the decays: exact gradients at 0
    decays = None if decays is None else first(decays, 1.0)
    return [OneSS._of(log_a[..., m], G.B[..., m], G.C[..., m], mask.lower, mask.batch_shape,
                      None if decays is None else decays[..., m]) for m in range(mask.order)]


def _chunked_tile(tuning: Tuning, p: Problem, chunk: int) -> int:
    """Steps per time block of the chunked order (a multiple of ``chunk``)."""
    per_step = p.BH * max(chunk, p.N * p.P // chunk, p.N, p.P)
    return max(chunk, time_tile(tuning, p.T, per_step) // chunk * chunk)


def _one(q, k, v, mask: OneSS, scale: float, tuning: Tuning, chunk: int, dtype: torch.dtype) -> torch.Tensor:
    """``sma(q, k, v, mask)`` for a OneSS mask through the chunked-decay primitive, in ``dtype``: ``x = v``,
    ``log_a`` the mask's decays, ``B = k b``, ``C = q c`` (unit scalings skipped); time blocks with the state
    carried. Decays the mask keeps and differentiates get their gradient in linear space
    (:mod:`~structmat.kernels.decay_adjoint`)."""
    Bsz, T, H, N = q.shape
    reverse = not mask.lower  # an upper mask is the lower one in reversed time
    lower = mask.reverse() if reverse else mask
    mask_to_bh(lower, Bsz, H)
    # a parameter (*, T) with batch dims broadcasting to (B, H): (B, T, H)
    expand = lambda t: None if t is None else t.reshape((1,) * (3 - t.dim()) + t.shape).expand(Bsz, H, T).transpose(1, 2)  # noqa: E731
    log_a = expand(torch.cat([torch.zeros_like(lower.log_a[..., :1]), lower.log_a[..., 1:]], -1))
    b, c = (None if t is None else t[..., None] for t in (expand(lower.b), expand(lower.c)))
    exact = carries_gradient(lower.decays)
    if exact:
        log_a = log_a.detach()  # the decays' gradient comes from the adjoint below
    v = v if v.dtype == dtype else v.to(dtype)
    kernel = chunk in TRITON_CHUNKS and triton_applies(v, log_a, k if b is None else b, q if c is None else c)
    backend = "triton" if kernel else "torch"
    p = Problem(Bsz, T, T, H, N, v.shape[-1], 0, chunk)
    tile = T if kernel else _chunked_tile(tuning, p, chunk)
    state, parts = None, []
    for steps, _, take in time_blocks(T, tile, reverse):
        kb = take(k) if b is None else take(k) * b[:, steps]
        qc = take(q) if c is None else take(q) * c[:, steps]
        x, la = take(v), log_a[:, steps]
        if kernel:
            kb, qc, x, la = kb.to(k.dtype), qc.to(q.dtype), x, la.float()
        y, state = chunked_decay(x, la, kb, qc, initial_state=state, chunk_size=chunk, backend=backend)
        parts.append(torch.flip(y, (1,)) if reverse else y)
    y = parts[0] if len(parts) == 1 else torch.cat(parts[::-1] if reverse else parts, dim=1)  # (in input time)
    y = y if y.dtype == dtype else y.to(dtype)
    y = y if isinstance(scale, float) and scale == 1.0 else y * scale
    if not exact:
        return y
    time = (lambda t: torch.flip(t, (1,))) if reverse else (lambda t: t)  # noqa: E731  the recurrence's time
    kb, qc = time(k) if b is None else time(k) * b, time(q) if c is None else time(q) * c
    return time(with_exact_decay_gradient(time(y), expand(lower.decays), time(v), log_a, kb, qc * scale))


def _sss(q, k, v, mask: SSS, scale: float, chunk: int) -> torch.Tensor:
    """Chunked SMA for any SSS mask: dense ``L x L`` mask blocks inside chunks, ``(n, N, P)`` states
    between them (the chunk maps of :mod:`structmat.linalg.block_solve`)."""
    Bsz, T, H, _ = q.shape
    G, reverse = mask_as_bh(mask, Bsz, H).time_lower()
    if reverse:
        q, k, v = (torch.flip(t, (1,)) for t in (q, k, v))
    maps = chunk_maps(G, chunk)  # (*bh, c, L, L), (*bh, c, L, n) x2, chunk transitions
    dtype = torch.promote_types(q.dtype, maps.blocks.dtype)
    n_chunks, L = maps.blocks.shape[-3], maps.L
    pad = n_chunks * L - T
    chunks = lambda t: torch.nn.functional.pad(t, (0, 0, 0, 0, 0, pad)).reshape(Bsz, n_chunks, L, H, -1).to(dtype)  # noqa: E731
    qc, kc, vc = chunks(q), chunks(k), chunks(v)
    y = torch.einsum("bhcts,bcthn,bcshn,bcshp->bcthp", maps.blocks.to(dtype), qc, kc, vc)
    states = torch.einsum("bhcsm,bcshn,bcshp->bhcmnp", maps.R.to(dtype), kc, vc)  # leaving each chunk
    n, N, Pd = states.shape[-3:]
    ends = linear_scan(maps.P.cast(dtype), states.reshape(*states.shape[:3], n, N * Pd))  # (b, h, c, n, N P)
    entering = torch.cat([torch.zeros_like(ends[..., :1, :, :]), ends[..., :-1, :, :]], dim=-3)
    y = y + torch.einsum("bhctm,bhcmnp,bcthn->bcthp", maps.W.to(dtype), entering.reshape(*entering.shape[:3], n, N, Pd), qc)
    y = y.reshape(Bsz, n_chunks * L, H, -1)[:, :T] * scale
    return torch.flip(y, (1,)) if reverse else y


def term_orders(mask: StructuredMatrix) -> list[int]:
    """The orders of :func:`chunk_terms` without forming the terms (nor reading the transitions: a signed
    diagonal, rare, splits into one term of order ``N`` instead of ``N`` of order one)."""
    if isinstance(mask, Quasiseparable):
        return term_orders(mask.lower_part) + term_orders(mask.upper_part)
    if isinstance(mask, OneSS) or mask.dtype.is_complex or mask.transitions.kind == "dense":
        return [mask.order]
    return [1] * mask.order


def _dense_transitions(mask: StructuredMatrix) -> bool:
    """Some part of the mask has dense ``n x n`` transitions: its chunk products cost ``n^3`` a step, not ``n`` (its own
    coefficients, ``chunked/dense``)."""
    parts = (mask.lower_part, mask.upper_part) if isinstance(mask, Quasiseparable) else (mask,)
    return any(isinstance(P, SSS) and P.transitions.kind == "dense" for P in parts)


class Chunked(Order):
    name = "chunked"

    def admissible(self, mask: StructuredMatrix) -> bool:
        return isinstance(mask, (SSS, Quasiseparable))  # chunk_terms(mask) is not None

    def cost(self, p: Problem, mask: StructuredMatrix, tuning: Tuning) -> Cost:
        L = min(p.chunk, p.T)
        term_orders_ = term_orders(mask)
        flops = sum(2 * p.BH * p.T * L * (p.N + p.P) + 4 * p.BH * p.T * n * p.N * p.P for n in term_orders_)
        extra = sum(p.BH * (p.T // max(L, 1) + 1) * n * p.N * p.P * p.element_bytes + 4 * p.BH * p.T * L * p.element_bytes
                    for n in term_orders_)
        tiles = -(-p.T // _chunked_tile(tuning, p, max(L, 1))) if tuning.time_blocks else 1
        path = "decay" if max(term_orders_, default=1) == 1 else "dense" if _dense_transitions(mask) else "states"
        return Cost(flops, extra, len(term_orders_) * tiles, path)

    def run(self, q, k, v, mask, scale, tuning, chunk) -> torch.Tensor:
        terms = chunk_terms(mask)
        if terms is None:
            raise ValueError(f"the chunked order does not apply to {type(mask).__name__}")
        dtype = out_dtype(q, k, v, mask)
        out = None
        for term in terms:
            part = _one(q, k, v, term, scale, tuning, chunk, dtype) if isinstance(term, OneSS) else \
                _sss(q, k, v, term, scale, chunk).to(dtype)
            out = part if out is None else out + part
        if len(terms) == 1 and terms[0] is mask:
            return out
        if out is None:  # order 0 (a compressed mask whose strict part vanished): the diagonal alone
            out = torch.zeros(*q.shape[:2], *v.shape[2:], dtype=dtype, device=v.device)
        correction = mask.diagonal() - sum(t.diagonal() for t in terms)
        return add_diagonal(out, correction, mask, q, k, v, scale)
