"""The compiled quasiseparable decay product (:mod:`structmat.algebra.quasiseparable_decay_compiled`): built by the
installation, equal to the numpy path and to dense float64 products on the inputs a user's tensors arrive as (strided,
expanded, broadcast batches, views with a negative bit, decays of 0, 1 and 1e-30), declining every case it does not
serve, and leaving its inputs as they were."""

import pytest
import torch
from conftest import F64, close, rand, randn
from hypothesis import given
from hypothesis import strategies as st

import structmat as sm
from structmat.algebra import quasiseparable_decay as QD
from structmat.algebra import quasiseparable_decay_compiled as QC


def test_the_extension_is_built():
    """``pip install`` compiles it (setup.py): a missing build would send every product to numpy unseen."""
    assert QC.compiled_available(), "structmat.algebra._quasiseparable_decay is not built: pip install -e . with a C compiler"


def _product(a: sm.Quasiseparable, b: sm.Quasiseparable, *, compiled: bool, monkeypatch) -> sm.Quasiseparable:
    with monkeypatch.context() as patched:
        if not compiled:
            patched.setattr(QC, "_decay_product", None)
        return QD.decay_matmul(a, b, QD.decay_sides(a, b))


def _same_generators(got: sm.Quasiseparable, want: sm.Quasiseparable, rtol: float) -> None:
    for part in ("lower_part", "upper_part"):
        G, H = getattr(got, part).generators, getattr(want, part).generators
        for x, y in ((G.A.values, H.A.values), (G.B, H.B), (G.C, H.C)):
            assert x.shape == y.shape and x.dtype == y.dtype and x.is_contiguous()
            close(x, y, rtol=rtol, atol=rtol)
    close(got.diag, want.diag, rtol=rtol, atol=rtol)


def _side(a: torch.Tensor, maps: torch.Tensor | None) -> sm.OneSS:
    return sm.OneSS.from_decays(a) if maps is None else sm.OneSS.from_decays(a, b=maps[0], c=maps[1])


DECAYS = st.sampled_from([0.0, 1.0, 1e-30, None])  # (None: random in (0.2, 1))


@given(T=st.integers(0, 24), dtype=st.sampled_from([torch.float32, F64]),
       batches=st.sampled_from([((), ()), ((3,), (3,)), ((2, 1), (1, 3)), ((2,), ()), ((0,), ())]),
       special=DECAYS, unit=st.booleans(), seed=st.integers(0, 1000))
def test_equals_numpy_and_dense(T, dtype, batches, special, unit, seed):
    """Maps of ones (LION's, stored expanded) or random; batches that broadcast, also over two axes; decays with
    exact zeros, ones and 1e-30 at a third of the steps."""
    monkeypatch = pytest.MonkeyPatch()

    def operand(batch, s):
        a = 0.2 + 0.8 * rand(*batch, T, seed=s, dtype=dtype)
        if special is not None:
            a[..., ::3] = special
        maps = None if unit else randn(2, *batch, T, seed=s + 1, dtype=dtype)
        fwd, bwd = _side(a, maps), _side(a.flip(-1), None if unit else maps.flip(-1))
        return sm.Quasiseparable.bidirectional(fwd, bwd, 2 + rand(*batch, T, seed=s + 2, dtype=dtype))

    a, b = operand(batches[0], seed), operand(batches[1], seed + 5)
    got = _product(a, b, compiled=True, monkeypatch=monkeypatch)
    want = _product(a, b, compiled=False, monkeypatch=monkeypatch)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    _same_generators(got, want, tol)
    close(got.to_dense().to(F64), a.to_dense().to(F64) @ b.to_dense().to(F64), rtol=10 * tol, atol=10 * tol)


def test_strided_and_negative_bit_inputs(monkeypatch):
    """Decays and maps as views: every other entry of a longer tensor, a transposed batch, and ``z.conj().imag`` (a
    real tensor with a negative bit, whose stored values are the negated ones)."""
    T = 9
    z = torch.complex(randn(2, T, seed=1, dtype=F64), randn(2, T, seed=2, dtype=F64))
    maps = z.conj().imag
    assert maps.is_neg()
    long = 0.3 + 0.6 * rand(3, 2 * T, seed=3, dtype=F64)
    a = sm.Quasiseparable.bidirectional(_side(long[0, ::2], maps), _side(long[1, 1::2], None), 2 + long[2, :T])
    b = sm.Quasiseparable.bidirectional(_side(long.T[:T, 2], None), _side(long[0, :T], maps.flip(-1)), long.T[T:, 1] + 2)
    _same_generators(_product(a, b, compiled=True, monkeypatch=monkeypatch),
                     _product(a, b, compiled=False, monkeypatch=monkeypatch), 1e-13)
    close((a @ b).to_dense(), a.to_dense() @ b.to_dense(), rtol=1e-12, atol=1e-12)


def test_long_batched_products_equal_numpy(monkeypatch):
    """A batch of long rows: the C loop against the numpy path (LAPACK's scans), to the last steps."""
    T = 3000
    a = 0.9 + 0.1 * rand(4, T, seed=7, dtype=F64)
    maps = randn(2, 4, T, seed=8, dtype=F64)
    M = sm.Quasiseparable.bidirectional(_side(a, maps), _side(a.flip(-1), maps), 1 + rand(4, T, seed=9, dtype=F64))
    _same_generators(_product(M, M, compiled=True, monkeypatch=monkeypatch),
                     _product(M, M, compiled=False, monkeypatch=monkeypatch), 1e-12)


def _sides_and_diagonals(dtype=F64, requires_grad=False):
    T = 5
    a = (0.5 + 0.4 * rand(T, seed=1, dtype=dtype)).requires_grad_(requires_grad)
    M = sm.Quasiseparable.bidirectional(sm.OneSS.from_decays(a.detach()), sm.OneSS.from_decays(a.detach()),
                                        2 + a if requires_grad else None)
    return QD.decay_sides(M, M), M.diag, M.diag, torch.Size(()), T


@pytest.mark.parametrize("case", ["complex", "float16", "mixed", "gradient", "meta"])
def test_declines_what_it_does_not_serve(case):
    """Complex and half dtypes, mixed dtypes, a gradient wanted, tensors off the CPU: None (the numpy or torch paths
    take them), never a read of memory in the wrong format."""
    sides, d1, d2, batch, T = _sides_and_diagonals(requires_grad=case == "gradient")
    if case == "complex":
        d1 = d2 = d1.to(torch.complex128)
    elif case == "float16":
        sides = [tuple(t.half() for t in side) for side in sides]
        d1 = d2 = d1.half()
    elif case == "mixed":
        sides = [sides[0], sides[1], tuple(t.float() for t in sides[2]), sides[3]]
    elif case == "meta":
        d2 = torch.empty_like(d2, device="meta")
    assert QC.compiled_decay_product(sides, d1, d2, batch, T) is None


def test_gradients_take_the_torch_path():
    """With the compiled routine in place, a differentiated diagonal routes the product through torch: the gradient
    equals the dense product's."""
    T = 6
    d = (2 + rand(T, seed=4, dtype=F64)).requires_grad_()
    a, b = (sm.OneSS.from_decays(0.3 + 0.6 * rand(T, seed=s, dtype=F64)) for s in (1, 2))
    M = sm.Quasiseparable.bidirectional(a, b, d)
    assert QD.decay_sides(M, M)
    (M @ M).to_dense().sum().backward()
    want = d.detach().clone().requires_grad_()
    N = sm.Quasiseparable.bidirectional(a, b, want).to_dense()
    (N @ N).sum().backward()
    close(d.grad, want.grad, rtol=1e-12, atol=1e-12)


def test_torch_func_transforms_take_the_torch_path():
    """Under ``torch.func.grad`` the diagonal is a wrapper without storage: the compiled routine declines it, and the
    gradient equals the dense product's."""
    T = 6
    a = sm.OneSS.from_decays(0.3 + 0.6 * rand(T, seed=1, dtype=F64))
    d = 2 + rand(T, seed=2, dtype=F64)

    def loss(diag, dense):
        M = sm.Quasiseparable.bidirectional(a, a, diag)
        if dense:
            M = sm.Dense(M.to_dense())
        return (M @ M).to_dense().square().sum()

    close(torch.func.grad(loss)(d, False), torch.func.grad(loss)(d, True), rtol=1e-12, atol=1e-12)


def test_inputs_are_not_changed():
    T = 12
    a = 0.5 + 0.4 * rand(2, T, seed=1)
    maps = randn(2, T, seed=2)
    M = sm.Quasiseparable.bidirectional(_side(a[0], maps), _side(a[1], maps), 1 + a[0])
    before = [t.clone() for t in (a, maps, M.diag, *(x for side in QD.decay_sides(M, M) for x in side))]
    with torch.inference_mode():
        M @ M
    after = [a, maps, M.diag, *(x for side in QD.decay_sides(M, M) for x in side)]
    assert all(torch.equal(x, y) for x, y in zip(before, after))


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::torch.jit.TracerWarning")
def test_jit_trace_records_torch_operations():
    """``torch.jit.trace`` sees only torch operations (the audit of session 23: the compiled call took the traced
    ``T`` and raised; the numpy path baked one call's values into the trace): while tracing both step aside, and the
    trace gives the product of other inputs."""
    T = 5

    def product(a):
        M = sm.Quasiseparable.lion(a)
        return (M @ M).to_dense()

    traced = torch.jit.trace(product, (0.2 + 0.7 * rand(T, seed=1, dtype=F64),), check_trace=False)
    other = 0.2 + 0.7 * rand(T, seed=2, dtype=F64)
    close(traced(other), product(other), rtol=1e-12, atol=1e-12)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # (torch's forward-AD decompositions use torch.jit.script)
def test_forward_mode_tangents_reach_the_product():
    """Dual tensors do not set ``requires_grad``: under a forward-mode AD level the product takes the torch path, so
    the tangent of a diagonal reaches it (it was dropped, silently)."""
    import torch.autograd.forward_ad as fwAD

    T = 7
    a, b = (sm.OneSS.from_decays(0.3 + 0.6 * rand(T, seed=s, dtype=F64)) for s in (1, 2))
    d, t = 2 + rand(T, seed=3, dtype=F64), randn(T, seed=4, dtype=F64)
    with fwAD.dual_level():
        M = sm.Quasiseparable.bidirectional(a, b, fwAD.make_dual(d, t))
        got = fwAD.unpack_dual((M @ M).to_dense()).tangent
        D = M.to_dense()
        want = fwAD.unpack_dual(D @ D).tangent
    assert got is not None
    close(got, want, rtol=1e-12, atol=1e-12)
