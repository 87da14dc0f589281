"""The linear order: ``Z_s = K_s V_s^T``, the mask applied along ``S`` with its fast matvec, contracted with ``Q``.

Any mask with a fast matvec. The key features and value columns are processed in slices so the
extra memory stays bounded. Two layouts: FFT products read whole time rows (time last); scans
read every column of one step together (time first). On the CPU a semiseparable mask runs over
time blocks with its ``(n, N P)`` state carried, so the working set stays in cache.
"""

from __future__ import annotations

import math

import torch

from structmat.attention.heads import add_diagonal, mask_as_bh, out_dtype, time_blocks, time_tile
from structmat.attention.orders.registry import Cost, Order, Problem
from structmat.attention.tuning import Tuning
from structmat.core.base import StructuredMatrix
from structmat.linalg.semiseparable import Generators
from structmat.linalg.spectral import fft_length
from structmat.matrices.fourier import Fourier
from structmat.matrices.quasiseparable import Quasiseparable
from structmat.matrices.sss import SSS
from structmat.matrices.toeplitz import Toeplitz

__all__ = ["Linear", "state_parts", "linear_slices"]


def state_parts(mask: StructuredMatrix) -> list[tuple[Generators, bool]] | None:
    """``[(lower generators, reversed)]`` whose sum is the mask off its free diagonal, or None.

    A lower SSS is one part; an upper one is a lower one in reversed time; a quasiseparable mask
    is both (its free diagonal is added separately).
    """
    if isinstance(mask, SSS):
        return [mask.time_lower()]
    if isinstance(mask, Quasiseparable):
        return [mask.lower_part.time_lower(), mask.upper_part.time_lower()]
    return None


def part_orders(mask: StructuredMatrix) -> list[int] | None:
    """The state sizes of :func:`state_parts` without forming the parts."""
    if isinstance(mask, SSS):
        return [mask.order]
    if isinstance(mask, Quasiseparable):
        return [mask.lower_part.order, mask.upper_part.order]
    return None


def matvec_length(mask: StructuredMatrix) -> int:
    """Elements per column that ``mask @ X`` works on: the circulant length of a Toeplitz FFT
    product (a power of two ``>= T + S - 1``), else the longer side."""
    T, S = mask.shape[-2:]
    return fft_length(T + S - 1) if isinstance(mask, Toeplitz) else max(T, S)


def linear_slices(tuning: Tuning, length: int, B: int, H: int, N: int, P: int) -> tuple[int, int]:
    """``(n, p)``: key features and value columns of one pass: ``B H n p`` columns of ``length``
    elements within ``tuning.linear_budget``, but at least ``tuning.min_columns`` columns."""
    cols = max(1, tuning.linear_budget // max(1, B * H * length), -(-tuning.min_columns // max(1, B * H)))
    P = max(P, 1)  # (P = 0: an empty call, planned)
    return (max(1, min(N, cols // P)), P) if cols >= P else (1, cols)


def streamed_sizes(tuning: Tuning, p: Problem, n_state: int) -> tuple[int, int]:
    """``(n_slice, tile)`` of the time-blocked linear order for one ``n_state``-state part: key
    features per pass (blocks of at least 256 steps where the budget allows) and steps per block."""
    per_step = p.BH * p.P * n_state  # the (B, H, t, n_state, n P) states
    n_slice = max(1, min(p.N, tuning.tile_elements // max(1, per_step * min(p.T, 256))))  # (empty calls: 1)
    return n_slice, time_tile(tuning, p.T, per_step * n_slice)


def _sliced(q, k, v, M: StructuredMatrix, scale: float, tuning: Tuning, time_last: bool) -> torch.Tensor:
    """The linear order over slices of the key features and value columns (``M`` with batch ``(B|1, H|1)``)."""
    Bsz, S, H, N = k.shape
    T, P = q.shape[1], v.shape[-1]
    n_slice, p_slice = linear_slices(tuning, matvec_length(M), Bsz, H, N, P)
    apply = M.matmat_fn()
    f = 2 if time_last else 3  # the feature axis of (B, H, N|P, T|S) or (B, H, T|S, N|P)
    qf, kf, vf = ((t.permute(0, 2, 3, 1) if time_last else t.permute(0, 2, 1, 3)).contiguous() for t in (q, k, v))
    shape = (Bsz, H, P, T) if time_last else (Bsz, H, T, P)
    out = torch.zeros(shape, dtype=out_dtype(q, k, v, M), device=q.device)
    for p0 in range(0, P, p_slice):
        vp = vf.narrow(f, p0, min(p_slice, P - p0)).unsqueeze(f)
        for n0 in range(0, N, n_slice):
            n = min(n_slice, N - n0)
            Z = (kf.narrow(f, n0, n).unsqueeze(f + 1) * vp).flatten(f, f + 1)  # n p columns of length S
            MZ = apply(Z.transpose(-1, -2)).transpose(-1, -2) if time_last else apply(Z)
            MZ = MZ.unflatten(f, (n, -1)).to(out.dtype)  # (B, H, n, p, T) or (B, H, T, n, p)
            qn = qf.narrow(f, n0, n).unsqueeze(f + 1).to(out.dtype)
            target = out.narrow(f, p0, MZ.shape[f + 1])
            if n == 1:  # one fused pass, no temporary
                target.addcmul_(qn.select(f, 0), MZ.select(f, 0))
            else:
                target += (qn * MZ).sum(f)
    return (out.permute(0, 3, 1, 2) if time_last else out.transpose(1, 2)) * scale


def _streamed(q, k, v, mask, parts, scale: float, tuning: Tuning, p: Problem) -> torch.Tensor:
    """The linear order over time blocks with the ``(n, N P)`` state carried (bounded memory)."""
    dtype = out_dtype(q, k, v, mask)
    out = torch.zeros(p.B, p.T, p.H, p.P, dtype=dtype, device=v.device)
    for G, reverse in parts:
        n_slice, tile = streamed_sizes(tuning, p, G.order)
        for n0 in range(0, p.N, n_slice):
            h = None
            for steps, src, take in time_blocks(p.T, tile, reverse):
                kn, qn = take(k[..., n0 : n0 + n_slice]), take(q[..., n0 : n0 + n_slice])
                Z = (kn[..., :, None] * take(v)[..., None, :]).permute(0, 2, 1, 3, 4)  # (B, H, t, n, P)
                Gt = G.narrow(steps.start, steps.stop - steps.start)
                Y, h = Gt.matmat(Z.reshape(*Z.shape[:3], -1).to(dtype), h)
                part = torch.einsum("bhtn,bhtnp->bthp", qn.permute(0, 2, 1, 3).to(dtype), Y.reshape(Z.shape))
                out[:, src] += torch.flip(part, (1,)) if reverse else part
    if isinstance(mask, Quasiseparable):
        out = add_diagonal(out, mask.diagonal(), mask, q, k, v, 1.0)
    return out * scale


class Linear(Order):
    name = "linear"

    def admissible(self, mask: StructuredMatrix) -> bool:
        return True

    def cost(self, p: Problem, mask: StructuredMatrix, tuning: Tuning) -> Cost:
        flops = 2 * p.BH * p.S * p.N * p.P + p.BH * mask.matvec_flops(p.N * p.P) + 2 * p.BH * p.T * p.N * p.P
        parts = part_orders(mask)
        if tuning.time_blocks and parts is not None:
            extra, passes = 0, 0
            for order in parts:
                n_slice, tile = streamed_sizes(tuning, p, order)
                extra += 4 * p.BH * p.T * order * p.N * p.P * p.element_bytes
                passes += -(-p.N // n_slice) * -(-p.T // tile) * (1 + int(math.log(max(tile, 2), 32)))
            return Cost(flops, extra, passes, "streamed")
        n_slice, p_slice = linear_slices(tuning, matvec_length(mask), p.B, p.H, p.N, p.P)
        slices = -(-p.N // n_slice) * -(-p.P // p_slice)
        extra = (2 if tuning.device == "cpu" else 6) * p.BH * max(p.S, p.T) * p.N * p.P * p.element_bytes
        # FFT products (Toeplitz, circulant) and direct ones (banded, low-rank, dense masks) differ in cost per flop
        path = "sliced" if parts is not None or isinstance(mask, (Toeplitz, Fourier)) else "direct"
        return Cost(flops, extra, slices * ((1 + int(math.log(max(p.T, 2), 32))) if parts is not None else 1), path)

    def run(self, q, k, v, mask, scale, tuning, chunk) -> torch.Tensor:
        M = mask_as_bh(mask, k.shape[0], k.shape[2])
        parts = state_parts(M)
        p = Problem(q.shape[0], q.shape[1], k.shape[1], q.shape[2], q.shape[3], v.shape[3], 0, chunk)
        if parts is not None and tuning.time_blocks:
            return _streamed(q, k, v, M, parts, scale, tuning, p)
        # FFT products read whole time rows: time last; a scan reads every column of one step together
        return _sliced(q, k, v, M, scale, tuning, time_last=parts is None)

