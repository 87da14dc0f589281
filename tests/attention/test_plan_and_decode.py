"""The planner (every admissible order costed, a printable plan) and recurrent decoding."""

import pytest
import torch
from conftest import F64, rand, randn, rel

import structmat as sm
from structmat.attention import ORDERS, admissible
from structmat.attention.orders.chunked import chunk_terms


def test_plan_lists_every_admissible_order():
    plan = sm.sma_plan((2, 4096, 8, 64), (2, 4096, 8, 64), (2, 4096, 8, 64), sm.OneSS.causal(4096))
    assert plan.order == "chunked"
    assert set(plan.alternatives) == {"quadratic", "linear", "chunked"}
    assert plan.alternatives["quadratic"]["flops"] > plan.alternatives["chunked"]["flops"]
    assert plan.alternatives["quadratic"]["bytes"] > plan.alternatives["chunked"]["bytes"]
    text = str(plan)
    assert "chunked" in text and "GFLOP" in text and text.count("\n") == 4
    small = sm.sma_plan((1, 16, 2, 8), (1, 16, 2, 8), (1, 16, 2, 8), sm.Toeplitz.causal(torch.ones(16)))
    assert small.order in ("quadratic", "linear") and "chunked" not in small.alternatives
    assert sm.sma_plan((1, 64, 2, 8), (1, 64, 2, 8), (1, 64, 2, 8), sm.LowRank(torch.ones(64, 1), torch.ones(64, 1))).order in ORDERS


def test_chunked_admissibility_and_terms():
    T = 6
    assert len(chunk_terms(sm.SSS(torch.rand(T, 2), torch.ones(T, 2), torch.ones(T, 2)))) == 2  # two 1-SS terms
    ones = torch.ones(T, 2)
    for M in (sm.SSS(-torch.rand(T, 2), ones, ones), sm.SSS(torch.rand(T, 2, 2), ones, ones)):
        assert "chunked" in admissible(M) and chunk_terms(M) == [M]  # generic (n, N, P) states
    assert "chunked" in admissible(sm.Quasiseparable.bidirectional(sm.OneSS.causal(T), sm.OneSS.causal(T)))
    assert "chunked" not in admissible(sm.Toeplitz.causal(torch.ones(T)))
    assert admissible(sm.LowRank(torch.ones(T, 1), torch.ones(T, 1))) == ["quadratic", "linear", "lowrank"]


@pytest.mark.parametrize("kind", ["oness", "sss_dense", "sss_scalar", "bidiagonal"])
def test_decoding_reproduces_sma(kind):
    B, T, H, N, P = 2, 9, 2, 3, 2
    q, k, v = randn(B, T, H, N, seed=1), randn(B, T, 1, N, seed=2), randn(B, T, H, P, seed=3)
    M = {
        "oness": sm.OneSS.from_decays(rand(B, H, T, seed=4), b=randn(B, H, T, seed=5)),
        "sss_dense": sm.SSS(rand(T, 2, 2, seed=6) / 2, randn(T, 2, seed=7), randn(T, 2, seed=8), D=randn(T, seed=9)),
        "sss_scalar": sm.SSS(rand(H, T, seed=10), randn(H, T, 3, seed=11), randn(H, T, 3, seed=12)),
        "bidiagonal": sm.Bidiagonal(1 + rand(H, T, seed=13), randn(H, T - 1, seed=14)),
    }[kind]
    full = sm.sma(q, k, v, M, scale=0.5)
    dec = sm.SMADecoder(M, scale=0.5)
    steps = torch.stack([dec.step(q[:, t], k[:, t], v[:, t]) for t in range(T)], dim=1)
    assert rel(steps, full) < 1e-12
    with pytest.raises(IndexError):
        dec.step(q[:, 0], k[:, 0], v[:, 0])


def test_decoding_refuses_unbounded_masks():
    for M in (sm.Toeplitz.causal(torch.ones(4)), sm.Fourier.from_kernel(torch.ones(4)), sm.OneSS.causal(4).T):
        with pytest.raises(TypeError, match="no bounded recurrent state"):
            sm.SMADecoder(M)
    assert sm.SMADecoder(sm.OneSS.causal(4).to(F64)).t == 0


@pytest.mark.parametrize("kind", ["oness", "sss_diag", "sss_dense"])
def test_prefill_state_then_decoding_continues_the_same_attention(kind):
    B, T, H, N, P, t0 = 2, 12, 2, 3, 2, 7
    q, k, v = randn(B, T, H, N, seed=1), randn(B, T, 1, N, seed=2), randn(B, T, H, P, seed=3)
    M = {"oness": sm.OneSS.from_decays(rand(B, H, T, seed=4), c=randn(B, H, T, seed=5)),
         "sss_diag": sm.SSS(rand(H, T, 2, seed=6), randn(H, T, 2, seed=7), randn(H, T, 2, seed=8), D=randn(H, T, seed=9)),
         "sss_dense": sm.SSS(rand(T, 2, 2, seed=10) / 2, randn(T, 2, seed=11), randn(T, 2, seed=12))}[kind]
    full = sm.sma(q, k, v, M)
    G = M.generators
    prefix = type(M)._from_generators(G.narrow(0, t0), True)
    state = sm.sma_state(k[:, :t0], v[:, :t0], prefix)
    dec = sm.SMADecoder(M, state=state, start=t0)
    rest = torch.stack([dec.step(q[:, t], k[:, t], v[:, t]) for t in range(t0, T)], dim=1)
    assert rel(rest, full[:, t0:]) < 1e-12


def test_per_token_decays_through_sma_step():
    """A model that computes its decays from the current token: no mask up front."""
    B, T, H, N, P = 2, 10, 3, 4, 2
    q, k, v = randn(B, T, H, N, seed=1), randn(B, T, H, N, seed=2), randn(B, T, H, P, seed=3)
    log_a = -rand(B, T, H, seed=4)
    full = sm.sma(q, k, v, sm.OneSS(log_a.transpose(1, 2)))
    state, ones = None, torch.ones(B, H, 1, dtype=F64)
    for t in range(T):
        y, state = sm.sma_step(state, q[:, t], k[:, t], v[:, t], sm.Transitions.from_log(log_a[:, t, :, None]), ones, ones)
        assert rel(y, full[:, t]) < 1e-12
    A = rand(B, T, H, 2, seed=5)  # diagonal transitions as plain tensors
    Bm, Cm = randn(B, T, H, 2, seed=6), randn(B, T, H, 2, seed=7)
    full = sm.sma(q, k, v, sm.SSS(A.transpose(1, 2), Bm.transpose(1, 2), Cm.transpose(1, 2)))
    state = None
    for t in range(T):
        y, state = sm.sma_step(state, q[:, t], k[:, t], v[:, t], A[:, t], Bm[:, t], Cm[:, t])
        assert rel(y, full[:, t]) < 1e-12
    with pytest.raises(ValueError, match="A must have shape"):
        sm.sma_step(state, q[:, 0], k[:, 0], v[:, 0], torch.ones(B, H, 2, 2, 2), Bm[:, 0], Cm[:, 0])


def test_decoding_returns_sma_dtype_and_checks_its_arguments():
    """The decoder's outputs have ``sma``'s dtype (float32 activations beside a float64 mask gave float32, where
    ``sma`` gives float64; 16-bit activations stay 16-bit); ``sma_state`` checks the mask's length against ``k`` and
    ``SMADecoder`` the ``state`` it continues from; ``sma_plan`` of an empty call plans (it divided by zero)."""
    M = sm.OneSS.from_decays(rand(4))
    q, k, v = randn(1, 4, 2, 3, seed=1), randn(1, 4, 2, 3, seed=2).float(), randn(1, 4, 2, 2, seed=3).float()
    for acts in ((q, k, v), (q.float(), k, v), tuple(t.bfloat16() for t in (q, k, v))):
        want = sm.sma(*acts, M)
        dec = sm.SMADecoder(M)
        ys = torch.stack([dec.step(*(t[:, i] for t in acts)) for i in range(4)], 1)
        assert ys.dtype == want.dtype
        assert rel(ys, want) < (1e-2 if want.dtype == torch.bfloat16 else 1e-6)
    with pytest.raises(ValueError, match=r"mask must have shape \(\*, 4, 4\)"):
        sm.sma_state(k, v, sm.OneSS.from_decays(rand(1)))
    with pytest.raises(ValueError, match="state must have shape"):
        sm.SMADecoder(M, state=torch.zeros(1, 2, 3, 3, 2))
    with pytest.raises(TypeError, match="state must be"):
        sm.SMADecoder(M, state="abc")
    for shape, mask in (((1, 0, 2, 3), sm.OneSS.causal(0)), ((0, 5, 2, 3), sm.OneSS.causal(5))):
        plan = sm.sma_plan(torch.zeros(shape), torch.zeros(shape), torch.zeros(shape), mask)
        assert plan.order in admissible(mask)
        assert sm.sma(torch.zeros(shape), torch.zeros(shape), torch.zeros(shape), mask, order=plan.order).shape == shape
