"""Plans kept per sizes and mask structure; the small-T paths of sma; the torch chunk of ssd by device."""

import dataclasses

import torch
from conftest import F64, close, rand, randn

import structmat as sm
from structmat.attention import ORDERS, tuning_for
from structmat.attention import plan as plan_module
from structmat.attention.orders.chunked import chunk_terms, term_orders
from structmat.kernels.chunked_decay import TORCH_CHUNK, torch_chunk


def _qkv(B=1, T=12, H=2, N=3, P=4, seed=0):
    return randn(B, T, H, N, seed=seed), randn(B, T, H, N, seed=seed + 1), randn(B, T, H, P, seed=seed + 2)


def test_plans_are_kept_per_sizes_and_structure_and_follow_tuning_and_registry():
    q, k, v = _qkv()
    mask = sm.OneSS.from_decays(rand(2, 12, seed=3))
    first = sm.sma_plan(q, k, v, mask)
    other = sm.OneSS.from_decays(rand(2, 12, seed=4))  # the same structure: the kept plan
    kept = plan_module.plan_checked(q.shape, k.shape, v.shape, other, F64, None, tuning_for("cpu"))
    assert kept is plan_module.plan_checked(q.shape, k.shape, v.shape, mask, F64, None, tuning_for("cpu"))
    assert kept.order == first.order
    first.alternatives.clear()  # sma_plan returns the caller's own copy
    assert kept.alternatives
    # another tuning is planned anew, with its own coefficients
    cpu = tuning_for("cpu")
    costly = {name: (1.0, 1.0, 1.0) for name in cpu.coefficients}
    tuning = dataclasses.replace(cpu, coefficients={**costly, "linear": (0.0, 0.0, 0.0)})
    assert sm.sma_plan(q, k, v, mask, tuning=tuning).order == "linear"
    # a mask without a known structure (a lazy sum) is never kept
    assert plan_module.structure(mask + sm.Toeplitz.causal(torch.ones(12, dtype=F64))) is None
    # an order taken out of the registry (or put back) is seen at once by the kept plans
    before = set(sm.sma_plan(q, k, v, mask).alternatives)
    saved = dict(ORDERS)
    del ORDERS["linear"]
    try:
        assert set(sm.sma_plan(q, k, v, mask).alternatives) == before - {"linear"}
    finally:
        ORDERS.clear()
        ORDERS.update(saved)  # in the registry's order
    assert set(sm.sma_plan(q, k, v, mask).alternatives) == before


def test_chunked_cost_reads_term_orders_without_the_terms():
    masks = [sm.OneSS.from_decays(rand(10, seed=1)), sm.SSS(rand(10, 3, seed=2), randn(10, 3), randn(10, 3)),
             sm.SSS(randn(10, 2, 2, seed=3), randn(10, 2), randn(10, 2)),
             sm.Quasiseparable.bidirectional(sm.OneSS.from_decays(rand(10, seed=4)), sm.OneSS.from_decays(rand(10, seed=5)))]
    for mask in masks:
        assert term_orders(mask) == [t.order for t in chunk_terms(mask)]


def test_sma_with_a_tensor_scale_and_orders_agree_at_small_sizes():
    q, k, v = _qkv(B=2, T=7, H=2)
    for mask in (sm.Dense(randn(2, 7, 7, seed=6)), sm.OneSS.from_decays(rand(2, 7, seed=7), c=randn(2, 7, seed=8)),
                 sm.Quasiseparable.lion(rand(7, seed=9))):
        L = mask.to_dense()
        for scale in (1.0, 0.5, torch.tensor(0.25, dtype=F64)):
            want = torch.einsum("bhts,bshp->bthp", torch.einsum("bthn,bshn->bhts", q, k) * scale * L, v)
            for order in sm.attention.admissible(mask):
                close(sm.sma(q, k, v, mask, order=order, scale=scale), want)


def test_torch_chunk_is_capped_by_device_and_results_do_not_depend_on_it():
    assert torch_chunk(None, torch.device("cpu")) == TORCH_CHUNK["cpu"] == torch_chunk(256, torch.device("cpu"))
    assert torch_chunk(16, torch.device("cpu")) == 16
    x, dt, B, C = randn(1, 40, 2, 3, seed=1), rand(1, 40, 2, seed=2), randn(1, 40, 1, 4, seed=3), randn(1, 40, 1, 4, seed=4)
    A = -rand(2, seed=5)
    out, final = sm.ssd(x, dt, A, B, C, 256, return_final_states=True, backend="torch")
    ref, ref_final = sm.ssd(x, dt, A, B, C, 8, return_final_states=True, backend="torch")
    close(out, ref)
    close(final, ref_final)


def test_planned_sma_compiles_to_one_graph():
    """``order="auto"`` under ``torch.compile(fullgraph=True)``: the plan's FLOP counts (opt_einsum's path search)
    fold to constants rather than being traced (a graph break raises)."""
    torch._dynamo.reset()
    q, k, v = _qkv(T=16)
    mask = sm.OneSS.from_decays(rand(2, 16, seed=5))
    f = lambda q, k, v: sm.sma(q, k, v, mask)  # noqa: E731
    close(torch.compile(f, fullgraph=True, backend="eager")(q, k, v), f(q, k, v))
