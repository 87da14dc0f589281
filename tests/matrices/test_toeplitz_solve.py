"""General Toeplitz solves and inverses: differentiable in c, r and the right side; exact where Levinson breaks
down (vanishing leading minors, (M^{-1})[0, 0] = 0); SingularMatrixError for singular matrices."""

import numpy as np
import pytest
import scipy.linalg as sl
import torch
from conftest import C128, F64, close, randn

import structmat as sm
from structmat.linalg import toeplitz_solvers


def well_posed(T, seed, dtype=F64, batch=()):
    c, r = randn(*batch, T, seed=seed, dtype=dtype), randn(*batch, T, seed=seed + 1, dtype=dtype)
    c[..., 0] = 3.0 * T ** 0.5
    return c, r


@pytest.mark.parametrize("T", [1, 2, 7])
@pytest.mark.parametrize("dtype", [F64, C128])
def test_solve_gradcheck_in_c_r_and_y(T, dtype):
    c, r = well_posed(T, T, dtype)
    y = randn(T, 2, seed=9, dtype=dtype)
    args = tuple(t.clone().requires_grad_() for t in (c, r, y))
    assert torch.autograd.gradcheck(lambda c, r, y: sm.Toeplitz(c, r).solve(y), args)
    assert torch.autograd.gradcheck(lambda c, r, y: sm.Toeplitz(c, r).inv() @ y[:, 0], args)
    assert torch.autograd.gradcheck(lambda c, r, y: sm.Toeplitz(c, r).inv().T @ y, args)


def test_solve_gradcheck_batched_and_broadcast():
    """``c (2, 1, T)``, ``r (3, T)`` and ``y (2, 1, 1, T, 2)``: gradients summed back to each shape
    (fast mode: the Jacobian against random directions, as the full one needs 240 backward passes)."""
    T = 4
    c, _ = well_posed(T, 1, batch=(2, 1))
    r = randn(3, T, seed=2)
    y = randn(2, 1, 1, T, 2, seed=3)
    args = tuple(t.clone().requires_grad_() for t in (c, r, y))
    assert torch.autograd.gradcheck(lambda c, r, y: sm.Toeplitz(c, r).solve(y), args, fast_mode=True)


def test_solve_gradgradcheck():
    c, r = well_posed(4, 3)
    args = tuple(t.clone().requires_grad_() for t in (c, r, randn(4, 1, seed=5)))
    assert torch.autograd.gradgradcheck(lambda c, r, y: sm.Toeplitz(c, r).solve(y), args)


def test_solve_gradient_matches_dense_solve():
    """The same gradients as autograd through ``torch.linalg.solve`` on the dense matrix, at T = 40."""
    c, r = well_posed(40, 11)
    y, w = randn(40, 3, seed=12), randn(40, 3, seed=13)
    grads = []
    for solve in (lambda M, y: M.solve(y), lambda M, y: torch.linalg.solve(M.to_dense(), y)):
        cc, rr = c.clone().requires_grad_(), r.clone().requires_grad_()
        (solve(sm.Toeplitz(cc, rr), y) * w).sum().backward()
        grads.append((cc.grad, rr.grad))
    close(grads[0][0], grads[1][0], rtol=1e-10)
    close(grads[0][1], grads[1][1], rtol=1e-10)
    assert grads[0][1][0] == 0  # r[0] is ignored


def vanishing_minor(T, k, seed):
    """A Toeplitz matrix whose leading k x k minor is zero, the whole matrix invertible."""
    rng = np.random.default_rng(seed)
    c, r = rng.standard_normal(T), rng.standard_normal(T)
    if k == 1:
        c[0] = r[0] = 0.0
    else:  # k = 2: c0^2 = c1 r1
        c[0] = r[0] = 1.0
        c[1], r[1] = 2.0, 0.5
    return c, r


CASES = {
    "swap": (np.array([0.0, 1.0]), np.array([0.0, 1.0])),                 # [[0, 1], [1, 0]]
    "x0 = 0": vanishing_minor(3, 2, 5),                                    # (M^{-1})[0, 0] = det(M[:2, :2]) / det(M)
    "c0 = 0, T = 9": vanishing_minor(9, 1, 0),
    "2x2 minor, T = 12": vanishing_minor(12, 2, 1),
    "c0 = 0, T = 200": vanishing_minor(200, 1, 2),
    "near-zero minor": (np.r_[1e-15, np.random.default_rng(3).standard_normal(29)],
                        np.r_[1e-15, np.random.default_rng(4).standard_normal(29)]),
}


@pytest.fixture(params=["dense", "levinson"])
def generators_path(request, monkeypatch):
    """The inverse's generators from the dense inverse (short matrices) or from Levinson with its fallbacks."""
    if request.param == "levinson":
        monkeypatch.setattr(toeplitz_solvers, "DENSE_GENERATORS_MAX", 0)
    return request.param


@pytest.mark.parametrize("name", list(CASES))
def test_invertible_without_levinson(name, generators_path):
    c, r = CASES[name]
    dense = sl.toeplitz(c, r)
    assert abs(np.linalg.det(dense)) > 1e-6 * np.abs(dense).max() ** len(c)
    M = sm.Toeplitz(torch.as_tensor(c), torch.as_tensor(r))
    Y = randn(len(c), 3, seed=5)
    close(M.solve(Y), np.linalg.solve(dense, Y.numpy()), rtol=1e-9)
    close(M.inv().to_dense(), np.linalg.inv(dense), rtol=1e-9)
    close(M.T.solve(Y), np.linalg.solve(dense.T, Y.numpy()), rtol=1e-9)
    close(M.inv().T @ Y, np.linalg.solve(dense.T, Y.numpy()), rtol=1e-9)
    close((2.0 * M.inv()) @ Y, 2.0 * np.linalg.solve(dense, Y.numpy()), rtol=1e-9)
    close(M.to(torch.complex128).solve(Y.to(C128)), np.linalg.solve(dense, Y.numpy()), rtol=1e-9)


def test_the_cases_are_what_they_say():
    """The cases above break Levinson where claimed (checked on the dense matrices)."""
    assert abs(np.linalg.inv(sl.toeplitz(*CASES["x0 = 0"]))[0, 0]) < 1e-15  # Gohberg-Semencul divides by it
    assert np.linalg.det(sl.toeplitz(*CASES["2x2 minor, T = 12"])[:2, :2]) == 0
    with pytest.raises(np.linalg.LinAlgError):
        sl.solve_toeplitz(CASES["c0 = 0, T = 9"], np.ones(9))


def test_fallback_gradcheck_and_batch_mix(generators_path):
    """A batch of one matrix with c[0] = 0 beside well-posed ones: every entry right, gradients too."""
    c, r = well_posed(6, 21, batch=(3,))
    c[1, 0] = 0.0
    y = randn(6, 2, seed=22)
    dense = sl.toeplitz(c.numpy(), r.numpy())
    close(sm.Toeplitz(c, r).solve(y), np.linalg.solve(dense, y.numpy()), rtol=1e-9)
    args = tuple(t.clone().requires_grad_() for t in (c, r, y))
    assert torch.autograd.gradcheck(lambda c, r, y: sm.Toeplitz(c, r).solve(y), args, fast_mode=True)


@pytest.mark.parametrize("c,r,match", [
    (np.ones(3), np.ones(3), "singular"),                                               # rank 1
    (np.zeros(4), np.zeros(4), "singular"),
    (np.cos(0.3 * np.arange(6)), np.cos(0.3 * np.arange(6)), "singular"),               # rank 2
    (np.r_[0.0, 1.0, 0.0], np.r_[0.0, 0.0, 0.0], "singular"),                          # the shift: zero pivot
])
def test_singular_toeplitz_raises(c, r, match, generators_path):
    M = sm.Toeplitz(torch.as_tensor(c), torch.as_tensor(r))
    with pytest.raises(sm.SingularMatrixError, match=match):
        M.solve(torch.ones(len(c), dtype=F64))
    with pytest.raises(sm.SingularMatrixError, match=match):
        M.inv()


def test_inputs_not_mutated_and_gradients_reach_float32():
    c, r = well_posed(8, 31)
    c, r = c.float().requires_grad_(), r.float().requires_grad_()
    y = randn(8, seed=32).float()
    before = [t.detach().clone() for t in (c, r, y)]
    X = sm.Toeplitz(c, r).solve(y)
    X.sum().backward()
    for t, b in zip((c, r, y), before):
        assert torch.equal(t.detach(), b)
    dense = sl.toeplitz(c.detach().double().numpy(), r.detach().double().numpy())
    close(X, np.linalg.solve(dense, y.double().numpy()), rtol=1e-5)
    lam = np.linalg.solve(dense.T, np.ones(8))
    xs = np.linalg.solve(dense, y.double().numpy())
    want_c = [-sum(lam[i] * xs[i - k] for i in range(k, 8)) for k in range(8)]
    close(c.grad, want_c, rtol=1e-4)


@pytest.mark.parametrize("T", [1, 5, 64, 65, 300])
@pytest.mark.parametrize("dtype", [F64, C128])
def test_causal_solve_matches_solve_triangular(T, dtype):
    """Both causal paths (dense triangular solve up to T = 64, Newton inverse series above) against scipy."""
    c = randn(2, T, seed=T, dtype=dtype) / T
    c[..., 0] = 2.0
    L = sm.Toeplitz.causal(c)
    dense = np.tril(sl.toeplitz(c.numpy(), np.zeros(T)))  # scipy's batched toeplitz, lower part
    Y = randn(T, 3, seed=1, dtype=dtype)
    want = np.stack([sl.solve_triangular(d, Y.numpy(), lower=True) for d in dense])
    close(L.solve(Y), want, rtol=1e-10)
    close(L.solve(Y[:, 0]), want[..., 0], rtol=1e-10)
    close(L.inv() @ Y, want, rtol=1e-10)
    close(sm.Toeplitz.causal(c[0]).solve(Y), want[0], rtol=1e-10)  # unbatched: the lean operand path


@pytest.mark.parametrize("T", [5, 70])
def test_causal_solve_gradcheck(T):
    c = randn(T, seed=3) / T
    c[0] = 2.0
    args = (c.clone().requires_grad_(), randn(T, 2, seed=4).requires_grad_())
    assert torch.autograd.gradcheck(lambda c, y: sm.Toeplitz.causal(c).solve(y), args)


@pytest.mark.parametrize("T", [3, 100])
def test_causal_solve_singular_overflow_and_nan(T):
    c = torch.ones(T, dtype=F64)
    c[0] = 0.0
    with pytest.raises(sm.SingularMatrixError, match=r"c\[0\] == 0"):
        sm.Toeplitz.causal(c).solve(torch.ones(T, dtype=F64))
    c[0], c[1] = 1e-200, 1.0  # entries of the inverse grow like 1e200^k: overflow, not a silent inf
    with pytest.raises(sm.SingularMatrixError, match="overflow"):
        sm.Toeplitz.causal(c).solve(torch.ones(T, dtype=F64))
    y = torch.ones(T, dtype=F64)
    y[-1] = float("nan")  # NaN in, NaN out (not an error), as torch.linalg.solve_triangular
    c[0] = 2.0
    x = sm.Toeplitz.causal(c).solve(y)
    assert torch.isnan(x[-1])
    if T <= 64:  # the dense triangular solve keeps it where it is; an FFT product spreads it
        assert torch.isfinite(x[:-1]).all()


def test_causal_takes_no_first_row():
    with pytest.raises(ValueError, match="r must be None for a causal Toeplitz"):
        sm.Toeplitz(torch.ones(3), torch.ones(3), causal=True)


def test_causal_short_solve_reuses_no_stale_matrix():
    """The dense L(c) kept between short solves never hides a gradient nor leaks an inference tensor."""
    c, y = randn(8, seed=41) / 8, randn(8, seed=42)
    c[0] = 2.0
    L = sm.Toeplitz.causal(c)
    want = sl.solve_triangular(np.tril(sl.toeplitz(c.numpy())), y.numpy(), lower=True)
    close(L.solve(y), want)
    close(L.solve(y), want)  # from the kept matrix
    c.requires_grad_()  # after the matrix was kept: the next solve must reach c
    L.solve(y).sum().backward()
    lam = np.linalg.solve(np.tril(sl.toeplitz(c.detach().numpy())).T, np.ones(8))
    close(c.grad, [-sum(lam[i] * want[i - k] for i in range(k, 8)) for k in range(8)])
    with torch.inference_mode():
        M = sm.Toeplitz.causal(c.detach().clone())
        M.solve(y)
    yy = y.clone().requires_grad_()
    M.solve(yy).sum().backward()  # no inference tensor kept from the solve above
    close(yy.grad, np.linalg.solve(np.tril(sl.toeplitz(c.detach().numpy())).T, np.ones(8)))


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_causal_long_solve_keeps_the_inverse_spectrum(dtype):
    """T = 300 without batch dims: three FFT calls with the inverse's spectrum kept, against scipy in float64;
    an in-place change of c drops the kept spectrum; float32 data with a float64 matrix promote."""
    T = 300
    c = randn(T, seed=5) / T
    c[0] = 2.0
    L = sm.Toeplitz.causal(c.to(dtype).clone())
    dense = np.tril(sl.toeplitz(c.to(dtype).double().numpy(), np.zeros(T)))
    tol = 1e-5 if dtype == torch.float32 else 1e-10
    for seed in (1, 2):
        Y = randn(T, 2, seed=seed, dtype=dtype)
        X = L.solve(Y)
        assert X.dtype == dtype and X.shape == (T, 2)
        close(X.double(), sl.solve_triangular(dense, Y.double().numpy(), lower=True), rtol=tol)
    assert "inverse spectrum" in L._small.values
    L.c.mul_(2.0)  # in place: the kept spectrum is dropped
    close(L.solve(Y).double(), sl.solve_triangular(2 * dense, Y.double().numpy(), lower=True), rtol=tol)
    X = sm.Toeplitz.causal(c).solve(randn(T, seed=3, dtype=torch.float32))
    assert X.dtype == F64
    close(X, sl.solve_triangular(dense if dtype == F64 else np.tril(sl.toeplitz(c.numpy(), np.zeros(T))),
                                 randn(T, seed=3, dtype=torch.float32).double().numpy(), lower=True), rtol=1e-10)


@pytest.mark.parametrize("dtype", [F64, C128, torch.float32])
def test_dense_and_levinson_generators_agree(dtype, monkeypatch):
    """A batch of well-posed matrices at the crossover: the two paths give the same inverse."""
    T = toeplitz_solvers.DENSE_GENERATORS_MAX
    c, r = well_posed(T, 41, dtype, batch=(2,))
    dense = toeplitz_solvers.toeplitz_inverse_generators(c, r)
    monkeypatch.setattr(toeplitz_solvers, "DENSE_GENERATORS_MAX", 0)
    levinson = toeplitz_solvers.toeplitz_inverse_generators(c, r)
    X = randn(T, 3, seed=42, dtype=dtype)
    want = torch.linalg.solve(torch.as_tensor(np.stack([sl.toeplitz(ci, ri) for ci, ri in zip(c.numpy(), r.numpy())])), X)
    rtol = 1e-5 if dtype == torch.float32 else 1e-10
    close(dense.apply(X), want, rtol=rtol, atol=rtol)
    close(levinson.apply(X), want, rtol=rtol, atol=rtol)
