"""Half precision in the FFT family: the matrix keeps the dtype asked for (float16, bfloat16, complex32) and its
results come back in it, computed in float32 (torch's CPU FFTs have no half kernels), as accurate as the dtype
allows against float64 references of the rounded entries."""

import warnings

import numpy as np
import pytest
import scipy.linalg as sl
import torch
from conftest import F64, close, randn

import structmat as sm
from structmat.testing import tolerance

HALF = [torch.float16, torch.bfloat16]
pytestmark = pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")


def rounded(t, dtype):
    """``t`` rounded to ``dtype``, as float64 / complex128 numpy for the references."""
    return t.to(dtype).to(torch.complex128 if dtype.is_complex else F64).numpy()


def kernel(T, seed, dtype=F64):
    c = randn(T, seed=seed, dtype=dtype) / T
    c[0] = 2.0
    return c


@pytest.mark.parametrize("dt", HALF)
def test_fourier_half(dt):
    c, x = kernel(16, 1), randn(16, 3, seed=2)
    M = sm.Fourier.from_kernel(c).to(dt)
    assert M.dtype == dt and M.real
    dense = sl.circulant(rounded(c, dt))
    close(M.to_dense().double(), dense, rtol=tolerance(dt))
    X = x.to(dt)
    close((M @ X).double(), dense @ rounded(x, dt), rtol=tolerance(dt))
    close(M.solve(X).double(), np.linalg.solve(dense, rounded(x, dt)), rtol=tolerance(dt))
    for R in (M + M, M @ M, M.inv(), M.T, M.hadamard(M), M @ X, M.solve(X), M.kernel, M.diagonal()):
        assert R.dtype == dt
    assert sm.Fourier.from_kernel(c, dtype=dt).dtype == dt
    assert sm.Fourier(M.eigvals, dtype=dt).dtype == dt and sm.Fourier(M.eigvals, dtype=torch.complex64).dtype == torch.complex64
    assert M.to(torch.float32).dtype == torch.float32 and M.to(F64).dtype == F64
    close(M.to(F64).to_dense(), dense)  # back up: the rounded entries, exactly


def test_fourier_complex32():
    c = kernel(8, 3, torch.complex128)
    M = sm.Fourier.from_kernel(c).to(torch.complex32)
    assert M.dtype == torch.complex32 and not M.real
    x = randn(8, seed=4, dtype=torch.complex128)
    dense = sl.circulant(rounded(c, torch.complex32))
    close((M @ x.to(torch.complex32)).to(torch.complex128), dense @ rounded(x, torch.complex32), rtol=tolerance(torch.float16))
    assert sm.Fourier.from_kernel(c, dtype=torch.float16).dtype == torch.complex32  # a precision: a complex kernel stays complex


def test_fourier_complex_to_real_keeps_the_real_part():
    """As torch casts a complex tensor: the entries' real part (it used to keep a broken half spectrum)."""
    c = kernel(6, 5, torch.complex128)
    M = sm.Fourier.from_kernel(c)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        R = M.to(F64)
    assert R.dtype == F64
    close(R.to_dense(), sl.circulant(c.real.numpy()))
    close(R @ torch.ones(6, dtype=F64), sl.circulant(c.real.numpy()) @ np.ones(6))


@pytest.mark.parametrize("dt", HALF)
@pytest.mark.parametrize("T", [5, 100])
def test_toeplitz_half(dt, T):
    c, r, x = kernel(T, 6), randn(T, seed=7) / T, randn(T, 2, seed=8)
    for M, dense in ((sm.Toeplitz(c, r).to(dt), sl.toeplitz(rounded(c, dt), rounded(r, dt))),
                     (sm.Toeplitz.causal(c).to(dt), np.tril(sl.toeplitz(rounded(c, dt))))):
        assert M.dtype == dt
        X = x.to(dt)
        close(M.to_dense().double(), dense, rtol=tolerance(dt))
        close((M @ X).double(), dense @ rounded(x, dt), rtol=tolerance(dt))
        close(M.matmat_fn()(X).double(), dense @ rounded(x, dt), rtol=tolerance(dt))
        close(M.solve(X).double(), np.linalg.solve(dense, rounded(x, dt)), rtol=tolerance(dt))
        close(M.inv().to_dense().double(), np.linalg.inv(dense), rtol=tolerance(dt))
        for R in (M @ X, M.solve(X), M.inv() @ X, M.inv().to_dense(), M.T @ X, (M + M) @ X):
            assert R.dtype == dt


@pytest.mark.parametrize("dt,complex_dt", [(torch.float16, torch.complex32), (torch.bfloat16, torch.complex64)])
def test_dft_half(dt, complex_dt):
    """The full matrix is complex (torch's to_complex of the precision), its parts real."""
    T = 12
    F = sm.DFT(T, dtype=dt)
    assert F.dtype == complex_dt and sm.DFT(T).to(dt).dtype == complex_dt
    assert F.real.dtype == dt and F.imag.dtype == dt
    want = np.fft.fft(np.eye(T))
    close(F.to_dense().to(torch.complex128), want, rtol=tolerance(dt))
    x = randn(T, 2, seed=9)
    close((F @ x.to(complex_dt)).to(torch.complex128), want @ rounded(x, dt), rtol=tolerance(dt))
    close((F.real @ x.to(dt)).double(), want.real @ rounded(x, dt), rtol=tolerance(dt))
    assert (F.real @ x.to(dt)).dtype == dt and F.inv().dtype == complex_dt


def test_dft_part_cast_to_a_complex_dtype_is_complex():
    """``DFT(T).real.to(complex64)`` kept float32 (the cast set only the precision): a complex cast of a real part
    gives that complex dtype, with the same entries; real casts and the full matrix's casts are unchanged."""
    R = sm.DFT(6).real
    for dt in (torch.complex64, torch.complex128):
        C = R.to(dt)
        assert C.dtype == dt
        close(C.to_dense().to(torch.complex128), R.to_dense().to(torch.complex128), rtol=1e-6)
        x = randn(6, 2, seed=3).to(dt)
        close((C @ x).to(torch.complex128), R.to_dense().to(torch.complex128) @ x.to(torch.complex128), rtol=1e-5)
    assert R.to(torch.float64).dtype == torch.float64 and sm.DFT(6).to(torch.complex128).dtype == torch.complex128
