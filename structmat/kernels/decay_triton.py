"""Launchers and the autograd function of the Triton SSD.

Forward: :func:`state_kernel` (chunk states + state passing, one pass over ``x``) then
:func:`chunk_out_kernel` (outputs, ``D`` and ``silu(z)`` fused). Backward recomputes the forward
states instead of storing them, runs the state kernel in reverse for the adjoint states, then
:func:`dc_kernel` and :func:`dx_db_kernel`; the ``d log decay`` chain is a reverse cumulative sum
``ddA_k = sum_{i >= k} (C_i . dC_i - B_i . dB_i)`` done in torch on a ``(b, h, l)`` tensor.

Block sizes come from a fixed rule (no autotuning), so the first call on a new shape costs only
the compilation of four kernels; under ``TRITON_INTERPRET=1`` the same code runs on the CPU.
"""

from __future__ import annotations

import torch
import triton

from structmat.kernels import decay_triton_kernels as K

__all__ = ["decay_chunked_triton", "ssd_triton", "SSDFunction"]


MAX_BLOCK_M = 64  # row/column block inside a chunk; tests lower it to exercise several blocks per chunk


def _pow2(n: int, low: int = 16) -> int:
    return max(low, triton.next_power_of_2(n))


STATE_TILES = (64, 32)  # (BLOCK_N, BLOCK_P) of the state kernel; see benchmarks/NOTES_ssd.md
HEAD_SPLIT = 4  # backward programs per group: each takes heads_per_group / HEAD_SPLIT heads
BWD_WARPS = 4
STATE_WARPS = 8


def _state_tiles(N: int, P: int) -> tuple[int, int]:
    return min(STATE_TILES[0], _pow2(N)), min(STATE_TILES[1], _pow2(P))


def _precision(dtype: torch.dtype) -> str:
    return "ieee" if dtype in (torch.float32, torch.float64) else "tf32"


def _seq_args(seq_idx, like):
    if seq_idx is None:
        return like, 0, 0
    return seq_idx, seq_idx.stride(0), seq_idx.stride(1)


def run_states(x, dt, A, B, init, seq_idx, chunk, *, reverse=False, write_cs=True, out=None, dt_is_dA=False):
    """States entering each chunk ``(b, c, h, n, p)``, the last state ``(b, h, p, n)`` (fp32) and
    chunk-local cumulative ``dt A`` ``(b, h, l)`` (fp32). The per-chunk states are kept in the input
    dtype for 16-bit inputs: they only feed 16-bit tensor-core dots, and it halves their traffic.
    ``out``: optional ``(states, final, cs)`` buffers to write into (tests poison them with NaN)."""
    b, L, H, P = x.shape
    G, N = B.shape[2], B.shape[3]
    n_chunks = triton.cdiv(L, chunk)
    if out is None:
        states_dtype = x.dtype if x.dtype in (torch.bfloat16, torch.float16) else torch.float32
        states = torch.empty(b, n_chunks, H, N, P, device=x.device, dtype=states_dtype)
        final = torch.empty(b, H, P, N, device=x.device, dtype=torch.float32)
        cs = torch.empty(b, H, L, device=x.device, dtype=torch.float32) if write_cs else final
    else:
        states, final, cs = out
    BN, BP = _state_tiles(N, P)
    seq, sq_b, sq_l = _seq_args(seq_idx, dt)
    init_t = init if init is not None else final
    grid = (b * H, triton.cdiv(N, BN), triton.cdiv(P, BP))
    K.state_kernel[grid](
        x, dt, A, B, init_t, seq, states, final, cs,
        L, H, H // G, n_chunks, P, N,
        *x.stride(), *dt.stride(), *B.stride(),
        init_t.stride(0), init_t.stride(1), init_t.stride(2), init_t.stride(3),
        sq_b, sq_l,
        *states.stride(), *final.stride(),
        CHUNK=chunk, BLOCK_N=BN, BLOCK_P=BP,
        HAS_INIT=init is not None, HAS_SEQ=seq_idx is not None, REVERSE=reverse, WRITE_CS=write_cs,
        DOT_PRECISION=_precision(x.dtype), DT_IS_DA=dt_is_dA, num_warps=STATE_WARPS,
    )
    return states, final, (cs if write_cs else None)


def _d_args(D, H):
    if D is None:
        return None, 0, 0
    D2 = D if D.dim() == 2 else D[:, None]
    return D2, D2.stride(0), (D2.stride(1) if D.dim() == 2 else 0)


def run_chunk_out(x, dt, cs, B, C, states, D, z, seq_idx, chunk, out=None, dt_is_dA=False):
    """Outputs like ``x``, written into ``out`` if given."""
    b, L, H, P = x.shape
    G, N = B.shape[2], B.shape[3]
    BM = min(MAX_BLOCK_M, chunk)
    y = torch.empty_like(x) if out is None else out
    D2, sD_h, sD_p = _d_args(D, H)
    seq, sq_b, sq_l = _seq_args(seq_idx, dt)
    zz = z if z is not None else x
    grid = (triton.cdiv(L, chunk) * (chunk // BM), b * H)
    K.chunk_out_kernel[grid](
        x, dt, cs, B, C, states, D2 if D2 is not None else dt, zz, seq, y,
        L, H, H // G, P, N,
        *x.stride(), *dt.stride(), *B.stride(), *C.stride(), *states.stride(),
        sD_h, sD_p, *zz.stride(), sq_b, sq_l, *y.stride(),
        CHUNK=chunk, BLOCK_M=BM, BLOCK_N=_pow2(N), BLOCK_P=_pow2(P),
        HAS_D=D is not None, HAS_Z=z is not None, HAS_SEQ=seq_idx is not None,
        DOT_PRECISION=_precision(x.dtype), DT_IS_DA=dt_is_dA, num_warps=4,
    )
    return y


def run_backward(x, dt, A, B, C, D, dy, states, rstates, cs, seq_idx, chunk, out=None, dt_is_dA=False):
    """``dx, dB, dC, ddt_direct, ddA_partial`` from the forward and adjoint states (``out``: buffers).

    ``ddA_partial`` lacks the pairs that jump over a whole chunk (added by :func:`run_ddA`)."""
    b, L, H, P = x.shape
    G, N = B.shape[2], B.shape[3]
    BM = min(MAX_BLOCK_M, chunk)
    blocks = triton.cdiv(L, chunk) * (chunk // BM)
    if out is None:
        dC = torch.zeros(b, L, G, N, device=x.device, dtype=torch.float32)
        dB = torch.zeros(b, L, G, N, device=x.device, dtype=torch.float32)
        ddt = torch.empty(b, H, L, device=x.device, dtype=torch.float32)
        dda, dx = torch.zeros_like(ddt), torch.empty_like(x)
    else:
        dx, dB, dC, ddt, dda = out
    seq, sq_b, sq_l = _seq_args(seq_idx, dt)
    hpg = H // G
    split = max(d for d in range(1, min(HEAD_SPLIT, hpg) + 1) if hpg % d == 0)
    common = dict(CHUNK=chunk, BLOCK_M=BM, BLOCK_N=_pow2(N), BLOCK_P=_pow2(P), HAS_SEQ=seq_idx is not None,
                  HEADS_PER_PROGRAM=hpg // split, DOT_PRECISION=_precision(x.dtype), DT_IS_DA=dt_is_dA,
                  num_warps=BWD_WARPS)
    K.dc_kernel[(blocks, b * G, split)](
        x, dy, dt, cs, B, C, states, seq, dC, dda,
        L, H, H // G, G, P, N,
        *x.stride(), *dt.stride(), *B.stride(), *C.stride(), *states.stride(), sq_b, sq_l, *dC.stride(),
        **common,
    )
    D2, sD_h, sD_p = _d_args(D, H)
    K.dx_db_kernel[(blocks, b * G, split)](
        x, dy, dt, cs, B, C, rstates, D2 if D2 is not None else dt, seq,
        dx, dB, dda, ddt,
        L, H, H // G, G, P, N,
        *x.stride(), *dt.stride(), *B.stride(), *C.stride(), *rstates.stride(),
        sD_h, sD_p, sq_b, sq_l, *dx.stride(), *dB.stride(),
        HAS_D=D is not None, **common,
    )
    return dx, dB, dC, ddt, dda


def chunk_jump_pairs(states, rstates, cs, chunk, L):
    """``ddA`` of pairs with ``j`` before and ``i`` after chunk ``c``: ``exp(total_c) <g_c, h_c>``, on every ``k`` of it."""
    b, n_chunks, H = states.shape[:3]
    last = torch.clamp(torch.arange(1, n_chunks + 1, device=cs.device) * chunk - 1, max=L - 1)
    total = cs[:, :, last]  # (b, h, c)
    inner = (states.float() * rstates.float()).sum((-1, -2)).transpose(1, 2)  # (b, h, c)
    per_chunk = torch.exp(total.clamp(max=0)) * inner
    return per_chunk.repeat_interleave(chunk, dim=-1)[..., :L]


def _whole_chunk(seq_idx, chunk):
    """``(b, 1, l)``: 1 where a chunk lies inside one sequence with its neighbours (jumping pairs exist)."""
    b, L = seq_idx.shape
    n = -(-L // chunk)
    idx = torch.arange(n, device=seq_idx.device)
    first = seq_idx[:, idx * chunk]
    last = seq_idx[:, torch.clamp(idx * chunk + chunk - 1, max=L - 1)]
    prev = seq_idx[:, torch.clamp(idx * chunk - 1, min=0)]
    nxt = seq_idx[:, torch.clamp(idx * chunk + chunk, max=L - 1)]
    ok = (first == last) & (prev == first) & (nxt == last)
    return ok.repeat_interleave(chunk, dim=-1)[:, None, :L].float()


class SSDFunction(torch.autograd.Function):
    """``(y, final_states) = SSD(x, dt, A, B, C, D, z, initial_states, seq_idx)`` on Triton."""

    @staticmethod
    def forward(ctx, x, dt, A, B, C, D, z, initial_states, seq_idx, chunk, dt_is_dA=False):
        states, final, cs = run_states(x, dt, A, B, initial_states, seq_idx, chunk, dt_is_dA=dt_is_dA)
        y = run_chunk_out(x, dt, cs, B, C, states, D, z, seq_idx, chunk, dt_is_dA=dt_is_dA)
        ctx.save_for_backward(x, dt, A, B, C, D, z, initial_states, seq_idx)
        ctx.chunk, ctx.dt_is_dA = chunk, dt_is_dA
        return y, final

    @staticmethod
    def backward(ctx, dy, dfinal):
        x, dt, A, B, C, D, z, init, seq_idx = ctx.saved_tensors
        chunk, da = ctx.chunk, ctx.dt_is_dA
        states, final, cs = run_states(x, dt, A, B, init, seq_idx, chunk, dt_is_dA=da)
        dy = dy.contiguous()
        dz = None
        if z is not None:
            y_pre = run_chunk_out(x, dt, cs, B, C, states, D, None, seq_idx, chunk, dt_is_dA=da).float()
            zf = z.float()
            sig = torch.sigmoid(zf)
            dz = (dy.float() * y_pre * sig * (1 + zf * (1 - sig))).to(z.dtype)
            dy = (dy.float() * zf * sig).to(x.dtype)
        dfin = dfinal.contiguous() if dfinal is not None else None
        rstates, dinit, _ = run_states(dy, dt, A, C, dfin, seq_idx, chunk, reverse=True, write_cs=False, dt_is_dA=da)
        dx, dB, dC, ddt_direct, dda = run_backward(x, dt, A, B, C, D, dy, states, rstates, cs, seq_idx, chunk,
                                                   dt_is_dA=da)
        if seq_idx is None:
            dda += chunk_jump_pairs(states, rstates, cs, chunk, x.shape[1])
        else:
            dda += chunk_jump_pairs(states, rstates, cs, chunk, x.shape[1]) * _whole_chunk(seq_idx, chunk)
        ddA = dda.transpose(1, 2)  # (b, l, h)
        if da:  # dt carried the log decays: their gradient is ddA, and A played no part
            ddt, dA = ddA, torch.zeros_like(A)
        else:
            ddt = ddt_direct.transpose(1, 2) + ddA * A.float()
            dA = (ddA * dt.float()).sum((0, 1))
        dD = None
        if D is not None:
            prod = (dy.float() * x.float()).sum((0, 1))
            dD = (prod if D.dim() == 2 else prod.sum(-1)).to(D.dtype)
        dinit = dinit.to(init.dtype) if init is not None else None
        return dx, ddt.to(dt.dtype), dA.to(A.dtype), dB.to(B.dtype), dC.to(C.dtype), dD, dz, dinit, None, None, None


def ssd_triton(x, dt, A, B, C, chunk, D=None, z=None, initial_states=None, seq_idx=None, dt_is_dA=False):
    """Triton SSD on processed ``dt`` (fp32); returns ``(y, final_states (b, h, p, n) fp32)``.

    With ``dt_is_dA`` the ``dt`` tensor holds log decays ``(b, l, h)`` (<= 0, finite) directly and
    inputs are not scaled: the 1-SS structured masked attention of a ``OneSS`` mask."""
    x, B, C = x.contiguous(), B.contiguous(), C.contiguous()
    dt = dt.float().contiguous()
    A = A.float().contiguous()
    z = z.contiguous() if z is not None else None
    D = D.contiguous() if D is not None else None
    init = initial_states.float().contiguous() if initial_states is not None else None
    seq = seq_idx.to(torch.int32).contiguous() if seq_idx is not None else None
    return SSDFunction.apply(x, dt, A, B, C, D, z, init, seq, chunk, dt_is_dA)


def decay_chunked_triton(x, log_a, B, C, *, scale=None, D=None, z=None, initial_state=None, seq_idx=None,
                         chunk_size=256, return_chunk_states=False):
    """The chunked-decay primitive on the Triton kernels (log decays finite and <= 0)."""
    chunk = min(256, max(16, 1 << (int(chunk_size) - 1).bit_length()))
    xin = x if scale is None else (x * scale[..., None]).to(x.dtype)
    fuse = scale is None
    y, final = ssd_triton(xin, log_a, torch.zeros(x.shape[2], device=x.device), B, C, chunk,
                          D=D if fuse else None, z=z if fuse else None, initial_states=initial_state,
                          seq_idx=seq_idx, dt_is_dA=True)
    if not fuse:
        if D is not None:
            y = y + (x * (D if D.dim() == 2 else D[:, None])).to(y.dtype)
        if z is not None:
            y = (y.float() * torch.nn.functional.silu(z.float())).to(x.dtype)
    if not return_chunk_states:
        return y, final
    with torch.no_grad():
        states = run_states(xin.contiguous(), log_a.float().contiguous(), torch.zeros(x.shape[2], device=x.device),
                            B.contiguous(), None if initial_state is None else initial_state.float().contiguous(),
                            None if seq_idx is None else seq_idx.to(torch.int32).contiguous(), chunk,
                            dt_is_dA=True)[0].transpose(-1, -2)
    return y, final, states
