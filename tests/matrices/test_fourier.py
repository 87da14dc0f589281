"""Circulant (Fourier) and DFT masks against scipy's circulant and numpy's FFT."""

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

@given(st.integers(1, 64), st.booleans(), st.integers(0, 100))
def test_fourier_circulant_algebra(T, complex_kernel, seed):
    dtype = C128 if complex_kernel else F64
    c1, c2 = rand(T, seed=seed, dtype=dtype), rand(T, seed=seed + 1, dtype=dtype)
    c1[0] = c1[0] + 3 * T
    A, B = sm.Fourier.from_kernel(c1), sm.Fourier.from_kernel(c2)
    assert A.dtype == dtype
    dA, dB = sl.circulant(c1.numpy()), sl.circulant(c2.numpy())
    close(A.to_dense(), dA)
    smt.assert_matches_dense(A)
    for R, want in ((A + B, dA + dB), (A @ B, dA @ dB), (A.inv(), np.linalg.inv(dA)), (A.T, dA.T), (A.hadamard(B), dA * dB)):
        assert isinstance(R, sm.Fourier)
        close(R.to_dense(), want, rtol=1e-8)
    y = rand(T, seed=seed + 2, dtype=dtype)
    close(A.solve(y), sl.solve_circulant(c1.numpy(), y.numpy()), rtol=1e-8)
    close(A.to_toeplitz().to_dense(), dA)


def test_fourier_and_dft_gradcheck():
    c, x = rand(8, seed=3).requires_grad_(), rand(8, 2, seed=4).requires_grad_()
    c2 = rand(8, seed=6)
    c2[0] = 5.0
    f = lambda c, x: sm.Fourier.from_kernel(c) @ x + (sm.Fourier.from_kernel(c) @ sm.Fourier.from_kernel(c2)).inv() @ x  # noqa: E731
    assert torch.autograd.gradcheck(lambda c, x: f(c + 5 * torch.eye(8, dtype=F64)[0], x), (c, x))
    z = torch.complex(rand(8, 2, seed=5), rand(8, 2, seed=7)).requires_grad_()
    assert torch.autograd.gradcheck(lambda z: sm.DFT(8, dtype=C128) @ z, (z,))


def test_fourier_singular_and_real_results():
    with pytest.raises(sm.SingularMatrixError):
        sm.Fourier.from_kernel(torch.ones(4)).inv()  # eigenvalues (4, 0, 0, 0)
    M = sm.Fourier.from_kernel(torch.tensor([1.0, 2.0, 3.0]))
    assert not (M @ torch.ones(3)).is_complex()


def test_dft_masks():
    T = 12
    F = sm.DFT(T, dtype=C128)
    close(F.to_dense(), np.fft.fft(np.eye(T)))
    X = rand(T, 3, seed=1)
    close(F @ X, np.fft.fft(X.numpy(), axis=0))
    close(F.inv().to_dense() @ F.to_dense(), np.eye(T))
    assert F.inv().inverse
    cos = F.real
    close(cos.to_dense(), np.cos(2 * np.pi * np.outer(np.arange(T), np.arange(T)) / T))
    close(cos @ X, cos.to_dense() @ X)
    close(F.imag @ X, F.imag.to_dense() @ X)
    with pytest.raises(sm.SingularMatrixError):
        cos.inv()
