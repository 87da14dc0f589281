"""The blocked quasiseparable LU and inverse against dense float64: chunk boundaries, both sides of the chunk length,
the numpy and torch steps, dtypes, batches, T = 0 and 1, singular minors inside later chunks, gradients."""

import numpy as np
import pytest
import torch
from conftest import F64, close

import structmat as sm
import structmat.algebra.quasiseparable as QA
import structmat.linalg.quasiseparable_inverse as qs_inverse
import structmat.linalg.quasiseparable_inverse_host as qs_host
import structmat.linalg.quasiseparable_lu as qs_lu


def _matrix(T, n, seed, kind="dense", batch=(), shift=4.0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*batch, *s, generator=g, dtype=F64)  # noqa: E731

    def part():
        if kind == "one":
            return sm.OneSS.from_decays(torch.rand(*batch, T, generator=g, dtype=F64), b=r(T), c=r(T))
        A = r(T, n, n) if kind == "dense" else torch.rand(*batch, T, n, generator=g, dtype=F64)
        if kind == "dense":
            A = 0.9 * A / torch.linalg.matrix_norm(A, ord=2)[..., None, None]
        return sm.SSS(A, r(T, n), r(T, n))

    return sm.Quasiseparable.bidirectional(part(), part(), diag=shift + r(T))


@pytest.fixture(params=[3, 32], ids=["chunk3", "chunk32"])
def block(request, monkeypatch):
    monkeypatch.setattr(qs_lu, "LU_BLOCK", request.param)
    monkeypatch.setattr(qs_inverse, "LU_BLOCK", request.param)
    monkeypatch.setattr(qs_host, "HOST_BLOCK", request.param)
    return request.param


@pytest.mark.parametrize("T", [0, 1, 2, 3, 7, 31, 32, 33, 70])
@pytest.mark.parametrize("kind,n,batch", [("dense", 2, ()), ("diag", 3, (2,)), ("one", 1, ())])
def test_inverse_and_lu_match_dense_across_chunk_boundaries(block, T, kind, n, batch):
    M = _matrix(T, n, seed=T + 11 * n, kind=kind, batch=batch)
    dense = M.to_dense()
    close(M.inv().to_dense(), torch.linalg.inv(dense), rtol=1e-11)
    L, U = M.lu()
    close(L.to_dense() @ U.to_dense(), dense, rtol=1e-12)


@pytest.mark.parametrize("grad", [False, True], ids=["numpy steps", "torch steps"])
def test_numpy_and_torch_steps_agree(block, grad):
    M = _matrix(40, 2, seed=5)
    if grad:
        M = sm.Quasiseparable(M.lower_part, M.upper_part, M.diag.clone().requires_grad_())
    close(M.inv().to_dense().detach(), torch.linalg.inv(M.to_dense().detach()), rtol=1e-11)


@pytest.mark.parametrize("T", [3, 4, 5, 14, 40])
@pytest.mark.parametrize("dtype,rtol", [(torch.float32, 1e-6), (F64, 1e-13)])
def test_numpy_inverse_equals_torch_inverse(monkeypatch, T, dtype, rtol):
    """The whole numpy path (no gradient on the CPU) against the torch one, both in chunks of 4, batched, orders
    (2, 3): the same algorithm, so the same inverse to rounding (their differences: summation orders)."""
    monkeypatch.setattr(qs_inverse, "LU_BLOCK", 4)
    monkeypatch.setattr(qs_lu, "LU_BLOCK", 4)
    monkeypatch.setattr(qs_host, "HOST_BLOCK", 4)
    lower_order_2, upper_order_3 = _matrix(T, 2, seed=T, batch=(2,)), _matrix(T, 3, seed=T + 1, batch=(2,))
    M = sm.Quasiseparable(lower_order_2.lower_part, upper_order_3.upper_part, lower_order_2.diag).to(dtype)
    lower, upper, diag = M.lower_part.generators, M.upper_part.generators, M.diag
    on_host = qs_inverse.quasiseparable_inverse(lower, upper, diag, (2,))
    monkeypatch.setattr(qs_inverse, "host_steps_apply", lambda *tensors: False)
    in_torch = qs_inverse.quasiseparable_inverse(lower, upper, diag, (2,))
    for got, want in zip(on_host[:3], in_torch[:3]):
        if isinstance(got, torch.Tensor):
            close(got, want, rtol=rtol)
            continue
        assert got.order == want.order
        for x, y in [(got.A.matrices(got.order), want.A.matrices(want.order)), (got.B, want.B), (got.C, want.C)]:
            assert x.dtype == y.dtype == dtype
            close(x, y, rtol=rtol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex128])
def test_inverse_in_float32_and_complex(dtype):
    M = _matrix(50, 2, seed=3).to(dtype)
    if dtype.is_complex:
        M = M + sm.Quasiseparable(M.lower_part * 1j, M.upper_part * 0.5j, M.diag * 0)
    X = M.inv()
    assert X.dtype == dtype
    want = torch.linalg.inv(M.to_dense().to(torch.complex128 if dtype.is_complex else F64))
    close(X.to_dense().to(want.dtype), want, rtol=1e-5 if dtype == torch.float32 else 1e-11)


@pytest.mark.parametrize("k", [2, 6])
def test_zero_minor_inside_a_later_chunk_is_named(block, k):
    """``a_k = 0`` cuts row and column ``k`` off from the rows before, so ``d_k = 0`` makes minor ``k + 1`` exactly 0
    (``k = 2`` ends the first chunk of 3: its block is exactly singular, where numpy's solve raises)."""
    T = 10
    a = torch.full((T,), 0.5, dtype=F64)
    a[k] = 0.0
    lower = sm.OneSS.from_decays(a)
    d = torch.full((T,), 2.0, dtype=F64)
    d[k] = 0.0
    with pytest.raises(sm.SingularMatrixError, match=f"leading principal minor {k + 1} is zero"):
        sm.Quasiseparable(lower, lower.T, d).inv()


def test_blocked_inverse_gradcheck(block):
    T = 8
    g = torch.Generator().manual_seed(2)
    A = torch.rand(T, 2, generator=g, dtype=F64, requires_grad=True)
    B = torch.randn(T, 2, generator=g, dtype=F64, requires_grad=True)
    d = (4 + torch.rand(T, generator=g, dtype=F64)).requires_grad_()
    bwd = sm.OneSS.from_decays(torch.rand(T, generator=g, dtype=F64))
    inv = lambda A, B, d: sm.Quasiseparable.bidirectional(sm.SSS(A, B, B.flip(0)), bwd, diag=d).inv().to_dense()  # noqa: E731
    assert torch.autograd.gradcheck(inv, (A, B, d))


@pytest.mark.parametrize("dtype", [F64, torch.float32])
@pytest.mark.parametrize("d0", [1e-6, 1e-8, 1e-9, 1e-10, 1e-11, 1e-12, 1e-14])
def test_a_nearly_zero_leading_minor_raises_or_inverts_accurately(dtype, d0):
    """Order-2 sides, condition about 200, the first leading minor ``d0``: the unpivoted inverse's products of the
    factors' inverses cancel by far more than the factors' growth shows (session 23: off by 40 relative at
    ``d0 = 1e-11``, no error). Each case either raises :class:`~structmat.SingularMatrixError` (the growth check, or
    the probe of the result) or gives the inverse to the condition times ``eps^(1/3)``."""
    T, rng = 6, np.random.default_rng(4)
    S = sm.SSS(rng.random((T, 2)), rng.standard_normal((T, 2)), rng.standard_normal((T, 2)))
    Q = sm.Quasiseparable(S, S.T, np.r_[d0, np.zeros(T - 1)]).to(dtype)
    want = torch.linalg.inv(Q.to_dense().double())
    cond = torch.linalg.cond(Q.to_dense().double())
    try:
        got = Q.inv().to_dense().double()
    except sm.SingularMatrixError:
        return
    assert float((got - want).abs().max() / want.abs().max()) <= 10 * cond * torch.finfo(dtype).eps ** (1 / 3)


def test_the_probe_passes_accurate_inverses(monkeypatch):
    """With the probe on for every inverse (its growth threshold at 0), well-conditioned batched matrices of mixed
    orders and their nearly-singular-free LION cases invert without an error, to rounding."""
    monkeypatch.setattr(QA, "PROBE_GROWTH_POWER", 0.0)
    for T, batch in ((1, ()), (7, (2,)), (40, (3,)), (130, ())):
        lower, upper = _matrix(T, 2, seed=T, batch=batch), _matrix(T, 3, seed=T + 1, batch=batch)
        M = sm.Quasiseparable(lower.lower_part, upper.upper_part, lower.diag)
        close(M.inv().to_dense(), torch.linalg.inv(M.to_dense()), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("path", ["numpy", "torch"])
@pytest.mark.parametrize("dtype,scales", [(F64, [1e-170, 1e-120, 1e120, 1e150]), (torch.float32, [1e-22, 1e-12, 1e12, 1e16])])
def test_matrices_of_tiny_or_huge_entries_invert_as_their_scaled_copies(monkeypatch, path, dtype, scales):
    """Session 23's audit: entries of 1e-22 (float32) or 1e-170 (float64) gave inverses off by 3e-2 and 7e2 without an
    error (products of entries underflowed, and the growth check with them). The inverse of ``c M`` for a power of
    two ``c`` is exact to form: every scale inverts as well as scale 1 does, batched, on both paths."""
    if path == "torch":
        monkeypatch.setattr(qs_inverse, "host_steps_apply", lambda *tensors: False)
    T, rng = 6, np.random.default_rng(4)
    S = sm.SSS(rng.random((2, T, 2)), rng.standard_normal((2, T, 2)), rng.standard_normal((2, T, 2)))
    for s in scales:
        part = sm.SSS(S.A, S.B * s, S.C)
        Q = sm.Quasiseparable(part, part.T, torch.tensor(np.r_[1.0, np.ones(T - 1) * 0.5]) * s).to(dtype)
        want = torch.linalg.inv(Q.to_dense().double())
        got = Q.inv().to_dense().double()
        assert float((got - want).abs().max() / want.abs().max()) < 100 * torch.finfo(dtype).eps, s
