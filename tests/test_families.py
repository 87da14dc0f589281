"""Toeplitz, Fourier, DFT and Quasiseparable masks against scipy and dense float64 definitions."""

import numpy as np
import pytest
import scipy.linalg as sl
import torch
from hypothesis import given
from hypothesis import strategies as st

import structmat as sm
import structmat.testing as smt

F64, C128 = torch.float64, torch.complex128


def close(got, want, rtol=1e-9):
    got = got.detach().resolve_conj().numpy() if isinstance(got, torch.Tensor) else np.asarray(got)
    want = want.detach().resolve_conj().numpy() if isinstance(want, torch.Tensor) else np.asarray(want)
    scale = max(np.abs(want).max(initial=0.0), 1e-30)
    assert np.abs(got - want).max(initial=0.0) <= rtol * scale + 1e-13


def rand(*shape, seed=0, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_complex:
        return torch.complex(torch.randn(*shape, generator=g, dtype=F64), torch.randn(*shape, generator=g, dtype=F64))
    return torch.randn(*shape, generator=g, dtype=dtype)


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
    assert isinstance(inv, sm.Toeplitz) and inv.causal
    close(inv.to_dense() @ L.to_dense(), torch.eye(T, dtype=F64), rtol=1e-7)
    P = L @ sm.Toeplitz.causal(rand(T, seed=seed + 1))
    assert isinstance(P, sm.Toeplitz) and P.causal
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
        sm.Toeplitz(torch.zeros(0))
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


# --- quasiseparable -----------------------------------------------------------------------------


def J(T):
    return torch.eye(T, dtype=F64).flip(0)


@given(st.integers(1, 40), st.integers(0, 100))
def test_lion_masks_match_their_definitions(T, seed):
    g = torch.Generator().manual_seed(seed)
    a = torch.rand(T, generator=g, dtype=F64)
    # selective LION: forward decays a_t, backward the flipped decays
    fwd = sm.OneSS.from_decays(a)
    bwd = sm.OneSS.from_decays(torch.flip(torch.roll(a, -1), (0,)))
    Q = sm.Quasiseparable.bidirectional(fwd, bwd)
    want = np.zeros((T, T))
    for i in range(T):
        for j in range(T):
            lo, hi = min(i, j), max(i, j)
            want[i, j] = np.prod(a[lo + 1 : hi + 1].numpy())
    close(Q.to_dense(), want)
    close(Q.to_dense(), fwd.to_dense() + J(T) @ bwd.to_dense() @ J(T) - torch.eye(T, dtype=F64))
    smt.assert_matches_dense(Q)
    dec = sm.Quasiseparable.bidirectional(sm.OneSS.decay(torch.tensor(0.7, dtype=F64), T),
                                          sm.OneSS.decay(torch.tensor(0.7, dtype=F64), T))
    close(dec.to_dense(), 0.7 ** np.abs(np.subtract.outer(np.arange(T), np.arange(T))))


@given(st.integers(2, 30), st.integers(0, 100))
def test_hydra_mask_and_closure(T, seed):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=F64)  # noqa: E731
    fwd = sm.SSS(torch.rand(T, 2, generator=g, dtype=F64), r(T, 2), r(T, 2))
    bwd = sm.SSS(torch.rand(T, 3, generator=g, dtype=F64), r(T, 3), r(T, 3))
    d = r(T)
    Q = sm.Quasiseparable.bidirectional(fwd, bwd, diag=d)  # Hydra: free diagonal
    want = torch.tril(fwd.to_dense(), -1) + torch.triu(J(T) @ bwd.to_dense() @ J(T), 1) + torch.diag(d)
    close(Q.to_dense(), want)
    assert Q.order == (2, 3)
    for R, wantR, order in (
        (Q + Q, 2 * want, (4, 6)),
        (Q + fwd, want + fwd.to_dense(), (4, 3)),
        (Q + sm.Diagonal(d), want + torch.diag(d), (2, 3)),
        (Q + sm.OneSS.from_decays(torch.rand(T, generator=g, dtype=F64)).T, None, (2, 4)),
    ):
        assert isinstance(R, sm.Quasiseparable) and R.order == order
        if wantR is not None:
            close(R.to_dense(), wantR)
    close(Q.T.to_dense(), want.T)
    close(Q.tril().to_dense(), torch.tril(want))
    close(Q.triu().to_dense(), torch.triu(want))
    C = (Q + Q).compress()
    assert C.order[0] <= 2 and C.order[1] <= 3
    close(C.to_dense(), 2 * want, rtol=1e-8)


def _hydra(T, n_l, n_u, seed, batch=()):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.rand(*batch, *s, generator=g, dtype=F64)  # noqa: E731
    n = lambda *s: torch.randn(*batch, *s, generator=g, dtype=F64)  # noqa: E731
    fwd = sm.SSS(r(T, n_l), n(T, n_l), n(T, n_l))
    bwd = sm.SSS(r(T, n_u, n_u) / n_u, n(T, n_u), n(T, n_u))
    return sm.Quasiseparable.bidirectional(fwd, bwd, diag=4 + n(T))


@given(st.integers(1, 30), st.integers(1, 3), st.integers(1, 3), st.sampled_from([(), (2,)]), st.integers(0, 100))
def test_quasiseparable_product_and_inverse(T, n_l, n_u, batch, seed):
    Q1, Q2 = _hydra(T, n_l, n_u, seed, batch), _hydra(T, n_u, n_l, seed + 1)
    P = Q1 @ Q2
    assert isinstance(P, sm.Quasiseparable) and P.order == (n_l + n_u, n_u + n_l)
    close(P.to_dense(), Q1.to_dense() @ Q2.to_dense(), rtol=1e-9)
    inv = Q1.inv()
    assert isinstance(inv, sm.Quasiseparable) and inv.order == (n_l, n_u)
    close(inv.to_dense() @ Q1.to_dense(), torch.eye(T, dtype=F64).expand(Q1.shape), rtol=1e-8)
    y = torch.randn(T, 2, dtype=F64)
    close(Q1 @ Q1.solve(y), y.expand(*batch, T, 2), rtol=1e-8)
    L, U = Q1.lu()
    close(L.to_dense() @ U.to_dense(), Q1.to_dense(), rtol=1e-9)


@given(st.integers(2, 25), st.integers(0, 100))
def test_quasiseparable_with_sss_oness_diagonal(T, seed):
    Q = _hydra(T, 2, 1, seed)
    g = torch.Generator().manual_seed(seed + 5)
    S = sm.SSS(torch.rand(T, 3, generator=g, dtype=F64), torch.randn(T, 3, generator=g, dtype=F64),
               torch.randn(T, 3, generator=g, dtype=F64), D=2 + torch.rand(T, generator=g, dtype=F64))
    O = sm.OneSS.from_decays(torch.rand(T, generator=g, dtype=F64))
    Dg = sm.Diagonal(1 + torch.rand(T, generator=g, dtype=F64))
    cases = [(Q @ S, Q.to_dense() @ S.to_dense(), (5, 1)), (S @ Q, S.to_dense() @ Q.to_dense(), (5, 1)),
             (Q @ O.T, Q.to_dense() @ O.to_dense().T, (2, 2)), (Q @ Dg, Q.to_dense() @ Dg.to_dense(), (2, 1)),
             (Dg @ Q, Dg.to_dense() @ Q.to_dense(), (2, 1)), (S @ O.T, S.to_dense() @ O.to_dense().T, (3, 1))]
    for R, want, order in cases:
        assert isinstance(R, sm.Quasiseparable) and R.order == order
        close(R.to_dense(), want, rtol=1e-9)


def test_quasiseparable_gradcheck_and_errors():
    T = 8
    a, x = torch.rand(T, dtype=F64, requires_grad=True), torch.randn(T, 2, dtype=F64, requires_grad=True)
    f = lambda a, x: sm.Quasiseparable.bidirectional(sm.OneSS.from_decays(a), sm.OneSS.from_decays(a.flip(0))) @ x  # noqa: E731
    assert torch.autograd.gradcheck(f, (a, x))
    d = torch.rand(T, dtype=F64, requires_grad=True)

    def g(a, d, x):
        Q = sm.Quasiseparable.bidirectional(sm.OneSS.from_decays(a), sm.OneSS.from_decays(a.flip(0)), diag=3 + d)
        return (Q @ Q) @ x + Q.inv() @ x

    assert torch.autograd.gradcheck(g, (a, d, x))
    with pytest.raises(TypeError, match="upper must be"):
        sm.Quasiseparable(sm.OneSS.causal(3), sm.OneSS.causal(3), torch.ones(3))
    with pytest.raises(sm.SingularMatrixError, match="leading principal minor"):
        sm.Quasiseparable.bidirectional(sm.OneSS.causal(3), sm.OneSS.causal(3), diag=torch.zeros(3)).inv()
