"""``aslinearoperator``: scipy's iterative solvers on structured matrices."""

import numpy as np
import pytest
import scipy.sparse.linalg as sla
import torch
from conftest import F64, close, rand, randn

import structmat as sm


def test_gmres_solves_and_rmatvec_is_the_adjoint():
    M = sm.SSS(rand(50, 2), randn(50, 2), randn(50, 2, seed=1), D=3 + rand(50, seed=2))
    op = sm.aslinearoperator(M)
    y = np.random.default_rng(0).standard_normal(50)
    x, info = sla.gmres(op, y, rtol=1e-12, atol=0)
    assert info == 0
    close(np.asarray(M) @ x, y, rtol=1e-8)
    close(op.rmatvec(y), np.asarray(M).T @ y)


def test_complex_adjoints_including_the_dft():
    for M in (sm.DFT(8, dtype=torch.complex128), sm.DFT(8, dtype=torch.complex128).imag * 2j,
              sm.Fourier.from_kernel(randn(8, dtype=torch.complex128))):
        op = sm.aslinearoperator(M)
        y = np.random.default_rng(1).standard_normal(8) + 1j * np.random.default_rng(2).standard_normal(8)
        close(op.rmatvec(y), np.asarray(M).conj().T @ y)
        close(M.H.to_dense(), M.to_dense().mH)
        close(M.conj().to_dense(), M.to_dense().conj())


def test_batched_matrices_are_refused():
    with pytest.raises(ValueError, match="2-D"):
        sm.aslinearoperator(sm.OneSS.from_decays(torch.rand(2, 3, dtype=F64)))
    with pytest.raises(TypeError, match="StructuredMatrix"):
        sm.aslinearoperator(np.eye(3))


def test_reversed_and_read_only_numpy_arrays():
    """numpy arrays with negative strides (``a[::-1]``) or read-only ones are numbers like any other: constructors,
    products, solves and the scipy operator take them (torch refused the first: "not array-like"; warned at the
    second on every call)."""
    import warnings

    a = np.linspace(0.1, 0.9, 5)[::-1]
    frozen = np.linspace(1.0, 2.0, 5)
    frozen.flags.writeable = False
    M = sm.OneSS.from_decays(a)
    assert np.allclose(sm.Diagonal(a).to_dense().diagonal().numpy(), a)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.allclose((M @ frozen).numpy(), M.to_dense().numpy() @ frozen)
        assert np.allclose((M @ a).numpy(), M.to_dense().numpy() @ a)
        assert np.allclose(M.solve(a).numpy(), np.linalg.solve(M.to_dense().numpy(), a))
        op = sm.aslinearoperator(M)
        assert np.allclose(op.matvec(a), M.to_dense().numpy() @ a)
        X = np.arange(15.0).reshape(5, 3)[:, ::-1]
        assert np.allclose(op.matmat(X), M.to_dense().numpy() @ X)
        assert np.allclose(op.rmatvec(frozen), M.to_dense().numpy().T @ frozen)


def test_half_precision_is_refused_by_name():
    M = sm.Diagonal(torch.ones(4, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="float32, float64, complex64 or complex128"):
        sm.aslinearoperator(M)
    op = sm.aslinearoperator(M.to(torch.float32))
    assert op.dtype == np.float32 and np.allclose(op.matvec(np.ones(4, dtype=np.float32)), 1.0)
