"""Toeplitz masks against scipy's toeplitz, matmul_toeplitz and solve_toeplitz."""

import numpy as np
import pytest
import scipy.linalg as sl
import torch
from conftest import C128, F64, close, randn
from hypothesis import given
from hypothesis import strategies as st

import structmat as sm
import structmat.testing as smt


def rand(*shape, seed=0, dtype=F64):
    return randn(*shape, seed=seed, dtype=dtype)

@given(st.integers(1, 60), st.integers(1, 60), st.sampled_from([F64, C128]), st.integers(0, 100))
def test_toeplitz_matches_scipy(T, S, dtype, seed):
    c, r = rand(T, seed=seed, dtype=dtype), rand(S, seed=seed + 1, dtype=dtype)
    M = sm.Toeplitz(c, r)
    dense = sl.toeplitz(c.numpy(), r.numpy())
    close(M.to_dense(), dense)
    X = rand(S, 3, seed=seed + 2, dtype=dtype)
    close(M @ X, sl.matmul_toeplitz((c.numpy(), r.numpy()), X.numpy()))
    smt.assert_matches_dense(M)
    H = sm.Toeplitz(c)  # r = None: Hermitian
    close(H.to_dense(), sl.toeplitz(c.numpy()))


@given(st.integers(1, 150), st.integers(0, 100))
def test_causal_toeplitz_inverse_and_product(T, seed):
    c = rand(T, seed=seed)
    c[0] = 1.0 + c[1:].abs().sum()  # c(z) has no zero in the unit disk: a bounded inverse series
    L = sm.Toeplitz.causal(c)
    inv = L.inv()
    assert isinstance(inv, sm.Toeplitz) and inv.is_causal
    close(inv.to_dense() @ L.to_dense(), torch.eye(T, dtype=F64), rtol=1e-7)
    P = L @ sm.Toeplitz.causal(rand(T, seed=seed + 1))
    assert isinstance(P, sm.Toeplitz) and P.is_causal
    other = torch.as_tensor(sl.toeplitz(rand(T, seed=seed + 1).numpy(), np.zeros(T)))
    close(P.to_dense(), L.to_dense() @ other, rtol=1e-8)


@given(st.integers(2, 80), st.sampled_from([F64, C128]), st.integers(0, 50))
def test_general_toeplitz_inverse_gohberg_semencul(T, dtype, seed):
    c, r = rand(T, seed=seed, dtype=dtype), rand(T, seed=seed + 7, dtype=dtype)
    c[0] = r[0] = 4.0 * T ** 0.5
    M = sm.Toeplitz(c, r)
    inv = M.inv()
    assert isinstance(inv, sm.ToeplitzInverse)
    Y = rand(T, 16, seed=seed + 3, dtype=dtype)
    close(M.solve(Y), sl.solve_toeplitz((c.numpy(), r.numpy()), Y.numpy()), rtol=1e-8)
    close(inv.to_dense(), np.linalg.inv(M.to_dense().numpy()), rtol=1e-8)
    S = M + M.T
    assert isinstance(S, sm.Toeplitz)
    close(S.to_dense(), M.to_dense() + M.to_dense().T)
    assert isinstance(M @ M, sm.Product)  # general products are not Toeplitz
    Hd = M.hadamard(M)
    close(Hd.to_dense(), M.to_dense() * M.to_dense())


def test_toeplitz_singular_and_errors():
    with pytest.raises(sm.SingularMatrixError):
        sm.Toeplitz.causal(torch.tensor([0.0, 1.0])).inv()
    with pytest.raises(ValueError, match="c must have shape"):
        sm.Toeplitz(torch.tensor(1.0))
    with pytest.raises(ValueError, match="c must be finite"):
        sm.Toeplitz(torch.tensor([1.0, float("nan")]))


def test_toeplitz_gradcheck():
    c, r, x = (rand(n, seed=i).requires_grad_() for i, n in enumerate((9, 7, (7, 2))))
    assert torch.autograd.gradcheck(lambda c, r, x: sm.Toeplitz(c, r) @ x, (c, r, x))
    y = rand(9, 2, seed=5)
    assert torch.autograd.gradcheck(lambda c: sm.Toeplitz.causal(c + 3 * torch.eye(9, dtype=F64)[0]).inv() @ y, (c,))


def test_fft_products_broadcast_both_ways():
    """The spectrum product is in place when the operand's batch covers the mask's, else not."""
    c, r = rand(3, 6, seed=1), rand(3, 5, seed=2)
    for M in (sm.Toeplitz(c, r), sm.Fourier.from_kernel(rand(3, 5, seed=5))):  # both (3, *, 5)
        for x in (rand(5, 2, seed=3), rand(4, 3, 5, 2, seed=4)):  # out of place, in place
            before = x.clone()
            close(M @ x, M.to_dense() @ x)
            assert torch.equal(x, before)


def test_decay_toeplitz_equals_oness_decay():
    T, g = 50, 0.9
    L = sm.Toeplitz.causal(torch.tensor(g, dtype=F64) ** torch.arange(T, dtype=F64))
    close(L.to_dense(), sm.OneSS.decay(torch.tensor(g, dtype=F64), T).to_dense())


@pytest.mark.parametrize("c_shape,r_shape", [((2, 3, 4), (5,)), ((2, 1, 4), (1, 3, 5)), ((2, 3, 4), (4,)),
                                             ((2, 1, 4), (1, 3, 4)), ((4,), (3, 4)), ((2, 4), (4,))])
def test_toeplitz_batch_shapes_broadcast_as_scipy(c_shape, r_shape):
    """``c`` and ``r`` batch shapes broadcast as in scipy's ``toeplitz`` (scipy >= 1.17 batches it)."""
    c, r = rand(*c_shape, seed=1), rand(*r_shape, seed=2)
    c[..., 0] += 4.0  # dominant diagonal for the square cases (r[0] is ignored)
    M = sm.Toeplitz(c, r)
    dense = sl.toeplitz(c.numpy(), r.numpy())
    assert M.shape == dense.shape
    close(M.to_dense(), dense)
    X = rand(r_shape[-1], 2, seed=3)
    close(M @ X, dense @ X.numpy())
    close(M.matmat_fn()(X), dense @ X.numpy())
    close(M.T.to_dense(), np.swapaxes(dense, -1, -2))
    close(M.T @ rand(c_shape[-1], seed=4), np.swapaxes(dense, -1, -2) @ rand(c_shape[-1], seed=4).numpy())
    other = sm.Toeplitz(rand(c_shape[-1], seed=5), rand(*r_shape, seed=6))
    assert isinstance(M + other, sm.Toeplitz)
    close((M + other).to_dense(), dense + sl.toeplitz(other.c.numpy(), other.r.numpy()))
    if c_shape[-1] == r_shape[-1]:
        Y = rand(c_shape[-1], 3, seed=7)
        close(M.solve(Y), np.linalg.solve(dense, Y.numpy()), rtol=1e-8)
        close(M.inv().to_dense(), np.linalg.inv(dense), rtol=1e-8)
        close(M.T.solve(Y), np.linalg.solve(np.swapaxes(dense, -1, -2), Y.numpy()), rtol=1e-8)


def _dominant(*shape):
    c = torch.ones(*shape, dtype=F64)
    c[..., 0] = 10.0
    return c


@pytest.mark.parametrize("call,error,match", [
    (lambda: sm.Toeplitz(torch.ones(2, 3), torch.ones(3, 3)), ValueError, r"do not broadcast: c \(2,\), r \(3,\)"),
    (lambda: sm.Toeplitz(torch.ones(3), torch.tensor(1.0)), ValueError, r"r must have shape \(\*, S\)"),
    (lambda: sm.Toeplitz([[1.0, 2.0], [3.0]]), TypeError, "c must be array-like"),
    (lambda: sm.Toeplitz(torch.ones(3), "r"), TypeError, "r must be array-like"),
    (lambda: sm.Toeplitz(torch.ones(3), torch.ones(3), causal=True), ValueError, "r must be None"),
    (lambda: sm.Toeplitz(_dominant(3)).solve(torch.ones(4)), ValueError, r"Y has shape \(4,\); expected \(3,\)"),
    (lambda: sm.Toeplitz(_dominant(3)).solve(torch.ones(4, 2)), ValueError, r"Y has shape \(4, 2\); expected \(\*, 3, K\)"),
    (lambda: sm.Toeplitz(_dominant(2, 3)).solve(torch.ones(3, 3, 2)), ValueError, r"matrix \(2,\), Y \(3,\)"),
    (lambda: sm.Toeplitz(_dominant(3)).solve(torch.tensor(1.0)), ValueError, r"Y must have shape \(3,\) or \(\*, 3, K\)"),
    (lambda: sm.Toeplitz.causal(_dominant(3)).solve(torch.ones(4)), ValueError, r"Y has shape \(4,\); expected \(3,\)"),
    (lambda: sm.Toeplitz.causal(_dominant(2, 3)).solve(torch.ones(3, 3, 2)), ValueError, r"matrix \(2,\), Y \(3,\)"),
    (lambda: sm.Toeplitz.causal(_dominant(100)).solve(torch.ones(99, 1)), ValueError, r"expected \(\*, 100, K\)"),
    (lambda: sm.Toeplitz(torch.ones(3), torch.ones(4)).solve(torch.ones(3)), ValueError, "square"),
    (lambda: sm.ToeplitzInverse(sm.Diagonal(torch.ones(3))), TypeError, "M must be a square Toeplitz"),
])
def test_toeplitz_bad_input_names_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()
