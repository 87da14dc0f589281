"""Recurrences: the blocked scan, the 1-SS hot path and the compiled CPU solvers against the plain loop."""

import numpy as np
import pytest
import torch
from conftest import F64, close, rand, randn
from hypothesis import given
from hypothesis import strategies as st

import structmat as sm
import structmat.testing as smt
from structmat.linalg.first_order import first_order_scan
from structmat.linalg.iir import MAX_BANDED_COLUMNS, compiled_path
from structmat.linalg.scan import decay_scan, linear_scan, linear_scan_sequential
from structmat.linalg.segsum import segsum
from structmat.matrices.one_ss import safe_log


@given(st.sampled_from(["log", "scalar", "diag", "dense"]), st.integers(0, 300), st.integers(1, 3))
def test_blocked_scan_equals_sequential(kind, T, N):
    shape = {"log": (2, T), "scalar": (2, T), "diag": (2, T, N), "dense": (2, T, N, N)}[kind]
    A = rand(*shape, seed=T * 7 + N)
    A = sm.Transitions(A.log() if kind == "log" else A / N, kind)
    u, h0 = randn(2, T, N, 2, seed=1), randn(2, N, 2, seed=2)
    for init in (None, h0):
        close(linear_scan(A, u, init, chunk=8), linear_scan_sequential(A, u, init))


broadcast_pairs = st.sampled_from([((), ()), ((2,), (2,)), ((1,), (3,)), ((3, 1), (3, 2)), ((), (2, 2)), ((2, 3), (3,))])


@given(broadcast_pairs, st.integers(2, 90), st.integers(1, 3), st.booleans(), st.data())
def test_first_order_scan_matches_sequential_and_blocked(shapes, T, K, constant, data):
    """The compiled CPU paths (lfilter, LAPACK) against the plain recurrence and the blocked scan (the GPU path)."""
    a_batch, x_batch = shapes
    a = data.draw(smt.decays((*a_batch, T)))
    if constant:
        a = a[..., 1:2].expand(*a_batch, T)
    log_a = safe_log(a)
    X = randn(*x_batch, T, K, seed=T)
    assert compiled_path(log_a, X)[0]
    h = first_order_scan(log_a, X)
    batch = torch.broadcast_shapes(a_batch, x_batch)
    la, Xb = log_a.expand(*batch, T), X.expand(*batch, T, K)
    close(h, linear_scan_sequential(sm.Transitions(la, "log"), Xb[..., None, :])[..., 0, :])
    close(h, decay_scan(torch.cat([torch.zeros_like(la[..., :1]), la[..., 1:]], -1), Xb))


@pytest.mark.parametrize("path", ["compiled", "blocked", "complex"])
def test_first_order_scan_gradients_on_every_path(path):
    T = 12 if path == "blocked" else 40
    X = {"compiled": randn(3, T, 2), "blocked": randn(T, MAX_BANDED_COLUMNS + 1),
         "complex": randn(T, 2, dtype=torch.complex128)}[path]
    X.requires_grad_(path != "blocked")  # the blocked path's X: its 780 entries would make gradcheck slow
    shapes = ((T,), (3, T), (2, 1, T)) if path == "compiled" else ((T,), (1, T))
    for i, shape in enumerate(shapes):
        la = (-rand(*shape, seed=i)).requires_grad_()
        assert torch.autograd.gradcheck(lambda la, x: first_order_scan(la, x), (la, X))
    const = torch.full((T,), -0.3, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda la, x: first_order_scan(la, x), (const, X))
    if path == "blocked":  # X's gradient on the blocked path: one column broadcast to all of them
        x1, la = randn(T, 1, seed=9).requires_grad_(), -rand(T, seed=9)
        assert torch.autograd.gradcheck(lambda x: first_order_scan(la, x.expand(T, MAX_BANDED_COLUMNS + 1)), (x1,))


def test_decay_gradients_are_exact_at_zero_and_subnormal_decays():
    """d/da_t of the 1-SS matvec is a product of the other decays: finite and non-zero at a_t = 0."""
    a = torch.tensor([0.9, 0.5, 0.0, 0.7, 1e-40, 0.6], dtype=F64)
    x = randn(6, 3, seed=1)
    for X, dtype in ((x, F64), (x.float(), torch.float32), (torch.randn(6, 70, dtype=F64), F64)):
        decays = a.to(dtype).clone().requires_grad_()
        y = sm.OneSS.from_decays(decays) @ X
        (g,) = torch.autograd.grad(y.sum(), decays)
        ref = a.clone().requires_grad_()
        dense = torch.stack([torch.stack([torch.prod(ref[i + 1 : j + 1]) if j >= i else ref.new_zeros(())
                                          for i in range(6)]) for j in range(6)])  # products, no logs
        (want,) = torch.autograd.grad((dense @ X.double()).sum(), ref)
        assert torch.isfinite(g).all() and g[2] != 0 and g[4] != 0
        close(g, want, rtol=1e-5 if dtype == torch.float32 else 1e-12)
    assert not compiled_path(-rand(40), torch.ones(40, MAX_BANDED_COLUMNS + 1, dtype=F64))[0]
    assert first_order_scan(-torch.rand(40), torch.randn(40, 2)).dtype == torch.float32


def test_segsum_is_the_sum_over_each_segment():
    x = randn(6, seed=4)
    S = segsum(x)
    for i in range(6):
        for j in range(6):
            want = x[j + 1 : i + 1].sum() if i >= j else float("-inf")
            assert (S[i, j] == want) if i < j else abs(S[i, j] - want) < 1e-14
    assert torch.equal(torch.exp(segsum(torch.tensor([0.0, float("-inf"), 0.0])))[2, 0], torch.tensor(0.0))
    assert np.isfinite(as_np := torch.exp(segsum(torch.full((4,), -1e30, dtype=F64))).numpy()).all() and as_np[1, 1] == 1


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("batch,xbatch", [((), ()), ((2,), (2,)), ((2,), (3, 1)), ((), (2,))])
def test_scalar_sss_product_equals_dense(lower, batch, xbatch):
    """The order-1 scalar-decay product by one first-order scan (lower, and the transpose): exact cuts (a_t = 0),
    unit decays, a diagonal, batch broadcasting, T = 0."""
    from structmat.linalg.first_order import scalar_sss_product

    T = 37
    a = rand(*batch, T, seed=3)
    a[..., 5] = 0.0
    a[..., 20:26] = 1.0
    B, C, D = randn(*batch, T, 1, seed=4), randn(*batch, T, 1, seed=5), randn(*batch, T, seed=6)
    M = sm.SSS(a[..., None], B, C, D).to_dense()
    M = M if lower else M.mT
    X = randn(*xbatch, T, 2, seed=7)
    close(scalar_sss_product(safe_log(a), B, C, D, X, lower=lower), M @ X)
    close(scalar_sss_product(safe_log(a), B, C, None, X, lower=lower), (M - torch.diag_embed(D)) @ X)
    empty = scalar_sss_product(torch.zeros(0, dtype=F64), torch.ones(0, 1, dtype=F64), torch.ones(0, 1, dtype=F64), None,
                               torch.ones(0, 2, dtype=F64))
    assert empty.shape == (0, 2)


@pytest.mark.parametrize("lower", [True, False])
def test_scalar_sss_product_gradients(lower):
    from structmat.linalg.first_order import scalar_sss_product

    T = 7
    a = rand(T, seed=8).requires_grad_()
    B, C, D, X = (randn(*s, seed=9 + i).requires_grad_() for i, s in enumerate([(T, 1), (T, 1), (T,), (T, 2)]))
    torch.autograd.gradcheck(lambda a, B, C, D, X: scalar_sss_product(torch.log(a.detach()), B, C, D, X, a, lower),
                             (a, B, C, D, X))


def test_long_scalar_sss_matmat_takes_the_scan_where_no_band_is_kept(monkeypatch):
    """An order-1 log-kind SSS whose band is not kept (long, or parameters broadcast) multiplies by one compiled
    scan instead of building a band per call (LION's parts at T = 1e6: super-linear before): same products."""
    import structmat.linalg.banded as banded
    import structmat.matrices.sss as sss_module

    calls = []
    scan = sss_module.scalar_sss_product
    monkeypatch.setattr(sss_module, "scalar_sss_product", lambda *args: calls.append(1) or scan(*args))
    monkeypatch.setattr(banded, "KEEP_MAX_ENTRIES", 0)
    monkeypatch.setattr(banded, "KEEP_PER_PARAMETER_BYTE", 0)
    T = 300  # above the kept dense form
    a = rand(T, seed=12)
    a[40] = 0.0
    for M in (sm.Quasiseparable.lion(a), sm.Quasiseparable.lion(a, b=randn(T, seed=13), c=randn(T, seed=14))):
        x = randn(T, 2, seed=15)
        calls.clear()
        close(M @ x, M.to_dense() @ x)
        assert len(calls) == 2  # both triangles
