"""Dense forms of Toeplitz and circulant matrices against scipy's, with batches, dtypes, gradients and views."""

import numpy as np
import pytest
import scipy.linalg as sl
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import structmat as sm
from structmat.linalg.toeplitz_dense import circulant_dense, toeplitz_dense


@settings(max_examples=40, deadline=None)
@given(T=st.integers(0, 9), S=st.integers(0, 9), batch=st.sampled_from([(), (3,), (2, 1)]), seed=st.integers(0, 99))
def test_toeplitz_dense_matches_scipy(T, S, batch, seed):
    g = torch.Generator().manual_seed(seed)
    c = torch.randn(*batch, T, generator=g, dtype=torch.float64)
    r = torch.randn(*batch, S, generator=g, dtype=torch.float64)
    out = toeplitz_dense(c, r)
    assert out.shape == (*batch, T, S)
    for idx in np.ndindex(*batch):
        if T and S:
            np.testing.assert_array_equal(out[idx].numpy(), sl.toeplitz(c[idx].numpy(), r[idx].numpy()))


@pytest.mark.parametrize("T", [0, 1, 2, 7, 16])
def test_circulant_dense_matches_scipy(T):
    k = torch.randn(2, T, dtype=torch.complex128)
    out = circulant_dense(k)
    assert out.shape == (2, T, T)
    for i in range(2):
        if T:
            np.testing.assert_array_equal(out[i].numpy(), sl.circulant(k[i].numpy()))


def test_broadcast_mixed_dtypes_copy_and_gradient():
    c = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    r = torch.randn(4, dtype=torch.float32)
    out = toeplitz_dense(c, r)
    assert out.shape == (3, 5, 4) and out.dtype == torch.float64
    out.add_(1.0)  # a copy, not a view of the generators
    assert torch.equal(c.detach(), c.detach().clone())
    torch.autograd.gradcheck(lambda c: toeplitz_dense(c, r.double()), (c,))
    k = torch.randn(6, dtype=torch.float64, requires_grad=True)
    torch.autograd.gradcheck(circulant_dense, (k,))


def test_classes_use_it_with_their_own_entries():
    T = 11
    c, r = torch.randn(T, dtype=torch.float64), torch.randn(T, dtype=torch.float64)
    np.testing.assert_array_equal(sm.Toeplitz(c, r).to_dense().numpy(), sl.toeplitz(c.numpy(), r.numpy()))
    causal = sm.Toeplitz.causal(c).to_dense().numpy()
    np.testing.assert_array_equal(causal, np.tril(sl.toeplitz(c.numpy())))
    F = sm.Fourier.from_kernel(c)
    np.testing.assert_allclose(F.to_dense().numpy(), sl.circulant(c.numpy()), atol=1e-12)
