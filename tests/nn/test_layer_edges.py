"""The layers at their edges (defects D86-D95, found by the session-21 audit of ``structmat.nn``): prefills of packed
sequences, ``seq_idx`` checks under the layers' sync-free SSD, bfloat16 decays and decoding states, ``sma_state``,
caches of the wrong type or batch, constructor sizes, and ``SMA``'s prefill.

References: a prefill of the last sequence alone, the same layer in float64, and the full forward."""

import inspect

import pytest
import torch
from conftest import F64, rel

import structmat as sm
from structmat.nn import SMA, Hydra, InferenceParams, Mamba2


def test_mamba2_prefill_with_seq_idx_leaves_the_last_sequence_s_cache():
    """D86: the convolution cache after a ``seq_idx`` prefill held inputs of the sequence before the last one."""
    torch.manual_seed(0)
    block = Mamba2(16, d_state=6, headdim=8, chunk_size=4, layer_idx=0).to(F64)
    u = torch.randn(2, 9, 16, dtype=F64)
    seq_idx = torch.tensor([[0] * 7 + [1] * 2, [0] * 4 + [3] * 5])
    packed, alone = InferenceParams(max_seqlen=10, max_batch_size=2), []
    block(u, seq_idx=seq_idx, inference_params=packed)
    for row, start in ((0, 7), (1, 4)):
        params = InferenceParams(max_seqlen=10, max_batch_size=1)
        block(u[row:row + 1, start:], inference_params=params)
        alone.append(params)
    for row in range(2):
        for got, want in zip(packed.key_value_memory_dict[0], alone[row].key_value_memory_dict[0]):
            assert rel(got[row], want[0]) < 1e-13
    packed.seqlen_offset = 9
    nxt = torch.randn(2, 1, 16, dtype=F64)
    y = block(nxt, inference_params=packed)
    for row in range(2):
        alone[row].seqlen_offset = 9
        assert rel(y[row], block(nxt[row:row + 1], inference_params=alone[row])[0]) < 1e-13


@pytest.mark.parametrize("layer", [lambda: Mamba2(16, d_state=4, headdim=8, chunk_size=4),
                                   lambda: Hydra(16, d_state=4, headdim=8, chunk_size=4)])
def test_layers_check_seq_idx(layer):
    """D87, D94: the layers run the SSD without host syncs, which skipped its check of ``seq_idx``: a decreasing one
    was taken (the convolution joined equal ids, the SSD restarted at every change); Hydra broadcast a wrong shape."""
    block, u = layer(), torch.randn(1, 6, 16)
    with pytest.raises(ValueError, match="non-decreasing"):
        block(u, seq_idx=torch.tensor([[0, 0, 1, 1, 0, 0]]))
    with pytest.raises(ValueError, match=r"seq_idx must have shape \(1, 6\)"):
        block(u, seq_idx=torch.tensor([[0, 0, 1]]))
    with pytest.raises(TypeError, match="seq_idx must be an integer tensor"):
        block(u, seq_idx=torch.zeros(1, 6))
    with sm.skip_finite_checks():  # the user's choice: no host read
        block(u, seq_idx=torch.tensor([[0, 0, 1, 1, 0, 0]]))


def test_bfloat16_decays_and_decoding_states_keep_float32():
    """D88, D89: the ``decay`` mask's sigmoid in bfloat16 rounded 0.998 to 1 (a head that never forgets), and the
    decoding state of bfloat16 activations accumulated in bfloat16 (DESIGN section 5: in float32)."""
    torch.manual_seed(1)
    layer = SMA(16, 4, mask="decay", d_state=4)
    assert bool((layer.to(torch.bfloat16)._decays() < 1).all()) and layer._decays().dtype == torch.float32
    u = torch.randn(1, 200, 16)
    want = layer.to(F64)(u.to(F64))
    low = layer.to(torch.bfloat16)
    state, ys = None, []
    for t in range(u.shape[1]):
        y, state = low.step(u[:, t:t + 1].to(torch.bfloat16), state)
        ys.append(y)
    assert state.dtype == torch.float32
    assert rel(torch.cat(ys, 1), want) < 2e-2 and rel(low(u.to(torch.bfloat16)), want) < 2e-2
    q, k, v = (torch.randn(1, 2, n, dtype=torch.bfloat16) for n in (3, 3, 4))
    one = torch.ones(1, 1, 1)
    _, S = sm.sma_step(torch.zeros(1, 2, 1, 3, 4, dtype=F64), q, k, v, torch.full((1, 2), 0.5), one, one)
    assert S.dtype == F64  # a wider state passed in stays wide


def test_sma_state_of_an_empty_prompt_and_mixed_dtypes():
    """D90: ``sma_state`` of ``T = 0`` crashed; float64 ``k, v`` with a float32 mask gave a float32 state."""
    k, v = torch.randn(2, 0, 2, 3), torch.randn(2, 0, 2, 4)
    S = sm.sma_state(k, v, sm.OneSS.decay(0.5, 0))
    assert S.shape == (2, 2, 1, 3, 4) and not S.any()
    k, v = torch.randn(1, 5, 2, 3, dtype=F64), torch.randn(1, 5, 2, 4, dtype=F64)
    M = sm.OneSS.decay(0.5, 5)
    S = sm.sma_state(k, v, M)
    assert S.dtype == F64
    assert rel(S, sm.sma_state(k, v, M.to(F64))) < 1e-15


def test_mamba2_caches_of_the_wrong_type_or_batch_raise():
    """D91, D92: an integer ``ssm_state`` was taken (each new state truncated into it), ``None`` gave an
    ``AttributeError``; a prompt of batch 1 into a cache of batch 3 was broadcast into every row."""
    block = Mamba2(16, d_state=4, headdim=8, chunk_size=4, layer_idx=0)
    conv, ssm = block.allocate_inference_cache(2, 8)
    u = torch.randn(2, 1, 16)
    with pytest.raises(TypeError, match="ssm_state must be a floating tensor"):
        block.step(u, conv, ssm.long())
    with pytest.raises(TypeError, match="conv_state must be a floating tensor"):
        block.step(u, conv.int(), ssm)
    with pytest.raises(TypeError, match="conv_state"):
        block.step(u, None, ssm)
    params = InferenceParams(max_seqlen=8, max_batch_size=3)
    params.key_value_memory_dict[0] = block.allocate_inference_cache(3, 8)
    with pytest.raises(ValueError, match=r"ssm_state must have shape \(1,"):
        block(torch.randn(1, 4, 16), inference_params=params)


@pytest.mark.parametrize("build, match", [
    (lambda: Mamba2(16, headdim=0), "headdim must be a positive int"),
    (lambda: Mamba2(16, ngroups=0), "ngroups must be a positive int"),
    (lambda: Mamba2(16, expand=1.5), "expand must be a positive int"),
    (lambda: Mamba2(16, d_conv=0), "d_conv must be a positive int"),
    (lambda: Hydra(16, headdim=0), "headdim must be a positive int"),
    (lambda: Hydra(16, headdim=8, ngroups=3), "multiple of ngroups"),
    (lambda: SMA(2, 4), "pass head_dim"),
    (lambda: SMA(16, 4, head_dim=0), "head_dim must be a positive int"),
    (lambda: SMA(16, 4, mask=3), "mask must be one of"),
    (lambda: SMA(16, 4, d_state=0), "d_state must be a positive int"),
])
def test_constructors_check_their_sizes(build, match):
    """D93: ``ZeroDivisionError``, torch's ``empty()`` error, or a layer that failed only in its forward."""
    with pytest.raises(ValueError, match=match):
        build()


@pytest.mark.parametrize("mask", ["selective", "decay", "causal"])
def test_sma_prefill_then_step_equals_the_forward(mask):
    """D95: ``SMA`` had no prefill (a prompt's state only by one ``step`` per token): ``forward(u, return_state=True)``
    gives it, and decoding continues from it as the full forward."""
    torch.manual_seed(2)
    layer = SMA(16, 4, mask=mask, d_state=4, n_groups=2, chunk_size=4).to(F64)
    u = torch.randn(2, 9, 16, dtype=F64)
    y, state = layer(u[:, :5], return_state=True)
    ys = [y]
    for t in range(5, 9):
        y, state = layer.step(u[:, t:t + 1], state)
        ys.append(y)
    assert rel(torch.cat(ys, 1), layer(u)) < 1e-13
    with pytest.raises(TypeError, match="no bounded recurrent state"):
        SMA(16, 4, mask="fourier", max_seqlen=16)(u[:, :3].float(), return_state=True)
    with pytest.raises(TypeError, match="return_state must be a bool"):
        layer(u, return_state="yes")


#: ``mamba_ssm.modules.mamba2.Mamba2.__init__``'s parameters in order, with their defaults (mamba_ssm 2.2, read from
#: its source): a configuration or a positional call written for it must mean the same here.
MAMBA_SSM_MAMBA2 = [("d_model", None), ("d_state", 128), ("d_conv", 4), ("conv_init", None), ("expand", 2),
                    ("headdim", 64), ("d_ssm", None), ("ngroups", 1), ("A_init_range", (1, 16)), ("D_has_hdim", False),
                    ("rmsnorm", True), ("norm_before_gate", False), ("dt_min", 0.001), ("dt_max", 0.1),
                    ("dt_init_floor", 1e-4), ("dt_limit", (0.0, float("inf"))), ("bias", False), ("conv_bias", True),
                    ("chunk_size", 256), ("use_mem_eff_path", True), ("layer_idx", None), ("process_group", None),
                    ("sequence_parallel", True), ("device", None), ("dtype", None)]


def test_mamba2_takes_mamba_ssms_parameters_in_its_order():
    params = list(inspect.signature(Mamba2.__init__).parameters.values())[1:]
    assert [p.name for p in params] == [name for name, _ in MAMBA_SSM_MAMBA2]
    for p, (name, default) in zip(params[1:], MAMBA_SSM_MAMBA2[1:]):
        assert p.default == default, name
    block = Mamba2(16, 8, 4, None, 2, 8, None, 1, (1, 16), False, True, False, 0.001, 0.1, 1e-4, (0.0, float("inf")),
                   False, True, 4, True, 0, None, True, None, torch.float64)
    assert block.A_log.dtype == torch.float64 and block.process_group is None and block.sequence_parallel
    with pytest.raises(NotImplementedError, match="process_group"):
        Mamba2(16, headdim=8, process_group=object())


@pytest.mark.parametrize("ids", [[0, 0, 0, 0, 1, 1, 1, 1, 1], [3, 3, 5, 5, 5, 5, 7, 7, 7], [0] * 9])
def test_hydra_packed_sequences_each_start_from_the_learned_state(ids):
    """Session 23's audit: ``seq_idx`` with ``learnable_init_states`` gave the learned state to the first sequence of
    the forward pass and the last of the backward one only (none where the ids do not start at 0): a packed batch
    (two rows, different packings) against each sequence alone, float64."""
    torch.manual_seed(0)
    m = Hydra(16, d_state=4, headdim=8, chunk_size=4, learnable_init_states=True).double()
    with torch.no_grad():
        m.init_states.normal_()
    u = torch.randn(2, len(ids), 16, dtype=F64)
    seq_idx = torch.tensor([ids, [0] * 2 + [1] * (len(ids) - 2)])
    packed = m(u, seq_idx=seq_idx)
    for row in range(2):
        bounds = [0] + [t for t in range(1, len(ids)) if seq_idx[row, t] != seq_idx[row, t - 1]] + [len(ids)]
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            assert rel(packed[row, lo:hi], m(u[row : row + 1, lo:hi])[0]) < 1e-12, (row, lo, hi)


def test_a_custom_masks_layer_says_why_it_does_not_decode():
    """Session 23's audit: a custom lower mask was told it had 'no bounded recurrent state', untrue for a 1-SS mask;
    the layer cannot step a function of the input, and the message says so and where decoding from a mask lives."""
    layer = SMA(16, 2, mask=lambda u: sm.OneSS.decay(0.9, u.shape[1]), d_state=4)
    for call in (lambda: layer(torch.randn(1, 3, 16), return_state=True), lambda: layer.step(torch.randn(1, 1, 16), None)):
        with pytest.raises(TypeError, match="a custom mask is a function of the input .*sma_state and sma_step"):
            call()


def test_hydra_with_an_empty_seq_idx():
    """Session 23's audit: an empty batch or sequence with ``seq_idx`` failed in ``seq_idx.max()``."""
    h = Hydra(8, d_state=4, headdim=4, chunk_size=4, d_conv=3, learnable_init_states=True)
    for shape in ((0, 6), (2, 0)):
        u = torch.randn(*shape, 8)
        assert h(u, torch.zeros(shape, dtype=torch.int32)).shape == u.shape
