"""``ssd``: mamba_ssm's contract (positional order, returns, packed sequences), every backend against a float64
sequential recurrence, forward and backward (``ssd_step``: ``test_ssd_step.py``)."""

import importlib
import math
import sys
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import DEV, F64, rel
from hypothesis import given, settings
from hypothesis import strategies as st
from ssd_cases import inputs, reference

import structmat as sm

BACKENDS = ["torch", "triton"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("features", ["plain", "all", "seq_idx"])
def test_forward_matches_sequential(backend, features):
    b, l, h, p, g, n = 2, 37, 4, 8, 2, 16  # l not a multiple of the chunk, ngroups > 1
    t = inputs(b, l, h, p, g, n, seed=1)
    kw = {}
    if features in ("all", "seq_idx"):
        kw = dict(D=t["D"], z=t["z"], dt_bias=t["dt_bias"], dt_softplus=True, initial_states=t["initial_states"])
    if features == "seq_idx":
        kw["seq_idx"] = torch.tensor([[0] * 5 + [1] * 20 + [2] * 12, [0] * 37], device=DEV, dtype=torch.int32)
        kw["D"] = t["D"][:, 0]
    out, final = sm.ssd(t["x"], t["dt"], t["A"], t["B"], t["C"], 16, return_final_states=True, backend=backend, **kw)
    with torch.no_grad():
        want, want_final = reference(t["x"], t["dt"], t["A"], t["B"], t["C"], **kw)
    assert out.shape == t["x"].shape and out.dtype == t["x"].dtype
    assert rel(out, want) < 1e-5 and rel(final, want_final) < 1e-5


@pytest.mark.parametrize("backend", BACKENDS)
def test_backward_matches_float64(backend):
    b, l, h, p, g, n = 1, 40, 4, 8, 2, 16
    t = inputs(b, l, h, p, g, n, seed=2)
    names = ["x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states"]
    leaves = {k: t[k].clone().requires_grad_() for k in names}
    seq = torch.tensor([[0] * 12 + [1] * 28], device=DEV, dtype=torch.int32)
    kw = dict(dt_softplus=True, seq_idx=seq)
    out, final = sm.ssd(leaves["x"], leaves["dt"], leaves["A"], leaves["B"], leaves["C"], 16, D=leaves["D"],
                        z=leaves["z"], dt_bias=leaves["dt_bias"], initial_states=leaves["initial_states"],
                        return_final_states=True, backend=backend, **kw)
    gen = torch.Generator().manual_seed(3)
    gy, gf = torch.randn(out.shape, generator=gen, dtype=F64), torch.randn(final.shape, generator=gen, dtype=F64)
    torch.autograd.backward([out, final], [gy.to(out), gf.to(final)])
    refs = {k: t[k].detach().cpu().to(F64).requires_grad_() for k in names}
    want, want_final = reference(refs["x"], refs["dt"], refs["A"], refs["B"], refs["C"], D=refs["D"], z=refs["z"],
                                 dt_bias=refs["dt_bias"], initial_states=refs["initial_states"], **kw)
    torch.autograd.backward([want, want_final], [gy, gf])
    for k in names:
        assert rel(leaves[k].grad, refs[k].grad) < 1e-4, k


def test_positional_order_is_mamba_ssm_s():
    """``ssd(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, cu_seqlens, dt_softplus,
    dt_limit, return_final_states, return_varlen_states)``, every argument positional."""
    t = inputs(1, 30, 4, 3, 2, 5, seed=4, dtype=F64, device="cpu")
    seq = torch.tensor([[0] * 10 + [1] * 20])
    cu = torch.tensor([0, 10, 30])
    args = (t["x"], t["dt"].double(), t["A"].double(), t["B"], t["C"], 8, t["D"].double(), t["z"], t["dt_bias"].double(),
            t["initial_states"].double(), seq, cu, True, (0.0, 5.0), True, True)
    out, final, varlen = sm.ssd(*args)
    kw = dict(D=t["D"], z=t["z"], dt_bias=t["dt_bias"], dt_softplus=True, dt_limit=(0.0, 5.0),
              initial_states=t["initial_states"], seq_idx=seq)
    want, want_final = reference(t["x"], t["dt"], t["A"], t["B"], t["C"], **kw)
    assert rel(out, want) < 1e-12 and rel(final, want_final) < 1e-12
    assert varlen.shape == (2, 4, 3, 5)
    for i, (s, e) in enumerate(((0, 10), (10, 30))):
        init = t["initial_states"] if i == 0 else None
        _, fin = reference(t["x"][:, s:e], t["dt"][:, s:e], t["A"], t["B"][:, s:e], t["C"][:, s:e], dt_bias=t["dt_bias"],
                           dt_softplus=True, dt_limit=(0.0, 5.0), initial_states=init)
        assert rel(varlen[i], fin[0]) < 1e-12
    assert len(sm.ssd(*args[:15], False)) == 2 and len(sm.ssd(*args[:14], False, True)) == 2
    assert torch.is_tensor(sm.ssd(*args[:5]))


def _segsum(x):
    """mamba_ssm's stable segment sum (``modules/ssd_minimal.py``): ``out[..., i, j] = sum x[j+1..i]``, -inf above."""
    T = x.shape[-1]
    x = x[..., None].expand(*x.shape, T).masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(-1), 0)
    return torch.cumsum(x, dim=-2).masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), -torch.inf)


def mamba_ssm_reference(x, dt, A, B, C, chunk_size, D=None, z=None, dt_bias=None, dt_softplus=False):
    """A port (einops spelled out) of mamba_ssm's CPU reference: ``ssd_chunk_scan_combined_ref``'s arguments and
    ``dt`` processing, the chunked algorithm of ``ssd_minimal_discrete`` (Listing 1 of the Mamba-2 paper)."""
    b, l, h, p = x.shape
    dt = dt.double() + (0 if dt_bias is None else dt_bias.double())
    dt = F.softplus(dt) if dt_softplus else dt
    Bh, Ch = (t.double().repeat_interleave(h // t.shape[2], dim=2) for t in (B, C))
    X, dA = x.double() * dt[..., None], dt * A.double()
    X, dA, Bh, Ch = (t.reshape(b, l // chunk_size, chunk_size, *t.shape[2:]) for t in (X, dA, Bh, Ch))
    dA = dA.permute(0, 3, 1, 2)  # b h c l
    cum = torch.cumsum(dA, dim=-1)
    y_diag = torch.einsum("bclhn,bcshn,bhcls,bcshp->bclhp", Ch, Bh, torch.exp(_segsum(dA)), X)
    states = torch.einsum("bclhn,bhcl,bclhp->bchpn", Bh, torch.exp(cum[..., -1:] - cum), X)
    states = torch.cat([torch.zeros_like(states[:, :1]), states], dim=1)
    states = torch.einsum("bhzc,bchpn->bzhpn", torch.exp(_segsum(F.pad(cum[..., -1], (1, 0)))), states)[:, :-1]
    y = (y_diag + torch.einsum("bclhn,bchpn,bhcl->bclhp", Ch, states, torch.exp(cum))).reshape(b, l, h, p)
    y = y if D is None else y + x.double() * (D.double()[:, None] if D.dim() == 1 else D.double())
    return y if z is None else y * F.silu(z.double())


@pytest.mark.parametrize("D_dim", [1, 2])
def test_same_positional_call_as_mamba_ssm_s_reference(D_dim):
    """``ssd`` and mamba_ssm's reference take the same positional arguments (up to ``dt_bias``) and agree."""
    t = inputs(2, 32, 4, 3, 2, 5, seed=6, dtype=F64, device="cpu")
    D = t["D"].double()[:, 0] if D_dim == 1 else t["D"].double()
    args = (t["x"], t["dt"].double() - 0.5, t["A"].double(), t["B"], t["C"], 8, D, t["z"], t["dt_bias"].double())
    assert rel(sm.ssd(*args, dt_softplus=True), mamba_ssm_reference(*args, dt_softplus=True)) < 1e-12
    # (the reference applies no limit; mamba_ssm's kernel clamps dt to (0, inf): test_ssd_mamba_semantics)
    args = (t["x"], t["dt"].double(), *args[2:])
    assert rel(sm.ssd(*args[:6]), mamba_ssm_reference(*args[:6])) < 1e-12


@pytest.mark.skipif(not (torch.cuda.is_available() and (Path(__file__).parents[1] / "peers/mamba_ssm").is_dir()),
                    reason="needs a GPU and mamba_ssm's sources in peers/ (the benchmark machine)")
def test_same_positional_call_as_mamba_ssm_on_the_gpu():
    pkg = types.ModuleType("mamba_ssm")
    pkg.__path__ = [str(Path(__file__).parents[1] / "peers/mamba_ssm")]
    sys.modules.setdefault("mamba_ssm", pkg)
    peer = importlib.import_module("mamba_ssm.ops.triton.ssd_combined").mamba_chunk_scan_combined
    t = inputs(1, 300, 8, 16, 2, 32, seed=5)
    seq = torch.tensor([[0] * 100 + [1] * 200], device="cuda", dtype=torch.int32)
    cu = torch.tensor([0, 100, 300], device="cuda", dtype=torch.int32)
    args = (t["x"], t["dt"], t["A"], t["B"], t["C"], 64, t["D"], t["z"], t["dt_bias"], t["initial_states"], seq, cu,
            True, (0.0, float("inf")), True, True)
    double = tuple(a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args)
    refs = sm.ssd(*double, backend="torch")
    for ours, theirs, ref in zip(sm.ssd(*args), peer(*args), refs):
        # mamba_ssm's float32 dots run in TF32 (~1e-3); a positional argument taken wrongly is off by O(1)
        assert rel(ours, ref) < 1e-4 and rel(theirs, ref) < 5e-3


def test_torch_backend_gradcheck():
    t = inputs(1, 11, 2, 3, 1, 2, seed=4, dtype=F64, device="cpu")
    args = [t[k].to(F64).requires_grad_() for k in ("x", "dt", "A", "B", "C")]
    f = lambda x, dt, A, B, C: sm.ssd(x, dt, A, B, C, 4, dt_softplus=True, backend="torch")  # noqa: E731
    assert torch.autograd.gradcheck(f, args)


@settings(max_examples=8, deadline=None)
@given(st.integers(1, 70), st.sampled_from([(2, 1), (4, 2), (3, 3)]), st.sampled_from([16, 32]),
       st.sampled_from([0.0, 1e-30, 1.0, 60.0]))
def test_triton_random_shapes_and_decays(l, hg, chunk, dt_scale):
    """dt = 0 (no decay, no input), tiny, O(1), and dt A far below -50."""
    h, g = hg
    t = inputs(1, l, h, 5, g, 7, seed=l)
    dt = t["dt"].abs() * dt_scale
    out = sm.ssd(t["x"], dt, t["A"], t["B"], t["C"], chunk, backend="triton")
    want, _ = reference(t["x"], dt, t["A"], t["B"], t["C"])
    assert torch.isfinite(out).all()
    if want.norm() > 0:
        assert rel(out, want) < 1e-5
    else:
        assert out.abs().max() == 0


def test_triton_forward_at_decays_near_minus_370():
    """The example hypothesis drew in session 16: the forward's decays ``exp(lc_i - lc_j)`` from float32 cumulative
    sums lost ``~|lc| 2^-24`` (relative error 1.2e-5 on the CPU and the H100); from fp64 sums split into a float and
    row and column factors (session 17) it is as accurate as the torch backend in float32 (6e-8)."""
    t = inputs(1, 64, 3, 5, 3, 7, seed=64)
    dt = t["dt"].abs() * 60.0
    for chunk in (16, 32):
        out = sm.ssd(t["x"], dt, t["A"], t["B"], t["C"], chunk, backend="triton")
        want, _ = reference(t["x"], dt, t["A"], t["B"], t["C"])
        assert rel(out, want) < 5e-7


@pytest.mark.parametrize("l, chunk, scale", [(300, 256, 20.0), (300, 256, 400.0), (300, 128, 290.0)])
def test_triton_backward_at_strong_decays(l, chunk, scale):
    """The backward's decays ``exp(cs_i - cs_j)`` from chunk-level cumulative sums (``|cs|`` up to ``chunk x |dt A|``):
    float32 sums lost ``|cs| 2^-24`` in each exponent (float32 inputs: ``ddt`` 4e-5 to 4e-4, ``dA`` 1.5e-4 to 2e-3
    relative on these cases); fp64 sums split into a float and a rest (session 18) leave every gradient within 2e-6
    of float64, as the torch backend (1e-7 to 9e-7)."""
    t = inputs(1, l, 2, 5, 1, 7, seed=l)
    t["dt"] = t["dt"].abs() * scale
    names = ("x", "dt", "A", "B", "C")
    leaves = {k: t[k].clone().requires_grad_() for k in names}
    refs = {k: t[k].detach().to(F64).requires_grad_() for k in names}
    out = sm.ssd(*(leaves[k] for k in names), chunk, backend="triton")
    want, _ = reference(*(refs[k] for k in names))
    gy = torch.randn(out.shape, generator=torch.Generator().manual_seed(l), dtype=F64)
    out.backward(gy.to(out))
    want.backward(gy.to(want))
    assert rel(out, want) < 5e-7
    for k in names:
        assert rel(leaves[k].grad, refs[k].grad) < 2e-6, k


def test_ssd_equals_sma_form_with_oness():
    """With dt processed, ssd is sum_s L[t,s] (C_t . B_s) dt_s x_s with L = OneSS(dt A)."""
    t = inputs(1, 20, 2, 3, 1, 4, seed=6, dtype=F64, device="cpu")
    x, dt, A, B, C = (t[k].to(F64) for k in ("x", "dt", "A", "B", "C"))
    out = sm.ssd(x, dt, A, B, C, 8, backend="torch")
    mask = sm.OneSS((dt * A).transpose(1, 2))
    L = mask.to_dense()  # (b, h, T, T)
    scores = torch.einsum("bthn,bshn->bhts", C.expand(-1, -1, 2, -1), B.expand(-1, -1, 2, -1))
    assert rel(out, torch.einsum("bhts,bshp->bthp", L * scores, x * dt[..., None])) < 1e-12
    assert rel(out, sm.sma(C, B, x * dt[..., None], mask)) < 1e-12


def test_varlen_states_per_sequence():
    t = inputs(1, 50, 4, 8, 2, 16, seed=7)
    cu = torch.tensor([0, 13, 40, 50], device=DEV)
    seq = torch.tensor([[0] * 13 + [1] * 27 + [2] * 10], device=DEV, dtype=torch.int32)
    for backend in BACKENDS:
        out, states = sm.ssd(t["x"], t["dt"], t["A"], t["B"], t["C"], 16, seq_idx=seq, cu_seqlens=cu, dt_softplus=True,
                             return_varlen_states=True, backend=backend)
        assert states.shape == (3, 4, 8, 16)
        for i, (s, e) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist())):
            want, want_fin = reference(t["x"][:, s:e], t["dt"][:, s:e], t["A"], t["B"][:, s:e], t["C"][:, s:e],
                                       dt_softplus=True)
            assert rel(out[:, s:e], want) < 1e-5 and rel(states[i], want_fin[0]) < 1e-5


def test_varlen_states_with_growing_decays_and_float64():
    """A > 0 (the torch backend computes it: no clamp) in float64."""
    t = inputs(1, 30, 2, 3, 1, 4, seed=8, dtype=F64, device="cpu")
    A = torch.tensor([0.3, -0.2], dtype=F64)
    cu, seq = torch.tensor([0, 12, 30]), torch.tensor([[0] * 12 + [1] * 18])
    _, states = sm.ssd(t["x"], t["dt"].double(), A, t["B"], t["C"], 8, seq_idx=seq, cu_seqlens=cu,
                       return_varlen_states=True)
    assert states.dtype == F64
    for i, (s, e) in enumerate(((0, 12), (12, 30))):
        _, fin = reference(t["x"][:, s:e], t["dt"][:, s:e], A, t["B"][:, s:e], t["C"][:, s:e])
        assert rel(states[i], fin[0]) < 1e-12


def test_long_strong_and_weak_decays_in_the_torch_backend():
    t = inputs(1, 300, 2, 4, 1, 4, seed=8, dtype=F64, device="cpu")
    dt = torch.full((1, 300, 2), 5.0, dtype=F64)  # strong decay: exp(-10) per step
    A = torch.tensor([-2.0, -1e-7], dtype=F64)  # and an almost-constant one
    out, fin = sm.ssd(t["x"], dt, A, t["B"], t["C"], 64, return_final_states=True)
    want, want_fin = reference(t["x"], dt, A, t["B"], t["C"])
    assert rel(out, want) < 1e-12 and rel(fin, want_fin) < 1e-12


def test_mixed_dtypes_and_empty_sequences():
    t = inputs(1, 20, 2, 3, 1, 4, seed=9)  # on DEV: the Triton backend takes CUDA tensors where there is a GPU
    for backend in BACKENDS:
        out = sm.ssd(t["x"], t["dt"], t["A"], t["B"].half(), t["C"].half(), 16, backend=backend)
        assert out.dtype == torch.float32 and torch.isfinite(out).all()
    e = inputs(1, 0, 2, 3, 1, 4, device="cpu")
    out, fin = sm.ssd(e["x"], e["dt"], e["A"], e["B"], e["C"], 16, return_final_states=True)
    assert out.shape == (1, 0, 2, 3) and fin.shape == (1, 2, 3, 4) and (fin == 0).all()


def test_empty_batch():
    """A zero-size batch gives numpy's answer (empty outputs and states); the torch backend's chunk reshape
    crashed ("cannot reshape tensor of 0 elements ... -1 can be any value")."""
    e = inputs(0, 10, 2, 3, 1, 4, device="cpu")
    out, fin = sm.ssd(e["x"], e["dt"], e["A"], e["B"], e["C"], 4, D=e["D"], z=e["z"], return_final_states=True,
                      backend="torch")
    assert out.shape == (0, 10, 2, 3) and fin.shape == (0, 2, 3, 4)


def test_errors_name_the_argument():
    t = inputs(1, 8, 2, 3, 1, 4, device="cpu")
    x, dt, A, B, C = (t[k] for k in ("x", "dt", "A", "B", "C"))
    cases = [
        (dict(dt=dt[:, :4]), "dt must have shape"), (dict(A=A[:1]), "A must have shape"),
        (dict(B=torch.zeros(1, 8, 3, 4), C=torch.zeros(1, 8, 3, 4)), "multiple of ngroups"),
        (dict(initial_states=torch.zeros(1, 2, 4, 3)), "initial_states must have shape"),
        (dict(backend="cuda"), "backend must be one of"), (dict(chunk_size=2.5), "chunk_size must be a positive int"),
        (dict(dt_limit=(1.0, 0.5)), "dt_limit must be"), (dict(A=torch.tensor([float("nan"), -1.0])), "A must be finite"),
        (dict(seq_idx=torch.tensor([[0, 0, 1, 1, 0, 0, 1, 1]])), "seq_idx must be non-decreasing"),
        (dict(cu_seqlens=torch.tensor([0, 4, 9]), return_varlen_states=True), "cu_seqlens must start at 0"),
        (dict(cu_seqlens=torch.tensor([1, 4, 8]), return_varlen_states=True), "cu_seqlens must start at 0"),
        (dict(cu_seqlens=torch.tensor([0, 5, 4, 8]), return_varlen_states=True), "not decrease"),
        (dict(cu_seqlens=torch.tensor([0, 4, 8]), seq_idx=torch.tensor([[0] * 3 + [1] * 5]), return_varlen_states=True),
         "cu_seqlens and seq_idx disagree"),
        (dict(return_varlen_states=True), "return_varlen_states needs cu_seqlens"),
        (dict(A=torch.ones(2), backend="triton"), "dt \\* A <= 0"),
        (dict(x=x.double(), B=B.double(), C=C.double(), backend="triton"), "float64"),
    ]
    for change, message in cases:
        kw = dict(x=x, dt=dt, A=A, B=B, C=C, chunk_size=16)
        if change.get("backend") == "triton":  # CUDA tensors where there is a GPU (CPU ones are refused first)
            change = {k: v.to(DEV) if isinstance(v, torch.Tensor) else v for k, v in change.items()}
            kw = {k: v.to(DEV) if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
        kw.update(change)
        with pytest.raises(ValueError, match=message):
            sm.ssd(kw.pop("x"), kw.pop("dt"), kw.pop("A"), kw.pop("B"), kw.pop("C"), **kw)


def test_decay_check_reads_A_once_per_version(monkeypatch):
    """The decay check drains the CUDA queue, so with ``dt >= 0`` by construction it reads ``A`` once per
    tensor version: a second call with the same ``A`` reads nothing, an in-place change is read again
    (a NaN written into ``A`` still raises), and a ``dt`` that may be negative is checked with ``dt A``."""
    ssd_module = sys.modules["structmat.ssd"]  # the attribute structmat.ssd is the function
    reads = []
    verdict = ssd_module._a_verdict
    monkeypatch.setattr(ssd_module, "_a_verdict", lambda A: reads.append(1) or verdict(A))
    t = inputs(1, 8, 2, 3, 1, 4, device="cpu")
    x, dt, B, C = t["x"], t["dt"], t["B"], t["C"]
    A = -torch.ones(2)
    first = sm.ssd(x, dt, A, B, C, 4, dt_softplus=True)
    assert torch.equal(sm.ssd(x, dt, A, B, C, 4, dt_softplus=True), first) and len(reads) == 1
    A[0] = float("nan")
    with pytest.raises(ValueError, match="A must be finite"):
        sm.ssd(x, dt, A, B, C, 4, dt_softplus=True)
    assert len(reads) == 2
    with pytest.raises(ValueError, match="dt \\* A <= 0"):  # negative dt (a limit that keeps it), negative A: decays
        sm.ssd(x.to(DEV), -dt.abs().to(DEV) - 0.1, -torch.ones(2, device=DEV), B.to(DEV), C.to(DEV), 16,  # above 1
               dt_limit=(-math.inf, math.inf), backend="triton")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU error")
def test_triton_backend_on_cpu_tensors_says_so(monkeypatch):
    """Outside the interpreter, CPU tensors got Triton's "0 active drivers"; now an error naming the backend."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    t = inputs(1, 8, 2, 3, 1, 4, device="cpu")
    with pytest.raises(ValueError, match="backend='triton' needs CUDA tensors"):
        sm.ssd(t["x"], t["dt"], t["A"], t["B"], t["C"], 16, backend="triton")


def test_output_dtype_is_x_and_integer_inputs_raise():
    """The output has ``x``'s dtype (as mamba_ssm's ``empty_like(x)``) when ``B, C`` are wider; integer values raise
    (an integer ``x`` gave ``ssd_step`` an integer output, its values truncated), as does a floating ``seq_idx``."""
    t = inputs(1, 10, 2, 3, 1, 4, seed=13, device="cpu")
    x, dt, A, B, C = (t[k] for k in ("x", "dt", "A", "B", "C"))
    out = sm.ssd(x, dt, A, B.double(), C.double(), 4)
    want, _ = reference(x.double(), dt.double(), A.double(), B.double(), C.double())
    assert out.dtype == torch.float32 and rel(out, want) < 1e-6
    for name, value in (("x", x.long()), ("dt", dt.long()), ("A", A.long()), ("B", B.int()), ("D", torch.ones(2, dtype=torch.long))):
        kw = dict(x=x, dt=dt, A=A, B=B, C=C)
        kw[name] = value
        with pytest.raises(TypeError, match=f"{name} must be a floating-point tensor"):
            sm.ssd(kw.pop("x"), kw.pop("dt"), kw.pop("A"), kw.pop("B"), kw.pop("C"), 4, **kw)
    with pytest.raises(TypeError, match="seq_idx must be an integer tensor"):
        sm.ssd(x, dt, A, B, C, 4, seq_idx=torch.zeros(1, 10))
    state = torch.zeros(1, 2, 3, 4)
    with pytest.raises(TypeError, match="x must be a floating-point tensor"):
        sm.ssd_step(state, torch.ones(1, 2, 3, dtype=torch.long), torch.ones(1, 2, 3), -torch.ones(2, 3, 4),
                    torch.ones(1, 1, 4), torch.ones(1, 1, 4))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="bf16 kernel accuracy needs a GPU")
def test_bf16_gpu_accuracy_against_float64():
    t = inputs(2, 1024, 8, 64, 1, 64, seed=9, dtype=torch.bfloat16)
    dt = F.softplus(t["dt"] - 3)
    out = sm.ssd(t["x"], dt, t["A"], t["B"], t["C"], 256)
    want, _ = reference(t["x"], dt, t["A"], t["B"], t["C"])
    assert rel(out, want) < 1e-2


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_initial_state_per_packed_sequence(backend):
    t = inputs(1, 40, 4, 3, 2, 5, seed=12)
    cu = torch.tensor([0, 9, 9, 31, 40], device=DEV)  # an empty sequence too
    init = torch.randn(4, 4, 3, 5, generator=torch.Generator().manual_seed(13)).to(DEV)
    out, final, states = sm.ssd(t["x"], t["dt"], t["A"], t["B"], t["C"], 16, z=t["z"], cu_seqlens=cu,
                                initial_states=init, dt_softplus=True, return_final_states=True,
                                return_varlen_states=True, backend=backend)
    for i, (s, e) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist())):
        want, want_fin = reference(t["x"][:, s:e], t["dt"][:, s:e], t["A"], t["B"][:, s:e], t["C"][:, s:e], z=t["z"][:, s:e],
                                   dt_softplus=True, initial_states=init[i : i + 1])
        if e > s:
            assert rel(out[:, s:e], want) < 1e-5
        assert rel(states[i], want_fin[0]) < 1e-5
    assert rel(final, states[-1:]) < 1e-6
