"""SMA at its edges: masks of order 0, empty calls (in the graph, planned), a user's order without tuning
coefficients, and the checks of the decoding step's arguments (each case a defect found by the session-20 audit)."""

import dataclasses
import math

import pytest
import torch
from conftest import F64, close, rand, randn

import structmat as sm
from structmat.attention import ORDERS, Order, admissible, register_order, tuning_for
from structmat.attention.orders import Cost

B, T, H, N, P = 2, 7, 2, 3, 4
q, k, v = randn(B, T, H, N, seed=1), randn(B, T, H, N, seed=2), randn(B, T, H, P, seed=3)


def order_zero(diag_seed: int = 4) -> sm.SSS:
    """An SSS of order 0 with diagonal transitions of width 0: its diagonal alone."""
    none = torch.zeros(T, 0, dtype=F64)
    return sm.SSS(none, none, none, D=randn(T, seed=diag_seed))


def test_masks_of_order_zero_in_every_order_and_decoding():
    """The chunked order had no term to sum (``None.dtype``), decoding reshaped an empty state with ``-1``; the
    masks are what ``compress()`` returns where the strictly lower part vanishes."""
    S = sm.SSS(rand(T, 2, seed=5), randn(T, 2, seed=6), randn(T, 2, seed=7), D=1 + rand(T, seed=8))
    compressed = (S @ S.inv()).compress(1e-8)
    assert compressed.order == 0
    masks = [order_zero(), compressed, sm.Quasiseparable(order_zero(), order_zero(9).T, randn(T, seed=10))]
    for mask in masks:
        want = torch.einsum("bthn,bshn,ts,bshp->bthp", q, k, mask.to_dense(), v)
        for order in [*admissible(mask), "auto"]:
            close(sm.sma(q, k, v, mask, order=order, chunk=3), want)
    for mask in masks[:2]:
        decoder = sm.SMADecoder(mask)
        steps = torch.stack([decoder.step(q[:, t], k[:, t], v[:, t]) for t in range(T)], 1)
        close(steps, sm.sma(q, k, v, mask))
    diagonal = sm.Diagonal(randn(T, seed=11))  # no state at all: decodes too (it was refused)
    decoder = sm.SMADecoder(diagonal)
    close(torch.stack([decoder.step(q[:, t], k[:, t], v[:, t]) for t in range(T)], 1), sm.sma(q, k, v, diagonal))


@pytest.mark.parametrize("empty", ["B", "T", "H", "N", "P"])
def test_empty_calls_stay_in_the_graph_and_plan(empty):
    """Nothing to sum over gives zeros that autograd follows to zero gradients (a loss built on them crashed:
    "does not require grad"), as ``torch.einsum``; ``sma_plan`` plans them (``P = 0`` divided by zero) and ``H = 0``
    is an empty call, not an error."""
    sizes = {**dict(B=B, T=T, H=H, N=N, P=P), empty: 0}
    Bz, Tz, Hz, Nz, Pz = (sizes[c] for c in "BTHNP")
    qz, kz, vz = (torch.randn(Bz, Tz, Hz, d, dtype=F64, requires_grad=True) for d in (Nz, Nz, Pz))
    for mask in (sm.OneSS.from_decays(rand(Tz, seed=12)), sm.Toeplitz.causal(randn(Tz, seed=13))):
        y = sm.sma(qz, kz, vz, mask)
        want = torch.einsum("bthn,bshn,ts,bshp->bthp", qz, kz, mask.to_dense(), vz)
        assert y.shape == want.shape and y.requires_grad and not y.any()
        grads = torch.autograd.grad(y.sum(), (qz, kz, vz))
        for g, t in zip(grads, (qz, kz, vz)):
            assert g.shape == t.shape and not g.any()
        plan = sm.sma_plan(qz, kz, vz, mask)
        assert plan.order in admissible(mask)


def test_a_users_order_without_coefficients_is_left_out_of_auto():
    """A registered order the tuning has no coefficients for broke every ``auto`` call and layer with a bare
    ``KeyError``: ``auto`` now leaves it out, the plan lists it without an estimate, and it runs where named."""

    class DenseEinsum(Order):
        name = "dense_einsum_test"

        def admissible(self, mask):
            return True

        def cost(self, p, mask, tuning):
            return Cost(4.0 * p.BH * p.T * p.S * (p.N + p.P), 8.0 * p.BH * p.T * p.S, 1)

        def run(self, q, k, v, mask, scale, tuning, chunk):
            return torch.einsum("bthn,bshn,ts,bshp->bthp", q, k, mask.to_dense().to(q.dtype), v) * scale

    register_order(DenseEinsum())
    try:
        mask = sm.OneSS.from_decays(rand(T, seed=14))
        want = sm.sma(q, k, v, mask, order="quadratic")
        close(sm.sma(q, k, v, mask), want)
        close(sm.sma(q, k, v, mask, order="dense_einsum_test"), want)
        plan = sm.sma_plan(q, k, v, mask)
        assert plan.order != "dense_einsum_test" and plan.alternatives["dense_einsum_test"]["ms"] is None
        assert "dense_einsum_test" in str(plan)
        cpu = tuning_for("cpu")
        tuned = dataclasses.replace(cpu, coefficients={"dense_einsum_test": (0.0, 0.0, 0.0)})
        assert sm.sma_plan(q, k, v, mask, tuning=tuned).order == "dense_einsum_test"  # only it has coefficients
        with pytest.raises(ValueError, match="no coefficients for any admissible order"):
            sm.sma_plan(q, k, v, mask, tuning=dataclasses.replace(cpu, coefficients={}))
        sm.nn.SMA(8, 2, d_state=4)(torch.randn(1, 5, 8))
    finally:
        del ORDERS["dense_einsum_test"]


def test_decoding_step_arguments_are_checked():
    """``sma_step`` broadcast a state of another order, batch or width without a word, took ``scale=nan``, and
    blamed ``A`` for a 2-D ``B_t``; ``SMADecoder`` truncated a fractional ``start``."""
    q_t, k_t, v_t, one = q[:, 0], k[:, 0], v[:, 0], torch.ones(1, 1, 1, dtype=F64)
    A = torch.full((B, H), 0.5, dtype=F64)
    _, state = sm.sma_step(None, q_t, k_t, v_t, None, one, one)
    assert state.shape == (B, H, 1, N, P)
    bad_states = {"order": torch.zeros(B, H, 3, N, P, dtype=F64), "batch": torch.zeros(B + 1, H, 1, N, P, dtype=F64),
                  "width": torch.zeros(B, H, 1, N, P + 1, dtype=F64)}
    for bad in bad_states.values():
        with pytest.raises(ValueError, match=r"state must have shape \(B, H, n, N, P\) = \(2, 2, 1, 3, 4\)"):
            sm.sma_step(bad, q_t, k_t, v_t, A, one, one)
        with pytest.raises(ValueError, match="state must have shape"):
            sm.SMADecoder(sm.OneSS.causal(T), state=bad, start=1).step(q_t, k_t, v_t)
    with pytest.raises(ValueError, match="scale must be a finite number"):
        sm.sma_step(state, q_t, k_t, v_t, A, one, one, scale=math.nan)
    with pytest.raises(ValueError, match=r"B_t must be a 3-D tensor \(B\|1, H\|1, n\); got shape \(2, 1\)"):
        sm.sma_step(state, q_t, k_t, v_t, A, torch.ones(H, 1, dtype=F64), one)
    with pytest.raises(ValueError, match=r"C_t must have shape \(B\|1, H\|1, n\)"):
        sm.sma_step(state, q_t, k_t, v_t, A, one, torch.ones(1, 3, 1, dtype=F64))
    with pytest.raises(ValueError, match=r"D_t must broadcast to \(B, H\)"):
        sm.sma_step(state, q_t, k_t, v_t, A, one, one, torch.ones(3, dtype=F64))
    y, _ = sm.sma_step(state, q_t, k_t, v_t, A, one, one, 2.0)  # a number as the diagonal
    want, _ = sm.sma_step(state, q_t, k_t, v_t, A, one, one, torch.full((1, 1), 2.0, dtype=F64))
    close(y, want)
    with pytest.raises(ValueError, match="start must be a non-negative integer; got 2.7"):
        sm.SMADecoder(sm.OneSS.causal(T), start=2.7)


def test_sma_refuses_integer_activations_and_a_foreign_tuning():
    with pytest.raises(TypeError, match="q must be a floating-point or complex tensor; got torch.int64"):
        sm.sma(q.long(), k.long(), v.long(), sm.OneSS.causal(T))
    with pytest.raises(TypeError, match="v must be a floating-point or complex tensor; got torch.bool"):
        sm.sma(q, k, v.bool(), sm.OneSS.causal(T))
    with pytest.raises(TypeError, match="tuning must be a Tuning"):
        sm.sma(q, k, v, sm.OneSS.causal(T), tuning="cpu")
    with pytest.raises(ValueError, match="n_heads must be a positive int; got 0"):
        sm.nn.SMA(16, 0)
