"""Sums and products of quasiseparable matrices with 1-SS sides (:mod:`structmat.algebra.quasiseparable_decay`): the
sum and each of the product's four paths (compiled, numpy with LAPACK scans, torch segment products, torch scans) against
dense float64 / complex128 arithmetic over random shapes, batches, dtypes and exact zero decays; the paths against
each other; gradients."""

import pytest
import torch
from conftest import C128, F64, close, rand, randn
from hypothesis import given
from hypothesis import strategies as st

import structmat as sm
from structmat.algebra import quasiseparable_decay as QD
from structmat.algebra import quasiseparable_decay_compiled as QC

PATHS = ("compiled", "numpy", "torch products", "torch scans")


def _use(path: str, monkeypatch) -> None:
    """Route :func:`QD.decay_matmul` through ``path`` (the compiled one takes real dtypes only: complex operands go
    through numpy there)."""
    if path != "compiled":
        monkeypatch.setattr(QC, "_decay_product", None)
    if path not in ("compiled", "numpy"):
        monkeypatch.setattr(QD, "host_steps_apply", lambda *tensors: False)
    if path == "torch scans":
        monkeypatch.setattr(QD, "PAIRS_DENSE_MAX_ENTRIES", 0)


def _one_ss(T: int, batch: tuple, dtype, seed: int, *, scaled: bool, cut: bool) -> sm.OneSS:
    """A lower ``OneSS`` with decays in (0.2, 1) (one exact zero where ``cut``) and, where ``scaled``, maps of
    ``dtype``."""
    real = dtype.to_real() if dtype.is_complex else dtype
    a = 0.2 + 0.8 * rand(*batch, T, seed=seed, dtype=real)
    if cut and T > 2:
        a[..., T // 2] = 0.0
    if not scaled:
        return sm.OneSS.from_decays(a)
    return sm.OneSS.from_decays(a, b=1 + randn(*batch, T, seed=seed + 1, dtype=dtype) / 2,
                                c=randn(*batch, T, seed=seed + 2, dtype=dtype))


def _operand(T: int, batches: tuple, dtype, seed: int, *, scaled: bool = True, cut: bool = False) -> sm.Quasiseparable:
    """``bidirectional`` of two ``OneSS``: the sides and the diagonal of batch shapes ``batches`` (broadcasting)."""
    fwd = _one_ss(T, batches[0], dtype, seed, scaled=scaled, cut=cut)
    bwd = _one_ss(T, batches[1], dtype, seed + 3, scaled=scaled, cut=False)
    return sm.Quasiseparable.bidirectional(fwd, bwd, 2 + randn(*batches[2], T, seed=seed + 4, dtype=dtype))


BATCHES = [((), (), ()), ((3,), (3,), (3,)), ((2, 1), (1, 3), (3,)), ((2,), (), (1,)), ((0,), (0,), ())]


def _check(R: sm.Quasiseparable, a: sm.Quasiseparable, b: sm.Quasiseparable, rtol: float, op=torch.matmul) -> None:
    wide = C128 if R.dtype.is_complex else F64
    want = op(a.to_dense().to(wide), b.to_dense().to(wide))
    assert isinstance(R, sm.Quasiseparable) and R.order == (2, 2)
    assert R.dtype == a.dtype and R.shape == want.shape
    close(R.to_dense().to(wide), want, rtol=rtol, atol=rtol)


@given(T=st.integers(0, 40), dtype=st.sampled_from([torch.float32, F64, C128]), batches=st.sampled_from(BATCHES),
       scaled=st.booleans(), seed=st.integers(0, 1000))
def test_decay_sum_equals_dense(T, dtype, batches, scaled, seed):
    a, b = _operand(T, batches, dtype, seed, scaled=scaled, cut=True), _operand(T, batches[::-1], dtype, seed + 7)
    assert QD.decay_sides(a, b)
    R = a + b
    _check(R, a, b, 1e-5 if dtype == torch.float32 else 1e-12, torch.add)
    assert R.lower_part.transitions.kind == R.upper_part.transitions.kind == "diag"


@pytest.mark.parametrize("path", PATHS)
@given(T=st.integers(0, 40), dtype=st.sampled_from([torch.float32, F64, C128]), batches=st.sampled_from(BATCHES),
       scaled=st.booleans(), cut=st.booleans(), seed=st.integers(0, 1000))
def test_decay_product_equals_dense(path, T, dtype, batches, scaled, cut, seed):
    with pytest.MonkeyPatch.context() as monkeypatch:
        _use(path, monkeypatch)
        a, b = _operand(T, batches, dtype, seed, scaled=scaled, cut=cut), _operand(T, batches[::-1], dtype, seed + 7)
        assert QD.decay_sides(a, b)
        _check(a @ b, a, b, 1e-4 if dtype == torch.float32 else 1e-10)


@pytest.mark.parametrize("T", [1, 2, 17, 64, 200])
def test_paths_give_the_same_generators(T, monkeypatch):
    """The compiled, numpy and torch paths (segment products, and scans past the crossover) compute the same
    generators."""
    a, b = _operand(T, ((2,), (2,), (2,)), F64, 5, cut=True), _operand(T, ((2,), (), (2,)), F64, 9)
    want = QD.decay_matmul(a, b, QD.decay_sides(a, b))
    for path in PATHS[1:]:
        with pytest.MonkeyPatch.context() as patched:
            _use(path, patched)
            got = QD.decay_matmul(a, b, QD.decay_sides(a, b))
        for part in ("lower_part", "upper_part"):
            G, H = getattr(got, part).generators, getattr(want, part).generators
            for x, y in ((G.A.values, H.A.values), (G.B, H.B), (G.C, H.C)):
                close(x, y, rtol=1e-12, atol=1e-14)
        close(got.diag, want.diag, rtol=1e-12, atol=1e-14)


def test_strong_decays_and_exact_zeros_stay_accurate():
    """Decays of 1e-3 over a long product and exact zeros: the pair states are read one step off their recurrence (no
    cancellation), so tiny entries keep their relative accuracy; a zero decay gives exact zeros across it."""
    T = 300
    a = torch.full((T,), 1e-3, dtype=F64)
    a[150] = 0.0
    M = sm.Quasiseparable.bidirectional(sm.OneSS.from_decays(a), sm.OneSS.from_decays(torch.full((T,), 1e-3, dtype=F64)))
    R = (M @ M).to_dense()
    want = M.to_dense() @ M.to_dense()
    assert (R[151:, :150] == 0).all() and (want[151:, :150] == 0).all()
    near = want.abs() > 1e-290
    assert ((R - want).abs()[near] <= 1e-12 * want.abs()[near]).all()


@pytest.mark.parametrize("path", PATHS[2:])
def test_decay_closure_gradients(path, monkeypatch):
    """The product through the torch paths (a gradient wanted), and the sum: to the log decays, the maps and the
    diagonal of both operands."""
    _use(path, monkeypatch)
    T = 6
    log_a, log_b = torch.log(0.3 + 0.6 * rand(2, T, seed=1)), torch.log(0.3 + 0.6 * rand(2, T, seed=2))
    maps, diag = randn(4, T, seed=3), 2 + rand(T, seed=4)
    params = tuple(t.clone().requires_grad_() for t in (log_a, log_b, maps, diag))

    def product(log_a, log_b, maps, diag):
        a = sm.Quasiseparable.bidirectional(sm.OneSS(log_a[0], b=maps[0], c=maps[1]), sm.OneSS(log_a[1]), diag)
        b = sm.Quasiseparable.bidirectional(sm.OneSS(log_b[0]), sm.OneSS(log_b[1], b=maps[2], c=maps[3]), diag.flip(0))
        assert QD.decay_sides(a, b)
        return torch.stack([(a @ b).to_dense(), (a + b).to_dense()])

    assert torch.autograd.gradcheck(product, params)


def test_differentiated_decays_take_the_generic_product():
    """Decays given in linear space and differentiated (exact gradients at ``a_t = 0``) are carried by the generic
    rules: not a 1-SS-sides product, and the gradient at a zero decay equals that of the dense product built from
    the decays' products."""
    T = 5
    a = (0.3 + 0.6 * rand(T, seed=6)).detach()
    a[2] = 0.0
    a.requires_grad_()
    M = sm.Quasiseparable.lion(a)
    assert not QD.decay_sides(M, M)
    (M @ M).to_dense().sum().backward()
    got, a.grad = a.grad, None
    rows = [torch.stack([torch.prod(a[min(i, j) + 1 : max(i, j) + 1]) for j in range(T)]) for i in range(T)]
    dense = torch.stack(rows)  # LION: M[i, j] = a_{min+1} ... a_{max}
    (dense @ dense).sum().backward()
    close(got, a.grad)


@pytest.mark.parametrize("T", [1, 9, 40])
def test_results_work_downstream(T):
    """A sum's sides are views of shared tensors and a product's of stacked ones: every operation on them (products,
    solves, transposes, further closure) agrees with dense float64."""
    a, b = _operand(T, ((2,), (2,), (2,)), F64, 3), _operand(T, ((2,), (2,), (2,)), F64, 11)
    x = randn(2, T, 3, seed=5, dtype=F64)
    for R in (a + b, a @ b):
        D = R.to_dense()
        close(R @ x, D @ x, rtol=1e-10, atol=1e-10)
        close(R.T @ x, D.mT @ x, rtol=1e-10, atol=1e-10)
        close(R.solve(x), torch.linalg.solve(D, x), rtol=1e-8, atol=1e-8)
        close(R.inv().to_dense(), torch.linalg.inv(D), rtol=1e-8, atol=1e-8)
        close((R @ R).to_dense(), D @ D, rtol=1e-9, atol=1e-9)
        close((R + a).to_dense(), D + a.to_dense(), rtol=1e-12, atol=1e-12)


def test_sides_at_a_smaller_batch_than_the_matrix():
    """Sides without a batch and a batched diagonal: the sum joins the sides as they are (their batch broadcasts in
    the result's parts), the product expands them; both match the dense results, as do their products, inverses and
    transposes."""
    T = 6
    f = sm.OneSS.from_decays(0.3 + 0.5 * rand(T, seed=1), b=randn(T, seed=2), c=randn(T, seed=3))
    g = sm.OneSS.from_decays(0.3 + 0.5 * rand(T, seed=4))
    a = sm.Quasiseparable.bidirectional(f, g, 3 + rand(2, T, seed=5))
    b = sm.Quasiseparable.bidirectional(g, f, 3 + rand(T, seed=6))
    assert a.lower_part.B.shape == (T, 1) and a.shape == (2, T, T)
    x = randn(T, 1, seed=7)
    with torch.no_grad():
        for R, want in ((a + b, a.to_dense() + b.to_dense()), (a @ b, a.to_dense() @ b.to_dense()),
                        (b @ a, b.to_dense() @ a.to_dense())):
            assert R.shape == (2, T, T)
            close(R.to_dense(), want)
            close(R @ x, want @ x)
            close(R.T.to_dense(), want.mT)
            close(R.inv().to_dense(), torch.linalg.inv(want), rtol=1e-10)


def test_float32_products_at_weak_decays_keep_their_decays():
    """numpy's float32 ``exp`` is off by an ulp near 1 (``a = 1 - 1.2e-7`` came back as ``1 - 6e-8``), and the host
    products took their decays from it: over ``T = 1e4`` steps ``(L @ L) @ x`` was off by 4.7e-4 (6.3e-3 at 1e5) where
    ``L @ (L @ x)`` is off by 1e-7. Both host products (``decay_matmul``, ``host_matmul_lower``) exponentiate in
    float64 now (D73)."""
    T = 10_000
    a = torch.full((T,), 1 - 1e-7)
    x = randn(T, seed=1).float()
    L32, L64 = sm.Quasiseparable.lion(a), sm.Quasiseparable.lion(a.double())
    S32 = sm.SSS(a[:, None].expand(T, 2), randn(T, 2, seed=2).float(), randn(T, 2, seed=3).float())
    M32 = sm.OneSS.from_decays(a)
    for product, reference in (((L32 @ L32), L64 @ (L64 @ x.double())),
                               ((M32 @ S32), M32.double() @ (S32.double() @ x.double()))):
        got = product @ x
        assert ((got.double() - reference).abs().max() / reference.abs().max()).item() < 2e-6


def test_in_place_changes_of_a_sums_generators_are_guarded_or_harmless():
    """Log decays that want a gradient: the sum's decays are views of the ``exp_`` that autograd saved, and an
    in-place change of one must raise (with ``unsafe_chunk`` it corrupted the saved result: a gradient 0.93 off); its
    maps are views of a ``cat``, which saves nothing: changed in place, the gradient is that of the changed matrix."""
    T = 6
    log_a = (-rand(T, seed=1)).requires_grad_()

    def pair():
        half = lambda s: sm.OneSS(log_a + 0 * rand(T, seed=s), b=1 + rand(T, seed=s + 1))  # noqa: E731
        return sm.Quasiseparable.bidirectional(half(2), half(4)), sm.Quasiseparable.bidirectional(half(6), half(8))

    A, B = pair()
    assert QD.decay_sides(A, B) is not None
    with pytest.raises(RuntimeError, match="modified inplace"):
        (A + B).lower_part.transitions.values.mul_(0.5)
    S, x = (lambda p: p[0] + p[1])(pair()), randn(T, 2, seed=10)
    with torch.no_grad():
        S.lower_part.C.mul_(2.0)
    (g,) = torch.autograd.grad((S @ x).sum(), log_a, retain_graph=True)
    (want,) = torch.autograd.grad((S.to_dense() @ x).sum(), log_a)
    close(g, want)
