"""SMA engine: every admissible order equals the quadratic form, gradients agree, decoding matches."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import structmat as sm
from structmat.sma.plan import admissible

F64 = torch.float64


def qkv(B, T, H, Hk, N, P, seed=0, dtype=F64, S=None):
    g = torch.Generator().manual_seed(seed)
    S = T if S is None else S
    r = lambda *s: torch.randn(*s, generator=g, dtype=F64).to(dtype)  # noqa: E731
    return r(B, T, H, N), r(B, S, Hk, N), r(B, S, H, P)


def masks(T, H, B, seed, S=None):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.rand(*s, generator=g, dtype=F64)  # noqa: E731
    n = lambda *s: torch.randn(*s, generator=g, dtype=F64)  # noqa: E731
    out = {
        "OneSS (B, H)": sm.OneSS.from_decays(r(B, H, T)),
        "OneSS shared, upper": sm.OneSS.from_decays(r(T), b=n(T), c=n(T)).T,
        "OneSS per head": sm.OneSS.decay(r(H), T),
        "SSS(2)": sm.SSS(r(H, T, 2), n(H, T, 2), n(H, T, 2), D=n(H, T)),
        "SSS dense A": sm.SSS(n(T, 2, 2) / 2, n(T, 2), n(T, 2), D=n(T)),
        "SSS signed A, upper": sm.SSS(-r(B, H, T), n(B, H, T, 2), n(B, H, T, 2)).T,
        "causal Toeplitz": sm.Toeplitz.causal(n(T)),
        "Fourier": sm.Fourier.from_kernel(n(T)),
        "LowRank": sm.LowRank(n(T, 2), n(T, 2)),
        "Quasiseparable": sm.Quasiseparable.bidirectional(sm.OneSS.from_decays(r(T)), sm.OneSS.from_decays(r(T))),
        "DFT": sm.DFT(T, dtype=torch.complex128),
    }
    if S is not None:
        out = {"Toeplitz rectangular": sm.Toeplitz(n(T), n(S)), "LowRank rectangular": sm.LowRank(n(T, 2), n(S, 2)),
               "Dense": sm.Dense(n(H, T, S))}
    return out


@given(st.integers(1, 24), st.sampled_from([(2, 1), (2, 2), (4, 2)]), st.integers(1, 2), st.integers(0, 50))
def test_every_order_equals_quadratic(T, heads, B, seed):
    H, Hk = heads
    q, k, v = qkv(B, T, H, Hk, 3, 2, seed=seed)
    for name, M in masks(T, H, B, seed).items():
        ref = sm.sma(q, k, v, M, order="quadratic")
        assert ref.shape == (B, T, H, 2)
        for order in admissible(M):
            got = sm.sma(q, k, v, M, order=order, chunk=4)
            assert torch.allclose(got, ref, atol=1e-10, rtol=1e-9), (name, order)
        assert torch.allclose(sm.sma(q, k, v, M), ref, atol=1e-10, rtol=1e-9)


@pytest.mark.parametrize("budget", [1, 40, 300, 512])
def test_time_blocks_and_column_slices_equal_quadratic(monkeypatch, budget):
    """The CPU paths over time blocks (carried states) and column slices, forced small."""
    from structmat.sma import orders

    monkeypatch.setattr(orders, "TILE_ELEMENTS", budget)
    monkeypatch.setattr(orders, "MIN_COLUMNS", 1)
    T, H, B = 21, 2, 2
    q, k, v = qkv(B, T, H, 1, 3, 2, seed=budget)
    for name, M in masks(T, H, B, budget).items():
        ref = sm.sma(q, k, v, M, order="quadratic")
        for order in admissible(M):
            got = sm.sma(q, k, v, M, order=order, chunk=4)
            assert torch.allclose(got, ref, atol=1e-10, rtol=1e-9), (name, order, budget)
    q, k, v = (t[:1, :9].requires_grad_() for t in (q, k, v))
    a = torch.rand(2, 9, dtype=F64, requires_grad=True)
    for order in ("linear", "chunked"):
        f = lambda q, k, v, a: sm.sma(q, k, v, sm.OneSS.from_decays(a).T, order=order, chunk=2)  # noqa: E731
        assert torch.autograd.gradcheck(f, (q, k, v, a)), order


@pytest.mark.parametrize("budget", [1, 128])  # one column per pass; two key features per pass
def test_linear_order_in_both_layouts(monkeypatch, budget):
    """The sliced linear order, time-last (FFT masks) and time-first (scans on a GPU), on every mask."""
    from structmat.sma import orders
    from structmat.sma.engine import expand_heads

    monkeypatch.setattr(orders, "TILE_ELEMENTS", budget)
    monkeypatch.setattr(orders, "MIN_COLUMNS", 1)
    T, H, B = 13, 2, 2
    q, k, v = expand_heads(*qkv(B, T, H, 1, 3, 2, seed=budget))
    for name, M in masks(T, H, B, budget).items():
        ref = sm.sma(q, k, v, M, order="quadratic", scale=0.5)
        M = orders._reshape_mask(M, orders.mask_to_bh(M, B, H))
        for time_last in (True, False):
            got = orders._linear_sliced(q, k, v, M, 0.5, time_last)
            assert torch.allclose(got, ref, atol=1e-10, rtol=1e-9), (name, time_last)


def test_rectangular_masks_and_grouped_queries():
    q, k, v = qkv(2, 5, 4, 2, 3, 2, S=7)
    for name, M in masks(5, 4, 2, 0, S=7).items():
        ref = sm.sma(q, k, v, M, order="quadratic")
        assert torch.allclose(sm.sma(q, k, v, M, order="linear"), ref, atol=1e-10), name
    q_grouped = q[:, :, ::2]
    M = sm.OneSS.causal(5).to(F64)
    q2, k2, v2 = qkv(1, 5, 4, 2, 3, 2)
    y = sm.sma(q2[:, :, :2], k2, v2, M)
    assert torch.allclose(y, sm.sma(q2[:, :, :2].repeat_interleave(2, 2), k2, v2, M), atol=1e-12)
    assert q_grouped.shape[2] == 2


def test_literature_identities():
    B, T, H, N, P = 1, 16, 2, 3, 4
    q, k, v = qkv(B, T, H, H, N, P, seed=3)
    # causal mask: linear attention, Q . cumsum(K^T V)
    y = sm.sma(q, k, v, sm.OneSS.causal(T).to(F64), order="linear")
    want = torch.einsum("bthn,bthnp->bthp", q, torch.cumsum(k[..., :, None] * v[..., None, :], dim=1))
    assert torch.allclose(y, want, atol=1e-12)
    # rank-p mask L = U V^T: sum_i diag(u_i) (Q K^T) diag(v_i) V
    g = torch.Generator().manual_seed(4)
    U, W = torch.randn(T, 3, generator=g, dtype=F64), torch.randn(T, 3, generator=g, dtype=F64)
    y = sm.sma(q, k, v, sm.LowRank(U, W), order="lowrank")
    scores = torch.einsum("bthn,bshn->bhts", q, k)
    want = sum(torch.einsum("t,bhts,s,bshp->bthp", U[:, i], scores, W[:, i], v) for i in range(3))
    assert torch.allclose(y, want, atol=1e-12)


def test_gradients_agree_across_orders():
    T = 12
    q, k, v = (t.requires_grad_() for t in qkv(1, T, 2, 1, 3, 2, seed=5))
    a = torch.rand(2, T, dtype=F64, requires_grad=True)
    grads = {}
    for order in ("quadratic", "linear", "chunked"):
        out = sm.sma(q, k, v, sm.OneSS.from_decays(a), order=order, chunk=4)
        grads[order] = torch.autograd.grad(out.square().sum(), (q, k, v, a))
    for order in ("linear", "chunked"):
        for g1, g2 in zip(grads[order], grads["quadratic"]):
            assert torch.allclose(g1, g2, atol=1e-10)
    f = lambda q, k, v, a: sm.sma(q, k, v, sm.OneSS.from_decays(a), order="chunked", chunk=4)  # noqa: E731
    assert torch.autograd.gradcheck(f, (q, k, v, a))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_low_precision_accumulates_in_float32(dtype):
    q, k, v = qkv(1, 64, 2, 2, 8, 8, seed=6)
    M = sm.OneSS.from_decays(torch.rand(64, dtype=F64) * 0.2 + 0.8)
    ref = sm.sma(q, k, v, M, order="quadratic")
    for order in ("linear", "chunked"):
        y = sm.sma(q.to(dtype), k.to(dtype), v.to(dtype), M.to(torch.float32), order=order)
        assert y.dtype == dtype
        err = ((y.double() - ref).norm() / ref.norm()).item()
        assert err < {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 3e-3}[dtype]


def test_complex_mask_gives_complex_output():
    q, k, v = qkv(1, 8, 2, 2, 3, 2)
    y = sm.sma(q, k, v, sm.DFT(8, dtype=torch.complex128), order="linear")
    assert y.is_complex()


@pytest.mark.parametrize("kind", ["oness", "sss_dense", "sss_scalar"])
def test_decoding_reproduces_sma(kind):
    B, T, H, N, P = 2, 9, 2, 3, 2
    q, k, v = qkv(B, T, H, 1, N, P, seed=7)
    g = torch.Generator().manual_seed(8)
    M = {
        "oness": sm.OneSS.from_decays(torch.rand(B, H, T, generator=g, dtype=F64), b=torch.randn(B, H, T, generator=g, dtype=F64)),
        "sss_dense": sm.SSS(torch.rand(T, 2, 2, generator=g, dtype=F64) / 2, torch.randn(T, 2, generator=g, dtype=F64),
                            torch.randn(T, 2, generator=g, dtype=F64), D=torch.randn(T, generator=g, dtype=F64)),
        "sss_scalar": sm.SSS(torch.rand(H, T, generator=g, dtype=F64), torch.randn(H, T, 3, generator=g, dtype=F64),
                             torch.randn(H, T, 3, generator=g, dtype=F64)),
    }[kind]
    full = sm.sma(q, k, v, M, scale=0.5)
    dec = sm.sma.Decoder(M, scale=0.5)
    steps = torch.stack([dec.step(q[:, t], k[:, t], v[:, t]) for t in range(T)], dim=1)
    assert torch.allclose(steps, full, atol=1e-12)
    with pytest.raises(IndexError):
        dec.step(q[:, 0], k[:, 0], v[:, 0])


def test_decoding_refuses_unbounded_masks():
    for M in (sm.Toeplitz.causal(torch.ones(4)), sm.Fourier.from_kernel(torch.ones(4)), sm.OneSS.causal(4).T):
        with pytest.raises(TypeError, match="no bounded recurrent state"):
            sm.sma.Decoder(M)


def test_chunked_admissibility():
    T = 6
    from structmat.sma.orders import chunk_terms

    assert len(chunk_terms(sm.SSS(torch.rand(T, 2), torch.ones(T, 2), torch.ones(T, 2)))) == 2  # two 1-SS terms
    ones = torch.ones(T, 2)
    for M in (sm.SSS(-torch.rand(T, 2), ones, ones), sm.SSS(torch.rand(T, 2, 2), ones, ones)):
        assert "chunked" in admissible(M) and chunk_terms(M) == [M]  # generic (n, N, P) states
    assert "chunked" in admissible(sm.Quasiseparable.bidirectional(sm.OneSS.causal(T), sm.OneSS.causal(T)))
    assert "chunked" not in admissible(sm.Toeplitz.causal(torch.ones(T)))


def test_plan_and_errors():
    plan = sm.sma_plan((2, 4096, 8, 64), (2, 4096, 8, 64), (2, 4096, 8, 64), sm.OneSS.causal(4096))
    assert set(plan.alternatives) == {"quadratic", "linear", "chunked"}
    assert plan.alternatives["quadratic"]["flops"] > plan.alternatives["chunked"]["flops"]
    assert "chunked" in str(plan) and "GFLOP" in str(plan)
    q, k, v = qkv(1, 6, 2, 2, 3, 2)
    with pytest.raises(ValueError, match=r"mask must have shape \(\*, 6, 6\)"):
        sm.sma(q, k, v, sm.OneSS.causal(5))
    with pytest.raises(ValueError, match="not admissible"):
        sm.sma(q, k, v, sm.Toeplitz.causal(torch.ones(6)), order="chunked")
    with pytest.raises(ValueError, match="multiple of k heads"):
        sm.sma(q, k[:, :, :1].expand(-1, -1, 3, -1), v, sm.OneSS.causal(6))
    with pytest.raises(ValueError, match="broadcast to"):
        sm.sma(q, k, v, sm.OneSS.from_decays(torch.rand(3, 6)))
    with pytest.raises(TypeError, match="StructuredMatrix"):
        sm.sma(q, k, v, torch.ones(6, 6))


def test_generic_chunked_gradcheck():
    T = 9
    q, k, v = (t.requires_grad_() for t in qkv(1, T, 2, 2, 2, 2, seed=9))
    A = (torch.randn(T, 2, 2, dtype=F64) / 2).requires_grad_()
    Bm, Cm = torch.randn(T, 2, dtype=F64), torch.randn(T, 2, dtype=F64)
    f = lambda q, k, v, A: sm.sma(q, k, v, sm.SSS(A, Bm, Cm, D=torch.ones(T, dtype=F64)), order="chunked", chunk=4)  # noqa: E731
    assert torch.autograd.gradcheck(f, (q, k, v, A))
