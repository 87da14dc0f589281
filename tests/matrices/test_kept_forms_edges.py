"""What a matrix keeps, after in-place changes its version counters do not show (defects D111, D112, found by the
session-21 audit of kept forms).

References: a matrix built afresh from the current values, dense float64 forms, autograd through the dense form."""

import pytest
import torch
from conftest import F64, close, rand, randn

import structmat as sm


def test_an_sss_inverse_builds_its_generators_from_the_current_parameters():
    """D111: ``M.inv()`` kept its generators from the values ``inv()`` read, with their graph: after ``B.mul_`` its
    dense form (and its sums, products, transposes) were neither the old nor the new inverse, and a second backward
    through ``to_dense()`` raised."""
    T = 7
    A, C, D = 0.3 + 0.5 * rand(T, 2, seed=1), randn(T, 2, seed=3), 3 + rand(T, seed=4)
    B = randn(T, 2, seed=2)
    M = sm.SSS(A, B, C, D=D)
    Minv = M.inv()
    with torch.no_grad():
        Minv.to_dense()  # kept
    B.mul_(0.7)
    want = torch.linalg.inv(sm.SSS(A, B, C, D=D).to_dense())
    close(Minv.to_dense(), want)
    close((Minv + Minv).to_dense(), 2 * want)
    close(Minv.T.to_dense(), want.T)
    Bg = B.clone().requires_grad_()
    Minv = sm.SSS(A, Bg, C, D=D).inv()
    for _ in range(2):  # each use builds its own graph
        (g,) = torch.autograd.grad(Minv.to_dense().sum(), Bg)
    (want_g,) = torch.autograd.grad(torch.linalg.inv(sm.SSS(A, Bg, C, D=D).to_dense()).sum(), Bg)
    close(g, want_g)


@pytest.mark.parametrize("optimizer", [torch.optim.Adam, torch.optim.SGD])
def test_kept_forms_see_a_fused_optimizer_step(optimizer):
    """D112: fused optimizers write parameters without moving their version counter: forms kept during an evaluation
    under ``no_grad`` served the old parameters after a training step (`OneSS` products 0.47 off, a bought chunked
    form of an `SSS` at `T = 2048` 0.1 off)."""
    log_a = torch.nn.Parameter(torch.log(0.5 + 0.4 * torch.rand(64, dtype=F64)))
    c = torch.nn.Parameter(torch.randn(64, dtype=F64))
    M = sm.OneSS(log_a, c=c)
    x = torch.randn(64, 3, dtype=F64)
    with torch.no_grad():
        M @ x, M.solve(x)  # forms kept
    opt = optimizer([log_a, c], lr=0.1, fused=True)
    (M @ x).pow(2).sum().backward()
    version = c._version
    opt.step()
    assert c._version == version  # (what made the forms stale: no version moved)
    fresh = sm.OneSS(log_a.detach().clone(), c=c.detach().clone())
    with torch.no_grad():
        close(M @ x, fresh @ x)
        close(M.solve(x), fresh.solve(x))
    with torch.no_grad():
        c.data.mul_(2)  # through .data, likewise
        close(M @ x, sm.OneSS(log_a.detach().clone(), c=c.detach().clone()) @ x)


def test_a_parameter_that_wants_a_gradient_after_its_form_was_kept():
    """D114: a parameter frozen when a form was kept (a version stamp), then unfrozen and stepped by a fused optimizer,
    left the form stale."""
    c = torch.randn(32, dtype=F64)
    M = sm.OneSS(torch.log(0.5 + 0.4 * torch.rand(32, dtype=F64)), c=c)
    x = torch.randn(32, 2, dtype=F64)
    with torch.no_grad():
        M @ x  # kept, c stamped by its version
    c.requires_grad_()
    opt = torch.optim.Adam([c], lr=0.1, fused=True)
    (M @ x).sum().backward()
    opt.step()
    with torch.no_grad():
        close(M @ x, sm.OneSS(M.transitions.values, c=c.detach().clone()) @ x)
