"""The Triton kernels of the layers (gated RMSNorm, causal conv + SiLU and its decoding step, the SSD
decoding step) against their torch forms in float64, forward, backward and in-place state updates.

On a CPU they run under ``TRITON_INTERPRET=1`` (set by the conftest) on small float32 shapes that are
not multiples of the tiles; on a GPU the compiled kernels run the same tests, plus bf16. Inputs are
slices of larger tensors (the layers pass views of the input projection), and every kernel output is
compared, so an element a kernel fails to write shows up.
"""

import pytest
import torch
import torch.nn.functional as F
from conftest import DEV, F64

from structmat.kernels.causal_conv_triton import causal_conv_silu_triton, causal_conv_step_triton
from structmat.kernels.gated_norm_triton import gated_rms_norm_triton
from structmat.kernels.ssd_step_triton import ssd_step_triton
from structmat.nn.conv import causal_conv1d, conv_step
from structmat.nn.norm import GatedRMSNorm
from structmat.ssd_step import ssd_step

DTYPES = [torch.float32] + ([torch.bfloat16] if DEV == "cuda" else [])
TOL = {torch.float32: 2e-5, torch.bfloat16: 2e-2}


def rel(a, b):
    a, b = a.detach().cpu().to(F64), b.detach().cpu().to(F64)
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def view_of_wider(rows: int, cols: int, *, gen, dtype, extra: int = 5):
    """``(rows, cols)`` as a slice of a wider tensor: row stride != cols."""
    return torch.randn(rows, cols + extra, generator=gen, dtype=F64).to(DEV, dtype)[:, extra // 2 : extra // 2 + cols]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("group_size", [4, 12])
@pytest.mark.parametrize("gate", ["none", "before", "after"])
def test_gated_norm_matches_the_torch_form(dtype, group_size, gate):
    gen = torch.Generator().manual_seed(group_size)
    x = view_of_wider(37, 12, gen=gen, dtype=dtype).reshape(37, 12)
    z = view_of_wider(37, 12, gen=gen, dtype=dtype) if gate != "none" else None
    norm = GatedRMSNorm(12, group_size=group_size, norm_before_gate=gate == "before").to(F64)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(12, generator=gen, dtype=F64) + 0.5)
    weight = norm.weight.detach().to(DEV, dtype).requires_grad_()
    leaves = [t.detach().clone().requires_grad_() for t in (x, z) if t is not None]
    refs = [t.detach().cpu().to(F64).requires_grad_() for t in leaves]
    y = gated_rms_norm_triton(leaves[0], leaves[1] if z is not None else None, weight, norm.eps, group_size,
                              gate == "before")
    want = norm(refs[0], refs[1] if z is not None else None)
    assert y.dtype == dtype and y.shape == x.shape and rel(y, want) < TOL[dtype]
    gy = torch.randn(37, 12, generator=gen, dtype=F64)
    y.backward(gy.to(DEV, dtype))
    want.backward(gy)
    for got, ref in zip(leaves + [weight], refs + [norm.weight]):
        assert torch.isfinite(got.grad).all() and rel(got.grad, ref.grad) < 5 * TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("packed", [False, True])
def test_causal_conv_silu_matches_the_torch_form(dtype, bias, packed):
    gen = torch.Generator().manual_seed(int(bias) + 2 * int(packed))
    B, T, D, W = 2, 70, 20, 4
    x = torch.randn(B, T, D + 7, generator=gen, dtype=F64).to(DEV, dtype)[..., 3 : 3 + D]  # a projection's slice
    w = torch.randn(D, W, generator=gen, dtype=F64)
    b = torch.randn(D, generator=gen, dtype=F64) if bias else None
    seq = torch.tensor([[0] * 30 + [1] * 2 + [2] * 38, [0] * 69 + [1]]) if packed else None
    leaves = [x.detach().clone().requires_grad_(), w.to(DEV, dtype).requires_grad_()]
    leaves += [b.to(DEV, dtype).requires_grad_()] if bias else []
    refs = [t.detach().cpu().to(F64).requires_grad_() for t in leaves]
    y = causal_conv_silu_triton(leaves[0], leaves[1], leaves[2] if bias else None,
                                seq.to(DEV) if packed else None)
    want = F.silu(causal_conv1d(refs[0], refs[1], refs[2] if bias else None, seq))
    assert y.dtype == dtype and rel(y, want) < TOL[dtype]
    gy = torch.randn(B, T, D, generator=gen, dtype=F64)
    y.backward(gy.to(DEV, dtype))
    want.backward(gy)
    for got, ref in zip(leaves, refs):
        assert torch.isfinite(got.grad).all() and rel(got.grad, ref.grad) < 5 * TOL[dtype]


def test_causal_conv_step_matches_the_torch_form_and_updates_the_state():
    gen = torch.Generator().manual_seed(3)
    B, D, W = 3, 300, 4  # D past one block of channels
    state = torch.randn(B, W, D, generator=gen, dtype=F64).to(DEV, torch.float32).transpose(1, 2)  # the cache's layout
    ref_state = state.detach().cpu().to(F64).clone()
    w, b = torch.randn(D, W, generator=gen, dtype=F64), torch.randn(D, generator=gen, dtype=F64)
    for _ in range(3):
        x_t = torch.randn(B, D, generator=gen, dtype=F64)
        y = causal_conv_step_triton(x_t.to(DEV, torch.float32), state, w.to(DEV, torch.float32), b.to(DEV, torch.float32))
        want = F.silu(conv_step(x_t, ref_state, w, b))
        assert rel(y, want) < 1e-6 and rel(state, ref_state) < 1e-7


@pytest.mark.parametrize("features", [(), ("D", "z", "dt_bias")])
def test_ssd_step_kernel_matches_the_torch_step(features):
    """Mamba-2's call: per-head values as broadcast views, two groups, softplus; the state in place."""
    gen = torch.Generator().manual_seed(len(features))
    b, h, p, g, n = 2, 4, 20, 2, 24  # p past one block of rows, n not a power of two
    r = lambda *s: torch.randn(*s, generator=gen, dtype=F64)  # noqa: E731
    state = r(b, h, p, n)
    x, dt, B, C, z = r(b, h, p), r(b, h), r(b, g, n), r(b, g, n), r(b, h, p)
    A, D, bias = -torch.rand(h, generator=gen, dtype=F64) - 0.1, r(h), r(h)
    per_head = lambda v: v[:, None].expand(h, p)  # noqa: E731
    args = dict(dt=dt[..., None].expand(b, h, p), A=A[:, None, None].expand(h, p, n), B=B, C=C,
                D=per_head(D) if "D" in features else None, z=z if "z" in features else None,
                dt_bias=per_head(bias) if "dt_bias" in features else None)
    dev = {k: (v.to(DEV, torch.float32) if v is not None else None) for k, v in args.items()}
    st = state.to(DEV, torch.float32)
    got = ssd_step(st, x.to(DEV, torch.float32), dt_softplus=True, backend="triton", **dev)
    ref_state = state.clone()
    want = ssd_step(ref_state, x, dt_softplus=True, backend="torch", **args)
    assert rel(got, want) < 1e-5 and rel(st, ref_state) < 1e-6


def test_ssd_step_kernel_with_state_batch_indices():
    """Rows of a larger cache, by ``state_batch_indices``: the rows named step as the torch form steps them, the
    others are not written; a negative index pads (output 0, nothing written), an index past the rows (unchecked on
    CUDA) writes nothing and gives NaN."""
    gen = torch.Generator().manual_seed(5)
    b, h, p, g, n, rows = 3, 2, 20, 1, 24, 6
    r = lambda *s: torch.randn(*s, generator=gen, dtype=F64)  # noqa: E731
    cache, x, dt, B, C = r(rows, h, p, n), r(b, h, p), r(b, h, p), r(b, g, n), r(b, g, n)
    A = -torch.rand(h, p, n, generator=gen, dtype=F64)
    idx = torch.tensor([4, 1, 0])
    dev = lambda t: t.to(DEV, torch.float32)  # noqa: E731
    st = dev(cache)
    got = ssd_step(st, dev(x), dev(dt), dev(A), dev(B), dev(C), dt_softplus=True, state_batch_indices=idx.to(DEV),
                   backend="triton")
    ref = cache.clone()
    want = ssd_step(ref, x, dt, A, B, C, dt_softplus=True, state_batch_indices=idx, backend="torch")
    assert rel(got, want) < 1e-5 and rel(st, ref) < 1e-6
    st = dev(cache)
    out = ssd_step_triton(st, dev(x), dev(dt), dev(A), dev(B), dev(C), state_batch_indices=torch.tensor([4, 6, -1], device=DEV))
    assert torch.isnan(out[1]).all() and bool((out[2] == 0).all()) and not torch.isnan(out[0]).any()
    padded_state, padded_ref = dev(cache), cache.clone()
    pad = torch.tensor([-1, 1, 0])
    got = ssd_step(padded_state, dev(x), dev(dt), dev(A), dev(B), dev(C), None, None, None, True, pad.to(DEV),
                   backend="triton")
    want = ssd_step(padded_ref, x, dt, A, B, C, None, None, None, True, pad, backend="torch")
    assert bool((got[0] == 0).all()) and rel(got, want) < 1e-5 and rel(padded_state, padded_ref) < 1e-6
    keep = [0, 1, 2, 3, 5]
    assert torch.equal(st[keep], dev(cache)[keep])
