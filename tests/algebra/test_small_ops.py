"""Closure operations without the constructors' checks: every structured result against dense float64 arithmetic,
with broadcasting batches, complex and float32 parameters, empty matrices and gradients; the dispatch's cache of
matching rules; the quasiseparable product's pair states both ways."""

import pytest
import torch
from conftest import C128, F64, close, rand, randn

import structmat as sm
from structmat.algebra import quasiseparable as qs_algebra
from structmat.core import dispatch


def _operand(name: str, T: int, batch: tuple, dtype, seed: int):
    """A well-conditioned operand of class ``name`` (diagonals away from zero, decays in (0.5, 1))."""
    r = lambda *s: 0.5 + 0.5 * rand(*s, seed=seed).to(dtype.to_real() if dtype.is_complex else dtype)  # noqa: E731
    n = lambda *s: randn(*s, seed=seed + 1, dtype=dtype)  # noqa: E731
    return {
        "OneSS": lambda: sm.OneSS.from_decays(r(*batch, T), b=1 + 0.1 * n(*batch, T), c=1 + 0.1 * n(*batch, T)),
        "SSS": lambda: sm.SSS(r(*batch, T, 2), n(*batch, T, 2) / 2, n(*batch, T, 2) / 2, D=2 + n(*batch, T) / 4),
        "SSS dense": lambda: sm.SSS(n(*batch, T, 2, 2) / 4, n(*batch, T, 2) / 2, n(*batch, T, 2) / 2, D=2 + n(*batch, T) / 4),
        "Quasiseparable": lambda: sm.Quasiseparable.bidirectional(
            sm.OneSS.from_decays(r(*batch, T)), sm.SSS(r(*batch, T, 2), n(*batch, T, 2) / 4, n(*batch, T, 2) / 4),
            diag=3 + n(*batch, T) / 4),
        "Bidiagonal": lambda: sm.Bidiagonal(2 + n(*batch, T) / 4, n(*batch, max(T - 1, 0))),
        "Diagonal": lambda: sm.Diagonal(2 + n(*batch, T) / 4),
        "causal Toeplitz": lambda: sm.Toeplitz.causal(torch.cat([2 + n(*batch, 1).abs(), n(*batch, max(T - 1, 0)) / T], -1)),
        "Toeplitz": lambda: sm.Toeplitz(torch.cat([T + n(*batch, 1).abs(), n(*batch, max(T - 1, 0))], -1), n(*batch, T)),
        "Fourier": lambda: sm.Fourier.from_kernel(torch.cat([3 + n(*batch, 1).abs(), n(*batch, max(T - 1, 0)) / T], -1)),
        "LowRank": lambda: sm.LowRank(n(*batch, T, 2), n(*batch, T, 2)),
    }[name]()


#: class -> (ops with a structured rule, the result class of each).
OPS = {
    "OneSS": {"+": sm.SSS, "@": sm.SSS, "inv": sm.Bidiagonal},
    "SSS": {"+": sm.SSS, "@": sm.SSS, "inv": sm.SSS},
    "SSS dense": {"+": sm.SSS, "@": sm.SSS, "inv": sm.SSS},
    "Quasiseparable": {"+": sm.Quasiseparable, "@": sm.Quasiseparable, "inv": sm.Quasiseparable},
    "Bidiagonal": {"+": sm.Bidiagonal, "inv": sm.OneSS},
    "Diagonal": {"+": sm.Diagonal, "@": sm.Diagonal, "inv": sm.Diagonal},
    "causal Toeplitz": {"+": sm.Toeplitz, "@": sm.Toeplitz, "inv": sm.Toeplitz},
    "Toeplitz": {"+": sm.Toeplitz},
    "Fourier": {"+": sm.Fourier, "@": sm.Fourier, "inv": sm.Fourier},
    "LowRank": {"+": sm.LowRank, "@": sm.LowRank},
}

_APPLY = {"+": lambda a, b: a + b, "@": lambda a, b: a @ b, "inv": lambda a, b: a.inv()}
_DENSE = {"+": lambda a, b: a + b, "@": lambda a, b: a @ b, "inv": lambda a, b: torch.linalg.inv(a)}


def _expected_order(op, a, b, R):
    if op == "inv" or not isinstance(R, (sm.SSS, sm.Quasiseparable)):
        return R.order
    if isinstance(a, sm.Quasiseparable):
        return tuple(x + y for x, y in zip(a.order, b.order))
    return a.order + b.order


@pytest.mark.parametrize("name", list(OPS))
@pytest.mark.parametrize("dtype", [F64, C128, torch.float32])
def test_closure_results_equal_dense_arithmetic(name, dtype):
    T = 9
    a, b = _operand(name, T, (2, 1), dtype, seed=1), _operand(name, T, (3,), dtype, seed=5)
    for op, cls in OPS[name].items():
        R = _APPLY[op](a, b)
        assert isinstance(R, cls), (name, op, type(R))
        assert R.order == _expected_order(op, a, b, R)
        want = _DENSE[op](a.to_dense().to(C128), b.to_dense().to(C128))
        rtol = 1e-4 if dtype == torch.float32 else 1e-9
        close(R.to_dense().to(C128), want, rtol=rtol, atol=rtol)
        assert R.dtype == (a.dtype if op == "inv" else torch.promote_types(a.dtype, b.dtype))
        assert R.shape == want.shape


@pytest.mark.parametrize("name", list(OPS))
def test_closure_of_empty_matrices(name):
    empty = torch.zeros(0, dtype=F64)
    a = {"Toeplitz": lambda: sm.Toeplitz(empty, empty), "causal Toeplitz": lambda: sm.Toeplitz.causal(empty),
         "Fourier": lambda: sm.Fourier.from_kernel(empty)}.get(name, lambda: _operand(name, 0, (), F64, seed=1))()
    for op, cls in OPS[name].items():  # (the recipes of the spectral classes need a first entry: built directly)
        R = _APPLY[op](a, a)
        assert isinstance(R, cls) and R.shape == (0, 0)


@pytest.mark.parametrize("name", ["OneSS", "SSS", "SSS dense", "Quasiseparable", "Bidiagonal", "causal Toeplitz", "Fourier"])
def test_closure_gradients(name):
    T = 5
    x = (1 + rand(T, seed=3)).requires_grad_()  # scales one operand's parameters (the others fixed)

    def results(x):
        a, b = (sm.Diagonal(x) @ _operand(name, T, (), F64, seed=s) if name not in ("causal Toeplitz", "Fourier")
                else _operand(name, T, (), F64, seed=s) for s in (1, 5))
        if name in ("causal Toeplitz", "Fourier"):
            a = sm.Toeplitz.causal(a.c * x) if name == "causal Toeplitz" else sm.Fourier(a.eigvals * x)
        return tuple(_APPLY[op](a, b).to_dense().real for op in OPS[name])

    assert torch.autograd.gradcheck(results, (x,))


def test_quasiseparable_pair_states_from_segment_products_equal_the_scans(monkeypatch):
    a, b = _operand("Quasiseparable", 11, (2,), F64, seed=1), _operand("Quasiseparable", 11, (2,), F64, seed=5)
    want = (a @ b).to_dense()
    monkeypatch.setattr(qs_algebra, "PAIRS_DENSE_MAX_T", 0)  # the blocked scans
    close((a @ b).to_dense(), want)
    close(want, a.to_dense() @ b.to_dense())


def test_quasiseparable_lu_names_the_first_zero_minor():
    lower = sm.OneSS.from_decays(0.5 * torch.ones(4, dtype=F64))
    M = sm.Quasiseparable(lower, lower.T, torch.tensor([1.0, 0.25, 2.0, 2.0], dtype=F64))  # minor 2: 0.25 - 0.25
    with pytest.raises(sm.SingularMatrixError, match="leading principal minor 2 is zero"):
        M.inv()


def test_dispatch_cache_follows_the_registry():
    D = sm.Diagonal(torch.ones(3, dtype=F64))
    assert isinstance(D + D, sm.Diagonal)  # cached for (Diagonal, Diagonal)

    @sm.register("add", sm.Diagonal, sm.Diagonal, precedence=5, result="Dense (test)")
    def dense_sum(a, b):
        return sm.Dense(a.to_dense() + b.to_dense())

    try:
        assert isinstance(D + D, sm.Dense)  # a rule added after the first lookup counts at once
    finally:
        dispatch._REGISTRY["add"][:] = [r for r in dispatch._REGISTRY["add"] if r.fn is not dense_sum]
    assert isinstance(D + D, sm.Diagonal)  # and a rule removed in place, too


@pytest.mark.parametrize("T", [0, 1, 7])
@pytest.mark.parametrize("dtype", [F64, C128, torch.float32])
def test_operands_of_one_shape_take_the_short_paths(T, dtype):
    """Operands of one batch shape skip the expands: two OneSS multiply through their order-1 columns, strict parts of
    quasiseparable matrices add without their zero diagonals; every result against dense complex128 arithmetic."""
    for name in ("OneSS", "SSS", "SSS dense", "Quasiseparable", "LowRank"):
        a, b = _operand(name, T, (2, 3), dtype, seed=2), _operand(name, T, (2, 3), dtype, seed=7)
        for op in ("+", "@"):
            R = _APPLY[op](a, b)
            assert isinstance(R, OPS[name][op]) and R.order == _expected_order(op, a, b, R), (name, op)
            want = _DENSE[op](a.to_dense().to(C128), b.to_dense().to(C128))
            rtol = 1e-4 if dtype == torch.float32 else 1e-9
            close(R.to_dense().to(C128), want, rtol=rtol, atol=rtol)
            assert R.dtype == a.dtype and R.shape == want.shape


def test_one_ss_product_gradients_reach_the_decays_exactly_at_zero():
    """The order-1 product of two OneSS carries the decays' gradient (linear space, exact at ``a_t = 0``)."""
    cut = torch.tensor([1.0, 1, 0, 1, 1, 1], dtype=F64)
    a = (0.3 + rand(2, 6, seed=4)).requires_grad_()
    b = (0.3 + rand(2, 6, seed=6)).requires_grad_()
    c = 1 + rand(2, 6, seed=8)

    def product(a, b):
        return (sm.OneSS.from_decays(a * cut, c=c) @ sm.OneSS.from_decays(b, b=c)).to_dense()

    R = sm.OneSS.from_decays(a * cut, c=c) @ sm.OneSS.from_decays(b, b=c)
    assert R.order == 2
    assert torch.autograd.gradcheck(product, (a, b))


@pytest.mark.parametrize("scalings", ["none", "b", "c", "both", "broadcast b"])
def test_one_ss_products_with_unit_or_broadcast_scalings(scalings):
    """Two OneSS multiply from their scalings (unit ones skip their products; scalings of another batch shape take the
    generic product) in float32 and float64 against dense float64."""
    for dtype in (torch.float32, F64):
        a = 0.5 + 0.5 * rand(3, 6, seed=1, dtype=dtype)
        s = 1 + rand(3, 6, seed=2, dtype=dtype)
        b = {"b": s, "both": s, "broadcast b": s[:1]}.get(scalings)
        c = {"c": s, "both": s}.get(scalings)
        M1, M2 = sm.OneSS.from_decays(a, b=b, c=c), sm.OneSS.from_decays(a.flip(-1), b=c, c=b)
        R = M1 @ M2
        assert isinstance(R, sm.SSS) and R.order == 2 and R.dtype == dtype
        rtol = 1e-5 if dtype == torch.float32 else 1e-12
        close(R.to_dense().to(F64), M1.to_dense().to(F64) @ M2.to_dense().to(F64), rtol=rtol, atol=rtol)


@pytest.mark.parametrize("T", [0, 1, 9])
@pytest.mark.parametrize("dtype", [torch.float32, F64, C128])
def test_quasiseparable_inverse_steps_in_numpy_equal_the_torch_steps(T, dtype):
    """Without a gradient the Python steps of the LU and inverse recursions run in numpy; with one, in torch: the
    same generators (and both the inverse of the dense matrix), also for a batch and orders (1, 2)."""
    M = _operand("Quasiseparable", T, (2,), dtype, seed=3)
    host = M.inv()
    with torch.no_grad():
        assert (M @ M.inv().to_dense()).shape == (2, T, T)  # (no_grad: the numpy steps, also for the products)
    x = torch.ones((), dtype=dtype, requires_grad=True)  # a wanted gradient sends every step through torch
    graph = (M * x).inv()
    assert host.order == graph.order == M.order
    rtol = 1e-4 if dtype == torch.float32 else 1e-10
    close(host.to_dense().to(C128), graph.to_dense().detach().to(C128), rtol=rtol, atol=rtol)
    if T:
        close(host.to_dense().to(C128), torch.linalg.inv(M.to_dense().to(C128)), rtol=rtol, atol=rtol)


def test_quasiseparable_products_sharing_transitions_equal_dense():
    """Products whose sides share transitions (LION: one set of decays on both sides; ``M @ M``; ``M @ M.T``) share
    segment products between the halves of the product: each against the dense product."""
    a = 0.3 + 0.7 * rand(2, 10, seed=9)
    a[1, 4] = 0.0  # an exact zero decay
    for M in (sm.Quasiseparable.lion(a, b=1 + rand(2, 10, seed=1)), _operand("Quasiseparable", 10, (2,), F64, seed=4)):
        for other in (M, M.T, sm.Quasiseparable.lion(a.flip(-1))):
            R = M @ other
            assert isinstance(R, sm.Quasiseparable)
            close(R.to_dense(), M.to_dense() @ other.to_dense())


@pytest.mark.parametrize("grad", [False, True])
def test_quasiseparable_inverse_overflow_raises_in_both_paths(grad):
    """An inverse whose entries overflow float32 (a pivot of 1e-39) raises ``SingularMatrixError`` whether the steps
    run in numpy (no gradient) or in torch."""
    f32 = torch.float32
    lower = sm.OneSS(torch.zeros(2, dtype=f32), b=torch.ones(2, dtype=f32), c=torch.ones(2, dtype=f32))
    upper = sm.OneSS(torch.zeros(2, dtype=f32), b=torch.tensor([1e-39, 1.0], dtype=f32), c=torch.ones(2, dtype=f32),
                     lower=False)
    diag = torch.tensor([1.0, 2e-39], dtype=f32).requires_grad_(grad)
    M = sm.Quasiseparable(lower, upper, diag)  # [[1, 1e-39], [1, 2e-39]]: the second pivot is 1e-39
    with pytest.raises(sm.SingularMatrixError, match="minor 2 is nearly zero|overflows float32"):
        M.inv()
