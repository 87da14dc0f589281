"""Gradients of bidiagonal solves and inverses at zero and tiny sub-diagonal entries (D123-D124), against the same
loss through ``torch.linalg.solve`` on the dense matrix."""

import pytest
import torch
from conftest import close

import structmat as sm

C128, F64 = torch.complex128, torch.float64
DIAG = torch.tensor([2.0 + 0.5j, 1.5 - 0.2j, 3.0 + 0.1j], dtype=C128)
Y = torch.tensor([[1.0 + 0.3j], [0.5 - 0.7j], [-0.2 + 1.0j]], dtype=C128)
W = torch.tensor([[0.3 - 0.1j], [1.2 + 0.4j], [-0.5 + 0.8j]], dtype=C128)


def _dense_solve(d, s, y):
    return torch.linalg.solve(torch.diag(d) + torch.diag(s, -1), y)


def _close_all(got, want):
    for g, w in zip(got, want, strict=True):
        close(g, w)


def _grads(solve, sub, dtype, create_graph=False):
    diag, y, w = (t if dtype.is_complex else t.real for t in (DIAG, Y, W))
    d, s = diag.clone().requires_grad_(), sub.to(dtype).clone().requires_grad_()
    loss = (w.conj() * solve(d, s, y)).sum().abs() ** 2
    return torch.autograd.grad(loss, (d, s), create_graph=create_graph), (d, s)


@pytest.mark.parametrize("sub", [[0.0, 0.0], [1e-30, 0.0], [0.3 + 0.1j, 0.0], [0.3 + 0.1j, 0.2 - 0.1j]])
def test_complex_solve_gradients_at_zero_and_tiny_entries(sub):
    """The complex solve took its gradient through the inverse's moduli and phases: O(1) off at a zero entry, 2e14
    at 1e-30; it differentiates by the adjoint system now (the lower matrix and its conjugate transpose)."""
    sub = torch.tensor(sub, dtype=C128)
    want, _ = _grads(_dense_solve, sub, C128)
    _close_all(_grads(lambda d, s, y: sm.Bidiagonal(d, s).solve(y), sub, C128)[0], want)
    upper = _grads(lambda d, s, y: sm.Bidiagonal(d.conj(), s.conj(), lower=False).H.solve(y), sub, C128)[0]
    _close_all(upper, want)


@pytest.mark.parametrize("sub", [[0.0, 0.0], [1e-30, 0.0], [-1e-30, 0.5]])
def test_real_gradients_at_zero_and_tiny_entries_through_solve_and_inverse(sub):
    """The real inverse differentiated its signs r / |r|: two terms of size 1 / |r| cancelling (4.5e-3 off at
    1e-30)."""
    sub = torch.tensor(sub, dtype=F64)
    want, _ = _grads(lambda d, s, y: _dense_solve(d, s, y), sub, F64)
    for solve in (lambda d, s, y: sm.Bidiagonal(d, s).solve(y), lambda d, s, y: sm.Bidiagonal(d, s).inv() @ y):
        _close_all(_grads(solve, sub, F64)[0], want)


def test_complex_second_derivatives_through_solve_and_inverse():
    """The inverse's decays dropped the curvature of |r| (detached phases): Hessian-vector products 2.4e-3 off."""
    sub = torch.tensor([0.3 + 0.1j, 0.2 - 0.1j], dtype=C128)
    direction = torch.tensor([0.2 - 0.3j, 0.5 + 0.1j, -0.4 + 0.2j], dtype=C128)

    def hvp(solve):
        (gd, _), (d, _) = _grads(solve, sub, C128, create_graph=True)
        return torch.autograd.grad((gd * direction.conj()).real.sum(), d)[0]

    want = hvp(_dense_solve)
    close(hvp(lambda d, s, y: sm.Bidiagonal(d, s).solve(y)), want)
    close(hvp(lambda d, s, y: sm.Bidiagonal(d, s).inv() @ y), want)
    gradcheck_inputs = (DIAG.clone().requires_grad_(), sub.clone().requires_grad_(), Y.clone().requires_grad_())
    assert torch.autograd.gradgradcheck(lambda d, s, y: sm.Bidiagonal(d, s).solve(y), gradcheck_inputs)
