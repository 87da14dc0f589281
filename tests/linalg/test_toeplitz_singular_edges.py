"""Edge cases of the Toeplitz solvers: singular matrices on the Levinson path (T > 128) raise, and the causal inverse
series stays exact where it grows (Newton's FFT products would lose it), on both sides of the dense thresholds."""

import numpy as np
import pytest
import scipy.linalg as sl
import torch

import structmat as sm
from structmat.linalg import causal_toeplitz as ct
from structmat.linalg import toeplitz_solvers as ts


def _periodic_difference(T: int) -> torch.Tensor:
    c = torch.zeros(T, dtype=torch.float64)
    c[0], c[1], c[-1] = 2.0, -1.0, -1.0
    return c


def _y(T: int, dtype=torch.float64) -> torch.Tensor:
    return torch.randn(T, generator=torch.Generator().manual_seed(T), dtype=torch.float64).to(dtype)


@pytest.mark.parametrize("T", [129, 700, 1000])
def test_singular_periodic_difference_raises(T):
    """The periodic second difference (rows sum to 0: exactly singular) raises on the Levinson path, for ``solve``
    and ``inv() @``; at T = 700 and 1000 the probe's condition estimate fell short of 1 / eps and it was solved."""
    c = _periodic_difference(T)
    M = sm.Toeplitz(c, c)
    with pytest.raises(sm.SingularMatrixError, match="singular"):
        M.solve(_y(T))
    with pytest.raises(sm.SingularMatrixError, match="singular"):
        sm.Toeplitz(c, c).inv() @ _y(T)


@pytest.mark.parametrize("T, seed", [(200, 0), (200, 3), (500, 2), (2000, 3)])
def test_near_singular_circulant_raises(T, seed):
    """Real circulants whose DC eigenvalue is zero up to rounding (condition number above 1 / eps, checked by numpy)
    raise rather than returning a finite solution with an O(1) residual; the probe's condition estimate read only
    1e9 to 1e13 for them (T = 2000, seed 3 had the smallest forward residual, 1e-2 |z|)."""
    k = torch.randn(T, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    k -= k.mean()  # eigenvalue sum(k) = 0 up to rounding
    r = torch.cat([k[:1], k[1:].flip(0)])  # circulant: M[i, j] = k[(i - j) mod T]
    assert np.linalg.cond(sl.toeplitz(k.numpy(), r.numpy())) > 1 / np.finfo(np.float64).eps
    with pytest.raises(sm.SingularMatrixError, match="singular"):
        sm.Toeplitz(k, r).solve(_y(T))


@pytest.mark.parametrize("shift", [1e-6, 1e-9])
def test_ill_conditioned_invertible_keeps_levinson(shift, monkeypatch):
    """The periodic difference plus ``shift`` on the diagonal (condition number ``4 / shift``, up to 4e9) is invertible:
    it keeps Levinson's generators (the O(T^3) LU must not run) and solves to ``eps * cond`` against numpy."""
    T = 1000
    monkeypatch.setattr(ts, "_heinig_lu", lambda c, r: pytest.fail("the pivoted LU ran"))
    c = _periodic_difference(T)
    c[0] += shift
    y = _y(T)
    ref = np.linalg.solve(sl.toeplitz(c.numpy()), y.numpy())
    x = sm.Toeplitz(c, c).solve(y).numpy()
    assert np.abs(x - ref).max() <= np.finfo(np.float64).eps * 4 / shift * np.abs(ref).max()


def test_well_conditioned_levinson_still_solves():
    """A diagonally dominant general Toeplitz at T = 1000 still solves to 1e-10 (relative to max |x|) against
    scipy's Levinson: the forward-residual test does not reject well-conditioned matrices."""
    T = 1000
    g = torch.Generator().manual_seed(0)
    decay = 0.7 ** torch.arange(T, dtype=torch.float64)
    c, r = torch.randn(T, generator=g, dtype=torch.float64) * decay, torch.randn(T, generator=g, dtype=torch.float64) * decay
    c[0] = r[0] = 5.0
    y = _y(T)
    ref = sl.solve_toeplitz((c.numpy(), r.numpy()), y.numpy())
    for x in (sm.Toeplitz(c, r).solve(y), sm.Toeplitz(c, r).inv() @ y):
        assert np.abs(x.numpy() - ref).max() <= 1e-10 * np.abs(ref).max()


_ids = lambda v: str(v).replace("torch.", "") if isinstance(v, torch.dtype) else None  # noqa: E731
GROWING = [(g, dtype, T) for g in (1.5, 2.0, 3.0) for dtype in (torch.float64, torch.float32) for T in (63, 64, 65, 256, 257, 300)]


def _fits(g: float, dtype: torch.dtype, T: int) -> bool:
    return (T - 1) * np.log(g) < np.log(torch.finfo(dtype).max)


@pytest.mark.parametrize("g, dtype, T", GROWING, ids=_ids)
def test_growing_causal_inverse_series_is_exact(g, dtype, T):
    """``c = (1, -g, 0, ...)`` has the inverse series ``g**k``: ``inv().c`` matches it term by term on both sides of
    the dense threshold (T = 64), where Newton alone was off by 1e13; where ``g**(T-1)`` overflows the dtype it
    raises. Tolerance ``2 T eps`` relative per term: forward substitution rounds one product per term."""
    c = torch.zeros(T, dtype=dtype)
    c[0], c[1] = 1.0, -g
    if not _fits(g, dtype, T):
        with pytest.raises(sm.SingularMatrixError, match="overflow"):
            sm.Toeplitz.causal(c).inv()
        return
    d = sm.Toeplitz.causal(c).inv().c.double().numpy()
    exact = g ** np.arange(T, dtype=np.float64)
    np.testing.assert_allclose(d, exact, rtol=2 * T * torch.finfo(dtype).eps, atol=0)


@pytest.mark.parametrize("g, dtype, T", GROWING, ids=_ids)
def test_growing_causal_solve_matches_forward_substitution(g, dtype, T):
    """``solve(y)`` and ``inv() @ y`` for the growing kernel match scipy's float64 triangular solve on both sides of
    the thresholds (dense solve to T = 256, inverse series above), or raise where ``g**(T-1)`` overflows. Tolerance
    ``10 T eps`` relative to ``max |x|``: the inverse series is exact to ``T eps`` per term and the FFT product
    with ``y`` adds ``eps log2(2T) sum |y| max |d|``, at most ``T`` times ``max |x|`` here."""
    c = torch.zeros(T, dtype=dtype)
    c[0], c[1] = 1.0, -g
    y = _y(T, dtype)
    if not _fits(g, dtype, T):
        with pytest.raises(sm.SingularMatrixError, match="overflow"):
            sm.Toeplitz.causal(c).solve(y)
        return
    ref = sl.solve_triangular(sl.toeplitz(c.double().numpy(), np.zeros(T)), y.double().numpy(), lower=True)
    tol = 10 * T * torch.finfo(dtype).eps * np.abs(ref).max()
    for x in (sm.Toeplitz.causal(c).solve(y), sm.Toeplitz.causal(c).inv() @ y):
        assert np.abs(x.double().numpy() - ref).max() <= tol


def _forward_reference(coeffs, T: int) -> np.ndarray:
    """The inverse series by float64 forward substitution (scipy's triangular solve)."""
    c = np.zeros(T)
    c[: len(coeffs)] = coeffs
    e0 = np.zeros(T)
    e0[0] = 1
    return sl.solve_triangular(sl.toeplitz(c, np.zeros(T)), e0, lower=True)


@pytest.mark.parametrize("coeffs", [(1.0, -0.9, 0.2), (1.0, -0.999)])
def test_decaying_kernel_keeps_newton(coeffs, monkeypatch):
    """A decaying kernel (condition number 10, and 2e3 with the residual check) keeps the O(T log T) Newton series
    (the term-by-term series must not run) and matches forward substitution to 1e3 eps of ``max |d|``."""
    T = 4096
    monkeypatch.setattr(ct, "_series_divide", lambda work: pytest.fail("the term-by-term series ran"))
    c = torch.zeros(T, dtype=torch.float64)
    c[: len(coeffs)] = torch.tensor(coeffs, dtype=torch.float64)
    d = ct.causal_inverse_series(c).numpy()
    ref = _forward_reference(coeffs, T)
    assert np.abs(d - ref).max() <= 1e3 * np.finfo(np.float64).eps * np.abs(ref).max()


def test_humped_kernel_falls_back():
    """``1 / (1 - 0.95 z)^2`` decays but has a hump (largest term 7.5 at k = 19): Newton alone was off by 3e4 eps, its residual
    bound rejects it and the term-by-term series gives it to 1e3 eps of ``max |d|``."""
    T, coeffs = 4096, (1.0, -1.9, 0.9025)
    c = torch.zeros(T, dtype=torch.float64)
    c[:3] = torch.tensor(coeffs, dtype=torch.float64)
    assert ct._newton_failures(c, ct._series_newton(c)) is not None
    ref = _forward_reference(coeffs, T)
    assert np.abs(ct.causal_inverse_series(c).numpy() - ref).max() <= 1e3 * np.finfo(np.float64).eps * np.abs(ref).max()


@pytest.mark.parametrize("sigma", [3.6, 3.8])
def test_ill_conditioned_invertible_matrices_keep_levinsons_inverse(sigma):
    """A Gaussian kernel at T = 600 (condition numbers 4e13, 1.4e15: invertible in float64) fails the residual bound
    by little; the pivoted LU's generators were kept without comparison (residual 1e7-1e11 against Levinson's 1e-3):
    the smaller residual wins now, as accurate as a dense LAPACK solve."""
    T = 600
    c = torch.exp(-(torch.arange(T, dtype=torch.float64) / sigma) ** 2)
    M, x = sm.Toeplitz(c, c), torch.randn(T, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    dense = M.to_dense()
    lapack = (dense @ torch.linalg.solve(dense, x) - x).abs().max()
    for y in (M.solve(x), M.inv() @ x):
        assert (dense @ y - x).abs().max() <= 10 * lapack + 1e-12
