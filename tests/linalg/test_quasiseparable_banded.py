"""Quasiseparable solves as one banded LAPACK system (structmat.linalg.quasiseparable_banded) against dense float64
solves: orders, kinds of transitions, batch broadcasting, float32, cuts and unit decays, block boundaries of the
build, singular matrices."""

import numpy as np
import pytest
import scipy.linalg
import torch
from conftest import F64, close, rand, randn

import structmat as sm
from structmat.linalg import quasiseparable_banded as qb


def _side(kind, T, N, batch, seed):
    A = {"diag": lambda: rand(*batch, T, N, seed=seed), "scalar": lambda: rand(*batch, T, seed=seed) - 0.5,
         "dense": lambda: randn(*batch, T, N, N, seed=seed) / (2 * N)}[kind]()
    if T > 5:
        A.select(len(batch), 5).zero_()  # a cut
    return sm.SSS(A, randn(*batch, T, N, seed=seed + 1) / 2, randn(*batch, T, N, seed=seed + 2) / 2)


@pytest.mark.parametrize("kinds,orders", [(("diag", "diag"), (2, 2)), (("dense", "scalar"), (3, 1)),
                                          (("scalar", "dense"), (1, 2))])
@pytest.mark.parametrize("batch,ybatch", [((), ()), ((), (3,)), ((2,), (3, 1))])
def test_banded_solve_equals_dense(kinds, orders, batch, ybatch, monkeypatch):
    monkeypatch.setattr(qb, "BUILD_STEPS", 7)  # many build blocks
    T = 300
    fwd, bwd = _side(kinds[0], T, orders[0], batch, 1), _side(kinds[1], T, orders[1], batch, 5)
    M = sm.Quasiseparable.bidirectional(fwd, bwd, 3 + rand(*batch, T, seed=9))
    Y = randn(*ybatch, T, 2, seed=10)
    assert qb.applies(M.lower_part.generators, M.upper_part.generators, M.diag, Y)
    dense = M.to_dense()
    close(M.solve(Y), torch.linalg.solve(dense, Y), rtol=1e-10)
    close(M.solve(Y[(0,) * len(ybatch)][:, 0]), torch.linalg.solve(dense, Y[(0,) * len(ybatch)][:, :1])[..., 0], rtol=1e-10)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_bidirectional_masks_with_unit_decays_and_cuts(dtype):
    T = 400
    a = 0.5 + 0.5 * rand(T, seed=1)
    a[100:140] = 1.0
    a[200] = 0.0
    one_ss = sm.OneSS.from_decays(a.to(dtype))
    M = sm.Quasiseparable.bidirectional(one_ss, one_ss, (100 + rand(T, seed=3)).to(dtype))  # diagonally dominant
    dense = M.to_dense().double().numpy()
    y = randn(T, seed=2, dtype=dtype)
    x = M.solve(y)
    assert x.dtype == dtype and x.shape == (T,)
    want = scipy.linalg.solve(dense, y.double().numpy())
    close(x.double(), want, rtol=1e-4 if dtype == torch.float32 else 1e-8)
    assert torch.equal(y, randn(T, seed=2, dtype=dtype))  # not mutated


def test_singular_and_gradients_fall_back():
    T = 300
    ones = sm.Quasiseparable.bidirectional(sm.OneSS.causal(T, dtype=F64), sm.OneSS.causal(T, dtype=F64),
                                           diag=torch.ones(T, dtype=F64))  # all ones: rank 1
    with pytest.raises(sm.SingularMatrixError, match="singular"):
        ones.solve(torch.ones(T, dtype=F64))
    d = (3 + rand(T, seed=1)).requires_grad_()
    fwd = sm.SSS(rand(T, 2, seed=2), randn(T, 2, seed=3) / 2, randn(T, 2, seed=4) / 2)
    M = sm.Quasiseparable.bidirectional(fwd, fwd, d)
    y = randn(T, 1, seed=5)
    assert not qb.applies(M.lower_part.generators, M.upper_part.generators, M.diag, y)
    M.solve(y).sum().backward()
    dense = M.to_dense().detach().numpy()
    xbar = np.linalg.solve(dense.T, np.ones((T, 1)))
    close(d.grad, -(xbar * np.linalg.solve(dense, y.numpy()))[:, 0], rtol=1e-8)
