"""Where the time of a Mamba-2 block goes: ours against mamba_ssm's, kernel by kernel (``torch.profiler``).

Run by hand on a CUDA machine: ``python benchmarks/profile_layers.py [--d-model 1024] [--batch 8]``.
Prints, per block, the CUDA kernels of one forward+backward sorted by their total time, the host
time to enqueue one forward+backward (no sync: where it exceeds the GPU time, the block is bound by
Python), and the same for one decoding ``step``. ``bench_layers.py`` gives the headline numbers.
"""

from __future__ import annotations

import argparse
import time

import torch
from bench_layers import SEQLEN, blocks, load_peer
from torch.profiler import ProfilerActivity, profile


def enqueue_ms(fn, n: int = 20) -> float:
    """Host ms per call of ``fn`` with no sync in between (the GPU may lag behind)."""
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    host = (time.perf_counter() - t0) / n
    torch.cuda.synchronize()
    return 1e3 * host


def kernels(fn, rows: int) -> str:
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return prof.key_averages().table(sort_by="cuda_time_total", row_limit=rows)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--d-model", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--decode-batch", type=int, default=16)
    ap.add_argument("--rows", type=int, default=18)
    args = ap.parse_args()
    dev, dt = torch.device("cuda"), torch.bfloat16
    mods = blocks(load_peer(), args.d_model, dev, dt)
    u = torch.randn(args.batch, SEQLEN, args.d_model, device=dev, dtype=dt)
    gy = torch.randn_like(u)
    for name, m in mods.items():
        step = lambda m=m: m(u).backward(gy)  # noqa: E731
        print(f"\n=== {name}: forward+backward, enqueue {enqueue_ms(step):.3f} ms per call (host, no sync)")
        print(kernels(step, args.rows))
        conv, ssm = m.allocate_inference_cache(args.decode_batch, 1)
        tok = torch.randn(args.decode_batch, 1, args.d_model, device=dev, dtype=dt)
        with torch.no_grad():
            dec = lambda m=m: m.step(tok, conv, ssm)  # noqa: E731
            print(f"=== {name}: step at batch {args.decode_batch}, enqueue {enqueue_ms(dec):.3f} ms per call")
            print(kernels(dec, args.rows))


if __name__ == "__main__":
    main()
