"""Recurrences: the blocked scan, the 1-SS hot path and the compiled CPU solvers against the plain loop."""

import numpy as np
import torch
from conftest import F64, close, rand, randn
from hypothesis import given
from hypothesis import strategies as st

import structmat as sm
import structmat.testing as smt
from structmat.linalg.iir import MAX_BANDED_COLUMNS, cpu_scan
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
def test_compiled_scan_matches_sequential_and_blocked(shapes, T, K, constant, data):
    """The CPU LAPACK / lfilter paths against the plain recurrence and the blocked scan (the GPU path)."""
    a_batch, x_batch = shapes
    a = data.draw(smt.decays((*a_batch, T)))
    if constant:
        a = a[..., 1:2].expand(*a_batch, T)
    log_a = safe_log(a)
    X = randn(*x_batch, T, K, seed=T)
    h = cpu_scan(log_a, X)
    batch = torch.broadcast_shapes(a_batch, x_batch)
    la, Xb = log_a.expand(*batch, T), X.expand(*batch, T, K)
    close(h, linear_scan_sequential(sm.Transitions(la, "log"), Xb[..., None, :])[..., 0, :])
    close(h, decay_scan(torch.cat([torch.zeros_like(la[..., :1]), la[..., 1:]], -1), Xb))


def test_compiled_scan_gradients_and_fallbacks():
    T = 40
    x = randn(3, T, 2, seed=3).requires_grad_()
    for i, shape in enumerate(((T,), (3, T), (2, 1, T))):
        la = (-rand(*shape, seed=i)).requires_grad_()
        assert torch.autograd.gradcheck(lambda la, x: cpu_scan(la, x), (la, x))
    const = torch.full((T,), -0.3, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda la, x: cpu_scan(la, x), (const, x))
    assert cpu_scan(const, torch.ones(T, 1, dtype=torch.complex128)) is None  # complex: the blocked scan
    assert cpu_scan(-rand(T), torch.ones(T, MAX_BANDED_COLUMNS + 1, dtype=F64)) is None
    assert cpu_scan(-torch.rand(T), torch.randn(T, 2)).dtype == torch.float32


def test_segsum_is_the_sum_over_each_segment():
    x = randn(6, seed=4)
    S = segsum(x)
    for i in range(6):
        for j in range(6):
            want = x[j + 1 : i + 1].sum() if i >= j else float("-inf")
            assert (S[i, j] == want) if i < j else abs(S[i, j] - want) < 1e-14
    assert torch.equal(torch.exp(segsum(torch.tensor([0.0, float("-inf"), 0.0])))[2, 0], torch.tensor(0.0))
    assert np.isfinite(as_np := torch.exp(segsum(torch.full((4,), -1e30, dtype=F64))).numpy()).all() and as_np[1, 1] == 1
