"""``ssd`` and ``ssd_step`` where mamba_ssm's semantics are easy to miss (defects D75-D85, found by the session-21
audit): the default ``dt_limit`` clamps, the initial state belongs to sequence 0, padding rows of a decoding cache,
arguments lifted one by one, ``state_dtype``, and the checks of flags, parameters and types.

References: the float64 sequential recurrence of ``ssd_cases.reference`` and stepping rows one at a time."""

import math

import pytest
import torch
from conftest import F64, rel
from ssd_cases import reference

import structmat as sm


def _data(b=1, l=6, h=2, p=3, g=1, n=4, seed=0):
    gen = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=gen, dtype=F64)  # noqa: E731
    return r(b, l, h, p), r(b, l, h), -torch.rand(h, generator=gen, dtype=F64), r(b, l, g, n), r(b, l, g, n)


def test_the_default_dt_limit_clamps_a_negative_dt():
    """D75: mamba_ssm clamps the processed ``dt`` to ``dt_limit`` always, so under the default ``(0, inf)`` a negative
    ``dt`` is 0 (no step, no input); ``ssd_step`` applies no limit by default, as ``selective_state_update``."""
    x, dt, A, B, C = _data()
    assert bool((dt < 0).any())
    out = sm.ssd(x, dt, A, B, C, 4)
    assert rel(out, reference(x, dt.clamp_min(0), A, B, C)[0]) < 1e-12
    explicit = sm.ssd(x, dt, A, B, C, 4, dt_limit=(0.0, 1e30))
    assert rel(out, explicit) < 1e-14
    state = torch.zeros(1, 2, 3, 4, dtype=F64)
    for t in range(x.shape[1]):
        y = sm.ssd_step(state, x[:, t], dt[:, t, :, None].expand(1, 2, 3), A[:, None, None].expand(2, 3, 4), B[:, t],
                        C[:, t])
    assert rel(y, reference(x, dt, A, B, C, dt_limit=(-math.inf, math.inf))[0][:, -1]) < 1e-12
    state = torch.zeros(1, 2, 3, 4, dtype=F64)  # with ssd's limit passed, decoding reproduces ssd
    for t in range(x.shape[1]):
        y = sm.ssd_step(state, x[:, t], dt[:, t, :, None].expand(1, 2, 3), A[:, None, None].expand(2, 3, 4), B[:, t],
                        C[:, t], dt_limit=(0.0, math.inf))
    assert rel(y, out[:, -1]) < 1e-12


def test_the_final_state_with_an_empty_last_packed_sequence():
    """D76: with one initial state per packed sequence, ``final_states`` is the state after the last step (that of
    the last sequence that has steps), not the last sequence's initial state added to it."""
    x, dt, A, B, C = _data(l=4)
    dt = dt.abs()
    init = torch.randn(3, 2, 3, 4, dtype=F64)
    cu = torch.tensor([0, 1, 4, 4])
    out, final, varlen = sm.ssd(x, dt, A, B, C, 2, initial_states=init, cu_seqlens=cu, return_final_states=True,
                                return_varlen_states=True)
    assert rel(final[0], varlen[1]) < 1e-13 and rel(varlen[2], init[2]) < 1e-15
    alone = sm.ssd(x[:, 1:], dt[:, 1:], A, B[:, 1:], C[:, 1:], 2, initial_states=init[1:2], return_final_states=True)[1]
    assert rel(final, alone) < 1e-12


def test_the_initial_state_belongs_to_sequence_zero():
    """D77: with ``seq_idx``, the initial state is the state before the sequence with id 0; a row that starts at
    another id starts from zero (mamba_ssm's kernels compare the first id with 0)."""
    x, dt, A, B, C = _data(b=2)
    dt = dt.abs()
    init = torch.randn(2, 2, 3, 4, dtype=F64)
    seq_idx = torch.tensor([[0, 0, 0, 1, 1, 1], [1, 1, 2, 2, 2, 2]])
    out, final = sm.ssd(x, dt, A, B, C, 4, initial_states=init, seq_idx=seq_idx, return_final_states=True)
    row0 = reference(x[:1], dt[:1], A, B[:1], C[:1], initial_states=init[:1], seq_idx=seq_idx[:1])[0]
    row1 = reference(x[1:], dt[1:], A, B[1:], C[1:], seq_idx=seq_idx[1:])[0]
    assert rel(out[:1], row0) < 1e-12 and rel(out[1:], row1) < 1e-12
    without = sm.ssd(x[1:], dt[1:], A, B[1:], C[1:], 4, seq_idx=seq_idx[1:], return_final_states=True)[1]
    assert rel(final[1:], without) < 1e-13
    g = init.clone().requires_grad_()
    sm.ssd(x, dt, A, B, C, 4, initial_states=g, seq_idx=seq_idx).sum().backward()
    assert bool((g.grad[1] == 0).all()) and bool((g.grad[0] != 0).any())


def _step_args(b, h, p, n, seed=1):
    gen = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=gen, dtype=F64)  # noqa: E731
    return r(b, h, p), r(b, h, p), -torch.rand(h, p, n, generator=gen, dtype=F64), r(b, 1, n), r(b, 1, n)


def test_ssd_step_state_batch_indices_positional_with_padding_rows():
    """D78: ``state_batch_indices`` is ``selective_state_update``'s eleventh argument, and a negative index marks a
    padding row: its output is 0 and no state is touched; the other rows step as alone."""
    x, dt, A, B, C = _step_args(3, 2, 3, 4)
    cache = torch.randn(5, 2, 3, 4, dtype=F64)
    state = cache.clone()
    out = sm.ssd_step(state, x, dt, A, B, C, None, None, None, True, torch.tensor([-1, 4, 0]))
    assert bool((out[0] == 0).all())
    for i, row in ((1, 4), (2, 0)):
        alone = cache[row:row + 1].clone()
        want = sm.ssd_step(alone, x[i:i + 1], dt[i:i + 1], A, B[i:i + 1], C[i:i + 1], dt_softplus=True)
        assert rel(out[i:i + 1], want) < 1e-15 and rel(state[row], alone[0]) < 1e-15
    assert torch.equal(state[1:4], cache[1:4])
    x.requires_grad_()
    sm.ssd_step(cache.clone(), x, dt, A, B, C, None, None, None, True, torch.tensor([-1, 4, 0])).sum().backward()
    assert bool((x.grad[0] == 0).all()) and bool((x.grad[1:] != 0).any())


def test_ssd_step_lifts_each_argument_on_its_own():
    """D79: as ``selective_state_update``, each argument gets its heads axis on its own: ``B, C (batch, dstate)``
    beside a state with heads, and with one head a 2-D ``A`` and 1-D ``D`` and ``dt_bias``."""
    x, dt, A, B, C = _step_args(2, 3, 2, 4)
    s1 = torch.randn(2, 3, 2, 4, dtype=F64)
    s2 = s1.clone()
    assert rel(sm.ssd_step(s1, x, dt, A, B[:, 0], C[:, 0]), sm.ssd_step(s2, x, dt, A, B, C)) < 1e-15
    assert rel(s1, s2) < 1e-15
    x, dt, A, B, C = _step_args(2, 1, 2, 4)
    D, bias = torch.randn(2, dtype=F64), torch.randn(2, dtype=F64)
    s1 = torch.randn(2, 1, 2, 4, dtype=F64)
    s2 = s1.clone()
    got = sm.ssd_step(s1, x, dt, A[0], B, C, D, None, bias, True)
    want = sm.ssd_step(s2, x, dt, A, B, C, D[None], None, bias[None], True)
    assert got.shape == (2, 1, 2) and rel(got, want) < 1e-15 and rel(s1, s2) < 1e-15


def test_state_dtype_sets_the_returned_states_dtype():
    """D80: mamba_ssm's seventeenth argument ``state_dtype``: the returned states in that dtype (computed in float32
    whatever it is)."""
    x, dt, A, B, C = (t.float() for t in _data(l=5))
    cu = torch.tensor([0, 2, 5])
    out, final, varlen = sm.ssd(x, dt.abs(), A, B, C, 4, None, None, None, None, None, cu, False, (0.0, math.inf),
                                True, True, torch.bfloat16)
    assert final.dtype == varlen.dtype == torch.bfloat16
    _, f32, v32 = sm.ssd(x, dt.abs(), A, B, C, 4, cu_seqlens=cu, return_final_states=True, return_varlen_states=True)
    assert f32.dtype == torch.float32 and torch.equal(final, f32.to(torch.bfloat16))
    assert torch.equal(varlen, v32.to(torch.bfloat16))
    with pytest.raises(TypeError, match="state_dtype must be a torch.dtype"):
        sm.ssd(x, dt, A, B, C, 4, state_dtype="bf16")


def test_cu_seqlens_without_varlen_states_is_ignored():
    """D81: mamba_ssm reads ``cu_seqlens`` only for the varlen states: a batch of two with it is no error."""
    x, dt, A, B, C = _data(b=2)
    got = sm.ssd(x, dt.abs(), A, B, C, 4, cu_seqlens=torch.tensor([0, 3, 6]))
    assert rel(got, sm.ssd(x, dt.abs(), A, B, C, 4)) < 1e-15


def test_varlen_states_are_not_differentiated_with_per_sequence_initial_states():
    """D82: the varlen states are documented as not differentiated; with per-sequence initial states they carried a
    gradient of the initial states only (none of ``x``)."""
    x, dt, A, B, C = _data(l=4)
    init = torch.randn(2, 2, 3, 4, dtype=F64, requires_grad=True)
    x.requires_grad_()
    _, varlen = sm.ssd(x, dt.abs(), A, B, C, 2, initial_states=init, cu_seqlens=torch.tensor([0, 1, 4]),
                       return_varlen_states=True)
    assert not varlen.requires_grad


def test_non_finite_parameters_raise_and_leave_the_state():
    """D83: a NaN ``A``, ``D`` or ``dt_bias`` raises (``ssd_step`` wrote NaN into the caller's state in place)."""
    x, dt, A, B, C = _data()
    nan = torch.full((2,), math.nan, dtype=F64)
    for kw in (dict(dt_bias=nan), dict(D=nan)):
        with pytest.raises(ValueError, match=f"{next(iter(kw))} must be finite"):
            sm.ssd(x, dt, A, B, C, 4, **kw)
    xs, dts, As, Bs, Cs = _step_args(2, 2, 3, 4)
    state = torch.randn(2, 2, 3, 4, dtype=F64)
    before = state.clone()
    for args, name in (((As * math.nan,), "A"), ((As, torch.full((2, 3), math.nan, dtype=F64)), "D")):
        with pytest.raises(ValueError, match=f"{name} must be finite"):
            sm.ssd_step(state, xs, dts, args[0], Bs, Cs, *args[1:])
    with pytest.raises(ValueError, match="dt_bias must be finite"):
        sm.ssd_step(state, xs, dts, As, Bs, Cs, dt_bias=torch.full((2, 3), math.nan, dtype=F64))
    assert torch.equal(state, before)


def test_flags_must_be_bools_and_x_a_tensor():
    """D84, D85: ``dt_softplus="no"`` applied softplus and ``return_final_states="no"`` returned a tuple; a list or
    numpy ``x`` gave a shape error."""
    x, dt, A, B, C = _data()
    for kw in (dict(dt_softplus="no"), dict(return_final_states="no"), dict(return_varlen_states=1)):
        with pytest.raises(TypeError, match=f"{next(iter(kw))} must be a bool"):
            sm.ssd(x, dt, A, B, C, 4, **kw)
    xs, dts, As, Bs, Cs = _step_args(2, 2, 3, 4)
    with pytest.raises(TypeError, match="dt_softplus must be a bool"):
        sm.ssd_step(torch.zeros(2, 2, 3, 4, dtype=F64), xs, dts, As, Bs, Cs, dt_softplus="False")
    for bad in (x.tolist(), x.numpy(), None):
        with pytest.raises(TypeError, match="x must be a tensor"):
            sm.ssd(bad, dt, A, B, C, 4)
