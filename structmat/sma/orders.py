"""The contraction orders of structured masked attention, each a small function.

``Y[b,t,h,p] = sum_s L[b,h,t,s] (sum_n Q[b,t,h,n] K[b,s,h,n]) V[b,s,h,p]`` with heads already
expanded (``q, k: (B, T|S, H, N)``, ``v: (B, S, H, P)``) and the mask's batch broadcastable to
``(B, H)``:

* :func:`quadratic` -- materialise ``Q K^T`` per head, Hadamard with the dense mask, times ``V``.
  Any mask; ``O(B H T S (N + P))`` time and ``O(B H T S)`` memory.
* :func:`linear` -- ``Z_s = K_s V_s^T`` (``N x P`` per position), the mask applied along ``S`` to
  ``Z`` with its fast matvec, contracted with ``Q``; the ``N`` axis is processed in slices so the
  extra memory stays ``O(B H S n_slice P)``. Any mask with a fast matvec.
* :func:`chunked` -- the SSD block decomposition: quadratic inside chunks, states between them,
  ``O(B H T L (N + P) + B H T n N P)``. ``OneSS`` masks directly (the Triton kernels on CUDA); an
  ``SSS`` with non-negative scalar or diagonal ``A`` as the sum of its ``n`` one-state masks
  ``OneSS(log A_m, b=B_m, c=C_m)`` (plus a diagonal correction for an explicit ``D``); any other
  ``SSS`` (dense, signed or complex transitions) with ``(n, N, P)`` states between chunks; a
  ``Quasiseparable`` mask as its lower part, its upper part and its diagonal.
* :func:`lowrank` -- ``L = U V^T``: ``Y = sum_r diag(u_r) Q (K^T diag(v_r) V)``, linear in ``T``.
"""

from __future__ import annotations

import opt_einsum
import torch

from structmat.base import StructuredMatrix
from structmat.lowrank import LowRank
from structmat.one_ss import OneSS

__all__ = ["quadratic", "linear", "chunked", "lowrank", "mask_to_bh"]


def mask_to_bh(mask: StructuredMatrix, B: int, H: int) -> tuple[int, ...]:
    """The mask's batch shape as a 2-D ``(B|1, H|1)`` pair (validated)."""
    batch = tuple(mask.batch_shape)
    if len(batch) > 2:
        raise ValueError(f"mask batch shape {batch} must broadcast to (B, H) = ({B}, {H})")
    full = (1,) * (2 - len(batch)) + batch
    if full[0] not in (1, B) or full[1] not in (1, H):
        raise ValueError(f"mask batch shape {batch} must broadcast to (B, H) = ({B}, {H})")
    return full


#: Elements of the largest tensor of one time block on the CPU (see :func:`time_tile`).
TILE_ELEMENTS = 2**19


#: Fewest columns one mask product of the linear order takes: a CPU FFT call on fewer loses up to
#: 2x per element to its fixed costs (``benchmarks/NOTES_sma.md``).
MIN_COLUMNS = 16


def linear_slices(length: int, B: int, H: int, N: int, P: int, device) -> tuple[int, int]:
    """``(n, p)``: how many key features and value columns one pass of the linear order takes.

    ``length`` is how many elements per column the mask's product works on
    (:func:`matvec_length`). A pass's ``B H n p`` columns stay under ``2^26`` elements on a GPU
    (whose launches cost more) and ``2 TILE_ELEMENTS`` on the CPU (cache-sized passes), but take at
    least :data:`MIN_COLUMNS` columns.
    """
    budget = 2**26 if torch.device(device).type == "cuda" else 2 * TILE_ELEMENTS
    cols = max(1, budget // max(1, B * H * length), -(-MIN_COLUMNS // (B * H)))
    return (max(1, min(N, cols // P)), P) if cols >= P else (1, cols)


def matvec_length(mask: StructuredMatrix) -> int:
    """Elements per column that ``mask @ X`` works on: the circulant length of a Toeplitz FFT
    product (a power of two ``>= T + S - 1``), else the longer side."""
    from structmat.spectral import fft_length
    from structmat.toeplitz import Toeplitz

    T, S = mask.shape[-2:]
    return fft_length(T + S - 1) if isinstance(mask, Toeplitz) else max(T, S)


def time_tile(device, T: int, per_step: int) -> int:
    """Steps per block when a long sequence is processed block by block with a carried state.

    On the CPU every block's tensors stay under :data:`TILE_ELEMENTS` (``per_step`` elements per step):
    they then stay in cache and are served again from the heap, where a fresh multi-megabyte
    tensor costs a page fault per 4 KiB and makes the time grow faster than ``T``. On a GPU the
    whole sequence is one block.
    """
    if torch.device(device).type != "cpu":
        return T
    return max(1, min(T, TILE_ELEMENTS // max(1, per_step)))


def streamed_sizes(device, Bsz: int, H: int, T: int, N: int, P: int, n_state: int) -> tuple[int, int]:
    """``(n_slice, tile)`` of the time-blocked linear order for one ``n_state``-state part: key
    features per pass (blocks of at least 256 steps where the budget allows) and steps per block."""
    per_step = Bsz * H * P * n_state  # the (B, H, t, n_state, n P) states
    n_slice = max(1, min(N, TILE_ELEMENTS // (per_step * min(T, 256))))
    return n_slice, time_tile(device, T, per_step * n_slice)


def chunked_tile(device, Bsz: int, H: int, T: int, N: int, P: int, chunk: int) -> int:
    """Steps per time block of the chunked order (a multiple of ``chunk``)."""
    return max(chunk, time_tile(device, T, Bsz * H * max(chunk, N * P // chunk, N, P)) // chunk * chunk)


def _blocks(T: int, tile: int, reverse: bool):
    """``(steps, src, take)`` per time block: ``steps`` in the (possibly reversed) time of the
    recurrence, ``src`` the same steps in the inputs' time, ``take`` cuts an input ``(B, T, ...)``
    to the block in the recurrence's order."""
    for t0 in range(0, T, tile):
        steps = slice(t0, min(T, t0 + tile))
        src = slice(T - steps.stop, T - steps.start) if reverse else steps
        yield steps, src, (lambda t, src=src: torch.flip(t[:, src], (1,))) if reverse else (lambda t, src=src: t[:, src])


def _out_dtype(q, k, v, mask: StructuredMatrix) -> torch.dtype:
    return torch.promote_types(torch.promote_types(q.dtype, k.dtype), torch.promote_types(v.dtype, mask.dtype))


def _add_diagonal(out: torch.Tensor, diag: torch.Tensor, mask: StructuredMatrix, q, k, v, weight: float) -> torch.Tensor:
    """``out[b, t, h] += weight * diag[t] (q_t . k_t) v_t`` in place, ``diag`` a diagonal of ``mask``."""
    Bsz, T, H, _ = q.shape
    d = diag.expand(*mask.batch_shape, T).reshape(*mask_to_bh(mask, Bsz, H), T)
    d = d.expand(Bsz, H, T).transpose(1, 2)[..., None].to(out.dtype)
    return out.addcmul_(weight * d * (q * k).sum(-1, keepdim=True).to(out.dtype), v.to(out.dtype))


def quadratic(q, k, v, mask: StructuredMatrix, scale: float) -> torch.Tensor:
    L = mask.to_dense()
    L = L.reshape(*mask_to_bh(mask, q.shape[0], q.shape[2]), *L.shape[-2:])
    dtype = torch.promote_types(q.dtype, L.dtype)
    scores = opt_einsum.contract("bthn,bshn->bhts", q.to(dtype), k.to(dtype)) * scale
    return opt_einsum.contract("bhts,bshp->bthp", scores * L.to(dtype), v.to(dtype))


def linear(q, k, v, mask: StructuredMatrix, scale: float) -> torch.Tensor:
    Bsz, H = k.shape[0], k.shape[2]
    bh = mask_to_bh(mask, Bsz, H)
    M = mask if mask.batch_shape == torch.Size(bh) else _reshape_mask(mask, bh)
    parts = state_parts(M)
    if parts is not None and q.device.type == "cpu":
        return _linear_streamed(q, k, v, M, parts, scale)
    # FFT products read whole time rows: time last; a scan reads every column of one step together
    return _linear_sliced(q, k, v, M, scale, time_last=parts is None)


def _linear_sliced(q, k, v, M: StructuredMatrix, scale: float, time_last: bool) -> torch.Tensor:
    """The linear order over slices of the key features and value columns, in a time-last or
    time-first layout (``M`` with batch ``(B|1, H|1)``)."""
    Bsz, S, H, N = k.shape
    T, P = q.shape[1], v.shape[-1]
    n_slice, p_slice = linear_slices(matvec_length(M), Bsz, H, N, P, q.device)
    apply = M.matmat_fn()
    f = 2 if time_last else 3  # the feature axis of (B, H, N|P, T|S) or (B, H, T|S, N|P)
    qf, kf, vf = ((t.permute(0, 2, 3, 1) if time_last else t.permute(0, 2, 1, 3)).contiguous() for t in (q, k, v))
    out = None
    for p0 in range(0, P, p_slice):
        vp = vf.narrow(f, p0, min(p_slice, P - p0)).unsqueeze(f)
        for n0 in range(0, N, n_slice):
            n = min(n_slice, N - n0)
            Z = (kf.narrow(f, n0, n).unsqueeze(f + 1) * vp).flatten(f, f + 1)  # n p columns of length S
            MZ = apply(Z.transpose(-1, -2)).transpose(-1, -2) if time_last else apply(Z)
            MZ = MZ.unflatten(f, (n, -1))  # (B, H, n, p, T) or (B, H, T, n, p)
            qn = qf.narrow(f, n0, n).unsqueeze(f + 1)
            if out is None:
                shape = (Bsz, H, P, T) if time_last else (Bsz, H, T, P)
                out = torch.zeros(shape, dtype=torch.promote_types(qn.dtype, MZ.dtype), device=q.device)
            target = out.narrow(f, p0, MZ.shape[f + 1])
            if n == 1:  # one fused pass, no temporary
                target.addcmul_(qn.select(f, 0), MZ.select(f, 0))
            else:
                target += (qn * MZ).sum(f)
    return (out.permute(0, 3, 1, 2) if time_last else out.transpose(1, 2)) * scale


def state_parts(mask: StructuredMatrix):
    """``[(lower SSS parameters, reversed)]`` whose sum is the mask off its diagonal, or None.

    A lower SSS is one part; an upper one is a lower one in reversed time; a quasiseparable mask
    is both (its free diagonal is added separately).
    """
    from structmat.quasiseparable import Quasiseparable
    from structmat.sss import SSS

    if isinstance(mask, SSS):
        return [(mask.lower_params(), not mask.lower)]
    if isinstance(mask, Quasiseparable):
        return [(mask.lower_part.lower_params(), False), (mask.upper_part.lower_params(), True)]
    return None


def _linear_streamed(q, k, v, mask, parts, scale: float) -> torch.Tensor:
    """The linear order over time blocks with the ``(n, N P)`` state carried (CPU, bounded memory)."""
    from structmat.quasiseparable import Quasiseparable
    from structmat.sss import lower_matmat_carry, time_slice

    Bsz, T, H, N = q.shape
    P = v.shape[-1]
    dtype = _out_dtype(q, k, v, mask)
    out = torch.zeros(Bsz, T, H, P, dtype=dtype, device=v.device)
    for params, reverse in parts:
        n_slice, tile = streamed_sizes(q.device, Bsz, H, T, N, P, params[1].shape[-1])
        for n0 in range(0, N, n_slice):
            h = None
            for steps, src, take in _blocks(T, tile, reverse):
                kn, qn = take(k[..., n0 : n0 + n_slice]), take(q[..., n0 : n0 + n_slice])
                Z = (kn[..., :, None] * take(v)[..., None, :]).permute(0, 2, 1, 3, 4)  # (B, H, t, n, P)
                Y, h = lower_matmat_carry(*time_slice(*params, steps), Z.reshape(*Z.shape[:3], -1).to(dtype), h)
                part = torch.einsum("bhtn,bhtnp->bthp", qn.permute(0, 2, 1, 3).to(dtype), Y.reshape(Z.shape))
                out[:, src] += torch.flip(part, (1,)) if reverse else part
    if isinstance(mask, Quasiseparable):
        _add_diagonal(out, mask.diag, mask, q, k, v, 1.0)
    return out * scale


def _reshape_mask(mask: StructuredMatrix, bh):
    """View a mask with batch ``(H,)`` etc. as ``(B|1, H|1)`` by a parameter map (no copy)."""
    extra = len(bh) - len(mask.batch_shape)
    if extra == 0:
        return mask
    return mask._map(lambda t: t.reshape(*(1,) * extra, *t.shape) if t.dim() > 0 else t)


def chunk_terms(mask: StructuredMatrix) -> list[OneSS] | None:
    """The 1-SS terms of a mask that the chunked order can run, or None."""
    from structmat.quasiseparable import Quasiseparable
    from structmat.sss import SSS

    if isinstance(mask, OneSS):
        return [mask]
    if isinstance(mask, Quasiseparable):
        lo, up = chunk_terms(mask.lower_part), chunk_terms(mask.upper_part)
        return None if lo is None or up is None else lo + up
    if isinstance(mask, SSS) and mask.kind in ("scalar", "diag") and not mask.dtype.is_complex:
        A = mask.A
        if bool((A[..., 1:] < 0).any()):
            return [mask]
        A = A[..., None].expand(*A.shape, mask.order) if mask.kind == "scalar" else A
        log_a = torch.where(A > 0, torch.log(torch.where(A > 0, A, torch.ones_like(A))), float("-inf"))
        log_a = torch.cat([torch.zeros_like(log_a[..., :1, :]), log_a[..., 1:, :]], dim=-2)
        return [OneSS(log_a[..., m], b=mask.B[..., m], c=mask.C[..., m], lower=mask.lower) for m in range(mask.order)]
    if isinstance(mask, SSS):
        return [mask]
    return None


def _diagonal_correction(mask: StructuredMatrix, terms: list[OneSS]):
    """``diag(mask) - sum of the terms' diagonals`` (explicit ``D``, strict parts, free diagonals)."""
    total = sum(t.diagonal() for t in terms)
    return mask.diagonal() - total


def chunked(q, k, v, mask: StructuredMatrix, scale: float, chunk: int) -> torch.Tensor:
    terms = chunk_terms(mask)
    if terms is None:
        raise ValueError(f"the chunked order does not apply to {type(mask).__name__} with these transitions")
    Bsz, T, H, _ = q.shape
    out = torch.zeros(Bsz, T, H, v.shape[-1], dtype=_out_dtype(q, k, v, mask), device=v.device)
    for term in terms:
        if isinstance(term, OneSS):
            _chunked_one(q, k, v, term, scale, chunk, out)
        else:
            out += _chunked_sss(q, k, v, term, scale, chunk)
    if len(terms) == 1 and terms[0] is mask:
        return out
    return _add_diagonal(out, _diagonal_correction(mask, terms), mask, q, k, v, scale)


def _chunked_one(q, k, v, mask: OneSS, scale: float, chunk: int, out: torch.Tensor) -> None:
    """Add ``sma(q, k, v, mask)`` for a OneSS mask into ``out``: the SSD kernels on CUDA, else the
    torch chunked SSD over time blocks (:func:`time_tile`) with the state carried between them."""
    from structmat.ssd.chunked import ssd_chunked

    Bsz, T, H, N = q.shape
    P = v.shape[-1]
    reverse = not mask.lower  # an upper mask is the lower one in reversed time
    lower = _reversed(mask) if reverse else mask
    bh = mask_to_bh(lower, Bsz, H)
    expand = lambda t: t.reshape(*bh, T).expand(Bsz, H, T).transpose(1, 2)  # noqa: E731  (B, T, H)
    dA = expand(torch.cat([torch.zeros_like(lower.log_a[..., :1]), lower.log_a[..., 1:]], -1))
    b = expand(lower.B[..., 0])[..., None]
    c = expand(lower.C[..., 0])[..., None]
    kernel = _triton_applies(q, dA, b, c)  # one launch over the whole sequence
    tile = T if kernel else chunked_tile(q.device, Bsz, H, T, N, P, chunk)
    ones = torch.ones(H, dtype=dA.dtype, device=dA.device)
    state = None
    for sl, src, take in _blocks(T, tile, reverse):
        kb, qc = take(k) * b[:, sl], take(q) * c[:, sl]
        if kernel:
            from structmat.triton.ssd import ssd_triton

            y, _ = ssd_triton(take(v), dA[:, sl].float(), torch.zeros(H, device=v.device), kb.to(k.dtype), qc.to(q.dtype),
                              chunk if chunk in (16, 32, 64, 128, 256) else 64, dt_is_dA=True)
        else:
            y, state, _ = ssd_chunked(take(v), torch.ones_like(dA[:, sl]), ones, kb, qc, chunk,
                                      initial_states=state, dA=dA[:, sl])
        out[:, src] += (torch.flip(y, (1,)) if reverse else y) * scale


def _triton_applies(q, dA, b, c) -> bool:
    """The SSD kernel runs a OneSS mask on CUDA when its log decays are finite and <= 0 (real data)."""
    if not q.is_cuda or q.is_complex() or b.is_complex() or c.is_complex():
        return False
    return bool(torch.isfinite(dA).all() and (dA <= 0).all())


def _chunked_sss(q, k, v, mask, scale: float, chunk: int) -> torch.Tensor:
    """Chunked SMA for any SSS mask: dense ``L x L`` mask blocks inside chunks, ``(n, N, P)`` states
    between them (the chunk maps of :mod:`structmat.sss_solve`)."""
    from structmat.scan import linear_scan
    from structmat.sss import SSS, flip_params
    from structmat.sss_solve import chunk_maps

    Bsz, T, H, _ = q.shape
    if not mask.lower:
        A, B, C, D = flip_params(mask._A, mask.B, mask.C, mask.D, mask.kind)
        A = torch.exp(A) if mask.kind == "log" else A
        rev = SSS(A, B, C, mask.diag_values().flip(-1) if D is None else D)
        flip = lambda t: torch.flip(t, (1,))  # noqa: E731
        return flip(_chunked_sss(flip(q), flip(k), flip(v), rev, scale, chunk))
    bh = mask_to_bh(mask, Bsz, H)
    M = mask if tuple(mask.batch_shape) == bh else _reshape_mask(mask, bh)
    blocks, W, R, P, kind, L = chunk_maps(M, chunk)  # (*bh, c, L, L), (*bh, c, L, n) x2, chunk transitions
    dtype = torch.promote_types(q.dtype, blocks.dtype)
    n_chunks = blocks.shape[-3]
    pad = n_chunks * L - T
    chunks = lambda t: torch.nn.functional.pad(t, (0, 0, 0, 0, 0, pad)).reshape(Bsz, n_chunks, L, H, -1).to(dtype)  # noqa: E731
    qc, kc, vc = chunks(q), chunks(k), chunks(v)
    y = torch.einsum("bhcts,bcthn,bcshn,bcshp->bcthp", blocks.to(dtype), qc, kc, vc)
    states = torch.einsum("bhcsm,bcshn,bcshp->bhcmnp", R.to(dtype), kc, vc)  # leaving each chunk
    n, N, Pd = states.shape[-3:]
    flat = states.reshape(*states.shape[:3], n, N * Pd)
    ends = linear_scan(P.to(dtype), flat, "scalar" if kind == "log" else kind)  # (b, h, c, n, N P)
    entering = torch.cat([torch.zeros_like(ends[..., :1, :, :]), ends[..., :-1, :, :]], dim=-3)
    entering = entering.reshape(*entering.shape[:3], n, N, Pd)
    y = y + torch.einsum("bhctm,bhcmnp,bcthn->bcthp", W.to(dtype), entering, qc)
    return y.reshape(Bsz, n_chunks * L, H, -1)[:, :T] * scale


def _reversed(mask: OneSS) -> OneSS:
    """``J M J`` for an upper ``OneSS`` ``M``: a lower OneSS."""
    from structmat.sss import flip_params

    A, B, C, _ = flip_params(mask.log_a, mask.B, mask.C, None, "log")
    # flip_params gives J M_lower^T J; for M = M_lower^T that is exactly J M J
    return OneSS(A, b=B[..., 0], c=C[..., 0])


def lowrank(q, k, v, mask: LowRank, scale: float) -> torch.Tensor:
    Bsz, T, H, N = q.shape
    bh = mask_to_bh(mask, Bsz, H)
    U = mask.U.reshape(*bh, *mask.U.shape[-2:]).expand(Bsz, H, *mask.U.shape[-2:])  # (B, H, T, r)
    W = mask.V.reshape(*bh, *mask.V.shape[-2:]).expand(Bsz, H, *mask.V.shape[-2:])  # (B, H, S, r)
    dtype = torch.promote_types(q.dtype, U.dtype)
    kv = opt_einsum.contract("bshn,bhsr,bshp->bhrnp", k.to(dtype), W.to(dtype), v.to(dtype))
    return opt_einsum.contract("bthn,bhtr,bhrnp->bthp", q.to(dtype), U.to(dtype), kv) * scale
