"""``structmat.nn.Mamba2`` on CUDA, where it runs on Triton kernels (SSD, causal conv + SiLU, gated RMSNorm,
the decoding steps), against the same block on the CPU in float64 (its torch forms): forward, every
parameter gradient, packed sequences and token-by-token decoding. GPU only: on the CPU the kernels are
tested one by one under the interpreter (``tests/kernels/test_layer_kernels.py``)."""

import copy

import pytest
import torch
from conftest import F64, rel

from structmat.nn import Mamba2

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="the CUDA kernels of the block")


def blocks(seed=0, **kw):
    torch.manual_seed(seed)
    ref = Mamba2(d_model=64, d_state=32, headdim=16, ngroups=2, chunk_size=32, **kw).double()
    with torch.no_grad():
        for p in ref.parameters():  # random everywhere (the initialisation leaves norm and D at ones)
            p.add_(torch.randn_like(p) * 0.1)
    return ref, copy.deepcopy(ref).to("cuda", torch.float32)


@pytest.mark.parametrize("kw", [{}, {"norm_before_gate": True}, {"rmsnorm": False}])
def test_forward_and_gradients_match_the_float64_torch_block(kw):
    ref, gpu = blocks(**kw)
    u = torch.randn(2, 100, 64, dtype=F64)
    gy = torch.randn(2, 100, 64, dtype=F64)
    want = ref(u)
    got = gpu(u.to("cuda", torch.float32))
    assert rel(got, want) < 1e-4
    want.backward(gy)
    got.backward(gy.to("cuda", torch.float32))
    for (name, p), q in zip(ref.named_parameters(), gpu.parameters()):
        assert torch.isfinite(q.grad).all() and rel(q.grad, p.grad) < 1e-3, name


def test_packed_sequences_and_decoding_on_cuda():
    ref, gpu = blocks(seed=1)
    u = torch.randn(1, 70, 64, dtype=F64)
    seq_idx = torch.tensor([[0] * 20 + [1] * 35 + [2] * 15])
    assert rel(gpu(u.to("cuda", torch.float32), seq_idx=seq_idx.cuda()), ref(u, seq_idx=seq_idx)) < 1e-4
    x = torch.randn(3, 9, 64, dtype=F64)
    full = ref(x)
    conv_state, ssm_state = gpu.allocate_inference_cache(3, 9, dtype=torch.float32)
    steps = [gpu.step(x[:, t : t + 1].to("cuda", torch.float32), conv_state, ssm_state)[0] for t in range(9)]
    assert rel(torch.cat(steps, dim=1), full) < 1e-4
