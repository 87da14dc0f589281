"""Transposes and upper matrices take the fast paths of their lower counterparts (issue 15): the transposed
1-SS recurrence (with exact decay gradients), the reversed causal Toeplitz solve, the banded SSS systems."""

import numpy as np
import pytest
import torch
from conftest import C128, F64, close, rand, randn, sequential_one_ss

import structmat as sm


@pytest.mark.parametrize("T", [20, 400])
@pytest.mark.parametrize("dtype", [torch.float32, F64, C128])
def test_upper_one_ss_product_equals_the_transposed_loop(T, dtype):
    a, b, c = rand(2, T, seed=1), 1 + rand(2, T, seed=2), 1 + rand(2, T, seed=3)
    a[:, 5] = 0.0
    M = sm.OneSS.from_decays(a, b=b, c=c)
    x = randn(2, T, 3, seed=4, dtype=dtype)
    # (M^T x) reversed is the lower recurrence of the reversed problem: decays shifted by one, b and c swapped
    rev = lambda t: torch.flip(t, (-1,)).numpy()  # noqa: E731
    a_rev = torch.roll(torch.flip(a, (-1,)), 1, -1).numpy()
    want = [sequential_one_ss(a_rev[i], rev(c[i]), rev(b[i]), torch.flip(x[i], (0,)).to(C128).numpy())[::-1] for i in range(2)]
    tol = 1e-5 if dtype == torch.float32 else 1e-10
    want = torch.from_numpy(np.stack(want))
    close(M.T @ x, want if dtype.is_complex else want.real.to(dtype), rtol=tol)
    close(M.T @ x, M.to_dense().mT.to(dtype) @ x, rtol=tol)


def test_upper_one_ss_decay_gradients_are_exact_at_zero():
    a = rand(12, seed=1)
    a[4] = 0.0
    a.requires_grad_()
    x, w = randn(12, 2, seed=2), randn(12, 2, seed=3)
    (g,) = torch.autograd.grad(((sm.OneSS.from_decays(a).T @ x) * w).sum(), a)
    (want,) = torch.autograd.grad(((sm.OneSS.from_decays(a).to_dense().mT @ x) * w).sum(), a)
    close(g, want)
    assert g[4] != 0  # the link cut at a_4 = 0 still has its derivative
    a_pos = (0.2 + rand(6, seed=4)).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, x: sm.OneSS.from_decays(a, b=a + 1).T @ x, (a_pos, randn(6, 2).requires_grad_()))


@pytest.mark.parametrize("T", [20, 300])
def test_transposed_causal_toeplitz_solves_in_reversed_time(T):
    c = randn(T, seed=1) / T
    c[0] = 2.0
    L = sm.Toeplitz.causal(c)
    U = L.T
    assert U.is_anticausal and U.T.is_causal
    close(U.T.to_dense(), L.to_dense())
    close(randn(3, T, seed=5) @ U, randn(3, T, seed=5) @ L.to_dense().mT)  # through U.T
    y = randn(T, 2, seed=2)
    close(U.solve(y), torch.linalg.solve(L.to_dense().mT, y), rtol=1e-9)
    close(U.solve(y[:, 0]), torch.linalg.solve(L.to_dense().mT, y[:, 0]), rtol=1e-9)
    close(U @ y, L.to_dense().mT @ y)
    yg = randn(6, 1, seed=3).requires_grad_()
    c6 = torch.tensor([2.0, 0.3, -0.2, 0.1, 0.05, 0.01], dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda c, y: sm.Toeplitz.causal(c).T.solve(y), (c6, yg))


@pytest.mark.parametrize("T", [20, 300])
def test_bidiagonal_and_sss_transposes(T):
    B = sm.Bidiagonal(1 + rand(T, seed=1), randn(T - 1, seed=2))
    x = randn(T, 2, seed=3)
    close(B.T @ x, B.to_dense().mT @ x)
    close(B.T.solve(x), torch.linalg.solve(B.to_dense().mT, x), rtol=1e-8)
    assert B.T is B.T  # kept: no new matrix (and no new checks) per call
    S = sm.SSS(rand(T, 2, seed=4), randn(T, 2, seed=5), randn(T, 2, seed=6), D=2 + rand(T, seed=7))
    close(S.T @ x, S.to_dense().mT @ x)
    close(S.T.solve(x), torch.linalg.solve(S.to_dense().mT, x), rtol=1e-8)
