"""The quadratic order: materialise ``Q K^T`` per head, multiply by the dense mask, times ``V``.

Any mask; ``O(B H T S (N + P))`` time and ``O(B H T S)`` memory.
"""

from __future__ import annotations

import opt_einsum
import torch

from structmat.attention.heads import mask_to_bh
from structmat.attention.orders.registry import Cost, Order, Problem
from structmat.attention.tuning import Tuning
from structmat.core.base import StructuredMatrix
from structmat.linalg.dense_form import DENSE_CHUNKED_T
from structmat.matrices.bidiagonal import Bidiagonal
from structmat.matrices.dense import Dense
from structmat.matrices.diagonal import Diagonal
from structmat.matrices.fourier import Fourier
from structmat.matrices.lowrank import LowRank
from structmat.matrices.quasiseparable import Quasiseparable
from structmat.matrices.sss import SSS
from structmat.matrices.toeplitz import Toeplitz

__all__ = ["Quadratic", "einsum_flops", "dense_passes", "LARGE_SCORES"]


#: Scores (``B H T S`` entries) from which the quadratic order runs at the rate of its own coefficients
#: (``quadratic/large``): tensors of hundreds of MB fault in page by page and leave every cache, and the time per
#: byte grows (one thread: the model fitted to all sizes was 0.87x the measured time from 2^24 entries, 0.54x
#: at 2^25 for a causal Toeplitz mask at T = 4096).
LARGE_SCORES = 1 << 24

_FLOPS: dict = {}  # (expr, shapes) -> flops: planning a call of sizes seen before costs no path search


def einsum_flops(expr: str, *shapes) -> float:
    """FLOPs of one contraction, as ``opt_einsum.contract_path`` counts them."""
    key = (expr, shapes)
    if key not in _FLOPS:
        if len(_FLOPS) >= 4096:
            _FLOPS.clear()
        _FLOPS[key] = float(opt_einsum.contract_path(expr, *shapes, shapes=True)[1].opt_cost)
    return _FLOPS[key]


# Shapes in, a number out: torch.compile folds the call instead of tracing opt_einsum. This is the mark that
# ``torch.compiler.assume_constant_result`` sets; that function imports ``torch._dynamo`` (a second of every
# ``import structmat``, for users who never compile). ``tests/nn/test_compile.py`` traces it with ``fullgraph=True``.
einsum_flops._dynamo_marked_constant = True


def dense_passes(mask: StructuredMatrix) -> float:
    """Elementwise passes over the ``T x S`` entries that ``mask.to_dense()`` makes, roughly: a semiseparable mask
    ten per state from whole segment products (up to ``DENSE_CHUNKED_T`` steps), two plus one per state in chunks
    (one per entry of an ``n x n`` product, ``n^3``, for dense transitions); a quasiseparable mask its parts and ten to
    add them (one transposed, a strided read); a Toeplitz or circulant mask two (windows of one vector copied once,
    :mod:`structmat.linalg.toeplitz_dense`); a banded or low-rank one one (its entries written once); other classes
    eight; a dense one none. Fitted by eye to the residuals of the planner's calibration
    (``benchmarks/calibrate_plan.py``)."""
    if isinstance(mask, Quasiseparable):
        return dense_passes(mask.lower_part) + dense_passes(mask.upper_part) + 10
    if isinstance(mask, SSS):
        n = max(1, mask.order)
        if mask.shape[-1] <= DENSE_CHUNKED_T:
            return 10 * n + 2
        return 2 + (n**3 if mask.transitions.kind == "dense" else n)
    if isinstance(mask, (Toeplitz, Fourier)):
        return 2
    if isinstance(mask, (Bidiagonal, Diagonal, LowRank)):
        return 1
    return 0 if isinstance(mask, Dense) else 8


class Quadratic(Order):
    name = "quadratic"

    def admissible(self, mask: StructuredMatrix) -> bool:
        return True

    def cost(self, p: Problem, mask: StructuredMatrix, tuning: Tuning) -> Cost:
        flops = einsum_flops("bthn,bshn->bhts", (p.B, p.T, p.H, p.N), (p.B, p.S, p.H, p.N)) + p.BH * p.T * p.S
        flops += einsum_flops("bhts,bshp->bthp", (p.B, p.H, p.T, p.S), (p.B, p.S, p.H, p.P))
        # scores, mask, products; and the dense mask (its elementwise passes)
        extra = ((4 if tuning.device == "cpu" else 12) * p.BH + mask.batch_shape.numel() * dense_passes(mask)) \
            * p.T * p.S * p.element_bytes
        return Cost(flops, extra, 1, "large" if p.BH * p.T * p.S >= LARGE_SCORES else "")

    def run(self, q, k, v, mask, scale, tuning, chunk) -> torch.Tensor:
        L = mask.to_dense()
        L = L.reshape(*mask_to_bh(mask, q.shape[0], q.shape[2]), *L.shape[-2:])
        dtype = torch.promote_types(q.dtype, L.dtype)
        cast = lambda t: t if t.dtype == dtype else t.to(dtype)  # noqa: E731
        q = cast(q) if isinstance(scale, float) and scale == 1.0 else cast(q) * scale  # (scaled: T N entries, not T S)
        # batched matrix products over (b, h): the contractions of "bthn,bshn->bhts" and "bhts,bshp->bthp"
        # without einsum's parsing, a third of the time of a call at T = 16
        scores = q.transpose(1, 2) @ cast(k).permute(0, 2, 3, 1)
        return ((scores * cast(L)) @ cast(v).transpose(1, 2)).transpose(1, 2)

