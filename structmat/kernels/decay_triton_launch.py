"""Launchers of the decay kernels at the tiles of :mod:`structmat.kernels.decay_triton_config`: the forward
launch, the backward's six launches and their compile ahead of the first backward (:func:`compile_backward_ahead`).
:mod:`structmat.kernels.decay_triton` wraps them in custom ops with their autograd.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import torch

from structmat.kernels.triton_modules import triton

try:  # triton >= 3.4: compiles submitted from a warm-up run on an executor (a private module: optional)
    from triton.runtime._async_compile import AsyncCompileMode
except ImportError:  # pragma: no cover - older triton compiles the warm-ups one after the other
    AsyncCompileMode = None

from structmat.kernels import decay_triton_bwd as _bwd
from structmat.kernels import decay_triton_bwd_dx as _bwd_dx
from structmat.kernels import decay_triton_bwd_scan as _scan
from structmat.kernels import decay_triton_fwd as _fwd
from structmat.kernels.decay_triton_config import DecayTritonConfig, forward_stages, padded, resolve

__all__ = ["DecayTritonConfig", "forward", "backward", "resolve"]

# The carried fp32 state (forward) and adjoint state (dx) enter their 16-bit products as a high and a low
# 16-bit part: one more product per block, and their rounding drops out of the output and dx errors.
SPLIT_STATE = True
GATE_ROWS = 64  # (t, h) rows per program of the elementwise gate backward
# dC / dB programs launched heaviest block first (their work per block grows 1 : NBLK across a chunk)
HEAVY_FIRST = True
# Input dtypes whose kernels sum the log decays of a block (forward) or chunk (backward) in fp64, the rest applied as
# row and column factors: every decay exact to fp32 at any dt A (float32 sums lose |cs| 2^-24 per exponent: 1.2e-5 in
# the output at dt A near -370, 2e-3 in dA at chunk 256 near -400). bf16 / fp16 outputs round at 2^-9, far above
# that: their kernels compile without the sums' code (the same machine code; NOTES_ssd.md, sessions 17-18).
EXACT_DECAY_DTYPES = (torch.float32,)
# The first forward that saves for a backward compiles the backward's kernels on this many threads beside its
# own compile (a first forward+backward on a new shape was 11 s on an H100 host, 6 s of it the backward's
# kernels compiled one after the other; LLVM and ptxas run outside the GIL).
COMPILE_THREADS = 6


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _precision(dtype: torch.dtype) -> str:
    return "ieee" if dtype == torch.float32 else "tf32"


def _alloc(shape, dtype, device, debug):
    """Uninitialised, or NaN (-1 for integers) with ``debug``: unwritten elements cannot pass unseen."""
    if not debug:
        return torch.empty(shape, device=device, dtype=dtype)
    return torch.full(shape, float("nan") if dtype.is_floating_point else -1, device=device, dtype=dtype)


class _Buffers:
    """Where the backward's launchers get their buffers and how they launch: fresh tensors and a launch, or,
    for a compile-only warm-up (``standins``: a tensor per dtype), existing tensors and ``kernel.warmup``. A
    warm-up never runs the kernel, and a kernel is specialised on dtypes, 16-byte alignment and integer
    arguments, which the stand-ins share with the buffers of the real launch."""

    def __init__(self, debug: bool = False, standins: dict | None = None):
        self.debug = debug and standins is None
        self.standins = standins

    def __call__(self, shape, dtype, device):
        return self.standins[dtype] if self.standins is not None else _alloc(shape, dtype, device, self.debug)

    def zeros(self, shape, dtype, device):
        """A zeroed buffer (the look-back's flags), or the dtype's stand-in."""
        return self.standins[dtype] if self.standins is not None else torch.zeros(shape, device=device, dtype=dtype)

    def launch(self, kernel, grid, *args, **meta):
        if self.standins is None:
            kernel[grid](*args, **meta)
        else:
            kernel.warmup(*args, grid=grid, **meta)


def _split(P, ps):
    """Column split of the state: ``ps`` programs per head, each ``P / ps`` columns (>= 16)."""
    while ps > 1 and padded(P) // ps < 16:
        ps //= 2
    return ps


def _d_strides(D):
    if D is None:
        return 0, 0
    return (D.stride(0), D.stride(1)) if D.dim() == 2 else (D.stride(0), 0)


def _check_sync(sync, where):
    if int(sync[1].item()) != 0:
        raise RuntimeError(f"decay_chunked_triton: a look-back in the {where} kernel gave up waiting")


def forward(x, log_a, B, C, scale, D, z, init, seq_idx, chunk, bm, warps, save, debug=False):
    """``(out, final, chunk_states, states_lo, y_pre)``; the last two are empty unless ``save``."""
    b, T, H, P = x.shape
    G, N = B.shape[2], B.shape[3]
    ps = _split(P, warps[5])  # warps carries the splits after the five warp counts
    NC = _cdiv(T, chunk)
    dev = x.device
    out = _alloc((b, T, H, P), x.dtype, dev, debug)
    final = _alloc((b, H, P, N), torch.float32, dev, debug)
    cst = _alloc((b, NC, H, P, N), torch.float32, dev, debug)
    agg = _alloc((b, NC, H, P, N), torch.float32, dev, debug) if NC > 1 else final
    adec = _alloc((b, NC, H, ps), torch.float32, dev, debug)
    sync = torch.zeros(2 + b * NC * H * ps, device=dev, dtype=torch.int32)
    slo = _alloc((b, NC + 1, H, P, N), x.dtype, dev, debug) if save else out.new_empty(0)
    write_ypre = save and z is not None
    ypre = _alloc(out.shape, out.dtype, dev, debug) if write_ypre else out.new_empty(0)
    zz = z if z is not None else x
    ini = init if init is not None else final
    sD_h, sD_p = _d_strides(D)
    if save:
        compile_backward_ahead(x, log_a, B, C, scale, D, z, init, seq_idx, chunk, bm, warps, ypre)
    _fwd.decay_fwd_kernel[(NC * b * H * ps,)](
        x, log_a, scale if scale is not None else log_a, B, C, D if D is not None else log_a, zz, ini,
        seq_idx if seq_idx is not None else log_a,
        out, ypre if write_ypre else out, cst, slo if save else cst, final, agg, adec, sync,
        T, H, H // G, NC, b * H, P, N,
        *log_a.stride(), *x.stride(), *B.stride(), *C.stride(), *zz.stride(), sD_h, sD_p, *ini.stride(),
        CHUNK=chunk, BM=bm, BN=padded(N), BP=padded(P) // ps,
        HAS_SCALE=scale is not None, HAS_D=D is not None, HAS_Z=z is not None, HAS_INIT=init is not None,
        HAS_SEQ=seq_idx is not None, SAVE_LO=save, WRITE_YPRE=write_ypre, PREC=_precision(x.dtype), PS=ps,
        SPLIT_STATE=SPLIT_STATE and x.dtype != torch.float32, EXACT_DECAYS=x.dtype in EXACT_DECAY_DTYPES,
        num_warps=warps[0], **forward_stages(x.dtype, N, bm, chunk),
    )
    if debug:
        _check_sync(sync, "forward")
    return out, final, cst, slo, ypre


def _launch_chain(dy, dfinal, log_a, C, seq_idx, slo, has_init, exact, chunk, bm, warp, split, buf):
    """Adjoint states ``G_c`` per chunk (input dtype), ``d initial_state`` (fp32 or empty), the
    chunk-local cumulative log decays ``cs (b, h, T)`` (fp32; with ``exact`` the rounding of their fp64 sums, and
    the rests ``cl (b, h, T)``, else ``cl`` is None) and ``a_c <G_c, h_c>`` per ``(b, c, h)``."""
    b, T, H, P = dy.shape
    G, N = C.shape[2], C.shape[3]
    NC = _cdiv(T, chunk)
    dev = dy.device
    ps = _split(P, split)
    glo = buf((b, NC, H, P, N), C.dtype, dev)
    dinit = buf((b, H, P, N), torch.float32, dev) if has_init else log_a.new_empty(0)
    cs = buf((b, H, T), torch.float32, dev)
    cl = buf((b, H, T), torch.float32, dev) if exact else None
    jump = buf((b, NC, H, ps), torch.float32, dev)
    g32 = buf((b, NC, H, P, N), torch.float32, dev) if NC > 1 else glo
    agg = buf((b, NC, H, P, N), torch.float32, dev) if NC > 1 else glo
    adec = buf((b, NC, H, ps), torch.float32, dev)
    sync = buf.zeros(2 + b * NC * H * ps, torch.int32, dev)
    dfin = dfinal if dfinal is not None else glo
    sf = dfinal.stride() if dfinal is not None else (0, 0, 0, 0)
    buf.launch(
        _scan.decay_bwd_chain_kernel, (NC * b * H * ps,),
        dy, log_a, C, seq_idx if seq_idx is not None else log_a, dfin, slo, glo, dinit if has_init else glo, cs,
        cl, jump, g32, agg, adec, sync,
        T, H, H // G, NC, b * H, P, N,
        *log_a.stride(), *dy.stride(), *C.stride(), *sf,
        CHUNK=chunk, BM=bm, BN=padded(N), BP=padded(P) // ps, HAS_SEQ=seq_idx is not None,
        HAS_DFINAL=dfinal is not None, WRITE_DINIT=has_init, PREC=_precision(C.dtype), PS=ps, EXACT_DECAYS=exact,
        num_warps=warp,
    )
    if buf.debug:
        _check_sync(sync, "backward chain")
    return glo, dinit, cs, cl, jump


def _group_args(x, dy, B, C):
    return (*x.stride(), *dy.stride(), *B.stride(), *C.stride())


def _launch_group_grad(kernel, target, x, dy, cs, cl, s_ht, B, C, seq_idx, state, rpart, chunk, bm, warp, buf):
    """``dC`` (``target`` is ``C``, ``state`` the states ``slo``; row sums of ``V`` into ``rpart``) or ``dB``
    (``target`` is ``B``, ``state`` the state gradients ``glo``; column sums): one launch shape for both. ``cl``:
    the rests of the exact decays, or None (a None argument compiles the kernel without them)."""
    b, T, H, P = x.shape
    G, N = B.shape[2], B.shape[3]
    NC = _cdiv(T, chunk)
    grad = buf(target.shape, target.dtype, x.device)
    buf.launch(
        kernel, (NC * (chunk // bm), b * G),
        x, dy, cs, cl, s_ht if s_ht is not None else cs, B, C, seq_idx if seq_idx is not None else cs, state,
        grad, rpart,
        T, H, H // G, G, b, NC, P, N, *_group_args(x, dy, B, C),
        CHUNK=chunk, BM=bm, BN=padded(N), BP=padded(P), HAS_SCALE=s_ht is not None, HAS_SEQ=seq_idx is not None,
        PREC=_precision(x.dtype), HEAVY_FIRST=HEAVY_FIRST, EXACT_DECAYS=cl is not None, num_warps=warp,
    )
    return grad


def _launch_dx(x, dy, cs, cl, s_ht, B, C, D, seq_idx, glo, chunk, bm, warp, split, buf):
    """``dx``, ``d scale`` as ``(split, b, h, T)`` fp32 partials (or empty), ``dD`` partials
    ``(b, nc, h, p)`` (or empty)."""
    b, T, H, P = x.shape
    G, N = B.shape[2], B.shape[3]
    NC = _cdiv(T, chunk)
    dev = x.device
    ps = _split(P, split)
    dx = buf((b, T, H, P), x.dtype, dev)
    ds = buf((ps, b, H, T), torch.float32, dev) if s_ht is not None else cs.new_empty(0)
    dDp = buf((b, NC, H, P), torch.float32, dev) if D is not None else cs.new_empty(0)
    sD_h, sD_p = _d_strides(D)
    buf.launch(
        _bwd_dx.decay_bwd_dx_kernel, (NC, b * H * ps),
        x, dy, cs, cl, s_ht if s_ht is not None else cs, B, C, D if D is not None else cs,
        seq_idx if seq_idx is not None else cs, glo, dx, ds if s_ht is not None else cs,
        dDp if D is not None else cs,
        T, H, H // G, NC, P, N, *_group_args(x, dy, B, C), sD_h, sD_p,
        CHUNK=chunk, BM=bm, BN=padded(N), BP=padded(P) // ps, HAS_SCALE=s_ht is not None, HAS_D=D is not None,
        HAS_SEQ=seq_idx is not None, PREC=_precision(x.dtype), PS=ps,
        SPLIT_STATE=SPLIT_STATE and x.dtype != torch.float32, EXACT_DECAYS=cl is not None, num_warps=warp,
    )
    return dx, ds, dDp


def _launch_dla(rpart, jump, T, chunk, bm, buf):
    """``d log_a`` as ``(b, h, T)`` fp32 from the per-row sums of ``V``."""
    b, NC, H, ps = jump.shape
    dla = buf((b, H, T), torch.float32, jump.device)
    buf.launch(_scan.decay_bwd_dla_kernel, (NC, b * H), rpart, jump, dla, T, H, b, NC, CHUNK=chunk, BM=bm, PS=ps,
               num_warps=1)
    return dla


def _gate_backward(dout, z, ypre, buf):
    """``(dy, dz)`` of ``out = y_pre * silu(z)``."""
    b, T, H, P = dout.shape
    dy = buf((b, T, H, P), ypre.dtype, dout.device)
    dz = buf((b, T, H, P), z.dtype, dout.device)
    buf.launch(_scan.decay_gate_bwd_kernel, (_cdiv(T * H, GATE_ROWS), b),
               dout, z, ypre, dy, dz, T, H, P, *dout.stride(), *z.stride(), ROWS=GATE_ROWS, BP=padded(P), num_warps=4)
    return dy, dz


def _launch_backward(dout, dfinal, x, log_a, B, C, scale, D, z, seq_idx, slo, ypre, has_init, chunk, bm, warps, buf):
    """The backward's launches, in order; ``(dz, dinit, dC, dB, dx, ds, dDp, dla)``."""
    b, T, H, P = x.shape
    dy, dz = (dout, log_a.new_empty(0)) if z is None else _gate_backward(dout, z, ypre, buf)
    glo, dinit, cs, cl, jump = _launch_chain(dy, dfinal, log_a, C, seq_idx, slo, has_init,
                                             x.dtype in EXACT_DECAY_DTYPES, chunk, bm, warps[1], warps[6], buf)
    s_ht = None
    if scale is not None:  # (b, h, T): rows of a head
        s_ht = scale.transpose(1, 2).contiguous() if buf.standins is None else scale
    rpart = buf((chunk // bm + 2, b, H, T), torch.float32, x.device)
    common = (x, dy, cs, cl, s_ht, B, C, seq_idx)
    dC = _launch_group_grad(_bwd.decay_bwd_dc_kernel, C, *common, slo, rpart, chunk, bm, warps[2], buf)
    dB = _launch_group_grad(_bwd.decay_bwd_db_kernel, B, *common, glo, rpart, chunk, bm, warps[3], buf)
    dx, ds, dDp = _launch_dx(x, dy, cs, cl, s_ht, B, C, D, seq_idx, glo, chunk, bm, warps[4], warps[7], buf)
    dla = _launch_dla(rpart, jump, T, chunk, bm, buf)
    return dz, dinit, dC, dB, dx, ds, dDp, dla


def backward(dout, dfinal, x, log_a, B, C, scale, D, z, seq_idx, slo, ypre, has_init, chunk, bm, warps,
              debug=False):
    """``(dx, dlog_a, dB, dC, dscale, dD, dz, dinit)``; absent inputs get (fresh) empty tensors."""
    _await_compiles(x.device)
    dz, dinit, dC, dB, dx, ds, dDp, dla = _launch_backward(dout, dfinal, x, log_a, B, C, scale, D, z, seq_idx, slo,
                                                           ypre, has_init, chunk, bm, warps, _Buffers(debug))
    dla = dla.transpose(1, 2)
    if scale is not None:
        ds = (ds[0] if ds.shape[0] == 1 else ds.sum(0)).transpose(1, 2)
    dD = log_a.new_empty(0)
    if D is not None:
        dD = dDp.sum((0, 1))
        dD = (dD if D.dim() == 2 else dD.sum(-1)).to(D.dtype)
    return dx, dla, dB, dC, ds, dD, dz, dinit


# ---- the backward's kernels compiled beside the first forward ----------------------------------------------------

_COMPILED: set = set()  # backward specialisations already compiled (or being compiled) in this process
_PENDING: dict = {}  # device -> the threads compiling them


def _compile_key(x, B, scale, D, z, init, seq_idx, chunk, bm, warps):
    """What the backward's kernels are specialised on, as far as the forward can tell (a backward that differs,
    say by a differentiated final state, compiles its own kernels on its first call)."""
    return (x.device, x.dtype, B.shape[2:], x.shape[3], chunk, bm, tuple(warps), scale is not None,
            None if D is None else D.dim(), z is not None, seq_idx is not None, init is not None)


def compile_backward_ahead(x, log_a, B, C, scale, D, z, init, seq_idx, chunk, bm, warps, ypre):
    """Start compiling the backward's kernels on threads, once per specialisation, while the caller's forward
    compiles and runs; :func:`backward` waits for them. Without CUDA, or under the interpreter, nothing to do."""
    if not x.is_cuda or os.environ.get("TRITON_INTERPRET") == "1":
        return
    key = _compile_key(x, B, scale, D, z, init, seq_idx, chunk, bm, warps)
    if key in _COMPILED:
        return
    _COMPILED.add(key)
    triton.runtime.driver.active.get_current_device()  # the driver initialised here, not raced by the thread
    standins = {x.dtype: x, B.dtype: B, torch.float32: log_a, torch.int32: torch.zeros(1, dtype=torch.int32,
                                                                                       device=x.device)}
    if z is not None:
        standins.setdefault(z.dtype, z)
    # dout, slo and ypre stand in by x: the same dtype, and dout is most often laid out like x
    args = (x, None, x, log_a, B, C, scale, D, z, seq_idx, x, ypre if z is not None else x, init is not None, chunk,
            bm, warps, _Buffers(standins=standins))
    thread = threading.Thread(target=_compile_all, args=(x.device, args), daemon=True)
    _PENDING.setdefault(x.device, []).append(thread)
    thread.start()


def _compile_all(device, args):
    try:
        with torch.cuda.device(device):
            if AsyncCompileMode is None:
                _launch_backward(*args)
            else:
                with ThreadPoolExecutor(COMPILE_THREADS) as pool, AsyncCompileMode(pool):
                    _launch_backward(*args)
    except Exception:  # noqa: BLE001 - the backward's own launch compiles again and raises the error there
        pass


def _await_compiles(device):
    for thread in _PENDING.pop(device, ()):
        thread.join()
