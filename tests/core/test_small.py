"""Small matrices: products and solves through the kept dense form (structmat.core.small) against the dense
matrix built entry by entry, and the rules of keeping (gradients, in-place changes, inference mode)."""

import numpy as np
import pytest
import torch
from conftest import C128, F64, close, rand, randn, sss_dense

import structmat as sm
from structmat.core import small


def _matrices(T):
    a = 0.3 + 0.7 * rand(T, seed=1)
    A = rand(T, 3, seed=2)
    B, C = randn(T, 3, seed=3) / 2, randn(T, 3, seed=4) / 2
    lower = sm.SSS(A, B, C, D=2 + rand(T, seed=5))
    upper = sm.SSS(A, B, C, D=2 + rand(T, seed=5), lower=False)
    c = randn(T, seed=6) / T
    c[0] = 2.0
    return {
        "OneSS": (sm.OneSS.from_decays(a, b=1 + rand(T, seed=7), c=1 + rand(T, seed=8)),
                  sss_dense(a, (1 + rand(T, seed=7))[:, None], (1 + rand(T, seed=8))[:, None], None, "scalar")),
        "SSS": (lower, sss_dense(A, B, C, 2 + rand(T, seed=5), "diag")),
        "SSS upper": (upper, sss_dense(A, B, C, 2 + rand(T, seed=5), "diag").T),
        "Bidiagonal": (sm.Bidiagonal(1 + rand(T, seed=9), randn(T - 1, seed=10)),
                       np.diag(1 + rand(T, seed=9).numpy()) + np.diag(randn(T - 1, seed=10).numpy(), -1)),
        "Toeplitz.causal": (sm.Toeplitz.causal(c), np.tril(np.array([[c[i - j].item() if i >= j else 0.0 for j in range(T)]
                                                                      for i in range(T)]))),
    }


@pytest.mark.parametrize("name", ["OneSS", "SSS", "SSS upper", "Bidiagonal", "Toeplitz.causal"])
@pytest.mark.parametrize("dtype", [torch.float32, F64, C128])
def test_products_and_solves_of_small_matrices(name, dtype):
    M, dense = _matrices(20)[name]
    dense = torch.from_numpy(dense)
    for X in (randn(20, seed=11, dtype=dtype), randn(3, 20, 2, seed=12, dtype=dtype)):
        tol = 1e-5 if dtype == torch.float32 else 1e-10
        close(M @ X, (dense.to(X.dtype) @ X), rtol=tol)
        close(M.solve(X), torch.linalg.solve(dense.to(X.dtype), X.unsqueeze(-1) if X.dim() == 1 else X).reshape(X.shape),
              rtol=100 * tol)
    assert "_small" in vars(M)  # it kept its dense form
    assert (M @ torch.zeros(20, 0, dtype=F64)).shape == (20, 0)


def test_quasiseparable_small_solve_and_singular():
    Q = sm.Quasiseparable.bidirectional(sm.OneSS.decay(0.5, 12, dtype=F64), sm.OneSS.decay(0.3, 12, dtype=F64))
    dense = Q.to_dense()
    y = randn(12, 3, seed=1)
    close(Q.solve(y), torch.linalg.solve(dense, y))
    ones = sm.Quasiseparable.bidirectional(sm.OneSS.causal(3, dtype=F64), sm.OneSS.causal(3, dtype=F64),
                                           diag=torch.ones(3, dtype=F64))  # rank 1
    with pytest.raises(sm.SingularMatrixError, match="singular"):
        ones.solve(torch.ones(3, dtype=F64))


def test_singular_overflow_and_nan():
    M = sm.Bidiagonal(torch.tensor([1.0, 0.0, 1.0], dtype=F64), torch.ones(2, dtype=F64))
    with pytest.raises(sm.SingularMatrixError, match="diagonal entry is zero"):
        M.solve(torch.ones(3, dtype=F64))
    big = sm.Bidiagonal(torch.full((200,), 1e-3, dtype=F64), torch.ones(199, dtype=F64))  # entries up to 1e600
    with pytest.raises(sm.SingularMatrixError, match="overflows"):
        big.solve(torch.ones(200, dtype=F64))
    y = torch.ones(3, dtype=F64)
    y[1] = float("nan")
    assert torch.isnan(sm.Bidiagonal(torch.ones(3, dtype=F64), torch.ones(2, dtype=F64)).solve(y)).any()  # NaN in, NaN out


def test_a_parameter_changed_in_place_drops_the_kept_form():
    d = torch.ones(10, dtype=F64)
    M = sm.Diagonal(d) + sm.OneSS.causal(10, dtype=F64)  # a lazy sum: no kept form of its own
    O = sm.OneSS(torch.zeros(10, dtype=F64), c=torch.ones(10, dtype=F64))
    x = torch.ones(10, dtype=F64)
    close(O @ x, torch.arange(1.0, 11.0, dtype=F64))
    O.c.mul_(2.0)  # the user changes a parameter in place
    close(O @ x, 2 * torch.arange(1.0, 11.0, dtype=F64))
    close(M @ x, 1 + torch.arange(1.0, 11.0, dtype=F64))


@pytest.mark.parametrize("name", ["OneSS", "SSS", "SSS upper", "Bidiagonal", "Toeplitz.causal", "Quasiseparable",
                                  "Diagonal"])
def test_inference_parameters_changed_in_place_drop_the_kept_form(name):
    """Inference tensors have no version counter: the kept form compares their values instead (a form kept from
    them served the old products and solves after an in-place change: 5.5 and 0.125 off)."""
    T = 6
    with torch.inference_mode():
        a, d = 0.3 + 0.7 * rand(T, seed=1), 2 + rand(T, seed=5)
        M = {"OneSS": lambda: sm.OneSS.from_decays(a, c=d), "SSS": lambda: sm.SSS(a[:, None], d[:, None], d[:, None], D=d),
             "SSS upper": lambda: sm.SSS(a[:, None], d[:, None], d[:, None], D=d, lower=False),
             "Bidiagonal": lambda: sm.Bidiagonal(d, a[1:]), "Toeplitz.causal": lambda: sm.Toeplitz.causal(d),
             "Quasiseparable": lambda: sm.Quasiseparable.bidirectional(sm.OneSS.from_decays(a), sm.OneSS.from_decays(a), 3 * d),
             "Diagonal": lambda: sm.Diagonal(d)}[name]()
        y = randn(T, 2, seed=3)
        M @ y, M.solve(y)  # kept
        a.mul_(0.5)
        d.add_(1.0)
        dense = M.to_dense()
        close(M @ y, dense @ y)
        close(M.solve(y), torch.linalg.solve(dense, y))


def test_quasiseparable_factors_kept_in_inference_mode_serve_later_gradients():
    """The LU factors kept by a first solve in inference mode are built outside it (as the dense form): a later
    solve that wants a gradient can save them (it raised "Inference tensors cannot be saved for backward")."""
    T = 6
    a = torch.full((T,), 0.5, dtype=F64)
    M = sm.Quasiseparable.bidirectional(sm.OneSS.from_decays(a), sm.OneSS.from_decays(a), torch.full((T,), 3.0, dtype=F64))
    with torch.inference_mode():
        M.solve(torch.ones(T, dtype=F64))
    x = randn(T, seed=4).requires_grad_()
    M.solve(x).sum().backward()
    close(x.grad, torch.linalg.solve(M.to_dense().T, torch.ones(T, dtype=F64)))


def test_gradients_take_the_structured_path():
    a = (0.3 + 0.7 * rand(8, seed=1)).requires_grad_()
    x = randn(8, 2, seed=2).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, x: sm.OneSS.from_decays(a) @ x, (a, x))
    assert torch.autograd.gradcheck(lambda a, x: sm.OneSS.from_decays(a).solve(x), (a, x))
    assert torch.autograd.gradcheck(lambda a, x: sm.OneSS.from_decays(a).T @ x, (a, x))
    M = sm.OneSS.from_decays(a.detach())
    M @ x.detach()  # kept, without a graph
    y = M @ x  # x wants a gradient: the dense form has none to give, the product through it still does
    y.sum().backward()
    close(x.grad, M.to_dense().sum(0)[:, None].expand(8, 2))


def test_inference_mode_first_then_gradients():
    M = sm.SSS(rand(16, 2), randn(16, 2), randn(16, 2), D=2 + rand(16))
    with torch.inference_mode():
        y = M @ randn(16, 1)
        M.solve(randn(16, 1))
    x = randn(16, 1).requires_grad_()
    (M @ x).sum().backward()
    close(y, M.to_dense() @ randn(16, 1))
    close(x.grad, M.to_dense().sum(0)[:, None])


def test_large_matrices_keep_no_dense_form():
    T = int(small.DENSE_MAX_ENTRIES**0.5) + 1
    M = sm.Toeplitz(randn(T, seed=1), randn(T, seed=2))
    M @ randn(T, 1)
    assert ("dense", F64) not in getattr(M, "_small", small._Kept([])).values
    B = sm.OneSS.causal(T // 4, dtype=F64)  # small, but 17 batch rows of it are over the bound
    Bb = B._map(lambda t: t.expand(17, *t.shape))
    Bb @ randn(T // 4, 1)
    assert ("dense", F64) not in getattr(Bb, "_small", small._Kept([])).values


@pytest.mark.parametrize("name", ["OneSS", "SSS", "SSS upper", "Bidiagonal", "Toeplitz.causal"])
@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_one_column_solves_by_blas_match_scipy(name, dtype):
    """The BLAS path of one real column (first solve, then the kept one) against scipy in float64: vector and
    column shapes, a promoted right-hand side, a batched one, an in-place change of a parameter."""
    import scipy.linalg

    M, dense = _matrices(20)[name]
    M = M.to(dtype)
    dense = M.to_dense().double().numpy()
    lower = not name.endswith("upper")
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    for seed in (1, 2):  # the second solve takes the kept BLAS form
        y = randn(20, seed=seed, dtype=dtype)
        want = scipy.linalg.solve_triangular(dense, y.double().numpy(), lower=lower)
        for Y, shape in ((y, (20,)), (y[:, None], (20, 1))):
            X = M.solve(Y)
            assert X.dtype == dtype and X.shape == shape
            close(X.reshape(20), want, rtol=tol)
    assert ("trsv", "lower" if lower else "upper", dtype) in M._small.values
    Yb = randn(3, 20, 1, seed=3, dtype=dtype)  # batched: the torch path
    close(M.solve(Yb), np.stack([scipy.linalg.solve_triangular(dense, Yb[i].double().numpy(), lower=lower)
                                 for i in range(3)]), rtol=tol)
    if dtype == torch.float32:  # float64 data promotes the float32 matrix: its entries computed in float64
        y = randn(20, seed=4)
        X = M.solve(y)
        assert X.dtype == F64
        close(X, scipy.linalg.solve_triangular(M.to(F64).to_dense().numpy(), y.numpy(), lower=lower), rtol=1e-12)
    y = torch.ones(20, dtype=dtype)
    Y0 = y.clone()
    M.solve(y)
    assert torch.equal(y, Y0)  # not mutated


def test_kept_blas_solve_sees_changes_overflow_nan_and_empty():
    d = torch.full((200,), 1e-3, dtype=F64)
    big = sm.Bidiagonal(d, torch.ones(199, dtype=F64))  # entries up to 1e600
    for _ in range(2):  # first and kept solve
        with pytest.raises(sm.SingularMatrixError, match="overflows"):
            big.solve(torch.ones(200, dtype=F64))
    y = torch.ones(200, dtype=F64)
    y[3] = float("nan")
    assert torch.isnan(big.solve(y)).any()  # NaN in, NaN out
    d.fill_(2.0)  # in place: the kept form is dropped, the solve sees the new diagonal
    x = big.solve(torch.ones(200, dtype=F64))
    close(big @ x, torch.ones(200, dtype=F64))
    E = sm.SSS(torch.zeros(0, 2, dtype=F64), torch.zeros(0, 2, dtype=F64), torch.zeros(0, 2, dtype=F64))
    assert E.solve(torch.zeros(0, dtype=F64)).shape == (0,) and E.solve(torch.zeros(0, 1, dtype=F64)).shape == (0, 1)
    huge = sm.Bidiagonal(torch.full((200,), 1e-3, dtype=F64), torch.ones(199, dtype=F64))
    with sm.skip_finite_checks():  # the check is the user's to skip, on both paths
        for _ in range(2):
            assert not torch.isfinite(huge.solve(torch.ones(200, dtype=F64))).all()


def test_values_kept_in_inference_mode_serve_later_gradients():
    """A Toeplitz product keeps its circulant spectrum, a causal solve its inverse's: kept under inference mode,
    they must still serve a later call whose result is differentiated (an inference tensor cannot be saved)."""
    T = 300  # above the kept dense forms' size
    M = sm.Toeplitz(randn(T, seed=1), randn(T, seed=2))
    L = sm.Toeplitz.causal(randn(T, seed=3) / T + torch.cat([torch.full((1,), 5.0, dtype=F64), torch.zeros(T - 1, dtype=F64)]))
    with torch.inference_mode():
        M @ randn(T, 2, seed=4)
        L.solve(randn(T, 2, seed=5))
    X = randn(T, 2, seed=6).requires_grad_()
    (M @ X).sum().backward()
    close(X.grad, M.to_dense().sum(0)[:, None].expand(T, 2))
    Y = randn(T, 2, seed=7).requires_grad_()
    L.solve(Y).sum().backward()
    close(Y.grad, torch.linalg.inv(L.to_dense()).sum(0)[:, None].expand(T, 2))
    with torch.inference_mode():  # and inference mode still gives inference tensors
        assert (M @ randn(T, 1, seed=8)).is_inference()
    S = sm.OneSS.decay(0.5, 8)  # a float32 matrix's dense form kept in float64 (a float64 operand) in inference mode
    with torch.inference_mode():
        S @ randn(8, 2, seed=9)
    Z = randn(8, 2, seed=10).requires_grad_()
    (S @ Z).sum().backward()
    close(Z.grad, S.to(F64).to_dense().sum(0)[:, None].expand(8, 2))  # (entries in the promoted dtype)
