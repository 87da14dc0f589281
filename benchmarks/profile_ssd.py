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
    }


def main():
    for (T, N), tiles, bm in itertools.product([(2048, 64), (16384, 128)], [(64, 32), (32, 32), (64, 64), (128, 64)], [64]):
        tssd.STATE_TILES = tiles
        tssd.MAX_BLOCK_M = bm
        x, dt, A, B, C = make_inputs(32768 // T, T, 32, 64, N)
        row = {name: triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median") for name, fn in stages(x, dt, A, B, C).items()}
        print(f"T={T} N={N} tiles={tiles} BM={bm}: " + "  ".join(f"{k}={v:.3f}" for k, v in row.items()), flush=True)


if __name__ == "__main__":
    main()
