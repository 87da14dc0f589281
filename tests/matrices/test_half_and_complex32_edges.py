"""Half precisions and complex32 at the edges found by the session-22 audit (D126-D128): ``LowRank`` solves in
float16 / bfloat16, complex32 dense forms and products, and the overflow message's hint."""

import pytest
import torch

import structmat as sm

T = 5


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_lowrank_half_precision_solve_runs_in_float32(dtype):
    g = torch.Generator().manual_seed(0)
    U, V = torch.randn(T, T, generator=g) + 3 * torch.eye(T), torch.eye(T)
    M = sm.LowRank(U.to(dtype), V.to(dtype))
    y = torch.randn(T, generator=g).to(dtype)
    want = torch.linalg.solve(U.to(dtype).float(), y.float()).to(dtype)  # the rounded parameters, solved in float32
    for got in (M.solve(y), M.inv() @ y):
        assert got.dtype == dtype
        torch.testing.assert_close(got, want)


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
def test_complex32_dense_forms_and_products():
    """Torch has no complex32 ``flip`` or matmul on the CPU: the entries are assembled, and products accumulated, in
    complex64 and rounded (DESIGN section 5)."""
    g = torch.Generator().manual_seed(1)
    c = torch.complex(torch.randn(T, generator=g), torch.randn(T, generator=g))
    x = torch.complex(torch.randn(T, 2, generator=g), torch.randn(T, 2, generator=g)).to(torch.complex32)
    mats = [sm.Toeplitz(c, c.flip(0)), sm.Fourier.from_kernel(c), sm.Dense(torch.outer(c, c)), sm.LowRank(c[:, None], c[:, None])]
    for M in mats:
        half = M.to(torch.complex32)
        dense = half.to_dense()
        assert dense.dtype == torch.complex32
        want = dense.to(torch.complex128) @ x.to(torch.complex128)
        got = half @ x
        assert got.dtype == torch.complex32
        torch.testing.assert_close(got.to(torch.complex128), want, rtol=2e-2, atol=2e-2 * want.abs().max().item())


def test_the_overflow_message_suggests_float64_only_below_it():
    with pytest.raises(sm.SingularMatrixError) as wide:
        sm.Diagonal(torch.tensor([1e-320], dtype=torch.float64)).inv()
    assert "float64" in str(wide.value) and "try float64" not in str(wide.value)
    with pytest.raises(sm.SingularMatrixError, match="try float64"):
        sm.Diagonal(torch.tensor([1e-40], dtype=torch.float32)).inv()
