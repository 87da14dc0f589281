"""SSS sums and products (structmat.algebra.semiseparable) against dense float64 arithmetic: every kind of
transitions and their mixes, both orientations, broadcast batches, dtypes, T = 0, operands changed in place between
operations, gradients."""

import pytest
import torch
from conftest import C128, F64, close, rand, randn

import structmat as sm


def _sss(kind: str, T: int, batch: tuple, dtype, seed: int, D: bool = True, lower: bool = True):
    real = dtype.to_real() if dtype.is_complex else dtype
    n = lambda *s: randn(*s, seed=seed, dtype=dtype)  # noqa: E731
    r = lambda *s: 0.5 + 0.5 * rand(*s, seed=seed + 1, dtype=real)  # noqa: E731
    if kind == "OneSS":
        M = sm.OneSS.from_decays(r(*batch, T), b=1 + 0.1 * n(*batch, T), c=1 + 0.1 * n(*batch, T))
        return M if lower else M.T
    A = {"scalar": lambda: r(*batch, T), "diag": lambda: r(*batch, T, 2), "dense": lambda: n(*batch, T, 2, 2) / 4}[kind]()
    return sm.SSS(A, n(*batch, T, 2) / 2, n(*batch, T, 2) / 2, D=2 + n(*batch, T) / 4 if D else None, lower=lower)


def _check(R, a, b, op, rtol=1e-9):
    want = (a.to_dense().to(C128) + b.to_dense().to(C128)) if op == "+" else a.to_dense().to(C128) @ b.to_dense().to(C128)
    assert type(R) is sm.SSS and R.order == a.order + b.order and R.lower == a.lower
    close(R.to_dense().to(C128), want, rtol=rtol, atol=rtol)
    assert R.shape == want.shape and R.batch_shape == want.shape[:-2]


KINDS = ["OneSS", "scalar", "diag", "dense"]


@pytest.mark.parametrize("left", KINDS)
@pytest.mark.parametrize("right", KINDS)
@pytest.mark.parametrize("lower", [True, False])
def test_sums_and_products_of_every_kind_equal_dense(left, right, lower):
    a = _sss(left, 7, (2, 1), F64, seed=1, lower=lower)
    b = _sss(right, 7, (3,), F64, seed=5, D=False, lower=lower)
    for op, fn in (("+", lambda x, y: x + y), ("@", lambda x, y: x @ y)):
        _check(fn(a, b), a, b, op)
        _check(fn(b, a), b, a, op)
    assert (a + b).transitions.kind == ("dense" if "dense" in (left, right) else "diag")


@pytest.mark.parametrize("dtype", [F64, C128, torch.float32])
@pytest.mark.parametrize("T", [0, 1, 16])
def test_dtypes_and_lengths(dtype, T):
    a, b = _sss("diag", T, (), dtype, seed=2), _sss("dense", T, (2,), dtype, seed=3)
    rtol = 1e-4 if dtype == torch.float32 else 1e-9
    assert (a + b).dtype == (a @ b).dtype == dtype
    _check(a + b, a, b, "+", rtol)
    _check(a @ b, a, b, "@", rtol)
    _check(b @ a, b, a, "@", rtol)


def test_operands_changed_in_place_between_operations():
    a, b = _sss("diag", 6, (), F64, seed=1), _sss("OneSS", 6, (), F64, seed=2)
    with torch.no_grad():
        _check(a + b, a, b, "+")
        a.B.mul_(2)
        _check(a + b, a, b, "+")
        _check(a @ b, a, b, "@")
        b.log_a.sub_(0.1)
        _check(b @ a, b, a, "@")


@pytest.mark.parametrize("kinds", [("OneSS", "OneSS"), ("diag", "dense"), ("dense", "scalar")])
def test_gradients(kinds):
    T = 4
    x = (1 + rand(T, seed=3)).requires_grad_()

    def results(x):
        a = sm.Diagonal(x) @ _sss(kinds[0], T, (), F64, seed=1)
        b = _sss(kinds[1], T, (), F64, seed=2) @ sm.Diagonal(x)
        return (a + b).to_dense(), (a @ b).to_dense(), (b @ a).to_dense()

    assert torch.autograd.gradcheck(results, (x,))
    with torch.no_grad():  # a call without gradients first, then a differentiated one
        results(x.detach())
    assert torch.autograd.gradcheck(results, (x,))
