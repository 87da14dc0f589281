"""``ssd_step``: decoding reproduces ``ssd`` (outputs and the state updated in place), ``dt_limit``, and the rows of a
larger state cache by ``state_batch_indices``."""

import pytest
import torch
from conftest import F64, rel
from hypothesis import given, settings
from hypothesis import strategies as st
from ssd_cases import inputs, reference

import structmat as sm


def test_ssd_step_reproduces_ssd_and_updates_in_place():
    b, l, h, p, g, n = 2, 12, 4, 3, 2, 5
    t = inputs(b, l, h, p, g, n, seed=10, dtype=F64, device="cpu")
    kw = dict(D=t["D"], z=t["z"], dt_bias=t["dt_bias"].double(), dt_softplus=True)
    out, final = sm.ssd(t["x"], t["dt"].double(), t["A"].double(), t["B"], t["C"], 8,
                        initial_states=t["initial_states"].double(), return_final_states=True, **kw)
    state = t["initial_states"].double().clone()
    expand = lambda v: v[:, None].expand(h, p)  # noqa: E731  (Mamba-2 passes per-head values as broadcast views)
    A = t["A"].double()[:, None, None].expand(h, p, n)
    for i in range(l):
        y = sm.ssd_step(state, t["x"][:, i], t["dt"].double()[:, i, :, None].expand(b, h, p), A, t["B"][:, i], t["C"][:, i],
                        D=t["D"], z=t["z"][:, i], dt_bias=expand(t["dt_bias"].double()), dt_softplus=True)
        assert rel(y, out[:, i]) < 1e-12
    assert rel(state, final) < 1e-12
    x3 = torch.randn(b, p, dtype=F64)  # the form without heads
    st3 = torch.zeros(b, p, n, dtype=F64)
    y3 = sm.ssd_step(st3, x3, torch.ones(b, p, dtype=F64), -torch.ones(p, n, dtype=F64), torch.ones(b, n, dtype=F64),
                     torch.ones(b, n, dtype=F64))
    assert y3.shape == (b, p) and rel(st3, x3[..., None].expand(b, p, n)) < 1e-15
    with pytest.raises(ValueError, match="A must have shape"):
        sm.ssd_step(state, t["x"][:, 0], t["dt"].double()[:, 0, :, None].expand(b, h, p), A[:1], t["B"][:, 0], t["C"][:, 0])


def test_ssd_step_state_batch_indices_step_rows_of_a_larger_cache():
    """``state_batch_indices`` (``selective_state_update``'s): batch row ``i`` steps ``state[indices[i]]``, the
    other rows stay as they were; on the CPU the indices are checked."""
    b, h, p, g, n, rows = 3, 4, 3, 2, 5, 7
    t = inputs(b, 1, h, p, g, n, seed=14, dtype=F64, device="cpu")
    cache = torch.randn(rows, h, p, n, dtype=F64)
    args = (t["x"][:, 0], t["dt"].double()[:, 0, :, None].expand(b, h, p), t["A"].double()[:, None, None].expand(h, p, n),
            t["B"][:, 0], t["C"][:, 0])
    kw = dict(D=t["D"], z=t["z"][:, 0], dt_softplus=True)
    for dtype in (torch.int64, torch.int32):
        idx = torch.tensor([5, 0, 2], dtype=dtype)
        state = cache.clone()
        got = sm.ssd_step(state, *args, state_batch_indices=idx, **kw)
        want_state = cache[idx.long()].clone()
        want = sm.ssd_step(want_state, *args, **kw)
        assert rel(got, want) < 1e-15 and rel(state[idx.long()], want_state) < 1e-15
        untouched = [r for r in range(rows) if r not in idx.tolist()]
        assert torch.equal(state[untouched], cache[untouched])
    st2, x2 = cache[:, 0].clone(), args[0][:, 0]  # the form without heads
    y2 = sm.ssd_step(st2, x2, args[1][:, 0], args[2][0], args[3][:, 0], args[4][:, 0], state_batch_indices=idx)
    ref2 = cache[idx.long(), 0].clone()
    assert rel(y2, sm.ssd_step(ref2, x2, args[1][:, 0], args[2][0], args[3][:, 0], args[4][:, 0])) < 1e-15
    assert rel(st2[idx.long()], ref2) < 1e-15
    for bad, match in ((torch.tensor([5, 0, 7]), "lie below 7"),
                       (torch.tensor([5, 0, 5]), "distinct"), (torch.tensor([[5, 0, 2]]), r"shape \(batch,\)"),
                       (torch.tensor([5, 0]), r"x must have shape \(2, 4, 3\)")):
        state = cache.clone()
        with pytest.raises(ValueError, match=match):
            sm.ssd_step(state, *args, state_batch_indices=bad, **kw)
        assert torch.equal(state, cache)
    with pytest.raises(TypeError, match="state_batch_indices must be an integer tensor"):
        sm.ssd_step(cache.clone(), *args, state_batch_indices=torch.tensor([5.0, 0.0, 2.0]), **kw)


def test_ssd_step_applies_dt_limit_like_ssd():
    """``ssd_step(..., dt_limit=)`` clamps after the bias and softplus, so decoding reproduces ``ssd`` with the same
    limit (``selective_state_update`` has none)."""
    b, l, h, p, g, n = 2, 9, 4, 3, 2, 5
    t = inputs(b, l, h, p, g, n, seed=12, dtype=F64, device="cpu")
    dt, A, bias = t["dt"].double() * 3 - 1, t["A"].double(), t["dt_bias"].double()
    kw = dict(dt_bias=bias, dt_softplus=True, dt_limit=(0.2, 0.5))
    out, final = sm.ssd(t["x"], dt, A, t["B"], t["C"], 4, D=t["D"], return_final_states=True, **kw)
    assert rel(out, reference(t["x"], dt, A, t["B"], t["C"], D=t["D"], **kw)[0]) < 1e-12
    state = torch.zeros(b, h, p, n, dtype=F64)
    expand = lambda v: v[:, None].expand(h, p)  # noqa: E731
    for i in range(l):
        y = sm.ssd_step(state, t["x"][:, i], dt[:, i, :, None].expand(b, h, p), A[:, None, None].expand(h, p, n),
                        t["B"][:, i], t["C"][:, i], D=t["D"], dt_bias=expand(bias), dt_softplus=True, dt_limit=(0.2, 0.5))
        assert rel(y, out[:, i]) < 1e-12
    assert rel(state, final) < 1e-12
    with pytest.raises(ValueError, match="dt_limit must be"):
        sm.ssd_step(state, t["x"][:, 0], dt[:, 0, :, None].expand(b, h, p), A[:, None, None].expand(h, p, n),
                    t["B"][:, 0], t["C"][:, 0], dt_limit=(0.5, 0.2))


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 6), data=st.data(), heads=st.booleans(), dtype=st.sampled_from([torch.float32, F64]))
def test_state_batch_indices_equal_stepping_each_row_alone(rows, data, heads, dtype):
    """Any distinct indices (a permutation of a subset of the rows, the empty one included): each batch row equals
    a batch of one stepping its own row, and the rows not named keep their values exactly."""
    idx = torch.tensor(data.draw(st.permutations(range(rows)))[: data.draw(st.integers(0, rows))], dtype=torch.long)
    b, h, p, n = idx.numel(), 2, 3, 4
    gen = torch.Generator().manual_seed(rows)
    r = lambda *s: torch.randn(*s, generator=gen, dtype=F64).to(dtype)  # noqa: E731
    cache, x, dt, B, C, A = r(rows, h, p, n), r(b, h, p), r(b, h, p), r(b, 1, n), r(b, 1, n), -r(h, p, n).abs()
    if not heads:  # the form without heads: (batch, dim, dstate)
        cache, x, dt, B, C, A = cache[:, 0], x[:, 0], dt[:, 0], B[:, 0], C[:, 0], A[0]
    state = cache.clone()
    out = sm.ssd_step(state, x, dt, A, B, C, dt_softplus=True, state_batch_indices=idx)
    assert out.shape == x.shape
    for i, row in enumerate(idx.tolist()):
        alone = cache[row : row + 1].clone()
        want = sm.ssd_step(alone, x[i : i + 1], dt[i : i + 1], A, B[i : i + 1], C[i : i + 1], dt_softplus=True)
        tol = 1e-6 if dtype == torch.float32 else 1e-14
        assert rel(out[i : i + 1], want) < tol and rel(state[row], alone[0]) < tol
    others = sorted(set(range(rows)) - set(idx.tolist()))
    assert torch.equal(state[others], cache[others])


def test_shape_errors_name_the_users_shape():
    """Session 23's audit: a ``dt`` without its headdim axis was reported in the lifted shape ``(2, 1, 4)``; the
    layers took numpy arrays to an ``AttributeError``; a heads mismatch named its rule unclearly."""
    state, x, A = torch.zeros(2, 4, 3, 5), torch.randn(2, 4, 3), -torch.ones(4, 3, 5)
    B = C = torch.randn(2, 1, 5)
    with pytest.raises(ValueError, match=r"dt must have shape \(2, 4, 3\) .* got \(2, 4\)$"):
        sm.ssd_step(state, x, torch.rand(2, 4), A, B, C)
    from structmat.nn import SMA, Hydra, Mamba2

    for layer in (Mamba2(16, d_state=4, headdim=8), Hydra(16, d_state=4, headdim=8), SMA(16, 2, mask="decay", d_state=4)):
        with pytest.raises(TypeError, match=r"u must be a tensor of shape \(batch, seqlen, 16\); got ndarray"):
            layer(torch.randn(1, 3, 16).numpy())
    with pytest.raises(ValueError, match=r"q must have as many heads as v \(H=3\) or as k \(H_k=1\); got 2"):
        sm.SMADecoder(sm.OneSS.decay(0.9, 4)).step(torch.randn(1, 2, 3), torch.randn(1, 1, 3), torch.randn(1, 3, 4))
