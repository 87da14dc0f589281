"""Edges of the spectral masks (audit 22a items 5, 6, 7, 8, 11): real-spectrum gradients and detection, the
``Fourier.inv()`` tolerance, ``DFT`` scales out of range, and ``DFT.real`` / ``.imag`` of parts and complex scales.
References are independent: ``numpy.fft``, dense complex128 products, closed forms."""

import math

import numpy as np
import pytest
import torch

import structmat as sm

C64, C128, F32, F64 = torch.complex64, torch.complex128, torch.float32, torch.float64


def _mirror(g):
    """``conj(g[-k mod T])``: a spectrum is conjugate-symmetric when it equals its mirror."""
    return torch.roll(torch.flip(g, (-1,)), 1, dims=-1).conj()


def _real_spectrum(T, seed):
    return torch.from_numpy(np.fft.fft(np.random.default_rng(seed).standard_normal(T)))


def _grad(f, lam):
    """Gradient of ``sum(f(lam) * w)`` (``w`` fixed, so every path differentiates the same scalar)."""
    lam = lam.clone().requires_grad_()
    out = f(lam)
    w = torch.linspace(-1, 2, out.numel(), dtype=out.dtype).reshape(out.shape)
    (g,) = torch.autograd.grad((out * w).sum(), lam)
    return g


# item 5 ------------------------------------------------------------------------------------------------------------
def test_real_fourier_gradient_is_path_independent_and_symmetric():
    """Pins: for a real circulant the eigvals gradient of ``M @ x`` equals that of ``to_dense() @ x``, and the one of
    ``M.T @ x`` equals both ``(x^T M)^T`` and ``to_dense().T @ x``; all are conjugate-symmetric (was: all on one half)."""
    lam, x = _real_spectrum(6, 0), torch.randn(6, 2, dtype=F64, generator=torch.Generator().manual_seed(1))
    M = lambda lam: sm.Fourier(lam, real=True)  # noqa: E731
    g = _grad(lambda lam: M(lam) @ x, lam)
    gt = _grad(lambda lam: M(lam).T @ x, lam)
    for other in (_grad(lambda lam: M(lam).to_dense() @ x, lam), _grad(lambda lam: M(lam).T.T @ x, lam)):
        torch.testing.assert_close(other, g, rtol=1e-12, atol=1e-14)
    for other in (_grad(lambda lam: (x.T @ M(lam)).T, lam), _grad(lambda lam: M(lam).to_dense().T @ x, lam)):
        torch.testing.assert_close(other, gt, rtol=1e-12, atol=1e-14)
    for grad in (g, gt):
        torch.testing.assert_close(grad, _mirror(grad), rtol=0, atol=1e-14)


def test_real_fourier_sgd_step_stays_real():
    """Pins: one SGD step with the ``M @ x`` gradient keeps a spectrum ``real=True`` accepts and auto-detects."""
    lam, x = _real_spectrum(10, 2), torch.randn(10, dtype=F64, generator=torch.Generator().manual_seed(3))
    stepped = lam - 0.1 * _grad(lambda lam: sm.Fourier(lam, real=True) @ x, lam)
    assert sm.Fourier(stepped, real=True).dtype == F64
    assert sm.Fourier(stepped).real


def test_real_fourier_gradcheck():
    """Pins the gradient of ``Fourier(lam, real=True) @ x`` as a function of a complex ``lam`` (the symmetric
    projection included): finite differences break the symmetry, so the real=True check is skipped."""
    lam, x = _real_spectrum(6, 4).requires_grad_(), torch.randn(6, 2, dtype=F64).requires_grad_()
    with sm.skip_finite_checks():
        assert torch.autograd.gradcheck(lambda lam, x: sm.Fourier(lam, real=True) @ x, (lam, x))
        assert torch.autograd.gradcheck(lambda lam, x: sm.Fourier(lam, real=True).T @ x, (lam, x))


def test_real_fourier_values_are_those_of_the_kernel():
    """Pins: the symmetrised spectrum keeps the matrix the circulant of ``ifft(lam).real`` (numpy reference)."""
    lam = _real_spectrum(9, 5)
    lam_noisy = lam + 1e-14 * torch.randn(9, dtype=C128, generator=torch.Generator().manual_seed(6))
    c = np.fft.ifft(lam_noisy.numpy()).real
    dense = np.stack([np.roll(c, j) for j in range(9)], axis=1)
    M = sm.Fourier(lam_noisy, real=True)
    np.testing.assert_allclose(M.to_dense().numpy(), dense, rtol=0, atol=1e-13)
    torch.testing.assert_close(M.eigvals, _mirror(M.eigvals), rtol=0, atol=0)  # exactly symmetric


# item 6 ------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("T", [12, 100, 1000, 4096])
def test_fft_of_real_kernel_is_detected_real(T):
    """Pins: ``Fourier(np.fft.fft(real kernel))`` is a real float64 matrix (was complex in 20/20 draws at T = 1000)."""
    for seed in range(5):
        M = sm.Fourier(_real_spectrum(T, seed))
        assert M.real and M.dtype == F64


def test_complex_kernel_is_still_detected_complex():
    """Pins: a spectrum that is not symmetric beyond FFT rounding stays complex (a real kernel plus 1e-10 i)."""
    c = torch.randn(64, dtype=F64, generator=torch.Generator().manual_seed(7)).to(C128)
    c[3] += 1e-10j
    assert sm.Fourier(torch.fft.fft(c)).dtype == C128


# item 7 ------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [
    lambda: sm.DFT(4) * 0, lambda: sm.DFT(4, scale=0.0), lambda: sm.DFT(2).real * 0,
    lambda: sm.DFT(4, scale=1e-310, dtype=C128), lambda: sm.DFT(4, scale=1e-50), lambda: sm.DFT(4, scale=1e-40),
], ids=["times0", "scale0", "real_times0", "subnormal64", "zero32", "subnormal32"])
def test_dft_zero_scale_is_singular(make):
    """Pins: a zero scale, or one whose inverse overflows the precision, raises SingularMatrixError on inv/solve
    (was ZeroDivisionError, a 'got inf' message, or silent inf/NaN)."""
    M = make()
    y = torch.ones(M.shape[-1], dtype=M.dtype)
    for call in (M.inv, lambda: M.solve(y)):
        with pytest.raises(sm.SingularMatrixError, match="scale"):
            call()


def test_dft_small_scale_inverse_is_exact():
    """Pins: a small scale that is invertible in its precision still inverts (against dense complex128)."""
    M = sm.DFT(8, scale=1e-30)  # 1 / (8e-30) is within float32
    got = (M.inv().to_dense().to(C128) @ M.to_dense().to(C128))
    torch.testing.assert_close(got, torch.eye(8, dtype=C128), rtol=0, atol=1e-5)


@pytest.mark.parametrize("make", [
    lambda: sm.DFT(4) * 1e30 * 1e30, lambda: sm.DFT(4, scale=1e39), lambda: sm.DFT(4, dtype=torch.float16) * 1e5,
    lambda: sm.DFT(4, dtype=C128) * 1e300 * 1e300, lambda: sm.DFT(4, scale=1e30j) * 1e10,
])
def test_dft_scale_beyond_range_is_refused(make):
    """Pins: a scale beyond the dtype's range raises a ValueError naming the scale (was silent inf/NaN products)."""
    with pytest.raises(ValueError, match="scale"):
        make()


# item 8 ------------------------------------------------------------------------------------------------------------
def _conditioned_spectrum(T, cond):
    """Real, positive, symmetric spectrum with condition number ``cond``: ``1 + (cond - 1) cos^2(pi k / T)``."""
    k = torch.arange(T, dtype=F64)
    return (1 + (cond - 1) * torch.cos(math.pi * k / T) ** 2).to(C128)


@pytest.mark.parametrize("T, cond", [(8192, 2000.0), (131072, 100.0)])
def test_float32_fourier_solve_at_long_T(T, cond):
    """Pins: well-conditioned float32 circulants solve at long T (was SingularMatrixError at T eps), against the
    float64 closed form ``x = ifft(fft(y) / lam)``."""
    lam = _conditioned_spectrum(T, cond)
    y = torch.randn(T, dtype=F64, generator=torch.Generator().manual_seed(8))
    want = torch.fft.ifft(torch.fft.fft(y) / lam).real
    got = sm.Fourier(lam.to(C64), real=True).solve(y.to(F32)).double()
    assert ((got - want).norm() / want.norm()).item() < 100 * cond * torch.finfo(F32).eps


def test_fourier_inverse_tolerance_is_eps_log_T():
    """Pins the documented threshold ``10 eps max(1, log2 T) max|lam|``: just below it is singular, above is not."""
    T = 1024
    tol = 10 * torch.finfo(F64).eps * math.log2(T)
    for ratio, singular in ((0.5 * tol, True), (2 * tol, False)):
        lam = torch.ones(T, dtype=C128)
        lam[T // 2] = ratio
        if singular:
            with pytest.raises(sm.SingularMatrixError):
                sm.Fourier(lam).inv()
        else:
            torch.testing.assert_close(sm.Fourier(lam).inv().eigvals, 1 / lam)


# item 11 -----------------------------------------------------------------------------------------------------------
def _dense(M):
    return M.to_dense().to(C128)


@pytest.mark.parametrize("make", [
    lambda: sm.DFT(4, dtype=C128), lambda: sm.DFT(5, dtype=C128).imag, lambda: sm.DFT(5, dtype=C128).real,
    lambda: sm.DFT(4, dtype=C128) * 1j, lambda: sm.DFT(6, True, dtype=C128) * (2 - 3j),
    lambda: sm.DFT(5, dtype=C128).imag * (1 + 2j), lambda: sm.DFT(3, dtype=C128) * 0.5,
], ids=["full", "imag", "real", "times_1j", "inverse_complex", "imag_complex", "real_scale"])
def test_dft_real_imag_are_the_parts(make):
    """Pins: ``M.real`` / ``M.imag`` equal ``to_dense().real`` / ``.imag`` of the dense complex128 matrix, with a
    real dtype, for parts and complex scales (was: the part of the unscaled full matrix)."""
    M = make()
    ref = _dense(make())
    for part, want in ((M.real, ref.real), (M.imag, ref.imag)):
        assert not part.dtype.is_complex
        torch.testing.assert_close(part.to_dense().double(), want, rtol=0, atol=1e-12)
        x = torch.randn(M.shape[-1], 2, dtype=F64, generator=torch.Generator().manual_seed(9))
        torch.testing.assert_close(part @ x, want @ x, rtol=0, atol=1e-12)


def test_dft_real_of_real_part_is_itself():
    """Pins numpy semantics: ``.real`` of a real part is the same object; ``.imag`` of it is the (real) zero matrix."""
    S = sm.DFT(4).imag
    assert S.real is S
    assert S.imag.dtype == S.dtype and not S.imag.to_dense().any()


@pytest.mark.parametrize("T", [1, 2, 5, 8])
def test_from_kernel_of_a_real_kernel_is_exactly_conjugate_symmetric(T):
    """``from_kernel`` mirrors the half spectrum of a real kernel (no check or symmetrisation passes: at T = 1e6
    those cost as much as the solve): exactly symmetric, the kernel's circulant, differentiable in the kernel."""
    c = torch.randn(T, dtype=torch.float64, generator=torch.Generator().manual_seed(T)).requires_grad_()
    M = sm.Fourier.from_kernel(c)
    lam = M.eigvals.detach()
    assert M.real and M.dtype == torch.float64
    assert torch.equal(lam[1:], lam[1:].flip(-1).conj())
    torch.testing.assert_close(lam, torch.fft.fft(c.detach()))
    idx = (torch.arange(T)[:, None] - torch.arange(T)[None, :]) % T
    torch.testing.assert_close(M.to_dense(), c.detach()[idx])
    assert torch.autograd.gradcheck(lambda c: sm.Fourier.from_kernel(c) @ torch.ones(T, 2, dtype=torch.float64), (c,))


def test_real_detection_is_per_batch_entry():
    """A complex head beside a large real one passed the symmetry test at the large one's scale: the matrix came out
    real and the complex head lost its imaginary kernel (0.99 off)."""
    T = 64
    g = torch.Generator().manual_seed(3)
    real_head = torch.fft.fft(1e4 * torch.randn(T, generator=g, dtype=torch.float64)).to(torch.complex64)
    complex_head = torch.fft.fft(torch.complex(torch.randn(T, generator=g), torch.randn(T, generator=g)))
    M = sm.Fourier(torch.stack([real_head, complex_head]))
    assert not M.real and M.dtype == torch.complex64
    torch.testing.assert_close(M.to_dense()[1], sm.Fourier(complex_head).to_dense())


def test_short_circulants_invert_as_before_the_fft_tolerance():
    """The FFT rounding tolerance ``10 log2 T`` is larger than the former ``T`` below T = 59: ``min`` of the two keeps
    short, well-defined circulants invertible (condition 3e5 in complex64 at T = 16)."""
    lam = torch.ones(16, dtype=torch.complex64)
    lam[3] = 3e-6
    M = sm.Fourier(lam)
    x = torch.randn(16, dtype=torch.complex64, generator=torch.Generator().manual_seed(4))
    torch.testing.assert_close(M.inv() @ (M @ x), x, rtol=2e-2, atol=2e-2)
