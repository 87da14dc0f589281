"""Chunked decay recurrence on Triton: :func:`decay_chunked_triton` (forward and backward kernels).

Per batch ``b`` and head ``h``, group ``g = h // (H // G)``, state ``S_t`` of shape ``(P, N)``::

    S_t = exp(log_a[b,t,h]) S_{t-1} + (scale[b,t,h] x[b,t,h]) B[b,t,g]^T     (S_{-1} = initial_state or 0)
    y[b,t,h] = S_t C[b,t,g] + D[h] x[b,t,h],     out = y * silu(z)

``seq_idx`` restarts the state from 0 where it changes (``initial_state`` feeds the first sequence).
The reference is :func:`structmat.kernels.decay_naive.decay_naive`; the Mamba-2 SSD layer is the
case ``log_a = dt A``, ``scale = dt``, and structured masked attention with a 1-SS mask the case
``scale = None``.

Kernels (``decay_triton_fwd``, ``decay_triton_bwd``, ``decay_triton_bwd_dx``, ``decay_triton_bwd_scan``; launched by
``decay_triton_launch``): one fused forward (chunk states, a decoupled look-back across chunks,
outputs); backward: the adjoint states by the same look-back run
backwards, ``dB``/``dC`` per (chunk, block, group) summed over heads in registers, and ``dx``,
``d scale``, ``d log_a`` per (chunk, head). The kernels are registered as torch custom ops
(``structmat::decay_chunked_fwd`` / ``structmat::decay_chunked_bwd``) with their autograd, so
``torch.compile`` traces through :func:`decay_chunked_triton` without a graph break; eager calls take
a plain ``autograd.Function`` around the same launchers (less host time per call).

No autotuning: tile sizes and warps are the fixed constants of ``decay_triton_config``. The first forward
on a new specialisation that saves for a backward starts compiling the backward's five or six kernels on
threads beside its own compile (a first forward+backward 9.3-9.7 s -> 5.2-6.0 s on an H100 host; the backward
waits for them). Without a GPU the same code runs on CPU tensors under
``TRITON_INTERPRET=1`` (16-bit inputs are computed in float32 there: the interpreter's 16-bit dot is
not exact).
"""


from __future__ import annotations

import os

import torch

from structmat.kernels.decay_triton_config import DecayTritonConfig, resolve
from structmat.kernels.decay_triton_launch import backward, forward

__all__ = ["decay_chunked_triton", "DecayTritonConfig"]


# ---- custom ops and their autograd -------------------------------------------------------------

_FWD_SCHEMA = ("(Tensor x, Tensor log_a, Tensor B, Tensor C, Tensor? scale, Tensor? D, Tensor? z, "
               "Tensor? initial_state, Tensor? seq_idx, int chunk_size, int block_m, int[] warps, bool save, "
               "bool debug) -> (Tensor, Tensor, Tensor, Tensor, Tensor)")
_BWD_SCHEMA = ("(Tensor dout, Tensor? dfinal, Tensor x, Tensor log_a, Tensor B, Tensor C, Tensor? scale, "
               "Tensor? D, Tensor? z, Tensor? seq_idx, Tensor states_lo, Tensor y_pre, bool has_init, "
               "int chunk_size, int block_m, int[] warps, bool debug) "
               "-> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)")


@torch.library.custom_op("structmat::decay_chunked_fwd", mutates_args=(), schema=_FWD_SCHEMA)
def _fwd_op(x, log_a, B, C, scale, D, z, initial_state, seq_idx, chunk_size, block_m, warps, save, debug):
    return forward(x, log_a, B, C, scale, D, z, initial_state, seq_idx, chunk_size, block_m, warps, save, debug)


@_fwd_op.register_fake
def _(x, log_a, B, C, scale, D, z, initial_state, seq_idx, chunk_size, block_m, warps, save, debug):
    b, T, H, P = x.shape
    N = B.shape[3]
    NC = -(-T // chunk_size)
    out = x.new_empty(b, T, H, P)
    final = x.new_empty(b, H, P, N, dtype=torch.float32)
    cst = x.new_empty(b, NC, H, P, N, dtype=torch.float32)
    slo = x.new_empty(b, NC + 1, H, P, N) if save else x.new_empty(0)
    ypre = x.new_empty(b, T, H, P) if (save and z is not None) else x.new_empty(0)
    return out, final, cst, slo, ypre


@torch.library.custom_op("structmat::decay_chunked_bwd", mutates_args=(), schema=_BWD_SCHEMA)
def _bwd_op(dout, dfinal, x, log_a, B, C, scale, D, z, seq_idx, states_lo, y_pre, has_init, chunk_size, block_m,
            warps, debug):
    return backward(dout, dfinal, x, log_a, B, C, scale, D, z, seq_idx, states_lo, y_pre, has_init, chunk_size,
                     block_m, warps, debug)


@_bwd_op.register_fake
def _(dout, dfinal, x, log_a, B, C, scale, D, z, seq_idx, states_lo, y_pre, has_init, chunk_size, block_m, warps,
      debug):
    b, T, H, P = x.shape
    N = B.shape[3]
    e = log_a.new_empty(0)
    bth = lambda: log_a.new_empty(b, H, T).transpose(1, 2)  # noqa: E731  (written as (b, h, T) rows)
    return (x.new_empty(x.shape), bth(), B.new_empty(B.shape), C.new_empty(C.shape),
            bth() if scale is not None else e,
            D.new_empty(D.shape) if D is not None else e,
            z.new_empty(z.shape) if z is not None else e,
            log_a.new_empty(b, H, P, N) if has_init else e)


def _setup_context(ctx, inputs, output):
    x, log_a, B, C, scale, D, z, init, seq_idx, chunk_size, block_m, warps, save, debug = inputs
    out, final, cst, slo, ypre = output
    ctx.mark_non_differentiable(cst, slo, ypre)
    ctx.set_materialize_grads(False)  # no zero tensors for the outputs that get no gradient
    ctx.save_for_backward(x, log_a, B, C, scale, D, z, seq_idx, slo, ypre)
    ctx.meta = (init is not None, init.dtype if init is not None else None, chunk_size, block_m, list(warps), debug)


def _backward_rule(ctx, dout, dfinal, dcst, dslo, dypre, launch=_bwd_op):
    x, log_a, B, C, scale, D, z, seq_idx, slo, ypre = ctx.saved_tensors
    has_init, init_dtype, chunk, bm, warps, debug = ctx.meta
    if slo.numel() == 0:
        raise RuntimeError("decay_chunked_triton: the forward ran without saving states for the backward")
    if dout is None:
        dout = torch.zeros_like(x)
    dx, dla, dB, dC, ds, dD, dz, dinit = launch(dout, dfinal, x, log_a, B, C, scale, D, z, seq_idx, slo, ypre,
                                                has_init, chunk, bm, warps, debug)
    return (dx, dla, dB, dC, ds if scale is not None else None, dD if D is not None else None,
            dz if z is not None else None, dinit.to(init_dtype) if has_init else None,
            None, None, None, None, None, None)


_fwd_op.register_autograd(_backward_rule, setup_context=_setup_context)


class _Eager(torch.autograd.Function):
    """The same forward, backward and saved tensors without the custom-op dispatch, whose host cost
    (schema defaults, redispatch: ~0.3 ms per forward+backward) is paid only where ``torch.compile``
    needs the ops to trace through."""

    @staticmethod
    def forward(ctx, *inputs):
        output = forward(*inputs)
        _setup_context(ctx, inputs, output)
        return output

    @staticmethod
    def backward(ctx, *grads):
        return _backward_rule(ctx, *grads, launch=backward)


def _run_forward(*inputs):
    return _fwd_op(*inputs) if torch.compiler.is_compiling() else _Eager.apply(*inputs)


# ---- public function ---------------------------------------------------------------------------

def _check(x, log_a, B, C, scale, D, z, initial_state, seq_idx, chunk_size):
    if x.dim() != 4:
        raise ValueError(f"x must have shape (batch, seqlen, nheads, headdim); got {tuple(x.shape)}")
    b, T, H, P = x.shape
    if T < 1:
        raise ValueError("x must have at least one time step")
    if log_a.shape != (b, T, H):
        raise ValueError(f"log_a must have shape {(b, T, H)}; got {tuple(log_a.shape)}")
    if B.dim() != 4 or B.shape[:2] != (b, T) or C.shape != B.shape:
        raise ValueError(f"B and C must have shape ({b}, {T}, ngroups, dstate); got {tuple(B.shape)} and "
                         f"{tuple(C.shape)}")
    G, N = B.shape[2], B.shape[3]
    if G < 1 or H % G:
        raise ValueError(f"nheads={H} must be a multiple of ngroups={G}")
    if scale is not None and scale.shape != (b, T, H):
        raise ValueError(f"scale must have shape {(b, T, H)}; got {tuple(scale.shape)}")
    if D is not None and D.shape not in ((H,), (H, P)):
        raise ValueError(f"D must have shape ({H},) or ({H}, {P}); got {tuple(D.shape)}")
    if z is not None and z.shape != x.shape:
        raise ValueError(f"z must have the shape of x {tuple(x.shape)}; got {tuple(z.shape)}")
    if initial_state is not None and initial_state.shape != (b, H, P, N):
        raise ValueError(f"initial_state must have shape {(b, H, P, N)}; got {tuple(initial_state.shape)}")
    if seq_idx is not None and seq_idx.shape != (b, T):
        raise ValueError(f"seq_idx must have shape {(b, T)}; got {tuple(seq_idx.shape)}")
    if not (16 <= chunk_size <= 256) or chunk_size & (chunk_size - 1):
        raise ValueError(f"chunk_size must be a power of two in [16, 256]; got {chunk_size}")
    if x.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise TypeError(f"x must be float32, bfloat16 or float16; got {x.dtype}")
    for name, t in (("log_a", log_a), ("B", B), ("C", C), ("scale", scale), ("D", D), ("z", z),
                    ("initial_state", initial_state), ("seq_idx", seq_idx)):
        if t is not None and t.device != x.device:
            raise ValueError(f"{name} is on {t.device} but x is on {x.device}")


def decay_chunked_triton(x, log_a, B, C, *, scale=None, D=None, z=None, initial_state=None, seq_idx=None,
                         chunk_size=256, return_chunk_states=False, config=None):
    """The decay recurrence of the module docstring on Triton kernels.

    Parameters
    ----------
    x : ``(batch, T, H, P)`` float32 / bfloat16 / float16.
    log_a : ``(batch, T, H)`` log decays, finite and ``<= 0`` (not checked: the caller guarantees
        it; ``log_a[:, 0]`` decays ``initial_state``). Computed in float32.
    B, C : ``(batch, T, G, N)``, ``H % G == 0``.
    scale : ``(batch, T, H)`` or None (inputs unscaled).
    D : ``(H,)`` or ``(H, P)`` skip term.
    z : like ``x``, gate ``out = y * silu(z)``.
    initial_state : ``(batch, H, P, N)``.
    seq_idx : ``(batch, T)`` non-decreasing ints.
    chunk_size : power of two in ``[16, 256]`` (changes rounding only).
    return_chunk_states : also return the states entering every chunk, ``(batch, n_chunks, H, P, N)``
        float32 (constants for autograd: no gradient flows through them).
    config : :class:`DecayTritonConfig`, optional tile knobs (tests).

    Returns
    -------
    ``(out, final_state)`` or ``(out, final_state, chunk_states)``: ``out`` in ``x.dtype``, the states
    float32 ``(batch, H, P, N)``. Gradients reach ``x, log_a, B, C, scale, D, z, initial_state``.
    """
    _check(x, log_a, B, C, scale, D, z, initial_state, seq_idx, chunk_size)
    # (the kernels run in x's dtype; the interpreter's in float32, below)
    bm, warps, debug = resolve(config, chunk_size, B.shape[3], x.dtype if x.is_cuda else torch.float32)
    if not x.is_cuda and os.environ.get("TRITON_INTERPRET") != "1":  # (else triton's own error: "0 active drivers")
        raise ValueError("the Triton kernels need CUDA tensors (or TRITON_INTERPRET=1 for CPU tensors); "
                         "use backend='torch' on the CPU")
    out_dtype = x.dtype
    if not x.is_cuda and x.dtype != torch.float32:  # the interpreter: its 16-bit dot is not exact
        x, B, C = x.float(), B.float(), C.float()
        z = z.float() if z is not None else None
    B, C = B.to(x.dtype), C.to(x.dtype)
    log_a = log_a.float().contiguous()
    scale = scale.float().contiguous() if scale is not None else None
    initial_state = initial_state.float() if initial_state is not None else None
    seq_idx = seq_idx.to(torch.int32).contiguous() if seq_idx is not None else None
    tensors = (x, log_a, B, C, scale, D, z, initial_state)
    save = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)
    out, final, cst, _, _ = _run_forward(x, log_a, B, C, scale, D, z, initial_state, seq_idx, chunk_size, bm, warps,
                                         save, debug)
    out = out.to(out_dtype)
    return (out, final, cst) if return_chunk_states else (out, final)
