"""Solves and inverses in float16 and bfloat16 for every class with a solve: LAPACK and torch's triangular solves
have no half precision on the CPU (they raised ``NotImplementedError`` for ``SSS``, ``Dense``, ``Quasiseparable``,
``Inverse`` and a half ``DFT`` product), so these run in float32 and round the result (DESIGN section 5)."""

import pytest
import torch
from conftest import F64, rand, randn

import structmat as sm

T = 8
MATRICES = {
    "OneSS": lambda: sm.OneSS.from_decays(rand(T, seed=1), b=1 + rand(T, seed=2), c=1 + rand(T, seed=3)),
    "SSS diag": lambda: sm.SSS(rand(T, 2, seed=4), randn(T, 2, seed=5) / 2, randn(T, 2, seed=6) / 2, D=2 + rand(T, seed=7)),
    "SSS dense": lambda: sm.SSS(randn(T, 2, 2, seed=8) / 5, randn(T, 2, seed=9) / 2, randn(T, 2, seed=10) / 2,
                                D=2 + rand(T, seed=11)),
    "SSS upper": lambda: sm.SSS(rand(T, 2, seed=12), randn(T, 2, seed=13) / 2, randn(T, 2, seed=14) / 2,
                                D=2 + rand(T, seed=15)).T,
    "Bidiagonal": lambda: sm.Bidiagonal(1 + rand(T, seed=16), randn(T - 1, seed=17)),
    "Dense": lambda: sm.Dense(3 * torch.eye(T, dtype=F64) + randn(T, T, seed=18) / T),
    "Toeplitz": lambda: sm.Toeplitz(torch.cat([T + rand(1, seed=19), randn(T - 1, seed=20)]),
                                    torch.cat([rand(1, seed=21), randn(T - 1, seed=22)])),
    "Toeplitz.causal": lambda: sm.Toeplitz.causal(torch.cat([2 + rand(1, seed=23), randn(T - 1, seed=24) / 4])),
    "Fourier": lambda: sm.Fourier.from_kernel(torch.cat([2 + rand(1, seed=25), randn(T - 1, seed=26) / T])),
    "Quasiseparable": lambda: sm.Quasiseparable.bidirectional(sm.OneSS.from_decays(0.5 + rand(T, seed=27) / 2),
                                                              sm.OneSS.from_decays(0.5 + rand(T, seed=28) / 2), 3 + rand(T, seed=29)),
    "Inverse(Dense)": lambda: sm.Inverse(sm.Dense(3 * torch.eye(T, dtype=F64) + randn(T, T, seed=30) / T)),
}
TOLERANCE = {torch.float16: 5e-3, torch.bfloat16: 3e-2}


@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", list(MATRICES))
def test_half_precision_solves_and_inverses(name, half):
    M = MATRICES[name]().to(half)
    y = randn(T, 2, seed=31).to(half)
    wide = torch.complex128 if M.dtype.is_complex else F64
    want = torch.linalg.solve(M.to_dense().to(wide), y.to(wide))
    for got in (M.solve(y), M.inv() @ y, M.inv().to_dense() @ y.to(M.dtype)):
        assert got.dtype == M.dtype
        assert ((got.to(wide) - want).abs().max() / want.abs().max()).item() < TOLERANCE[half]


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16])
def test_dense_form_of_a_half_dft_product(half):
    product = sm.DFT(5, dtype=half) @ sm.DFT(5, dtype=half)  # complex32 (bf16: complex64)
    want = (sm.DFT(5).to_dense() @ sm.DFT(5).to_dense()).to(torch.complex128)
    assert torch.allclose(product.to_dense().to(torch.complex128), want, atol=0.1)
