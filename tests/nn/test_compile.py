"""``torch.compile(model, fullgraph=True)`` on the torch path: one graph (a graph break raises), the
same outputs and gradients as eager. ``aot_eager`` traces forward and backward the way inductor does
without spending CI time on C++ code generation; the long profile also runs inductor."""

import pytest
import torch
from conftest import LONG, rel

from structmat.nn import MASKS, SMA, Hydra, Mamba2

LAYERS = {
    "mamba2": lambda: Mamba2(d_model=32, d_state=16, headdim=8, chunk_size=8),
    "hydra": lambda: Hydra(d_model=32, d_state=16, headdim=8, chunk_size=8),
    **{f"sma-{m}": (lambda m=m: SMA(32, 4, mask=m, d_state=8, max_seqlen=32, chunk_size=8)) for m in MASKS},
}


def _grads(layer, u):
    layer.zero_grad()
    u = u.detach().requires_grad_()
    y = layer(u)
    (y * torch.linspace(-1, 1, y.numel()).reshape(y.shape)).sum().backward()
    return y.detach(), [u.grad] + [p.grad for p in layer.parameters() if p.grad is not None]


@pytest.mark.parametrize("backend", ["aot_eager"] + (["inductor"] if LONG else []))
@pytest.mark.parametrize("name", list(LAYERS))
def test_compiles_to_one_graph_with_eager_outputs_and_gradients(name, backend):
    torch._dynamo.reset()
    torch.manual_seed(0)
    layer = LAYERS[name]()
    u = torch.randn(2, 20, 32)
    y_eager, g_eager = _grads(layer, u)
    y_comp, g_comp = _grads(torch.compile(layer, fullgraph=True, backend=backend), u)
    assert rel(y_comp, y_eager) < 1e-5
    assert len(g_comp) == len(g_eager) and all(rel(a, b) < 1e-4 for a, b in zip(g_comp, g_eager))


def test_checks_skipped_while_tracing_stay_on_in_eager_calls():
    from structmat import ssd

    layer = Mamba2(d_model=32, d_state=16, headdim=8, chunk_size=8)
    torch.compile(layer, fullgraph=True, backend="aot_eager")(torch.randn(1, 8, 32))
    x, dt, B = torch.randn(1, 8, 2, 4), torch.rand(1, 8, 2), torch.randn(1, 8, 1, 4)
    with pytest.raises(ValueError, match="A must be finite"):
        ssd(x, dt, torch.tensor([-1.0, float("nan")]), B, B, 4)


def test_mamba2_decode_step_compiles_to_one_graph():
    """``torch.compile(block.step, fullgraph=True)`` under ``inference_mode``, as a generation loop would
    compile it: the same tokens and states as the eager step (the kept parameter views stay out of the trace)."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    block = Mamba2(d_model=32, d_state=16, headdim=8, chunk_size=8)
    u = torch.randn(2, 3, 32)
    states = [block.allocate_inference_cache(2, 3) for _ in range(2)]
    step = torch.compile(block.step, fullgraph=True, backend="aot_eager")
    with torch.inference_mode():
        for t in range(3):
            want = block.step(u[:, t : t + 1], *states[0])[0]
            got = step(u[:, t : t + 1], *states[1])[0]
            assert rel(got, want) < 1e-5
    assert all(rel(a, b) < 1e-5 for a, b in zip(states[1], states[0]))
