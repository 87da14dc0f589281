"""Tensors whose conjugation or negation torch keeps as a bit (``z.conj()``, ``z.conj().imag``) as parameters and as
operands: numpy cannot view them, and the host paths (numpy and LAPACK on the CPU) read tensors as numpy arrays.
Before the fix, ``M.conj() @ N`` of two SSS, ``M.solve(y)`` with such a ``y`` and most classes built from such
parameters at ``T = 300`` raised ``RuntimeError`` from inside torch's ``numpy()``. References: the dense matrices,
with the views' values written out."""

import numpy as np
import pytest
import torch
from conftest import C128, F64, close, rand

import structmat as sm


def negated_view(x: torch.Tensor) -> torch.Tensor:
    """A tensor equal to real ``x`` that carries torch's negative bit."""
    y = torch.complex(torch.zeros_like(x), -x).conj().imag
    assert y.is_neg() and torch.equal(y, x)
    return y


def _matrix(name: str, T: int, seed: int, view=negated_view) -> sm.StructuredMatrix:
    r = lambda *s, k=0: view(rand(*s, seed=seed + k))  # noqa: E731
    one = torch.ones(1, dtype=F64)
    make = {
        "OneSS": lambda: sm.OneSS(view(torch.log(0.5 + 0.4 * rand(T, seed=seed))), b=r(T, k=1), c=r(T, k=2)),
        "OneSS.from_decays": lambda: sm.OneSS.from_decays(view(0.5 + 0.4 * rand(T, seed=seed))),
        "SSS": lambda: sm.SSS(view(0.5 + 0.4 * rand(T, 3, seed=seed)), r(T, 3, k=1), r(T, 3, k=2), D=view(2 + rand(T, seed=seed))),
        "SSS dense A": lambda: sm.SSS(view(0.2 * rand(T, 3, 3, seed=seed)), r(T, 3, k=1), r(T, 3, k=2),
                                      D=view(2 + rand(T, seed=seed))),
        "Bidiagonal": lambda: sm.Bidiagonal(view(1 + rand(T, seed=seed)), r(T - 1, k=1)),
        "Diagonal": lambda: sm.Diagonal(view(1 + rand(T, seed=seed))),
        "causal Toeplitz": lambda: sm.Toeplitz.causal(view(torch.cat([2 + one, 0.3 ** torch.arange(1.0, T, dtype=F64)]))),
        "Toeplitz": lambda: sm.Toeplitz(view(torch.cat([T + one, rand(T - 1, seed=seed)])),
                                        view(torch.cat([one, rand(T - 1, seed=seed + 1)]))),
        "Fourier": lambda: sm.Fourier.from_kernel(view(torch.cat([2 + one, rand(T - 1, seed=seed) / T]))),
        "Quasiseparable": lambda: sm.Quasiseparable.bidirectional(sm.OneSS.from_decays(view(0.5 + 0.4 * rand(T, seed=seed))),
                                                                  sm.OneSS.from_decays(view(0.5 + 0.4 * rand(T, seed=seed + 1))),
                                                                  view(3 + rand(T, seed=seed + 2))),
    }
    return make[name]()


NAMES = ["OneSS", "OneSS.from_decays", "SSS", "SSS dense A", "Bidiagonal", "Diagonal", "causal Toeplitz", "Toeplitz",
         "Fourier", "Quasiseparable"]


@pytest.mark.parametrize("grad", [True, False])
@pytest.mark.parametrize("T", [8, 300])
@pytest.mark.parametrize("name", NAMES)
def test_parameters_with_a_negative_bit(name, T, grad):
    """Products, solves (repeated: the kept forms) and closure operations of matrices built from negated views."""
    with torch.set_grad_enabled(grad):
        M, N = _matrix(name, T, 1), _matrix(name, T, 11)
        D, E = M.to_dense(), N.to_dense()
        x = rand(T, 2, seed=5)
        for _ in range(3):
            close(M @ x, D @ x)
            close(M @ x[:, 0], D @ x[:, 0])
            close(D @ M.solve(x), x, rtol=1e-8)
            close(D @ M.solve(x[:, 0]), x[:, 0], rtol=1e-8)
        if T <= 8:
            close((M + N).to_dense(), D + E)
            close((M @ N).to_dense(), D @ E)
            close(M.inv().to_dense() @ D, torch.eye(T, dtype=F64), rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("inference", [True, False])
@pytest.mark.parametrize("name", NAMES)
def test_operands_with_a_negative_or_conjugate_bit(name, inference):
    """``M @ y`` and ``M.solve(y)`` (the kept dense form's BLAS solve of one column among them) for views ``y``."""
    M = _matrix(name, 12, 3, view=lambda t: t)
    D = M.to_dense()
    z = torch.complex(rand(12, 2, seed=7), rand(12, 2, seed=8))
    with torch.inference_mode(inference):
        for y in (negated_view(z.real), negated_view(z.real)[:, 0], z.conj(), z.conj()[:, 0]):
            want = y.resolve_conj().resolve_neg()
            for _ in range(2):
                close(M @ y, D.to(want.dtype) @ want)
                close(D.to(want.dtype) @ M.solve(y), want, rtol=1e-8)


@pytest.mark.parametrize("name", ["SSS", "SSS dense A", "OneSS", "Quasiseparable"])
def test_conjugated_matrices_in_closure_operations(name):
    """``M.conj()`` keeps its complex parameters as conjugate views; its products, sums and inverses (in numpy where
    no gradient is wanted) read their values."""
    M = _matrix(name, 9, 2, view=lambda t: t).to(C128) * (1 + 0.5j)
    N = _matrix(name, 9, 12, view=lambda t: t).to(C128) * (0.5 - 1j)
    Mc = M.conj()
    with torch.no_grad():
        D, E = Mc.to_dense(), N.to_dense()
        close(D, M.to_dense().conj())
        close((Mc @ N).to_dense(), D @ E)
        close((N @ Mc).to_dense(), E @ D)
        close((Mc + N).to_dense(), D + E)
        close(Mc.inv().to_dense() @ D, torch.eye(9, dtype=C128), rtol=1e-8, atol=1e-10)


def test_numpy_of_a_matrix_holding_views():
    """``np.asarray(M)`` writes out the values of a dense form that is a negated or conjugated view."""
    z = torch.complex(rand(4, 4, seed=1), rand(4, 4, seed=2))
    assert np.array_equal(np.asarray(sm.Dense(negated_view(z.real))), z.real.numpy())
    assert np.array_equal(np.asarray(sm.Dense(z).conj()), z.numpy().conj())
