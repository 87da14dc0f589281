"""Per-kernel times of the decay kernels (structmat.kernels.decay_triton) for tile variants, on a GPU.

``python benchmarks/profile_ssd.py [--quick] [--json PATH]``: median ms per kernel (forward; backward
chain, dB/dC, dx) and of the whole forward+backward through autograd, with the peak memory of the
latter, for the bench's problem (32768 tokens, H = 32, P = 64, bf16) and warps variants.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import triton
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).parent))

from _report import cuda_peak_mib  # noqa: E402

import structmat.kernels.decay_triton_config as tile_config  # noqa: E402
import structmat.kernels.decay_triton_launch as dt  # noqa: E402
from structmat.kernels.decay_triton import decay_chunked_triton  # noqa: E402


def inputs(batch, T, H, P, N, G=1, seed=0, dtype=torch.bfloat16):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(batch, T, H, P, device="cuda", dtype=dtype, generator=g)
    dtv = torch.nn.functional.softplus(torch.randn(batch, T, H, device="cuda", generator=g) - 3.0)
    A = -torch.exp(torch.rand(H, device="cuda", generator=g) * 2.0)
    B = torch.randn(batch, T, G, N, device="cuda", dtype=dtype, generator=g) / N**0.5
    C = torch.randn(batch, T, G, N, device="cuda", dtype=dtype, generator=g) / N**0.5
    return x, (dtv * A).contiguous(), dtv, B, C


def ms(fn):
    return triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median")


def stages(x, la, s, B, C, chunk, bm, knobs):
    """Each kernel alone; ``knobs`` = five warp counts then the (forward, chain, dx) column splits."""
    out, final, cst, slo, ypre = dt.forward(x, la, B, C, s, None, None, None, None, chunk, bm, knobs, True)
    dt._await_compiles(x.device)
    buf = dt._Buffers()
    dy = torch.randn_like(x)
    exact = x.dtype in dt.EXACT_DECAY_DTYPES
    glo, _, cs, cl, jump = dt._launch_chain(dy, None, la, C, None, slo, False, exact, chunk, bm, knobs[1], knobs[6],
                                            buf)
    s_ht = s.transpose(1, 2).contiguous()
    b, T, H, _ = x.shape
    rpart = torch.empty(chunk // bm + 2, b, H, T, device=x.device)
    group = dt._launch_group_grad
    common = (x, dy, cs, cl, s_ht, B, C, None)
    return {
        "fwd": lambda: dt.forward(x, la, B, C, s, None, None, None, None, chunk, bm, knobs, True),
        "chain": lambda: dt._launch_chain(dy, None, la, C, None, slo, False, exact, chunk, bm, knobs[1], knobs[6],
                                          buf),
        "dc": lambda: group(dt._bwd.decay_bwd_dc_kernel, C, *common, slo, rpart, chunk, bm, knobs[2], buf),
        "db": lambda: group(dt._bwd.decay_bwd_db_kernel, B, *common, glo, rpart, chunk, bm, knobs[3], buf),
        "dx": lambda: dt._launch_dx(x, dy, cs, cl, s_ht, B, C, None, None, glo, chunk, bm, knobs[4], knobs[7], buf),
        "dla": lambda: dt._launch_dla(rpart, jump, T, chunk, bm, buf),
    }


def fwd_bwd(x, la, s, B, C, chunk, cfg):
    leaves = [t.detach().clone().requires_grad_() for t in (x, la, s, B, C)]
    gy = torch.randn_like(x)

    def run():
        out, _ = decay_chunked_triton(leaves[0], leaves[1], leaves[3], leaves[4], scale=leaves[2],
                                         chunk_size=chunk, config=cfg)
        out.backward(gy)

    run()
    t = triton.testing.do_bench(run, warmup=10, rep=40, grad_to_none=leaves, return_mode="median")
    return t, cuda_peak_mib(run)


def variants(N, extra=()):
    """The defaults, then each knob changed alone (warps 4 <-> 8, split 1 <-> 2), then ``extra``."""
    c = tile_config
    d = [c.FWD_WARPS[N], c.CHAIN_WARPS[N], c.DC_WARPS[N], c.DB_WARPS[N], c.DX_WARPS[N], c.FWD_SPLIT[N], c.CHAIN_SPLIT[N],
         c.DX_SPLIT[N]]
    out = [tuple(d)]
    for i in range(8):
        v = list(d)
        v[i] = {4: 8, 8: 4, 1: 2, 2: 1}[d[i]]
        out.append(tuple(v))
    return out + [tuple(e) for e in extra]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="default warps only")
    ap.add_argument("--json", default=None)
    ap.add_argument("--shapes", default="2048:64,16384:128,8192:128:2:80")
    ap.add_argument("--no-split-state", action="store_true", help="also time the defaults with SPLIT_STATE off")
    args = ap.parse_args()
    rows = []
    for spec in args.shapes.split(","):
        parts = [int(v) for v in spec.split(":")]
        T, N = parts[:2]
        batch = parts[2] if len(parts) > 2 else 32768 // T
        H = parts[3] if len(parts) > 3 else 32
        x, la, s, B, C = inputs(batch, T, H, 64, N)
        runs = [(w, True) for w in (variants(N)[:1] if args.quick else variants(N))]
        if args.no_split_state:
            runs.append((variants(N)[0], False))
        for warps, split_state in runs:
            dt.SPLIT_STATE = split_state
            t0 = time.perf_counter()
            st = stages(x, la, s, B, C, 256, 64, list(warps))
            torch.cuda.synchronize()
            compile_s = time.perf_counter() - t0
            row = dict(T=T, N=N, batch=batch, H=H, knobs=list(warps), split_state=split_state,
                       compile_s=round(compile_s, 2))
            row.update({k: round(ms(f), 4) for k, f in st.items()})
            row["bwd_kernels"] = round(sum(row[k] for k in ("chain", "dc", "db", "dx", "dla")), 4)
            t, peak = fwd_bwd(x, la, s, B, C, 256, tile_config.DecayTritonConfig(warps=warps[:5], splits=warps[5:]))
            row["fwdbwd"] = round(t, 4)
            row["peak_mib"] = round(peak, 1)
            rows.append(row)
            print(json.dumps(row), flush=True)
        dt.SPLIT_STATE = True
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
