"""Empty Toeplitz, Fourier and DFT masks (length 0, batches of 0, zero columns) give numpy/scipy's answer:
empty results of the right shape, never a crash (torch's FFTs refuse empty batches)."""

import numpy as np
import pytest
import scipy.linalg as sl
import torch
from conftest import F64, close

import structmat as sm


def empty_operations(M, Y):
    """``to_dense``, ``@``, ``solve``, ``inv() @``, ``inv().to_dense()`` of a square empty ``M``."""
    return {"to_dense": M.to_dense(), "@": M @ Y, "solve": M.solve(Y), "inv @": M.inv() @ Y, "inv dense": M.inv().to_dense()}


@pytest.mark.parametrize("make", [
    lambda: sm.Toeplitz(torch.ones(0, dtype=F64)),
    lambda: sm.Toeplitz(torch.ones(0, dtype=F64), torch.ones(0, dtype=F64)),
    lambda: sm.Toeplitz.causal(torch.ones(0, dtype=F64)),
    lambda: sm.Fourier.from_kernel(torch.ones(0, dtype=F64)),
    lambda: sm.DFT(0, dtype=torch.complex128),
    lambda: sm.DFT(0, dtype=torch.complex128).real,
], ids=["toeplitz", "toeplitz-r", "causal", "fourier", "dft", "dft-real"])
@pytest.mark.parametrize("Y", [np.ones(0), np.ones((0, 3)), np.ones((2, 0, 3))], ids=["vector", "matrix", "batched"])
def test_length_zero_matches_numpy(make, Y):
    M = make()
    want_solve = np.linalg.solve(np.ones((*Y.shape[:-2], 0, 0)), Y) if Y.ndim > 1 else sl.solve_toeplitz(np.ones(0), Y)
    got = empty_operations(M, torch.as_tensor(Y, dtype=M.dtype))
    close(got["to_dense"], np.zeros((0, 0)))
    for key in ("@", "solve", "inv @"):
        assert got[key].shape == want_solve.shape, key
        assert got[key].dtype == M.dtype, key
    assert got["inv dense"].shape == (0, 0)


def test_fourier_from_empty_kernels():
    close(sm.Fourier.from_kernel([]).to_dense(), sl.circulant([]))
    M = sm.Fourier.from_kernel(torch.ones(0, 10, dtype=F64))
    close(M.to_dense(), sl.circulant(np.ones((0, 10))))
    x = torch.ones(10, dtype=F64)
    for got in (M @ x, M.solve(x), M.inv() @ x, M.T @ x, (M + M) @ x, (M @ M) @ x, M.hadamard(M) @ x):
        assert got.shape == (0, 10)


@pytest.mark.parametrize("causal", [False, True])
def test_toeplitz_batch_of_zero(causal):
    """``Toeplitz(ones(0, 10), ones(0, 9))``: the FFT is short-circuited for the empty batch."""
    c, r = torch.ones(0, 10, dtype=F64), torch.ones(0, 9, dtype=F64)
    M = sm.Toeplitz.causal(c) if causal else sm.Toeplitz(c, r)
    assert (M @ torch.ones(M.shape[-1], dtype=F64)).shape == (0, 10)
    assert M.to_dense().shape == (0, 10, M.shape[-1])
    assert (M.T @ torch.ones(10, dtype=F64)).shape == (0, M.shape[-1])
    assert M.matmat_fn()(torch.ones(M.shape[-1], 2, dtype=F64)).shape == (0, 10, 2)
    S = sm.Toeplitz.causal(torch.ones(0, 100, dtype=F64)) if causal else sm.Toeplitz(c, torch.ones(0, 10, dtype=F64))
    y = torch.ones(S.shape[-1], dtype=F64)
    for got in (S.solve(y), S.inv() @ y, S.inv().to_dense()):
        assert got.shape[0] == 0 and got.shape[1:] == S.shape[1:len(got.shape)]


@pytest.mark.parametrize("T,S", [(5, 0), (1, 0), (0, 5), (3, 0)])
def test_rectangular_with_an_empty_side(T, S):
    c, r = np.arange(1.0, T + 1), np.arange(1.0, S + 1)
    M = sm.Toeplitz(torch.as_tensor(c), torch.as_tensor(r))
    close(M.to_dense(), sl.toeplitz(c, r))
    close(M @ torch.ones(S, dtype=F64), sl.toeplitz(c, r) @ np.ones(S))
    close(M.matmat_fn()(torch.ones(S, 2, dtype=F64)), sl.toeplitz(c, r) @ np.ones((S, 2)))
    close(M.T @ torch.ones(T, dtype=F64), sl.toeplitz(c, r).T @ np.ones(T))


@pytest.mark.parametrize("make", [
    lambda: sm.Toeplitz(torch.tensor([3.0, 1.0, 0.5], dtype=F64), torch.tensor([3.0, 0.2, 0.1], dtype=F64)),
    lambda: sm.Toeplitz.causal(torch.tensor([3.0, 1.0, 0.5], dtype=F64)),
    lambda: sm.Toeplitz.causal(torch.cat([torch.tensor([3.0], dtype=F64), torch.ones(99, dtype=F64) / 100])),
    lambda: sm.Fourier.from_kernel(torch.tensor([3.0, 1.0, 0.5], dtype=F64)),
    lambda: sm.DFT(3, dtype=torch.complex128),
    lambda: sm.DFT(3, dtype=torch.complex128).imag,
])
def test_zero_columns(make):
    M = make()
    X = torch.rand(M.shape[-1], 0, dtype=F64)
    dense = M.to_dense().numpy()
    close(M @ X, dense @ X.numpy().astype(dense.dtype))
    if not (isinstance(M, sm.DFT) and M.part != "full"):
        close(M.solve(X), np.linalg.solve(dense, X.numpy().astype(dense.dtype)))
        close(M.inv() @ X, np.linalg.solve(dense, X.numpy().astype(dense.dtype)))
