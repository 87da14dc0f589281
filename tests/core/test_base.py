"""The base class: ``torch.matmul`` semantics, numpy interop, scalars, dtype/device moves, errors."""

import numpy as np
import pytest
import torch
from conftest import F64, close, rand, randn

import structmat as sm


def test_matmul_semantics_broadcasting():
    M = sm.OneSS.from_decays(rand(2, 1, 7))
    X = randn(3, 7, 4)
    Y = M @ X
    assert Y.shape == (2, 3, 7, 4)
    close(Y, M.to_dense() @ X)
    x = randn(7)
    assert (M @ x).shape == (2, 1, 7)
    close(x @ M, x @ M.to_dense())
    close(np.asarray(M), M.to_dense())
    assert (M @ x.float()).dtype == F64
    close(M @ x.numpy(), M.to_dense() @ x)


def test_scalars_of_every_kind_scale_without_densifying():
    M = sm.OneSS.from_decays(rand(5))
    for s in (2, 2.0, np.float64(2.0), np.array(2.0), torch.tensor(2.0)):
        for R in (M * s, s * M):
            assert isinstance(R, sm.OneSS), type(s)
            close(R.to_dense(), 2 * M.to_dense())
    close((M / np.array(4.0)).to_dense(), M.to_dense() / 4)
    close((-M).to_dense(), -M.to_dense())
    with pytest.raises(TypeError):
        M * torch.ones(5)  # elementwise products are M.hadamard(N)


def test_to_double_float_and_repr():
    M = sm.OneSS.from_decays(torch.rand(5))
    assert M.to(F64).dtype == F64 and M.double().dtype == F64 and M.double().float().dtype == torch.float32
    Mc = M.to(torch.complex128)
    assert Mc.dtype == torch.complex128 and Mc.log_a.dtype == F64
    close(Mc.to_dense(), M.to_dense().to(F64), rtol=1e-6)
    assert Mc.double().dtype == torch.complex128
    assert repr(M) == "OneSS(shape=(5, 5), order=1, dtype=float32)"
    assert M.to("meta").device.type == "meta"


def test_operand_errors_name_the_argument_and_shape():
    M = sm.OneSS.causal(4)
    with pytest.raises(ValueError, match=r"X has shape \(3, 2\); expected \(\*, 4, K\)"):
        M @ torch.ones(3, 2)
    with pytest.raises(ValueError, match=r"X has shape \(3,\); expected \(4,\)"):
        M @ torch.ones(3)
    with pytest.raises(ValueError, match="got a scalar"):
        M @ torch.tensor(1.0)
    with pytest.raises(ValueError, match="add needs matrices of equal"):
        M + sm.OneSS.causal(5)
    with pytest.raises(ValueError, match="cannot multiply"):
        M @ sm.OneSS.causal(5)
    with pytest.raises(ValueError, match="X is on meta"):
        M @ torch.ones(4, device="meta")
    with pytest.raises(ValueError, match=r"batch shapes do not broadcast: matrix \(2,\), X \(3,\)"):
        sm.OneSS.from_decays(torch.rand(2, 4)) @ torch.ones(3, 4, 1)
    with pytest.raises(ValueError, match=r"batch shapes do not broadcast: left operand \(2,\), right operand \(3,\)"):
        sm.OneSS.from_decays(torch.rand(2, 4)) + sm.OneSS.from_decays(torch.rand(3, 4))
    two, three = sm.OneSS.from_decays(torch.rand(2, 4)), sm.OneSS.from_decays(torch.rand(3, 4))
    with pytest.raises(ValueError, match=r"batch shapes do not broadcast: left operand \(2,\), right operand \(3,\)"):
        two.hadamard(three)
    with pytest.raises(ValueError, match=r"batch shapes do not broadcast: matrix \(2,\), Y \(3,\)"):
        two.solve(torch.ones(3, 4, 1))
    with pytest.raises(ValueError, match=r"batch shapes do not broadcast: a \(2,\), b \(3,\)"):  # (the names a user wrote)
        sm.OneSS.from_decays(torch.rand(2, 4), b=torch.rand(3, 4))
    with pytest.raises(TypeError, match="array-like"):
        M @ "abc"
    with pytest.raises(TypeError, match="hadamard needs a StructuredMatrix"):
        M.hadamard(torch.ones(4, 4))


def test_skip_finite_checks_is_scoped():
    with sm.skip_finite_checks():
        M = sm.OneSS(torch.tensor([0.0, float("nan")]))  # trusted input: no host sync, no check
    assert isinstance(M, sm.OneSS)
    with pytest.raises(ValueError, match="log_a must be finite"):
        sm.OneSS(torch.tensor([0.0, float("nan")]))


def test_python_sum_and_numpy_copy_protocol():
    """``sum([M1, M2])`` starts from the integer 0 (it raised ``TypeError``); numpy 2's ``copy=False`` asks for a view,
    which a matrix of computed entries cannot give (it made a copy silently)."""
    a = sm.OneSS.from_decays(torch.rand(4, dtype=torch.float64))
    b = sm.Diagonal(torch.ones(4, dtype=torch.float64))
    assert torch.allclose(sum([a, b]).to_dense(), a.to_dense() + b.to_dense())
    with pytest.raises(TypeError):
        1 + a
    assert np.asarray(a).shape == (4, 4)
    with pytest.raises(ValueError, match="no array to view"):
        np.array(a, copy=False)


def test_torch_names_detach_cpu_and_matrix_transposes():
    """``.mT``, ``.mH``, ``.detach()`` and ``.cpu()`` as on a tensor (the transposes of the last two dimensions)."""
    a = -torch.rand(2, 5, dtype=torch.float64, requires_grad=True)
    c = torch.rand(2, 5, dtype=torch.complex128, requires_grad=True)
    for M in (sm.OneSS(a, c=c), sm.Toeplitz.causal(c) + sm.Fourier.from_kernel(c)):
        dense = M.to_dense()
        assert torch.equal(M.mT.to_dense(), dense.mT) and torch.equal(M.mH.to_dense(), dense.mH)
        detached = M.detach()
        assert not detached.to_dense().requires_grad and torch.equal(detached.to_dense(), dense.detach())
        assert M.cpu().device.type == "cpu"
