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
