"""SMA: every admissible order equals the quadratic form; gradients agree; dtypes, grouped heads, errors."""

import dataclasses

import pytest
import torch
from conftest import F64, rand, randn, rel
from hypothesis import given
from hypothesis import strategies as st

import structmat as sm
from structmat.attention import admissible, tuning_for


def qkv(B, T, H, Hk, N, P, seed=0, dtype=F64, S=None):
    S = T if S is None else S
    return (randn(B, T, H, N, seed=seed, dtype=dtype), randn(B, S, Hk, N, seed=seed + 1, dtype=dtype),
            randn(B, S, H, P, seed=seed + 2, dtype=dtype))


def masks(T, H, B, seed, S=None):
    r = lambda *s, i: rand(*s, seed=seed + i)  # noqa: E731
    n = lambda *s, i: randn(*s, seed=seed + i)  # noqa: E731
    if S is not None:
        return {"Toeplitz rectangular": sm.Toeplitz(n(T, i=1), n(S, i=2)),
                "LowRank rectangular": sm.LowRank(n(T, 2, i=3), n(S, 2, i=4)), "Dense": sm.Dense(n(H, T, S, i=5))}
    return {
        "OneSS (B, H)": sm.OneSS.from_decays(r(B, H, T, i=1)),
        "OneSS shared, upper": sm.OneSS.from_decays(r(T, i=2), b=n(T, i=3), c=n(T, i=4)).T,
        "OneSS per head": sm.OneSS.decay(r(H, i=5), T),
        "SSS(2)": sm.SSS(r(H, T, 2, i=6), n(H, T, 2, i=7), n(H, T, 2, i=8), D=n(H, T, i=9)),
        "SSS dense A": sm.SSS(n(T, 2, 2, i=10) / 2, n(T, 2, i=11), n(T, 2, i=12), D=n(T, i=13)),
        "SSS signed A, upper": sm.SSS(-r(B, H, T, i=14), n(B, H, T, 2, i=15), n(B, H, T, 2, i=16)).T,
        "causal Toeplitz": sm.Toeplitz.causal(n(T, i=17)),
        "Fourier": sm.Fourier.from_kernel(n(T, i=18)),
        "LowRank": sm.LowRank(n(T, 2, i=19), n(T, 2, i=20)),
        "Quasiseparable": sm.Quasiseparable.bidirectional(sm.OneSS.from_decays(r(T, i=21)), sm.OneSS.from_decays(r(T, i=22))),
        "DFT": sm.DFT(T, dtype=torch.complex128),
        "Bidiagonal": sm.Bidiagonal(1 + r(T, i=23), n(T - 1, i=24)) if T > 1 else sm.Diagonal(r(T, i=23)),
    }


@given(st.integers(1, 24), st.sampled_from([(2, 1), (2, 2), (4, 2)]), st.integers(1, 2), st.integers(0, 50))
def test_every_order_equals_quadratic(T, heads, B, seed):
    H, Hk = heads
    q, k, v = qkv(B, T, H, Hk, 3, 2, seed=seed)
    for name, M in masks(T, H, B, seed).items():
        ref = sm.sma(q, k, v, M, order="quadratic")
        scores = torch.einsum("bthn,bshn->bhts", q, k.repeat_interleave(H // Hk, 2))
        d = M.to_dense()
        L = d.reshape(*(1,) * (4 - d.dim()), *d.shape)
        want = torch.einsum("bhts,bshp->bthp", (scores * L), v.to(L.dtype))
        assert rel(ref, want) < 1e-12, name
        for order in admissible(M):
            assert rel(sm.sma(q, k, v, M, order=order, chunk=4), ref) < 1e-10, (name, order)
        assert rel(sm.sma(q, k, v, M), ref) < 1e-10, name


@pytest.mark.parametrize("budget", [1, 40, 300, 512])
def test_time_blocks_and_column_slices_equal_quadratic(budget):
    """Time blocks with carried states and small column slices, forced by a tuning (CPU layout and GPU layout)."""
    cpu = tuning_for("cpu")
    tunings = [dataclasses.replace(cpu, tile_elements=budget, linear_budget=2 * budget, min_columns=1),
               dataclasses.replace(cpu, time_blocks=False, linear_budget=2 * budget, min_columns=1)]
    T, H, B = 21, 2, 2
    q, k, v = qkv(B, T, H, 1, 3, 2, seed=budget)
    for name, M in masks(T, H, B, budget).items():
        ref = sm.sma(q, k, v, M, order="quadratic", scale=0.5)
        for tuning in tunings:
            for order in admissible(M):
                got = sm.sma(q, k, v, M, order=order, chunk=4, scale=0.5, tuning=tuning)
                assert rel(got, ref) < 1e-10, (name, order, budget, tuning.time_blocks)
    q, k, v = (t[:1, :9].requires_grad_() for t in (q, k, v))
    a = rand(2, 9, seed=1).requires_grad_()
    for order in ("linear", "chunked"):
        f = lambda q, k, v, a: sm.sma(q, k, v, sm.OneSS.from_decays(a).T, order=order, chunk=2, tuning=tunings[0])  # noqa: E731
        assert torch.autograd.gradcheck(f, (q, k, v, a)), order


def test_rectangular_masks_and_grouped_queries():
    q, k, v = qkv(2, 5, 4, 2, 3, 2, S=7)
    for name, M in masks(5, 4, 2, 0, S=7).items():
        ref = sm.sma(q, k, v, M, order="quadratic")
        d = M.to_dense()
        dense = d.reshape(*(1,) * (4 - d.dim()), *d.shape)
        scores = torch.einsum("bthn,bshn->bhts", q, k.repeat_interleave(2, 2))
        assert rel(ref, torch.einsum("bhts,bshp->bthp", scores * dense, v)) < 1e-12, name
        assert rel(sm.sma(q, k, v, M, order="linear"), ref) < 1e-10, name
    q2, k2, v2 = qkv(1, 5, 4, 2, 3, 2)
    M = sm.OneSS.causal(5).to(F64)
    grouped = sm.sma(q2[:, :, :2], k2, v2, M)  # q with the H_k heads of k
    assert rel(grouped, sm.sma(q2[:, :, :2].repeat_interleave(2, 2), k2, v2, M)) < 1e-12


def test_literature_identities():
    B, T, H, N, P = 1, 16, 2, 3, 4
    q, k, v = qkv(B, T, H, H, N, P, seed=3)
    # causal mask: linear attention, Q . cumsum(K^T V)
    y = sm.sma(q, k, v, sm.OneSS.causal(T).to(F64), order="linear")
    want = torch.einsum("bthn,bthnp->bthp", q, torch.cumsum(k[..., :, None] * v[..., None, :], dim=1))
    assert rel(y, want) < 1e-12
    # rank-p mask L = U V^T: sum_i diag(u_i) (Q K^T) diag(v_i) V
    U, W = randn(T, 3, seed=4), randn(T, 3, seed=5)
    y = sm.sma(q, k, v, sm.LowRank(U, W), order="lowrank")
    scores = torch.einsum("bthn,bshn->bhts", q, k)
    want = sum(torch.einsum("t,bhts,s,bshp->bthp", U[:, i], scores, W[:, i], v) for i in range(3))
    assert rel(y, want) < 1e-12


def test_gradients_agree_across_orders():
    T = 12
    q, k, v = (t.requires_grad_() for t in qkv(1, T, 2, 1, 3, 2, seed=5))
    a = rand(2, T, seed=6).requires_grad_()
    grads = {}
    for order in ("quadratic", "linear", "chunked"):
        out = sm.sma(q, k, v, sm.OneSS.from_decays(a), order=order, chunk=4)
        grads[order] = torch.autograd.grad(out.square().sum(), (q, k, v, a))
    for order in ("linear", "chunked"):
        for g1, g2 in zip(grads[order], grads["quadratic"]):
            assert rel(g1, g2) < 1e-10
    f = lambda q, k, v, a: sm.sma(q, k, v, sm.OneSS.from_decays(a), order="chunked", chunk=4)  # noqa: E731
    assert torch.autograd.gradcheck(f, (q, k, v, a))


def test_generic_chunked_gradcheck():
    T = 9
    q, k, v = (t.requires_grad_() for t in qkv(1, T, 2, 2, 2, 2, seed=9))
    A = (randn(T, 2, 2, seed=10) / 2).requires_grad_()
    Bm, Cm = randn(T, 2, seed=11), randn(T, 2, seed=12)
    f = lambda q, k, v, A: sm.sma(q, k, v, sm.SSS(A, Bm, Cm, D=torch.ones(T, dtype=F64)), order="chunked", chunk=4)  # noqa: E731
    assert torch.autograd.gradcheck(f, (q, k, v, A))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_low_precision_accumulates_in_float32(dtype):
    q, k, v = qkv(1, 64, 2, 2, 8, 8, seed=6)
    M = sm.OneSS.from_decays(rand(64, seed=7) * 0.2 + 0.8)
    ref = sm.sma(q, k, v, M, order="quadratic")
    for order in ("linear", "chunked"):
        y = sm.sma(q.to(dtype), k.to(dtype), v.to(dtype), M.to(torch.float32), order=order)
        assert y.dtype == dtype
        assert rel(y, ref) < {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 3e-3}[dtype]


def test_dtypes_promote_and_complex_masks_give_complex_output():
    q, k, v = qkv(1, 8, 2, 2, 3, 2)
    y = sm.sma(q, k.float(), v.float(), sm.OneSS.causal(8))
    assert y.dtype == F64  # q float64 promotes the result, as torch does
    y = sm.sma(q, k, v, sm.DFT(8, dtype=torch.complex128), order="linear")
    assert y.is_complex()


def test_empty_inputs_give_empty_results():
    M = sm.OneSS.causal(0)
    q, k, v = torch.ones(2, 0, 3, 4), torch.ones(2, 0, 3, 4), torch.ones(2, 0, 3, 5)
    for order in ("auto", "quadratic", "linear", "chunked"):
        assert sm.sma(q, k, v, M, order=order).shape == (2, 0, 3, 5)
    q, k, v = torch.ones(0, 4, 3, 4), torch.ones(0, 4, 3, 4), torch.ones(0, 4, 3, 5)
    assert sm.sma(q, k, v, sm.OneSS.causal(4)).shape == (0, 4, 3, 5)


def test_errors_name_the_argument():
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
    with pytest.raises(ValueError, match="q must be a 4-D tensor"):
        sm.sma(q[0], k, v, sm.OneSS.causal(6))


def test_parameters_with_different_batches_inside_one_mask():
    """A decay shared by the heads with per-head scalings (and a low-rank mask with shared U)."""
    T, H, B = 8, 3, 2
    q, k, v = qkv(B, T, H, H, 4, 4, seed=8)
    for M in (sm.OneSS.from_decays(rand(1, T, seed=1), b=randn(H, T, seed=2)),
              sm.LowRank(randn(1, T, 2, seed=3), randn(H, T, 2, seed=4)),
              sm.SSS(rand(1, T, 2, seed=5), randn(H, T, 2, seed=6), randn(1, T, 2, seed=7))):
        ref = sm.sma(q, k, v, M, order="quadratic")
        for order in admissible(M):
            assert rel(sm.sma(q, k, v, M, order=order, chunk=4), ref) < 1e-12, (type(M).__name__, order)
        if isinstance(M, sm.SSS):
            dec = sm.SMADecoder(M)
            assert rel(torch.stack([dec.step(q[:, t], k[:, t], v[:, t]) for t in range(T)], 1), ref) < 1e-12
