"""Hadamard products of two ``Bidiagonal`` and of two ``LowRank`` matrices (session 23's audit: they raised
``TypeError``, though DESIGN.md gives every class ``M.hadamard(N)``): against the dense elementwise product in
float64 / complex128, over sizes (empty included), broadcast batches, orientations and mixed dtypes; gradients."""

import torch
from conftest import C128, F64, close, randn
from hypothesis import given
from hypothesis import strategies as st

import structmat as sm

BATCHES = st.sampled_from([((), ()), ((3,), ()), ((2, 1), (3,)), ((0,), ())])


@given(T=st.integers(0, 9), batches=BATCHES, lowers=st.tuples(st.booleans(), st.booleans()),
       dtypes=st.sampled_from([(F64, F64), (torch.float32, F64), (C128, F64)]), seed=st.integers(0, 500))
def test_bidiagonal_hadamard(T, batches, lowers, dtypes, seed):
    a, b = (sm.Bidiagonal(randn(*batch, T, seed=seed + i, dtype=dt), randn(*batch, max(T - 1, 0), seed=seed + 9 + i, dtype=dt),
                          lower=lower)
            for i, (batch, lower, dt) in enumerate(zip(batches, lowers, dtypes)))
    R = a.hadamard(b)
    assert isinstance(R, sm.Bidiagonal if lowers[0] == lowers[1] else sm.Diagonal)
    want = a.to_dense().to(C128) * b.to_dense().to(C128)
    assert R.shape == want.shape and R.dtype == torch.promote_types(*dtypes)
    close(R.to_dense().to(C128), want, rtol=1e-6, atol=1e-6)


@given(T=st.integers(0, 7), ranks=st.tuples(st.integers(0, 3), st.integers(0, 3)), batches=BATCHES,
       complex_first=st.booleans(), seed=st.integers(0, 500))
def test_lowrank_hadamard_multiplies_the_ranks(T, ranks, batches, complex_first, seed):
    dtypes = (C128 if complex_first else F64, F64)
    a, b = (sm.LowRank(randn(*batch, T, r, seed=seed + i, dtype=dt), randn(*batch, T, r, seed=seed + 5 + i, dtype=dt))
            for i, (batch, r, dt) in enumerate(zip(batches, ranks, dtypes)))
    R = a.hadamard(b)
    assert isinstance(R, sm.LowRank) and R.U.shape[-1] == ranks[0] * ranks[1]
    close(R.to_dense().to(C128), a.to_dense().to(C128) * b.to_dense().to(C128), rtol=1e-12, atol=1e-12)


def test_hadamard_gradients():
    T = 5
    params = tuple(randn(*s, seed=i, dtype=F64).requires_grad_() for i, s in enumerate([(T,), (T - 1,), (T, 2), (T, 2)]))

    def products(d, s, U, V):
        bid = sm.Bidiagonal(d, s).hadamard(sm.Bidiagonal(d.flip(0), s.flip(0)))
        low = sm.LowRank(U, V).hadamard(sm.LowRank(V, U))
        return torch.stack([bid.to_dense(), low.to_dense()])

    assert torch.autograd.gradcheck(products, params)
