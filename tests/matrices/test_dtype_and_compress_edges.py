"""The semiseparable classes at the edges found by the session-22 audit (D140-D144): `compress()` of float32
matrices, float32 matrices with float64 data on the small paths, complex `dtype` in the decay constructors,
`lion`'s `dtype` and `device`, and batch errors in the names a user wrote."""

import numpy as np
import pytest
import torch
from conftest import F64, close, rand, randn

import structmat as sm


def test_float32_compress_keeps_decays_near_one():
    """The sweeps rounded once a step in float32 and compounded over T: 6e-5 off at T = 2000 (3e-3 at 1e5) where the
    uncompressed sum was 4e-8; now reduced in float64 and rounded back."""
    T = 2000
    M = sm.OneSS.from_decays(torch.full((T,), 1 - 1e-7), b=1 + rand(T, seed=1, dtype=torch.float32))
    S = M + M
    C = S.compress()
    assert C.order == 1 and C.dtype == torch.float32
    want = S.to(F64).to_dense()
    assert ((C.to_dense().double() - want).abs().max() / want.abs().max()).item() < 1e-6


@pytest.mark.parametrize("T", [10, 300])
def test_float32_matrix_with_float64_data_computes_in_float64(T):
    """The small paths kept the float32 dense form (and OneSS.solve its float32 inverse) and widened it: 1e-8 off the
    matrix's own float64 entries where the large paths were exact."""
    M = sm.OneSS.from_decays(0.3 + 0.6 * rand(T, seed=2, dtype=torch.float32), b=1 + rand(T, seed=3, dtype=torch.float32))
    x = randn(T, 2, seed=4)
    wide = M.to(F64)
    close(M @ x, wide.to_dense() @ x)
    close(M.solve(x), torch.linalg.solve_triangular(wide.to_dense(), x, upper=False))


@pytest.mark.parametrize("make", [lambda d: sm.OneSS.causal(3, dtype=d), lambda d: sm.OneSS.decay(0.5, 3, dtype=d),
                                  lambda d: sm.OneSS.from_decays([0.5, 0.5, 0.1], dtype=d),
                                  lambda d: sm.Quasiseparable.lion([0.5, 0.5, 0.1], dtype=d),
                                  lambda d: sm.Quasiseparable.lion_decay(0.5, 3, dtype=d)])
def test_decay_constructors_take_a_complex_dtype(make):
    """``OneSS(log_a, dtype=complex64)`` worked; these said the user's real decays must be real."""
    M = make(torch.complex64)
    assert M.dtype == torch.complex64
    torch.testing.assert_close(M.to_dense(), make(torch.float32).to_dense().to(torch.complex64))


def test_lion_converts_its_maps_too():
    a, b = np.array([0.5, 0.4, 0.3]), np.array([1.0, 2.0, 3.0])
    assert sm.Quasiseparable.lion(a, b=b, dtype=torch.float32).dtype == torch.float32
    assert sm.Quasiseparable.lion(torch.tensor(a), c=torch.tensor(b), device="meta").device.type == "meta"


def test_batch_errors_name_what_the_user_wrote():
    with pytest.raises(ValueError, match=r"log_a \(2,\), b \(3,\)"):
        sm.OneSS(torch.zeros(2, 3), b=torch.ones(3, 3))
    with pytest.raises(ValueError, match=r"a \(2,\), c \(3,\)"):
        sm.Quasiseparable.lion(torch.rand(2, 3), c=torch.ones(3, 3))
