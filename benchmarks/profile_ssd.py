"""Per-kernel times of the Triton SSD for tile variants (kernel iteration on a GPU, by hand).

``python benchmarks/profile_ssd.py``: prints a table of median ms per stage.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import torch
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).parent))

import structmat.triton.ssd as tssd  # noqa: E402
from bench_ssd import make_inputs  # noqa: E402


def stages(x, dt, A, B, C, chunk=256):
    dy = torch.randn_like(x)
    states, final, cs = tssd.run_states(x, dt, A, B, None, None, chunk)
    rstates, _, _ = tssd.run_states(dy, dt, A, C, None, None, chunk, reverse=True, write_cs=False)
    return {
        "states_fwd": lambda: tssd.run_states(x, dt, A, B, None, None, chunk),
        "chunk_out": lambda: tssd.run_chunk_out(x, dt, cs, B, C, states, None, None, None, chunk),
        "states_rev": lambda: tssd.run_states(dy, dt, A, C, None, None, chunk, reverse=True, write_cs=False),
        "dc+dx_db": lambda: tssd.run_backward(x, dt, A, B, C, None, dy, states, rstates, cs, None, chunk),
        "dc": lambda: _dc_only(x, dt, A, B, C, dy, states, cs, chunk),
    }


def _dc_only(x, dt, A, B, C, dy, states, cs, chunk):
    from structmat.triton import ssd_kernels as K

    b, L, H, P = x.shape
    G, N = B.shape[2], B.shape[3]
    BM = min(tssd.MAX_BLOCK_M, chunk)
    dC = torch.zeros(b, L, G, N, device=x.device)
    dda = torch.zeros(b, H, L, device=x.device)
    hpg = H // G
    split = tssd.HEAD_SPLIT
    K.dc_kernel[((L // chunk) * (chunk // BM), b * G, split)](
        x, dy, dt, cs, B, C, states, dt, dC, dda, L, H, hpg, G, P, N,
        *x.stride(), *dt.stride(), *B.stride(), *C.stride(), *states.stride(), 0, 0, *dC.stride(),
        CHUNK=chunk, BLOCK_M=BM, BLOCK_N=tssd._pow2(N), BLOCK_P=tssd._pow2(P), HAS_SEQ=False,
        HEADS_PER_PROGRAM=hpg // split, DOT_PRECISION="tf32", num_warps=tssd.BWD_WARPS)


def main():
    for (T, N), split in itertools.product([(2048, 64), (16384, 128)], [4, 8]):
        tssd.HEAD_SPLIT = split
        x, dt, A, B, C = make_inputs(32768 // T, T, 32, 64, N)
        row = {name: triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median") for name, fn in stages(x, dt, A, B, C).items()}
        print(f"T={T} N={N} split={split}: " + "  ".join(f"{k}={v:.3f}" for k, v in row.items()), flush=True)


def resources():
    """Registers and spills of each compiled kernel (the compiler's report)."""
    from structmat.triton import ssd_kernels as K

    for name in ("state_kernel", "chunk_out_kernel", "dc_kernel", "dx_db_kernel"):
        kern = getattr(K, name)
        for dev_cache in getattr(kern, "device_caches", {}).values():
            for compiled in dev_cache[0].values():
                print(f"{name}: regs={compiled.n_regs} spills={compiled.n_spills} shared={compiled.metadata.shared}")


if __name__ == "__main__":
    main()
    try:
        resources()
    except Exception as err:  # the cache layout differs between triton versions
        print("no resource report:", repr(err))
