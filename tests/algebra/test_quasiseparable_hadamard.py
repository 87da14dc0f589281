"""Elementwise products with a Quasiseparable operand against dense float64: structured, orders multiply."""

import torch
from conftest import F64, close
from hypothesis import given
from hypothesis import strategies as st

import structmat as sm


def _parts(T, seed, batch=()):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*batch, *s, generator=g, dtype=F64)  # noqa: E731
    u = lambda *s: torch.rand(*batch, *s, generator=g, dtype=F64)  # noqa: E731
    return g, r, u


def _hydra(T, n_l, n_u, seed, batch=()):
    g, r, u = _parts(T, seed, batch)
    fwd = sm.SSS(u(T, n_l), r(T, n_l), r(T, n_l))
    bwd = sm.SSS(r(T, n_u, n_u) / n_u, r(T, n_u), r(T, n_u))
    return sm.Quasiseparable.bidirectional(fwd, bwd, diag=r(T))


@given(st.integers(1, 20), st.integers(1, 3), st.integers(1, 2), st.sampled_from([(), (2,)]), st.integers(0, 100))
def test_quasiseparable_hadamard_quasiseparable(T, n_l, n_u, batch, seed):
    Q1, Q2 = _hydra(T, n_l, n_u, seed, batch), _hydra(T, n_u, 2, seed + 1)
    H = Q1.hadamard(Q2)
    assert isinstance(H, sm.Quasiseparable) and H.order == (n_l * n_u, n_u * 2)
    close(H.to_dense(), Q1.to_dense() * Q2.to_dense())
    lion = sm.Quasiseparable.bidirectional(sm.OneSS.decay(torch.tensor(0.8, dtype=F64), T),
                                           sm.OneSS.decay(torch.tensor(0.8, dtype=F64), T))
    H = lion.hadamard(lion)  # decays multiply: gamma^|i-j| squared
    assert H.order == (1, 1)
    close(H.to_dense(), 0.64 ** torch.abs(torch.arange(T)[:, None] - torch.arange(T)).to(F64))


@given(st.integers(1, 20), st.integers(1, 3), st.booleans(), st.sampled_from([(), (2,)]), st.integers(0, 100))
def test_quasiseparable_hadamard_sss_meets_one_triangle(T, N, lower, batch, seed):
    Q = _hydra(T, 2, 3, seed, batch)
    g, r, u = _parts(T, seed + 7)
    S = sm.SSS(u(T, N), r(T, N), r(T, N), D=r(T))
    S = S if lower else S.T
    want = Q.to_dense() * S.to_dense()
    for H in (Q.hadamard(S), S.hadamard(Q)):
        assert isinstance(H, sm.SSS) and H.lower == lower
        assert H.order == (2 if lower else 3) * N
        close(H.to_dense(), want)
    O = sm.OneSS.from_decays(u(T), b=r(T), c=r(T))
    for M in (O, O.T):
        H = Q.hadamard(M)
        assert isinstance(H, sm.SSS) and H.order == (2 if M.lower else 3)
        close(H.to_dense(), Q.to_dense() * M.to_dense())


def test_quasiseparable_hadamard_diagonal_and_gradients():
    T = 7
    Q = _hydra(T, 2, 2, 0)
    d = torch.randn(T, dtype=F64)
    for H in (Q.hadamard(sm.Diagonal(d)), sm.Diagonal(d).hadamard(Q)):
        assert isinstance(H, sm.Diagonal)
        close(H.to_dense(), Q.to_dense() * torch.diag(d))
    a = torch.rand(T, dtype=F64, requires_grad=True)
    x = torch.randn(T, 2, dtype=F64, requires_grad=True)

    def f(a, x):
        lion = sm.Quasiseparable.bidirectional(sm.OneSS.from_decays(a), sm.OneSS.from_decays(a.flip(0)))
        return lion.hadamard(Q) @ x + Q.hadamard(sm.OneSS.from_decays(a)) @ x

    assert torch.autograd.gradcheck(f, (a, x))
