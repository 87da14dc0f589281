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


def dft_reference(T, inverse, part, scale):
    """``scale * part(F)`` with ``F`` numpy's DFT matrix (``fft`` of the identity; ``T ifft`` for the inverse)."""
    if T == 0:  # numpy's FFT refuses length 0
        return np.zeros((0, 0), dtype=complex) * scale
    F = T * np.fft.ifft(np.eye(T), axis=0) if inverse else np.fft.fft(np.eye(T), axis=0)
    return scale * {"full": F, "real": F.real, "imag": F.imag}[part]


@pytest.mark.parametrize("part", ["full", "real", "imag"])
@pytest.mark.parametrize("scale", [1.0, -0.5, 2j, 1 + 2j])
@pytest.mark.parametrize("inverse", [False, True])
def test_dft_adjoints_match_numpy(part, scale, inverse):
    """``.H``, ``.conj()``, ``.T`` and ``aslinearoperator(...).rmatvec`` of every part, with complex scales."""
    T = 7
    M = sm.DFT(T, inverse, scale=scale, part=part, dtype=C128)
    want = dft_reference(T, inverse, part, scale)
    close(M.to_dense(), want)
    close(M.H.to_dense(), want.conj().T)
    close(M.conj().to_dense(), want.conj())
    close(M.T.to_dense(), want.T)
    x = rand(T, seed=1, dtype=C128)
    close(M.H @ x, want.conj().T @ x.numpy())
    close(M.conj() @ x, want.conj() @ x.numpy())
    op = sm.aslinearoperator(M)
    close(op.matvec(x.numpy()), want @ x.numpy())
    close(op.rmatvec(x.numpy()), want.conj().T @ x.numpy())
    close(op.rmatmat(np.stack([x.numpy(), 2 * x.numpy()], 1)), want.conj().T @ np.stack([x.numpy(), 2 * x.numpy()], 1))


def test_dft_to_dense_complex64_at_5000():
    """Entries from exact integer products ``t s mod T``: complex64 rounding only (a float32 ``t s`` gave 1.3e-3)."""
    T = 5000
    dense = sm.DFT(T).to_dense()
    assert dense.dtype == torch.complex64
    worst = 0.0
    for j in range(0, T, 1000):  # numpy's reference by column blocks, to bound the memory
        want = np.fft.fft(np.eye(T)[:, j:j + 1000], axis=0)
        worst = max(worst, np.abs(dense[:, j:j + 1000].numpy() - want).max())
    assert worst <= 2 * torch.finfo(torch.float32).eps, worst
    close(sm.DFT(T, inverse=True).diagonal(), np.diag(np.fft.ifft(np.eye(T)) * T), rtol=2 * torch.finfo(torch.float32).eps)


@pytest.mark.parametrize("T", [0, 1, 2])
def test_dft_real_part_inverse_where_it_exists(T):
    M = sm.DFT(T, scale=3.0, dtype=C128).real
    close(M.inv().to_dense(), np.linalg.inv(dft_reference(T, False, "real", 3.0)))
    with pytest.raises(sm.SingularMatrixError, match="singular"):
        sm.DFT(3, dtype=C128).real.inv()
    if T:
        with pytest.raises(sm.SingularMatrixError, match="singular"):
            sm.DFT(T, dtype=C128).imag.inv()


@pytest.mark.parametrize("call,error,match", [
    (lambda: sm.Fourier(torch.tensor(1.0)), ValueError, r"eigvals must have shape \(\*, T\)"),
    (lambda: sm.Fourier.from_kernel(torch.tensor(1.0)), ValueError, r"c must have shape \(\*, T\)"),
    (lambda: sm.Fourier.from_kernel("c"), TypeError, "c must be array-like"),
    (lambda: sm.Fourier(torch.ones(3), dtype="float32"), TypeError, "dtype must be a floating or complex torch.dtype"),
    (lambda: sm.Fourier.from_kernel(torch.tensor([3.0, 1.0, 0.0])).solve(torch.ones(4)), ValueError,
     r"Y has shape \(4,\); expected \(3,\)"),
    (lambda: sm.Fourier.from_kernel(torch.tensor([[3.0, 1.0, 0.0]] * 2)).solve(torch.ones(3, 3, 1)), ValueError,
     r"matrix \(2,\), Y \(3,\)"),
    (lambda: sm.DFT(-1), ValueError, "T must be a non-negative integer; got -1"),
    (lambda: sm.DFT(2.5), ValueError, "T must be a non-negative integer; got 2.5"),
    (lambda: sm.DFT("4"), TypeError, "T must be a non-negative integer; got str"),
    (lambda: sm.DFT(4, part="cos"), ValueError, "part must be one of"),
    (lambda: sm.DFT(4, dtype=torch.int64), TypeError, "dtype must be a floating or complex torch.dtype"),
    (lambda: sm.DFT(4, scale="2"), TypeError, "scale must be a number"),
    (lambda: sm.DFT(3).solve(torch.ones(4)), ValueError, r"Y has shape \(4,\); expected \(3,\)"),
    (lambda: sm.DFT(3).solve(torch.tensor(1.0)), ValueError, r"Y must have shape \(3,\) or \(\*, 3, K\)"),
])
def test_fourier_and_dft_bad_input_names_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_explicit_real_needs_a_conjugate_symmetric_spectrum():
    """``real=True`` with a spectrum that is not conjugate-symmetric raised nothing, and then ``to_dense``, ``@`` and
    ``solve`` used the real kernel while ``inv()`` and products used the raw spectrum (``M.inv() M`` 0.18 from the
    identity): now a ``ValueError``. Rounding of a spectrum computed in float32 passes, and so does a skipped check."""
    with pytest.raises(ValueError, match="conjugate-symmetric"):
        sm.Fourier(torch.tensor([4, 1 + 2j, 3], dtype=torch.complex128), real=True)
    lam = torch.fft.fft(torch.randn(16, dtype=torch.float32)) * torch.fft.fft(torch.randn(16, dtype=torch.float32))
    M = sm.Fourier(lam * (1 + 1e-7 * torch.randn(16)), real=True)  # a few ulps off
    assert M.real and M.dtype == torch.float32
    with sm.skip_finite_checks():
        assert sm.Fourier(torch.tensor([4, 1 + 2j, 3], dtype=torch.complex128), real=True).real
