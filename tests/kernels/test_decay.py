"""The chunked-decay primitive: the torch implementation against the step-by-step recurrence."""

import pytest
import torch
from conftest import DEV, F64, rand, randn, rel
from hypothesis import given
from hypothesis import strategies as st

from structmat.kernels.chunked_decay import chunked_decay, states_after
from structmat.kernels.decay_naive import decay_naive
from structmat.kernels.decay_torch import decay_chunked_torch


def inputs(b, l, h, p, g, n, *, seed=0, dtype=F64):
    return dict(x=randn(b, l, h, p, seed=seed, dtype=dtype), log_a=-2 * rand(b, l, h, seed=seed + 1),
                B=randn(b, l, g, n, seed=seed + 2, dtype=dtype), C=randn(b, l, g, n, seed=seed + 3, dtype=dtype),
                scale=rand(b, l, h, seed=seed + 4), D=randn(h, p, seed=seed + 5), z=randn(b, l, h, p, seed=seed + 6),
                initial_state=randn(b, h, p, n, seed=seed + 7))


@given(st.integers(1, 40), st.sampled_from([(2, 1), (4, 2), (3, 3)]), st.sampled_from([4, 7, 16]),
       st.sampled_from(["plain", "all", "seq_idx", "cuts"]))
def test_torch_equals_sequential(l, hg, chunk, features):
    h, g = hg
    t = inputs(2, l, h, 3, g, 5, seed=l)
    kw = dict(scale=t["scale"])
    if features in ("all", "seq_idx"):
        kw.update(D=t["D"], z=t["z"], initial_state=t["initial_state"])
    if features == "seq_idx":
        cut = l // 3
        kw["seq_idx"] = torch.tensor([[0] * cut + [1] * (l - cut), [0] * l])
    log_a = t["log_a"]
    if features == "cuts":  # exact zero decays and positive log decays (the torch backend allows both)
        log_a = log_a.clone()
        log_a[:, ::5] = float("-inf")
        log_a[:, 1::7] = 0.05
    out, final = decay_chunked_torch(t["x"], log_a, t["B"], t["C"], chunk_size=chunk, **kw)
    want, want_final = decay_naive(t["x"], log_a, t["B"], t["C"], **kw)
    assert out.dtype == F64 and torch.isfinite(out).all()
    assert rel(out, want) < 1e-12 and rel(final, want_final) < 1e-12


def test_torch_gradcheck_every_input():
    t = inputs(1, 9, 2, 2, 1, 3, seed=3)
    names = ["x", "log_a", "B", "C", "scale", "D", "z", "initial_state"]
    args = [t[k].requires_grad_() for k in names]
    seq = torch.tensor([[0] * 4 + [1] * 5])

    def f(*a):
        kw = dict(zip(names, a))
        return decay_chunked_torch(kw.pop("x"), kw.pop("log_a"), kw.pop("B"), kw.pop("C"), chunk_size=4, seq_idx=seq, **kw)

    assert torch.autograd.gradcheck(f, args)


def test_chunk_states_and_states_after_positions():
    t = inputs(1, 23, 4, 3, 2, 5, seed=8)
    seq = torch.tensor([[0] * 6 + [1] * 10 + [2] * 7])
    out, final, states = decay_chunked_torch(t["x"], t["log_a"], t["B"], t["C"], scale=t["scale"], seq_idx=seq,
                                             chunk_size=8, return_chunk_states=True)
    assert states.shape == (1, 3, 4, 3, 5)
    got = states_after(t["x"], t["log_a"], t["B"], states, [5, 15, 22], scale=t["scale"], seq_idx=seq, chunk_size=8)
    for i, (s, e) in enumerate(((0, 6), (6, 16), (16, 23))):
        _, want = decay_naive(t["x"][:, s:e], t["log_a"][:, s:e], t["B"][:, s:e], t["C"][:, s:e], scale=t["scale"][:, s:e])
        assert rel(got[i], want[0]) < 1e-12
    for c in range(3):  # the state entering chunk c is the state after step 8 c - 1
        if c:
            _, want = decay_naive(t["x"][:, : 8 * c], t["log_a"][:, : 8 * c], t["B"][:, : 8 * c], t["C"][:, : 8 * c],
                                  scale=t["scale"][:, : 8 * c], seq_idx=seq[:, : 8 * c])
            assert rel(states[:, c], want) < 1e-12


@pytest.mark.parametrize("chunk", [16, 32])
def test_triton_backend_equals_sequential(chunk):
    """The Triton kernels (on the GPU, or interpreted on the CPU) through the front door, fp32."""
    t = {k: v.to(DEV) for k, v in inputs(2, 37, 4, 8, 2, 16, seed=11, dtype=torch.float32).items()}
    kw = dict(scale=t["scale"].float(), D=t["D"].float(), z=t["z"], initial_state=t["initial_state"].float())
    out, final = chunked_decay(t["x"], t["log_a"].float(), t["B"], t["C"], chunk_size=chunk, backend="triton", **kw)
    want, want_final = decay_naive(*(t[k].double() for k in ("x", "log_a", "B", "C")),
                                   **{k: v.double() for k, v in kw.items()})
    assert rel(out, want) < 1e-5 and rel(final, want_final) < 1e-5


@pytest.mark.parametrize("bad", [0.05, float("nan")])
def test_triton_backend_refuses_decays_above_one(bad):
    """The kernels assume ``log_a <= 0``: a growing decay (or NaN) gave a result 47% off, silently; now an
    error naming ``log_a`` (``backend="auto"`` takes the torch implementation for it)."""
    t = {k: v.to(DEV) for k, v in inputs(1, 16, 2, 4, 1, 8, seed=12, dtype=torch.float32).items()}
    log_a = t["log_a"].float().clone()
    log_a[0, 5, 1] = bad
    with pytest.raises(ValueError, match=r"log_a finite and <= 0"):
        chunked_decay(t["x"], log_a, t["B"], t["C"], chunk_size=16, backend="triton")
    if bad > 0:  # (NaN has no reference to compare with)
        out, _ = chunked_decay(t["x"], log_a, t["B"], t["C"], chunk_size=16)
        want, _ = decay_naive(t["x"].double(), log_a.double(), t["B"].double(), t["C"].double())
        assert rel(out, want) < 1e-5


def test_triton_backend_on_cpu_tensors_without_the_interpreter_says_so(monkeypatch):
    """CPU tensors reach the kernels only under ``TRITON_INTERPRET=1``; otherwise a clear error, not Triton's
    driver message ("0 active drivers" without a GPU, a pointer error with one)."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    t = inputs(1, 16, 2, 4, 1, 8, seed=13, dtype=torch.float32)
    with pytest.raises(ValueError, match="need CUDA tensors"):
        chunked_decay(t["x"], t["log_a"].float(), t["B"], t["C"], chunk_size=16, backend="triton")
