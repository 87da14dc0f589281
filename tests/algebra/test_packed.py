"""SSS sums and products from the pieces each operand keeps (structmat.algebra.packed) against dense float64
arithmetic: every kind of transitions and their mixes, both orientations, broadcast batches, dtypes, T = 0, the
kept pieces reused and dropped (parameters changed in place, gradients wanted, inference mode, large operands)."""

import pytest
import torch
from conftest import C128, F64, close, rand, randn

import structmat as sm
from structmat.algebra import packed


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


def test_kept_pieces_are_reused_and_follow_in_place_changes():
    a, b = _sss("diag", 6, (), F64, seed=1), _sss("OneSS", 6, (), F64, seed=2)
    with torch.no_grad():
        first = (a + b).to_dense()
        assert any(key[0] == "sum" for key in a._small.values)  # kept
        close((a + b).to_dense(), first, rtol=0, atol=0)
        a.B.mul_(2)  # in place: the kept pieces are stale
        _check(a + b, a, b, "+")
        _check(a @ b, a, b, "@")
        b.log_a.sub_(0.1)
        _check(b @ a, b, a, "@")


def test_pieces_are_not_kept_in_inference_mode_nor_for_large_operands(monkeypatch):
    a, b = _sss("diag", 6, (), F64, seed=1), _sss("dense", 6, (), F64, seed=2)
    with torch.inference_mode():
        _check(a @ b, a, b, "@")
    assert not any(key[0] == "product" for key in a._small.values)
    _check(a @ b, a, b, "@")  # outside: kept now, and usable with operands that want a gradient
    x = torch.ones((), dtype=F64, requires_grad=True)
    (a @ (b * x)).to_dense().sum().backward()
    assert x.grad is not None
    monkeypatch.setattr(packed, "KEEP_MAX_ENTRIES", 10)
    c = _sss("diag", 6, (), F64, seed=3)
    with torch.no_grad():
        _check(c + b, c, b, "+")
    assert not any(key[0] == "sum" for key in c._small.values)


@pytest.mark.parametrize("kinds", [("OneSS", "OneSS"), ("diag", "dense"), ("dense", "scalar")])
def test_gradients(kinds):
    T = 4
    x = (1 + rand(T, seed=3)).requires_grad_()

    def results(x):
        a = sm.Diagonal(x) @ _sss(kinds[0], T, (), F64, seed=1)
        b = _sss(kinds[1], T, (), F64, seed=2) @ sm.Diagonal(x)
        return (a + b).to_dense(), (a @ b).to_dense(), (b @ a).to_dense()

    assert torch.autograd.gradcheck(results, (x,))
    with torch.no_grad():  # pieces kept from a call without gradients stay out of a later differentiated one
        results(x.detach())
    assert torch.autograd.gradcheck(results, (x,))
