"""Decoding and SMA at the edges found by the session-22 audit (DEFECTS D115-D122): the step's dtype follows every
tensor it is given, empty prefills, the transition's checks, float64 products beside a float64 mask, an empty call
in the mask's graph, and the planner's ``device`` and sizes."""

import numpy as np
import pytest
import torch
from conftest import F64, close, rand, randn

import structmat as sm
from structmat.core.transitions import Transitions

B, H, N, P, n = 2, 3, 2, 4, 2


def _token(seed: int = 0, dtype=F64):
    return randn(B, H, N, seed=seed, dtype=dtype), randn(B, H, N, seed=seed + 1, dtype=dtype), \
        randn(B, H, P, seed=seed + 2, dtype=dtype)


def test_the_step_computes_in_the_dtype_of_a_complex_transition_and_diagonal():
    """A complex ``A`` or ``D_t`` beside real activations was cast to real (its imaginary part dropped); the
    reference is the same two steps through ``sma`` on the SSS holding them."""
    T = 2
    A = torch.complex(rand(T, H, n, seed=3), randn(T, H, n, seed=4)) * 0.5
    Bm, Cm = randn(T, H, n, seed=5), randn(T, H, n, seed=6)
    mask = sm.SSS(A.transpose(0, 1), Bm.transpose(0, 1), Cm.transpose(0, 1))
    q, k, v = randn(B, T, H, N, seed=7), randn(B, T, H, N, seed=8), randn(B, T, H, P, seed=9)
    want = sm.sma(q, k, v, mask, order="quadratic")
    y0, S = sm.sma_step(None, q[:, 0], k[:, 0], v[:, 0], None, Bm[0][None], Cm[0][None])
    y1, S = sm.sma_step(S, q[:, 1], k[:, 1], v[:, 1], A[1][None], Bm[1][None], Cm[1][None])
    assert y1.dtype == S.dtype == torch.complex128
    close(torch.stack([y0, y1], 1), want)
    D = torch.tensor(0.5 + 2j, dtype=torch.complex128)
    y, _ = sm.sma_step(None, q[:, 0], k[:, 0], v[:, 0], None, Bm[0][None], Cm[0][None], D)
    close(y, D * (q[:, 0] * k[:, 0]).sum(-1, keepdim=True) * v[:, 0])


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
def test_complex32_activations_decode_in_complex64():
    q, k, v = (x.to(torch.complex64).to(torch.complex32) for x in _token(10, torch.float32))
    one = torch.ones(1, 1, 1)
    y, S = sm.sma_step(None, q, k, v, None, one, one)
    assert S.dtype == torch.complex64
    wide = [x.to(torch.complex128) for x in (q, k, v)]
    close(y.to(torch.complex128), (wide[0] * wide[1]).sum(-1, keepdim=True) * wide[2], rtol=1e-3, atol=1e-3)
    mask = sm.OneSS.from_decays(rand(H, 1, seed=11, dtype=torch.float32))
    y = sm.SMADecoder(mask).step(q, k, v)
    assert y.dtype == sm.sma(q[:, None], k[:, None], v[:, None], mask).dtype == torch.complex64


@pytest.mark.parametrize("sizes", [(0, 2), (1, 0)])
def test_prefill_state_of_an_empty_batch_or_no_heads(sizes):
    Bsz, Hh = sizes
    k, v = torch.zeros(Bsz, 4, max(Hh, 1), N, dtype=F64)[:, :, :Hh], torch.zeros(Bsz, 4, Hh, P, dtype=F64)
    state = sm.sma_state(k, v, sm.OneSS.from_decays(rand(4, seed=12)))
    assert state.shape == (Bsz, Hh, 1, N, P)


def test_the_steps_transition_is_checked():
    q, k, v = _token(13)
    Bt = randn(1, 1, n, seed=16)
    _, S = sm.sma_step(None, q, k, v, None, Bt, Bt)
    cases = {
        None: (ValueError, "A is required"),
        "abc": (TypeError, "A must be a number"),
        rand(3, H, seed=17): (ValueError, "A's batch must broadcast"),
        rand(B, H, n + 1, seed=18): (ValueError, "A must have shape"),
        torch.full((B, H), float("nan"), dtype=F64): (ValueError, "A must be finite"),
        Transitions.from_log(rand(B, H, 5, seed=19).log()): (ValueError, "A as Transitions must be of one step"),
    }
    for A, (err, message) in cases.items():
        with pytest.raises(err, match=message):
            sm.sma_step(S, q, k, v, A, Bt, Bt)
    with pytest.raises(ValueError, match="D_t must be finite"):
        sm.sma_step(S, q, k, v, 0.5, Bt, Bt, torch.tensor(float("nan")))
    # a number, a 0-d tensor and (B|1, H|1) all mean one scalar transition per (batch, head)
    want = sm.sma_step(S, q, k, v, torch.full((B, H), 0.5, dtype=F64), Bt, Bt)[0]
    for A in (0.5, torch.tensor(0.5, dtype=F64), torch.full((1, 1), 0.5, dtype=F64)):
        close(sm.sma_step(S, q, k, v, A, Bt, Bt)[0], want)
    with sm.skip_finite_checks():  # (a host read per step on a GPU: skipped as for a mask's parameters)
        sm.sma_step(S, q, k, v, torch.full((B, H), float("nan"), dtype=F64), Bt, Bt)


def test_decoding_arguments_named_and_activations_floating():
    k, v = randn(2, 4, 1, N, seed=20), randn(1, 4, 1, P, seed=21)
    mask = sm.OneSS.from_decays(rand(4, seed=22))
    with pytest.raises(ValueError, match="k and v must share"):
        sm.sma_state(k, v, mask)
    with pytest.raises(ValueError, match="k must be a 4-D"):
        sm.sma_state(k[:, :, 0], v, mask)
    with pytest.raises(TypeError, match="k must be a floating-point"):
        sm.sma_state(torch.ones(1, 4, 1, N, dtype=torch.int64), torch.ones(1, 4, 1, P), mask)
    q1, k1, v1 = (torch.ones(1, 1, 2, dtype=torch.int64) for _ in range(3))
    with pytest.raises(TypeError, match="q_t must be a floating-point"):
        sm.sma_step(None, q1, k1, v1, None, torch.ones(1, 1, 1), torch.ones(1, 1, 1))
    with pytest.raises(TypeError, match="q_t must be a floating-point"):
        sm.SMADecoder(mask).step(q1.bool(), k1.bool(), v1.bool())


@pytest.mark.parametrize("mask_name", ["OneSS", "LION", "Toeplitz"])
def test_float32_activations_beside_a_float64_mask_are_multiplied_in_float64(mask_name):
    """Every order gave the float64 result of float32 products (``k v^T``, ``q . k``): 1e-8 off, so ``auto``'s
    precision changed with ``T``; the reference multiplies the same float32 values in float64."""
    T = 24
    masks = {"OneSS": lambda: sm.OneSS.from_decays(rand(T, seed=23)),
             "LION": lambda: sm.Quasiseparable.lion(rand(T, seed=24)),
             "Toeplitz": lambda: sm.Toeplitz.causal(rand(T, seed=25))}
    mask = masks[mask_name]()
    q, k, v = (randn(1, T, 2, 3, seed=s, dtype=torch.float32) for s in (26, 27, 28))
    want = torch.einsum("bthn,bshn,ts,bshp->bthp", q.double(), k.double(), mask.to_dense(), v.double())
    for order in sm.attention.admissible(mask):
        got = sm.sma(q, k, v, mask, order=order, chunk=5)
        assert got.dtype == F64
        close(got, want, rtol=1e-12, atol=1e-13)


def test_an_empty_call_stays_in_the_masks_graph():
    a = rand(4, seed=29).requires_grad_()
    q, k, v = torch.zeros(0, 4, 1, 2, dtype=F64), torch.zeros(0, 4, 1, 2, dtype=F64), torch.zeros(0, 4, 1, 3, dtype=F64)
    y = sm.sma(q, k, v, sm.OneSS.from_decays(a))
    assert y.requires_grad
    (g,) = torch.autograd.grad(y.sum(), a)
    assert torch.equal(g, torch.zeros_like(a))


def test_the_planners_device_is_checked_and_numpy_sizes_taken():
    mask = sm.OneSS.causal(16)
    for device in ("abc", [0]):
        with pytest.raises(ValueError, match="device must be"):
            sm.sma_plan((1, 16, 2, 4), (1, 16, 2, 4), (1, 16, 2, 4), mask, device=device)
    sizes = tuple(np.int64(s) for s in (1, 16, 2, 4))
    assert sm.sma_plan(sizes, sizes, sizes, mask).order == sm.sma_plan((1, 16, 2, 4), (1, 16, 2, 4), (1, 16, 2, 4), mask).order


def test_the_steps_transition_takes_what_broadcasts():
    """A numpy ``(B, H)`` array, an int, and a one-step ``Transitions`` of batch ``(H,)`` (broadcast to ``(1, H)``)
    worked before the checks of D118 and must still (as the same tensor ``(B, H)``)."""
    q, k, v = _token(30)
    Bt = randn(1, 1, n, seed=31)
    _, S = sm.sma_step(None, q, k, v, None, Bt, Bt)
    log_a = rand(H, seed=32).log()
    want = sm.sma_step(S, q, k, v, log_a.exp().expand(B, H), Bt, Bt)[0]
    close(sm.sma_step(S, q, k, v, Transitions.from_log(log_a[..., None]), Bt, Bt)[0], want)
    close(sm.sma_step(S, q, k, v, log_a.exp().expand(B, H).numpy(), Bt, Bt)[0], want)
    close(sm.sma_step(S, q, k, v, 1, Bt, Bt)[0], sm.sma_step(S, q, k, v, 1.0, Bt, Bt)[0])
