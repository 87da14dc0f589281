"""The tiles of the decay kernels: rows per block, warps and column splits per program, by state size and input
dtype (each table with its reason), :class:`DecayTritonConfig` to override them, and :func:`resolve`, which fills in
the defaults. :mod:`structmat.kernels.decay_triton_launch` launches with what it returns.
"""

from __future__ import annotations

import torch

__all__ = ["DecayTritonConfig", "resolve", "default_block_m", "forward_stages", "padded"]

# Rows per block inside a chunk. Only the BM x BM diagonal tiles of a chunk are quadratic; between
# blocks the state is carried in registers. 64 rows is one wgmma tile per warpgroup; see
# benchmarks/NOTES_ssd.md for the measured alternatives.
BLOCK_M = 64
# Warps per program by padded state size N: the fp32 state (N x P) and the block tiles must fit in
# registers without spills (benchmarks/kernel_resources.py prints the compiler's numbers).
FWD_WARPS = {16: 4, 32: 4, 64: 4, 128: 4, 256: 8}
CHAIN_WARPS = {16: 4, 32: 4, 64: 4, 128: 4, 256: 8}
DC_WARPS = {16: 4, 32: 4, 64: 8, 128: 8, 256: 8}
DB_WARPS = {16: 4, 32: 4, 64: 4, 128: 8, 256: 8}
DX_WARPS = {16: 4, 32: 4, 64: 4, 128: 4, 256: 8}
# float32 inputs run ieee products on the CUDA cores, and their fp32 tiles spill at 64 rows. H100, fwd + bwd kernels,
# 16K tokens x 2, H = 32, P = 64 (NOTES_ssd.md, session 18): N = 64 149 -> 21 ms at 32 rows; N = 128 408 -> 37 ms at
# 32 rows and 8 warps in forward, dB, dx. N = 256 needs too much shared memory at 64 rows, and its forward took 141 ms
# at 32 rows against 19 at 16 (session 19): 16 rows, 107 ms fwd + bwd.
FP32_BLOCK_M = {16: 32, 32: 32, 64: 32, 128: 32, 256: 16}  # by padded N
FP32_WARPS = {128: (8, 4, 8, 8, 8)}  # (forward, chain, dC, dB, dx) by padded N where they differ from the above
# Column splits of the (N, P) state in the kernels that carry it (forward, chain, dx): PS programs per
# (chunk, head), each holding N x P / PS of it, halve the registers at N = 128 for a duplicated C B^T.
FWD_SPLIT = {16: 1, 32: 1, 64: 1, 128: 2, 256: 2}
CHAIN_SPLIT = {16: 1, 32: 1, 64: 1, 128: 1, 256: 2}
DX_SPLIT = {16: 1, 32: 1, 64: 1, 128: 2, 256: 2}


class DecayTritonConfig:
    """Tile knobs of :func:`decay_chunked_triton` (``None``: the module's defaults).

    ``block_m``: rows per block inside a chunk (power of two, 16..chunk); tests lower it to run several blocks
    per chunk (the forward then runs unpipelined: :func:`forward_stages`). ``warps``:
    ``(forward, chain, dC, dB, dx)`` warps per program; ``splits``: ``(forward, chain, dx)`` programs per (chunk, head), each
    taking ``P / split`` columns.
    ``debug``: fill every buffer with NaN before the kernels run (an element they fail to write shows)
    and, after each look-back launch, synchronise and raise if a program gave up waiting. Tests only.
    """

    __slots__ = ("block_m", "warps", "splits", "debug")

    def __init__(self, block_m: int | None = None, warps: tuple | None = None, splits: tuple | None = None,
                 debug: bool = False):
        self.block_m = block_m
        self.warps = warps
        self.splits = splits
        self.debug = debug

    def __repr__(self) -> str:
        return (f"DecayTritonConfig(block_m={self.block_m}, warps={self.warps}, splits={self.splits}, "
                f"debug={self.debug})")


def padded(n: int, low: int = 16) -> int:
    """The power of two at least ``n`` and ``low``: a tile's extent for ``n`` rows or columns."""
    # plain Python: triton's host helpers are JIT objects costing ~15 us per call in triton 3.9
    return max(low, 1 << (n - 1).bit_length())


def resolve(config, chunk: int, N: int, dtype: torch.dtype) -> tuple[int, list[int], bool]:
    """``(block_m, warps + splits, debug)`` of ``config`` with the defaults for state size ``N`` and inputs of
    ``dtype`` filled in."""
    cfg = config or DecayTritonConfig()
    fp32 = dtype == torch.float32
    bn = padded(N)
    bm = cfg.block_m if cfg.block_m is not None else default_block_m(dtype, N, chunk)
    if bm < 16 or bm > chunk or bm & (bm - 1):
        raise ValueError(f"block_m must be a power of two in [16, chunk_size={chunk}]; got {bm}")
    if cfg.warps is not None:
        warps = list(cfg.warps)
    elif fp32 and bn in FP32_WARPS:
        warps = list(FP32_WARPS[bn])
    else:
        warps = [FWD_WARPS[bn], CHAIN_WARPS[bn], DC_WARPS[bn], DB_WARPS[bn], DX_WARPS[bn]]
    splits = list(cfg.splits) if cfg.splits is not None else [FWD_SPLIT[bn], CHAIN_SPLIT[bn], DX_SPLIT[bn]]
    return bm, warps + splits, cfg.debug


def default_block_m(dtype: torch.dtype, N: int, chunk: int) -> int:
    """Rows per block of the default tiles for inputs of ``dtype``, state size ``N`` and ``chunk``."""
    return min(FP32_BLOCK_M[padded(N)] if dtype == torch.float32 else BLOCK_M, chunk)


def forward_stages(dtype: torch.dtype, N: int, bm: int, chunk: int) -> dict:
    """``num_stages=1`` (the forward's loop over blocks not pipelined) at rows per block other than the default's,
    else nothing: the default tiles keep triton's pipelining and their machine code. triton 3.6's pipelining (3
    stages) gave wrong outputs on the H100 at two tiles off the defaults, right at 1 stage (NOTES_ssd.md, session 19):
    16-bit inputs below 64 rows with several blocks per chunk (0.16-0.31 off; some products take MMA v2 beside wgmma
    there), and float32 at N = 256, 32 rows, two column programs, saving states for the backward (every output off).
    Tiles off the defaults are for tests, where being right matters more than speed."""
    return {} if bm == default_block_m(dtype, N, chunk) else {"num_stages": 1}
