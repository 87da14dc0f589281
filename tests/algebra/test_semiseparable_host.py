"""The SSS product's generators in numpy (structmat.algebra.semiseparable_host) against the torch original
(matmul_lower) and dense products: every kind of transitions, with and without explicit diagonals, dtypes, batches."""

import pytest
import torch
from conftest import C128, F64, close, rand, randn

import structmat as sm
from structmat.algebra.semiseparable import matmul_lower
from structmat.algebra.semiseparable_host import host_matmul_lower
from structmat.core.transitions import Transitions
from structmat.linalg.semiseparable import Generators


def product(G1, G2):
    """host_matmul_lower of two ``Generators`` (it takes and gives plain ``(A, B, C, D)`` tuples), or None."""
    got = host_matmul_lower((G1.A, G1.B, G1.C, G1.D), (G2.A, G2.B, G2.C, G2.D))
    return None if got is None else Generators(*got)


def _generators(kind, T, N, batch, dtype, seed, D):
    real = dtype.to_real() if dtype.is_complex else dtype
    a = 0.5 + 0.5 * rand(*batch, T, *{"log": (), "scalar": (), "diag": (N,), "dense": (N, N)}[kind], seed=seed, dtype=real)
    values = torch.log(a) if kind == "log" else (a.to(dtype) - 0.5 if kind == "dense" else a)
    if kind == "log" and T > 2:
        values[..., 2] = float("-inf")  # an exact cut
    B, C = randn(*batch, T, N, seed=seed + 1, dtype=dtype), randn(*batch, T, N, seed=seed + 2, dtype=dtype)
    return Generators(Transitions(values, kind), B, C, 2 + randn(*batch, T, seed=seed + 3, dtype=dtype) if D else None)


@pytest.mark.parametrize("k1", ["log", "scalar", "diag", "dense"])
@pytest.mark.parametrize("k2", ["log", "scalar", "diag", "dense"])
@pytest.mark.parametrize("D1,D2", [(True, True), (False, True), (True, False)])
def test_host_product_equals_the_torch_generators(k1, k2, D1, D2):
    G1, G2 = _generators(k1, 9, 2, (), F64, 1, D1), _generators(k2, 9, 3, (), F64, 5, D2)
    got, want = product(G1, G2), matmul_lower(G1, G2)
    assert got is not None
    assert (got.D is None) == (want.D is None) and got.A.kind == "dense" and got.order == 5
    close(got.dense(), want.dense())
    close(got.dense(), G1.dense() @ G2.dense())


@pytest.mark.parametrize("dtype", [torch.float32, F64, torch.complex64, C128])
@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_dtypes_and_batches(dtype, batch):
    G1, G2 = _generators("diag", 11, 2, batch, dtype, 3, True), _generators("dense", 11, 2, batch, dtype, 4, True)
    got = product(G1, G2)
    assert got.B.dtype == got.A.values.dtype == dtype and got.batch_shape == batch
    rtol = 1e-5 if dtype in (torch.float32, torch.complex64) else 1e-12
    close(got.dense().to(C128), G1.dense().to(C128) @ G2.dense().to(C128), rtol=rtol, atol=rtol)


def test_host_path_only_where_it_applies():
    G1, G2 = _generators("diag", 6, 2, (), F64, 1, True), _generators("diag", 6, 2, (), F64, 2, True)
    B = G1.B.clone().requires_grad_()
    Gg = Generators(G1.A, B, G1.C, G1.D)
    assert product(Gg, G2) is None  # a gradient wanted: the torch original
    with torch.no_grad():
        assert product(Gg, G2) is not None
    Gb = _generators("diag", 6, 2, (3,), F64, 3, True)
    assert product(Generators(Gb.A, G1.B, Gb.C, Gb.D), Gb) is None  # sizes left to broadcast
    # through the class: the product with a gradient wanted carries it
    M1 = sm.SSS(G1.A.values, B, G1.C, D=G1.D)
    M2 = sm.SSS(G2.A.values, G2.B, G2.C, D=G2.D)
    (M1 @ M2).to_dense().sum().backward()
    Bd = B.detach().clone().requires_grad_()
    (sm.SSS(G1.A.values, Bd, G1.C, D=G1.D).to_dense() @ M2.to_dense()).sum().backward()
    close(B.grad, Bd.grad)


def test_lazily_conjugated_and_negated_parameters():
    """Tensors whose conjugation or negation torch keeps as a bit (``x.conj()``, ``z.conj().imag``) have no numpy
    view: the product reads their values (``M.conj() @ N`` raised inside numpy before)."""
    G1, G2 = _generators("diag", 7, 2, (), C128, 1, True), _generators("dense", 7, 2, (), C128, 2, False)
    lazy = Generators(G1.A, G1.B.conj(), G1.C.conj(), G1.D.conj())
    assert lazy.B.is_conj()
    got = product(lazy, G2)
    close(got.dense(), lazy.dense() @ G2.dense())
    G3 = _generators("log", 7, 2, (), F64, 3, True)
    negated = Generators(G3.A, torch.complex(torch.zeros_like(G3.B), -G3.B).conj().imag, G3.C, G3.D)
    assert negated.B.is_neg()
    close(product(negated, G3).dense(), G3.dense() @ G3.dense())
    M, N = sm.SSS(G1.A.values, G1.B, G1.C, D=G1.D), sm.SSS(G2.A.values, G2.B, G2.C)
    with torch.no_grad():
        close((M.conj() @ N).to_dense(), M.to_dense().conj() @ N.to_dense())
        close((N @ M.conj()).to_dense(), N.to_dense() @ M.to_dense().conj())
