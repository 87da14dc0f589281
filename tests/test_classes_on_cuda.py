"""Every class's operations on CUDA against dense float64 (session 23: ``Quasiseparable.inv()`` had failed on CUDA
since session 21, its growth check reading CUDA tensors as numpy arrays, and no test ran the algebra there). Runs
where CUDA is available (the lent H100); the same operations run on the CPU in the rest of the suite."""

import pytest
import torch
from conftest import F64

import structmat as sm

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (the algebra on the CPU: every other test)")


def _operands(name: str, T: int):
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.rand(*s, generator=g, dtype=F64)  # noqa: E731
    n = lambda *s: torch.randn(*s, generator=g, dtype=F64)  # noqa: E731
    make = {
        "OneSS": lambda: sm.OneSS.from_decays(0.5 + 0.5 * r(T), b=1 + r(T), c=1 + r(T)),
        "SSS(4)": lambda: sm.SSS(0.5 + 0.5 * r(T, 4), n(T, 4) / 2, n(T, 4) / 2, D=2 + r(T)),
        "SSS(4, dense A)": lambda: sm.SSS(0.2 * n(T, 4, 4), n(T, 4) / 2, n(T, 4) / 2, D=2 + r(T)),
        "Bidiagonal": lambda: sm.Bidiagonal(1 + r(T), n(T - 1)),
        "Diagonal": lambda: sm.Diagonal(1 + r(T)),
        "causal Toeplitz": lambda: sm.Toeplitz.causal(torch.cat([2 + r(1), 0.5 ** torch.arange(1.0, T, dtype=F64) * n(T - 1)])),
        "Toeplitz": lambda: sm.Toeplitz(torch.cat([T + r(1), n(T - 1)]), torch.cat([r(1), n(T - 1)])),
        "Fourier": lambda: sm.Fourier.from_kernel(torch.cat([2 + r(1), n(T - 1) / T])),
        "Quasiseparable": lambda: sm.Quasiseparable.bidirectional(sm.OneSS.from_decays(0.5 + 0.5 * r(T)),
                                                                  sm.OneSS.from_decays(0.5 + 0.5 * r(T)), 3 + r(T)),
        "LowRank": lambda: sm.LowRank(n(T, 4), n(T, 4)),
    }[name]
    return make().to("cuda"), make().to("cuda")


@pytest.mark.parametrize("T", [24, 300])
@pytest.mark.parametrize("name", ["OneSS", "SSS(4)", "SSS(4, dense A)", "Bidiagonal", "Diagonal", "causal Toeplitz",
                                  "Toeplitz", "Fourier", "Quasiseparable", "LowRank"])
def test_operations_on_cuda(name, T):
    a, b = _operands(name, T)
    A, B = a.to_dense(), b.to_dense()
    x = torch.randn(T, 3, dtype=F64, device="cuda")
    cases = [(a @ x, A @ x), (a.T @ x, A.T @ x), ((a + b).to_dense(), A + B), ((a @ b).to_dense(), A @ B),
             (a.hadamard(b).to_dense(), A * B)]
    if name != "LowRank":
        cases += [(a.solve(x), torch.linalg.solve(A, x)), (a.inv() @ x, torch.linalg.solve(A, x))]
    for got, want in cases:
        assert got.device.type == "cuda"
        assert float((got - want).abs().max() / want.abs().max()) < 1e-8
