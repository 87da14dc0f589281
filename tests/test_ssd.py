"""SSD: every backend against a float64 sequential recurrence, forward and backward.

On a CPU the Triton kernels run under ``TRITON_INTERPRET=1`` (set in the root conftest) on small
shapes; on a GPU the same tests run the compiled kernels, plus bf16 checks at larger shapes.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import structmat as sm
from structmat.ssd.api import process_dt
from structmat.ssd.chunked import ssd_chunked
from structmat.ssd.naive import ssd_sequential

DEV = "cuda" if torch.cuda.is_available() else "cpu"
F64 = torch.float64


def inputs(b, l, h, p, g, n, *, seed=0, dtype=torch.float32, device=DEV):
    gen = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=gen, dtype=F64)  # noqa: E731
    x, dt, A = r(b, l, h, p), r(b, l, h).abs(), -torch.rand(h, generator=gen, dtype=F64) * 2
    B, C = r(b, l, g, n), r(b, l, g, n)
    D, z, bias, init = r(h, p), r(b, l, h, p), r(h), r(b, h, p, n)
    out = dict(x=x, dt=dt, A=A, B=B, C=C, D=D, z=z, dt_bias=bias, initial_states=init)
    return {k: v.to(device=device, dtype=dtype if k not in ("dt", "A", "dt_bias", "initial_states") else torch.float32)
            for k, v in out.items()}


def reference(x, dt, A, B, C, *, D=None, z=None, dt_bias=None, dt_softplus=False, dt_limit=(0.0, math.inf),
              initial_states=None, seq_idx=None):
    """Float64 sequential recurrence plus the D and z terms, on the CPU."""
    cpu = lambda t: None if t is None else t.cpu().to(F64)  # noqa: E731
    dtp = process_dt(cpu(dt), cpu(dt_bias), dt_softplus, dt_limit).to(F64)
    y, final = ssd_sequential(cpu(x), dtp, cpu(A), cpu(B), cpu(C), initial_states=cpu(initial_states),
                              seq_idx=None if seq_idx is None else seq_idx.cpu())
    if D is not None:
        y = y + cpu(x) * (cpu(D) if D.dim() == 2 else cpu(D)[:, None])
    if z is not None:
        y = y * F.silu(cpu(z))
    return y, final


def rel(a, b):
    a, b = a.detach().cpu().to(F64), b.detach().cpu().to(F64)
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


BACKENDS = ["torch", "triton"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("features", ["plain", "all", "seq_idx"])
def test_forward_matches_sequential(backend, features):
    b, l, h, p, g, n = 2, 37, 4, 8, 2, 16  # l not a multiple of the chunk, ngroups > 1
    t = inputs(b, l, h, p, g, n, seed=1)
    kw = {}
    if features in ("all", "seq_idx"):
        kw = dict(D=t["D"], z=t["z"], dt_bias=t["dt_bias"], dt_softplus=True, initial_states=t["initial_states"])
    if features == "seq_idx":
        kw["seq_idx"] = torch.tensor([[0] * 5 + [1] * 20 + [2] * 12, [0] * 37], device=DEV, dtype=torch.int32)
        kw["D"] = t["D"][:, 0]
    out, final = sm.ssd(t["x"], t["dt"], t["A"], t["B"], t["C"], chunk_size=16, return_final_states=True,
                        backend=backend, **kw)
    with torch.no_grad():
        want, want_final = reference(t["x"], t["dt"], t["A"], t["B"], t["C"], **kw)
    assert out.shape == t["x"].shape and out.dtype == t["x"].dtype
    assert torch.isfinite(out).all()
    assert rel(out, want) < 1e-5
    assert rel(final, want_final) < 1e-5


@pytest.mark.parametrize("backend", BACKENDS)
def test_backward_matches_float64(backend):
    b, l, h, p, g, n = 1, 40, 4, 8, 2, 16
    t = inputs(b, l, h, p, g, n, seed=2)
    names = ["x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states"]
    leaves = {k: t[k].clone().requires_grad_() for k in names}
    seq = torch.tensor([[0] * 12 + [1] * 28], device=DEV, dtype=torch.int32)
    kw = dict(dt_softplus=True, seq_idx=seq)
    out, final = sm.ssd(leaves["x"], leaves["dt"], leaves["A"], leaves["B"], leaves["C"], chunk_size=16,
                        D=leaves["D"], z=leaves["z"], dt_bias=leaves["dt_bias"],
                        initial_states=leaves["initial_states"], return_final_states=True, backend=backend, **kw)
    gen = torch.Generator().manual_seed(3)
    gy, gf = torch.randn(out.shape, generator=gen, dtype=F64), torch.randn(final.shape, generator=gen, dtype=F64)
    torch.autograd.backward([out, final], [gy.to(out), gf.to(final)])
    refs = {k: t[k].detach().cpu().to(F64).requires_grad_() for k in names}
    want, want_final = reference(refs["x"], refs["dt"], refs["A"], refs["B"], refs["C"], D=refs["D"], z=refs["z"],
                                 dt_bias=refs["dt_bias"], initial_states=refs["initial_states"], **kw)
    torch.autograd.backward([want, want_final], [gy, gf])
    for k in names:
        assert rel(leaves[k].grad, refs[k].grad) < 1e-4, k


def test_triton_several_blocks_per_chunk(monkeypatch):
    """Chunks of 64 in blocks of 16: off-diagonal tiles and the straddling d log-decay sums."""
    import structmat.triton.ssd as tssd

    monkeypatch.setattr(tssd, "MAX_BLOCK_M", 16)
    b, l, h, p, g, n = 1, 150, 2, 4, 1, 16
    t = inputs(b, l, h, p, g, n, seed=11)
    names = ["x", "dt", "A", "B", "C", "D", "initial_states"]
    leaves = {k: t[k].clone().requires_grad_() for k in names}
    seq = torch.tensor([[0] * 70 + [1] * 80], device=DEV, dtype=torch.int32)
    for seq_idx in (None, seq):
        for v in leaves.values():
            v.grad = None
        out, final = sm.ssd(leaves["x"], leaves["dt"], leaves["A"], leaves["B"], leaves["C"], chunk_size=64,
                            D=leaves["D"], initial_states=leaves["initial_states"], seq_idx=seq_idx,
                            dt_softplus=True, return_final_states=True, backend="triton")
        gen = torch.Generator().manual_seed(12)
        gy, gf = torch.randn(out.shape, generator=gen, dtype=F64), torch.randn(final.shape, generator=gen, dtype=F64)
        torch.autograd.backward([out, final], [gy.to(out), gf.to(final)])
        refs = {k: t[k].detach().cpu().to(F64).requires_grad_() for k in names}
        want, want_final = reference(refs["x"], refs["dt"], refs["A"], refs["B"], refs["C"], D=refs["D"],
                                     initial_states=refs["initial_states"], dt_softplus=True, seq_idx=seq_idx)
        assert rel(out, want) < 1e-5 and rel(final, want_final) < 1e-5
        torch.autograd.backward([want, want_final], [gy, gf])
        for k in names:
            assert rel(leaves[k].grad, refs[k].grad) < 1e-4, k


def test_torch_backend_gradcheck():
    t = inputs(1, 11, 2, 3, 1, 2, seed=4, dtype=F64, device="cpu")
    args = [t[k].to(F64).requires_grad_() for k in ("x", "dt", "A", "B", "C")]
    f = lambda x, dt, A, B, C: sm.ssd(x, dt, A, B, C, chunk_size=4, dt_softplus=True, backend="torch")  # noqa: E731
    assert torch.autograd.gradcheck(f, args)


@settings(max_examples=8, deadline=None)
@given(st.integers(1, 70), st.sampled_from([(2, 1), (4, 2), (3, 3)]), st.sampled_from([16, 32]),
       st.sampled_from([0.0, 1e-30, 1.0]))
def test_triton_random_shapes(l, hg, chunk, dt_scale):
    h, g = hg
    t = inputs(1, l, h, 5, g, 7, seed=l)
    dt = t["dt"].abs() * dt_scale  # dt = 0 (no decay, no input), tiny, or O(1)
    out = sm.ssd(t["x"], dt, t["A"], t["B"], t["C"], chunk_size=chunk, backend="triton")
    want, _ = reference(t["x"], dt, t["A"], t["B"], t["C"])
    assert torch.isfinite(out).all()
    if want.norm() > 0:
        assert rel(out, want) < 1e-5
    else:
        assert out.abs().max() == 0


def test_triton_writes_every_output_element():
    """Every kernel output is written: buffers poisoned with NaN come back finite."""
    from structmat.triton.ssd import run_backward, run_chunk_out, run_states

    b, l, h, p, g, n, chunk = 2, 45, 4, 8, 2, 16, 16
    t = inputs(b, l, h, p, g, n, seed=5)
    dt = process_dt(t["dt"], dt_softplus=True)
    nan = lambda *shape, dtype=torch.float32: torch.full(shape, float("nan"), device=DEV, dtype=dtype)  # noqa: E731
    n_chunks = -(-l // chunk)
    for reverse in (False, True):
        bufs = (nan(b, n_chunks, h, n, p), nan(b, h, p, n), nan(b, h, l))
        states, final, cs = run_states(t["x"], dt, t["A"], t["B"], None, None, chunk, reverse=reverse, out=bufs)
        assert all(torch.isfinite(buf).all() for buf in (states, final, cs))
    states, _, cs = run_states(t["x"], dt, t["A"], t["B"], None, None, chunk)
    y = run_chunk_out(t["x"], dt, cs, t["B"], t["C"], states, t["D"], t["z"], None, chunk, out=nan(*t["x"].shape))
    assert torch.isfinite(y).all()
    rstates, _, _ = run_states(t["z"], dt, t["A"], t["C"], None, None, chunk, reverse=True, write_cs=False)
    zeros = lambda *shape: torch.zeros(shape, device=DEV)  # noqa: E731  (accumulated atomically)
    bufs = (nan(*t["x"].shape), zeros(b, l, g, n), zeros(b, l, g, n), nan(b, h, l), zeros(b, h, l))
    grads = run_backward(t["x"], dt, t["A"], t["B"], t["C"], t["D"], t["z"], states, rstates, cs, None, chunk, out=bufs)
    assert all(torch.isfinite(buf).all() for buf in grads)


def test_ssd_equals_sma_form_with_oness():
    """With dt processed, ssd is sum_s L[t,s] (C_t . B_s) dt_s x_s with L = OneSS(dt A)."""
    t = inputs(1, 20, 2, 3, 1, 4, seed=6, dtype=F64, device="cpu")
    x, dt, A, B, C = (t[k].to(F64) for k in ("x", "dt", "A", "B", "C"))
    dt = dt.abs()
    out = sm.ssd(x, dt, A, B, C, chunk_size=8, backend="torch")
    L = sm.OneSS((dt * A).transpose(1, 2)).to_dense()  # (b, h, T, T)
    scores = torch.einsum("bthn,bshn->bhts", C.expand(-1, -1, 2, -1), B.expand(-1, -1, 2, -1))
    want = torch.einsum("bhts,bshp->bthp", L * scores, x * dt[..., None])
    assert rel(out, want) < 1e-12


def test_cu_seqlens_final_states_per_sequence():
    t = inputs(1, 50, 4, 8, 2, 16, seed=7)
    cu = torch.tensor([0, 13, 40, 50], device=DEV)
    for backend in BACKENDS:
        out, fin = sm.ssd(t["x"], t["dt"], t["A"], t["B"], t["C"], chunk_size=16, dt_softplus=True, cu_seqlens=cu,
                          return_final_states=True, backend=backend)
        assert fin.shape == (3, 4, 8, 16)
        for i, (s, e) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist())):
            want, want_fin = reference(t["x"][:, s:e], t["dt"][:, s:e], t["A"], t["B"][:, s:e], t["C"][:, s:e],
                                       dt_softplus=True)
            assert rel(out[:, s:e], want) < 1e-5
            assert rel(fin[i], want_fin[0]) < 1e-5


def test_chunked_torch_matches_sequential_long_decays():
    t = inputs(1, 300, 2, 4, 1, 4, seed=8, dtype=F64, device="cpu")
    x, B, C = (t[k].to(F64) for k in ("x", "B", "C"))
    dt = torch.full((1, 300, 2), 5.0, dtype=F64)  # strong decay: exp(-10) per step
    A = torch.tensor([-2.0, -1e-7], dtype=F64)  # and an almost-constant one
    y, fin, _ = ssd_chunked(x, dt, A, B, C, 64)
    want, want_fin = ssd_sequential(x, dt, A, B, C)
    assert rel(y, want) < 1e-12 and rel(fin, want_fin) < 1e-12


def test_errors():
    t = inputs(1, 8, 2, 3, 1, 4, device="cpu")
    x, dt, A, B, C = (t[k] for k in ("x", "dt", "A", "B", "C"))
    with pytest.raises(ValueError, match="dt must have shape"):
        sm.ssd(x, dt[:, :4], A, B, C)
    with pytest.raises(ValueError, match="A must have shape"):
        sm.ssd(x, dt, A[:1], B, C)
    with pytest.raises(ValueError, match="multiple of ngroups"):
        sm.ssd(x, dt, A, torch.zeros(1, 8, 3, 4), torch.zeros(1, 8, 3, 4))
    with pytest.raises(ValueError, match="initial_states must have shape"):
        sm.ssd(x, dt, A, B, C, initial_states=torch.zeros(1, 2, 4, 3))
    with pytest.raises(ValueError, match="backend must be one of"):
        sm.ssd(x, dt, A, B, C, backend="cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="bf16 kernel accuracy needs a GPU")
def test_bf16_gpu_accuracy_against_float64():
    t = inputs(2, 1024, 8, 64, 1, 64, seed=9, dtype=torch.bfloat16)
    dt = F.softplus(t["dt"] - 3)
    out = sm.ssd(t["x"], dt, t["A"], t["B"], t["C"], chunk_size=256)
    want, _ = reference(t["x"], dt, t["A"], t["B"], t["C"])
    assert rel(out, want) < 1e-2


def test_sma_oness_kernel_path_matches_quadratic(monkeypatch):
    """The Triton SSD kernel with log decays as input (what ``sma`` runs for a OneSS mask on CUDA)."""
    import structmat.sma.orders as orders

    if DEV == "cpu":  # run the kernel path under the interpreter on CPU tensors
        monkeypatch.setattr(orders, "_triton_applies", lambda q, dA, b, c: bool(torch.isfinite(dA).all()))
    gen = torch.Generator().manual_seed(13)
    B, T, H, N, P = 2, 40, 2, 16, 8
    q, k, v = (torch.randn(B, T, H, d, generator=gen, dtype=F64).to(DEV).float().requires_grad_() for d in (N, N, P))
    log_a = (-torch.rand(B, H, T, generator=gen, dtype=F64)).to(DEV).float().requires_grad_()
    mask = sm.OneSS(log_a, c=torch.rand(B, H, T, generator=gen, dtype=F64).to(DEV).float() + 0.5)
    y = sm.sma(q, k, v, mask, order="chunked", chunk=16)
    want = sm.sma(q, k, v, mask, order="quadratic")
    assert rel(y, want) < 1e-5
    gy = torch.randn(y.shape, generator=gen, dtype=F64).to(y)
    got = torch.autograd.grad(y, (q, k, v, log_a), gy)
    ref = torch.autograd.grad(want, (q, k, v, log_a), gy)
    for g1, g2 in zip(got, ref):
        assert rel(g1, g2) < 1e-4
