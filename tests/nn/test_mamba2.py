"""``structmat.nn.Mamba2`` against HuggingFace's plain-torch ``Mamba2Mixer`` (checkpoints load strictly and give
the same outputs), packed sequences, decoding, initialisation, gradients."""

import contextlib
import math
from unittest import mock

import pytest
import torch
import transformers  # noqa: E402  (the test extra installs it: the independent reference)
from conftest import F64, rel
from transformers import Mamba2Config  # noqa: E402
from transformers.models.mamba2.modeling_mamba2 import Mamba2Mixer  # noqa: E402

from structmat.nn import InferenceParams, Mamba2

transformers.logging.set_verbosity_error()


@contextlib.contextmanager
def float64_throughout():
    """HuggingFace's reference computes its scan and norm in float32 (``.float()``, ``.to(torch.float32)``);
    within this block those casts keep float64 tensors in float64, so the comparison is float64 on both sides."""
    to, flt = torch.Tensor.to, torch.Tensor.float

    def keep(self, *args, **kwargs):
        if self.dtype == F64 and (torch.float32 in args or kwargs.get("dtype") is torch.float32):
            return self
        return to(self, *args, **kwargs)

    with mock.patch.object(torch.Tensor, "to", keep), \
            mock.patch.object(torch.Tensor, "float", lambda self: self if self.dtype == F64 else flt(self)):
        yield


def pair(d_model=16, heads=4, headdim=8, state=6, groups=2, chunk=8, seed=0):
    cfg = Mamba2Config(hidden_size=d_model, num_heads=heads, head_dim=headdim, state_size=state, n_groups=groups, expand=2,
                       conv_kernel=4, chunk_size=chunk, layer_norm_epsilon=1e-5, num_hidden_layers=1)
    torch.manual_seed(seed)
    hf = Mamba2Mixer(cfg, 0).double()
    with torch.no_grad():  # random weights everywhere (the initialisation leaves norm and D at ones)
        for p in hf.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
        hf.A_log.copy_(torch.rand_like(hf.A_log) * 2)
    ours = Mamba2(d_model=d_model, d_state=state, headdim=headdim, ngroups=groups, chunk_size=chunk, layer_idx=0).double()
    ours.load_state_dict(hf.state_dict(), strict=True)
    return hf, ours


#: HuggingFace's plain-torch Mamba2 took the gated RMSNorm over the whole width before 5.23 (the fused kernel it
#: calls on a GPU, and mamba_ssm's Mamba2 layer, normalise per group of ``d_inner / ngroups``, as we do): with several
#: groups it is not a reference there (5.17 on the H100 host: relative error 0.54; with one group it agrees).
HF_GROUPED_NORM = hasattr(Mamba2Mixer(Mamba2Config(hidden_size=16, num_heads=4, head_dim=8, n_groups=2), 0).norm,
                          "group_size")


@pytest.mark.parametrize("groups", [1, 2])
def test_huggingface_checkpoint_loads_strictly_and_gives_the_same_outputs(groups):
    if groups > 1 and not HF_GROUPED_NORM:
        pytest.skip(f"transformers {transformers.__version__} normalises Mamba2's gate over the whole width, not per "
                    "group as mamba_ssm (fixed by 5.23)")
    hf, ours = pair(groups=groups)
    assert set(ours.state_dict()) == set(hf.state_dict())
    u = torch.randn(2, 21, 16, dtype=F64)
    with float64_throughout():
        want = hf(u)
    assert rel(ours(u), want) < 1e-9


def test_packed_sequences_equal_separate_calls():
    _, block = pair(seed=1)
    lengths = [5, 11, 4]
    parts = [torch.randn(1, n, 16, dtype=F64, generator=torch.Generator().manual_seed(n)) for n in lengths]
    packed = torch.cat(parts, dim=1)
    cu = torch.tensor([0, 5, 16, 20])
    seq_idx = torch.repeat_interleave(torch.arange(3), torch.tensor(lengths))[None]
    separate = torch.cat([block(p) for p in parts], dim=1)
    assert rel(block(packed, cu_seqlens=cu), separate) < 1e-12
    assert rel(block(packed, seq_idx=seq_idx), separate) < 1e-12
    assert rel(block(packed), separate) > 1e-3  # without the boundaries the conv and the state leak across


def test_step_by_step_decoding_reproduces_the_forward():
    _, block = pair(seed=2)
    u = torch.randn(3, 9, 16, dtype=F64)
    full = block(u)
    conv_state, ssm_state = block.allocate_inference_cache(3, 9, dtype=F64)
    assert conv_state.shape == (3, block.conv1d.weight.shape[0], 4) and ssm_state.shape == (3, 4, 8, 6)
    outs = [block.step(u[:, t : t + 1], conv_state, ssm_state)[0] for t in range(9)]
    assert rel(torch.cat(outs, dim=1), full) < 1e-10


def test_decoding_follows_parameter_updates_and_differentiates_them():
    """The step keeps ``A``, ``D`` and ``dt_bias`` between tokens without gradients; an in-place update (an
    optimizer step, ``load_state_dict``) is seen by the next token, and with gradients the step reaches them."""
    _, block = pair(seed=4)
    _, fresh = pair(seed=5)
    u = torch.randn(2, 1, 16, dtype=F64)
    states = [block.allocate_inference_cache(2, 1, dtype=F64) for _ in range(2)]
    with torch.inference_mode():
        block.step(u, *states[0])
        fresh.step(u, *states[1])
        block.load_state_dict(fresh.state_dict())  # in place: same storage, new versions
        got = block.step(u, *[s.clone() for s in states[1]])[0]
        want = fresh.step(u, *[s.clone() for s in states[1]])[0]
    assert rel(got, want) < 1e-14
    conv_state, ssm_state = block.allocate_inference_cache(2, 1, dtype=F64)
    ssm_state.normal_()
    block.step(u, conv_state, ssm_state)[0].sum().backward()
    assert all(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in (block.A_log, block.D, block.dt_bias))
    with pytest.raises(ValueError, match="ssm_state must have shape"):
        block.step(u, conv_state, ssm_state[:1])


def test_decoding_sees_writes_through_data_and_runs_in_inference_mode():
    """An in-place write through ``.data`` (old-style EMA or weight copies) bumps no version counter: decoding must
    still use the new ``A`` (a cache keyed on the version served the old one: 6e-3 off). A block made inside
    ``inference_mode`` decodes (reading an inference tensor's version raised)."""
    _, block = pair(seed=6)
    u = torch.randn(2, 4, 16, dtype=F64)

    def decode():
        states = block.allocate_inference_cache(2, 4, dtype=F64)
        return torch.cat([block.step(u[:, t : t + 1], *states)[0] for t in range(4)], 1)

    with torch.no_grad():
        decode()
        block.A_log.data.add_(1.0)
        block.dt_bias.data.mul_(0.5)
        assert rel(decode(), block(u)) < 1e-10
    with torch.inference_mode():
        made = Mamba2(d_model=16, d_state=6, headdim=8, ngroups=2, chunk_size=4).double()
        states = made.allocate_inference_cache(2, 4, dtype=F64)
        steps = torch.cat([made.step(u[:, t : t + 1], *states)[0] for t in range(4)], 1)
        assert rel(steps, made(u)) < 1e-10


def test_decoding_applies_dt_limit_and_differentiates_through_steps():
    """The step clamps ``dt`` to the block's ``dt_limit`` as the forward does (mamba_ssm's step does not: 0.42 off with
    random weights), through the cache too; gradients through several steps equal those of the forward (each step
    overwrote the convolution state that the previous one kept for its backward)."""
    _, block = pair(seed=7)
    block.dt_limit = (0.2, 0.5)
    u = torch.randn(2, 6, 16, dtype=F64)
    with torch.no_grad():
        full = block(u)
        states = block.allocate_inference_cache(2, 6, dtype=F64)
        assert rel(torch.cat([block.step(u[:, t : t + 1], *states)[0] for t in range(6)], 1), full) < 1e-10
        params = InferenceParams(max_seqlen=6, max_batch_size=2)
        block(u[:, :3], inference_params=params)
        params.seqlen_offset = 3
        tail = torch.cat([block(u[:, t : t + 1], inference_params=params) for t in range(3, 6)], 1)
        assert rel(tail, full[:, 3:]) < 1e-10
    grads = []
    for decode in (False, True):
        block.zero_grad()
        leaf = u.clone().requires_grad_()
        if decode:
            states = block.allocate_inference_cache(2, 6, dtype=F64)
            out = torch.cat([block.step(leaf[:, t : t + 1], *states)[0] for t in range(6)], 1)
        else:
            out = block(leaf)
        (out * torch.linspace(-1, 1, 16, dtype=F64)).sum().backward()
        grads.append([leaf.grad] + [p.grad.clone() for p in block.parameters()])
    for got, want in zip(grads[1], grads[0]):
        assert rel(got, want) < 1e-10


def test_prefill_fills_the_cache_then_decoding_continues():
    _, block = pair(seed=3)
    u = torch.randn(2, 12, 16, dtype=F64)
    full = block(u)
    params = InferenceParams(max_seqlen=12, max_batch_size=2)
    head = block(u[:, :7], inference_params=params)
    assert rel(head, full[:, :7]) < 1e-12
    params.seqlen_offset = 7
    tail = [block(u[:, t : t + 1], inference_params=params) for t in range(7, 12)]
    assert rel(torch.cat(tail, dim=1), full[:, 7:]) < 1e-10


def test_initialisation_follows_mamba_ssm():
    torch.manual_seed(0)
    a = Mamba2(d_model=32, d_state=16, headdim=16, ngroups=2, dt_min=0.01, dt_max=0.05, A_init_range=(2, 3), conv_init=0.1)
    torch.manual_seed(0)
    b = Mamba2(d_model=32, d_state=16, headdim=16, ngroups=2, dt_min=0.01, dt_max=0.05, A_init_range=(2, 3), conv_init=0.1)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))  # seeded
    shapes = {k: tuple(v.shape) for k, v in a.state_dict().items()}
    assert shapes == {"in_proj.weight": (2 * 64 + 2 * 2 * 16 + 4, 32), "conv1d.weight": (64 + 64, 1, 4), "conv1d.bias": (128,),
                      "dt_bias": (4,), "A_log": (4,), "D": (4,), "norm.weight": (64,), "out_proj.weight": (32, 64)}
    dt = torch.nn.functional.softplus(a.dt_bias)
    assert ((dt >= 0.01 - 1e-6) & (dt <= 0.05 + 1e-6)).all()
    assert ((a.A_log.exp() >= 2) & (a.A_log.exp() <= 3)).all() and torch.equal(a.D, torch.ones(4))
    assert a.conv1d.weight.abs().max() <= 0.1
    assert "d_model=32" in repr(a) and "ngroups=2" in repr(a)
    c = Mamba2(d_model=16, d_state=4, headdim=8, D_has_hdim=True, rmsnorm=False)
    assert c.D.shape == (32,) and not hasattr(c, "norm")


def test_variants_gradcheck_and_errors():
    torch.manual_seed(4)
    for kw in (dict(rmsnorm=False), dict(D_has_hdim=True), dict(norm_before_gate=True), dict(d_ssm=16)):
        block = Mamba2(d_model=8, d_state=3, headdim=4, chunk_size=4, **kw).double()
        u = torch.randn(2, 6, 8, dtype=F64)
        conv_state, ssm_state = block.allocate_inference_cache(2, 6, dtype=F64)
        steps = torch.cat([block.step(u[:, t : t + 1], conv_state, ssm_state)[0] for t in range(6)], 1)
        assert rel(steps, block(u)) < 1e-10, kw
    block = Mamba2(d_model=4, d_state=2, headdim=2, chunk_size=4).double()
    u = torch.randn(1, 5, 4, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda u: block(u), (u,))
    with pytest.raises(ValueError, match=r"u must have shape \(batch, seqlen, 4\)"):
        block(torch.randn(1, 5, 3, dtype=F64))
    with pytest.raises(ValueError, match="multiple of headdim"):
        Mamba2(d_model=10, headdim=3)
    with pytest.raises(ValueError, match="step decodes one token"):
        block.step(torch.randn(1, 2, 4, dtype=F64), *block.allocate_inference_cache(1, 2))
    conv_state, ssm_state = block.allocate_inference_cache(1, 2, dtype=F64)
    with pytest.raises(ValueError, match=r"conv_state must have shape \(1, 12, 4\)"):
        block.step(torch.randn(1, 1, 4, dtype=F64), conv_state[..., :3], ssm_state)
    with pytest.raises(ValueError, match="cu_seqlens needs batch == 1"):
        block(torch.randn(2, 5, 4, dtype=F64), cu_seqlens=torch.tensor([0, 2, 5]))
    with pytest.raises(ValueError, match="end at seqlen=5"):
        block(torch.randn(1, 5, 4, dtype=F64), cu_seqlens=torch.tensor([0, 2, 4]))
    with pytest.raises(TypeError, match=r"cu_seqlens must be an integer tensor \(num_seqs \+ 1,\); got list"):
        block(torch.randn(1, 5, 4, dtype=F64), cu_seqlens=[0, 2, 5])  # (an AttributeError)
    with pytest.raises(ValueError, match=r"seq_idx must have shape \(1, 5\)"):
        block(torch.randn(1, 5, 4, dtype=F64), seq_idx=torch.zeros(5, dtype=torch.long))
    with pytest.raises(ValueError, match="d_ssm must be in"):
        Mamba2(d_model=4, headdim=2, d_ssm=16)
    assert math.isclose(block.norm.eps, 1e-5)
