"""The chunked form (dense diagonal blocks and one coupling between chunks) against dense matrices built entry by
entry, and the classes' use of it: kept after enough columns, dropped when a parameter changes, never for gradients."""

import math

import numpy as np
import pytest
import torch
from conftest import F64, close, rand, randn, sss_dense
from hypothesis import given, settings
from hypothesis import strategies as st

import structmat as sm
from structmat.core.transitions import Transitions
from structmat.linalg import chunk_form
from structmat.linalg.semiseparable import Generators


def _generators(kind, T, N, batch=(), seed=0, dtype=F64):
    shape = {"log": (*batch, T), "scalar": (*batch, T), "diag": (*batch, T, N), "dense": (*batch, T, N, N)}[kind]
    A = rand(*shape, seed=seed) if kind != "dense" else randn(*shape, seed=seed) / (2 * N)
    if kind == "scalar":
        A = A - 0.5  # signed transitions
    if T > 3:
        A.select(len(batch), 3).zero_()  # an exact cut
    values = torch.where(A > 0, torch.log(torch.where(A > 0, A, 1.0)), float("-inf")) if kind == "log" else A
    B, C, D = randn(*batch, T, N, seed=seed + 1), randn(*batch, T, N, seed=seed + 2), 2 + rand(*batch, T, seed=seed + 3)
    G = Generators(Transitions(values.to(dtype), kind), B.to(dtype), C.to(dtype), D.to(dtype))
    return G, A


def _dense(G, A, kind, batch, strict=False):
    """The lower matrix from the definition (numpy, float64), batch by batch."""
    if batch:
        return torch.stack([_dense(Generators(G.A, G.B[i], G.C[i], G.D[i]), A[i], kind, batch[1:], strict)
                            for i in range(batch[0])])
    D = np.zeros(G.length) if strict else G.D
    return torch.from_numpy(sss_dense(A, G.B, G.C, D, "scalar" if kind == "log" else kind))


@pytest.mark.parametrize("kind", ["log", "scalar", "diag", "dense"])
@pytest.mark.parametrize("T,L", [(41, 8), (48, 16), (5, 8)])
@pytest.mark.parametrize("batch,xbatch", [((), ()), ((), (3,)), ((2,), (2,)), ((2,), (3, 1))])
def test_lower_form_and_its_inverse_equal_dense(kind, T, L, batch, xbatch):
    """Products with the form, its transpose and the inverse's form: padded last chunks, an exact cut, batches."""
    G, A = _generators(kind, T, 3, batch, seed=len(batch) + T)
    M = _dense(G, A, kind, batch)
    F, Fi = chunk_form.lower_form(G, L), chunk_form.lower_inverse_form(G, L)
    for K in (1, 2):  # (one column runs as rows)
        X = randn(*xbatch, T, K, seed=9)
        close(chunk_form.apply(F, X), M @ X)
        close(chunk_form.apply(F.T, X), M.mT @ X)
        want = X.expand(*torch.broadcast_shapes(M.shape[:-2], X.shape[:-2]), T, K)
        close(M @ chunk_form.apply(Fi, X), want, rtol=1e-9)
        close(M.mT @ chunk_form.apply(Fi.T, X), want, rtol=1e-9)


@pytest.mark.parametrize("kinds", [("diag", "log"), ("dense", "scalar")])
@pytest.mark.parametrize("batch,dbatch", [((), ()), ((2,), (2,)), ((), (2,))])
def test_quasiseparable_form_equals_dense(kinds, batch, dbatch):
    """Both triangles' states side by side (orders 3 and 2), the generators' own diagonals unused."""
    T = 37
    (Gl, Al), (Gu, Au) = _generators(kinds[0], T, 3, batch, seed=1), _generators(kinds[1], T, 2, (), seed=7)
    d = randn(*dbatch, T, seed=5)
    M = (_dense(Gl, Al, kinds[0], batch, strict=True) + _dense(Gu, Au, kinds[1], (), strict=True).mT
         + torch.diag_embed(d))
    X = randn(T, 3, seed=2)
    close(chunk_form.apply(chunk_form.quasiseparable_form(Gl, Gu, d, 8), X), M @ X)


def test_complex_and_float32():
    G, A = _generators("diag", 40, 2, seed=4)
    M = _dense(G, A, "diag", ())
    Gc = Generators(Transitions(G.A.values * (0.6 + 0.8j), "diag"), G.B.to(torch.complex128), G.C * 1j, G.D.to(torch.complex128))
    Mc = torch.from_numpy(sss_dense(A * (0.6 + 0.8j), Gc.B, Gc.C, Gc.D, "diag"))
    X = randn(40, 2, seed=1).to(torch.complex128)
    close(chunk_form.apply(chunk_form.lower_form(Gc, 8), X), Mc @ X)
    close(Mc @ chunk_form.apply(chunk_form.lower_inverse_form(Gc, 8), X), X, rtol=1e-9)
    G32 = Generators(Transitions(G.A.values.float(), "diag"), G.B.float(), G.C.float(), G.D.float())
    X32 = randn(40, 1, seed=2, dtype=torch.float32)
    Y = chunk_form.apply(chunk_form.lower_form(G32, 8), X32)
    assert Y.dtype == torch.float32
    close(Y, M @ X32.double(), rtol=1e-5, atol=1e-5)


def test_inverse_form_refuses_singular_and_overflowing_matrices():
    G, _ = _generators("diag", 40, 2, seed=4)
    D = G.D.clone()
    D[11] = 0.0
    with pytest.raises(sm.SingularMatrixError, match="diagonal entry is zero"):
        chunk_form.lower_inverse_form(G.with_diagonal(D), 8)
    # tiny diagonal entries: the inverse's entries pass 1e38, beyond float32 (the banded solve is used instead)
    G32 = Generators(Transitions(torch.ones(40, 1), "diag"), torch.ones(40, 1), torch.ones(40, 1), torch.full((40,), 1e-7))
    assert chunk_form.lower_inverse_form(G32, 8) is None


def _used(M, columns):
    """Products with ``M`` bringing ``columns`` columns in all, one column at a time."""
    for i in range(columns):
        M @ randn(M.shape[-1], 1, seed=100 + i, dtype=M.dtype)


def _classes(T):
    A = rand(T, 4, seed=1)
    yield "SSS", sm.SSS(A, randn(T, 4, seed=2) / 4, randn(T, 4, seed=3) / 4, D=2 + rand(T, seed=4))
    yield "SSS dense A", sm.SSS(randn(T, 3, 3, seed=5) / 6, randn(T, 3, seed=6) / 4, randn(T, 3, seed=7) / 4,
                                D=2 + rand(T, seed=8))
    yield "upper SSS", sm.SSS(A, randn(T, 4, seed=2) / 4, randn(T, 4, seed=3) / 4, D=2 + rand(T, seed=4), lower=False)
    yield "OneSS", sm.OneSS.from_decays(rand(T, seed=9), b=1 + rand(T, seed=10), c=1 + rand(T, seed=11))
    yield "upper OneSS", sm.OneSS.from_decays(rand(T, seed=9), b=1 + rand(T, seed=10), c=2 + rand(T, seed=11)).T
    yield "SSS(24)", sm.SSS(rand(T, 24, seed=20), randn(T, 24, seed=21) / 24, randn(T, 24, seed=22) / 24,
                            D=2 + rand(T, seed=23))  # (longer chunks: 64 steps)
    yield "SSS float32", sm.SSS(A.float(), randn(T, 4, seed=2).float() / 4, randn(T, 4, seed=3).float() / 4,
                                D=2 + rand(T, seed=4).float())
    fwd = sm.SSS(0.5 + 0.5 * rand(T, 2, seed=12), randn(T, 2, seed=13) / 4, randn(T, 2, seed=14) / 4)
    bwd = sm.SSS(rand(T, 2, 2, seed=15) / 4, randn(T, 2, seed=16) / 4, randn(T, 2, seed=17) / 4)
    yield "Quasiseparable", sm.Quasiseparable.bidirectional(fwd, bwd, 3 + rand(T, seed=18))
    yield "lion", sm.Quasiseparable.lion(rand(T, seed=19))


@pytest.mark.parametrize("name,M", list(_classes(300)), ids=lambda v: v if isinstance(v, str) else "")
def test_classes_take_the_form_after_enough_columns(name, M):
    """Products (and triangular solves) before and after the form is kept equal the dense matrix; it is built by the
    first call after after_columns(T, r) columns have been multiplied (a matrix used once never builds it); a solve
    in the band at its second call with that many columns, one outside it (whose calls cost mostly their chunk maps,
    whatever their columns) once its calls have counted ``after_columns(T, r, maps_rebuilt=True)``, each
    ``1 + columns / REBUILT_MAPS_COLUMNS``."""
    dense = M.to_dense().double()
    rtol = 1e-5 if M.dtype == torch.float32 else 1e-9
    x = lambda *shape, seed: randn(*shape, seed=seed, dtype=M.dtype)  # noqa: E731

    def check(got, want):
        assert got.dtype == M.dtype
        close(got.double(), want, rtol=rtol, atol=rtol)

    X = x(300, 3, seed=1)
    key = "chunk form" if isinstance(M, sm.Quasiseparable) else ("chunk form", False)
    check(M @ X, dense @ X.double())
    r = sum(M.order) if isinstance(M, sm.Quasiseparable) else M.order
    _used(M, chunk_form.after_columns(300, r) - 3)
    assert key not in M._small.values  # the count is reached, by earlier calls only
    check(M @ X, dense @ X.double())  # the next call builds the form and uses it
    assert M._small.values[key] is not None
    assert ("band", False) not in M._small.values  # the form serves instead of the band
    check(M @ X, dense @ X.double())
    Xb = x(2, 300, 1, seed=3)  # a batch of operands
    check(M @ Xb, dense @ Xb.double())
    Xt = x(3, 300, seed=5).mT  # a time-last view
    check(M @ Xt, dense @ Xt.double())
    with torch.inference_mode():
        check(M @ X[:, :1], dense @ X[:, :1].double())
    if isinstance(M, sm.SSS):
        Y = x(300, chunk_form.after_columns(300, r), seed=4)
        outside = r > 8 or M.dtype.is_complex  # (the band takes real matrices of up to 8 states)
        calls = 1
        if outside:  # each wide call counts as one and a little
            per_call = 1 + Y.shape[-1] / chunk_form.REBUILT_MAPS_COLUMNS
            calls = math.ceil(chunk_form.after_columns(300, r, maps_rebuilt=True) / per_call)
        for _ in range(calls):
            check(M.solve(Y), torch.linalg.solve(dense, Y.double()))
            assert ("chunk form", True) not in M._small.values  # the count is reached by earlier calls only
        check(M.solve(Y), torch.linalg.solve(dense, Y.double()))
        if not isinstance(M, sm.OneSS):  # (a 1-SS solves through its bidiagonal inverse)
            assert M._small.values[("chunk form", True)] is not None
        check(M.solve(Y[:, 0]), torch.linalg.solve(dense, Y[:, 0].double()))


def test_form_follows_parameters_changed_in_place_and_serves_no_gradient():
    T = 300
    B = randn(T, 2, seed=2)
    M = sm.SSS(rand(T, 2, seed=1), B, randn(T, 2, seed=3), D=2 + rand(T, seed=4))
    X = randn(T, chunk_form.after_columns(T, 2), seed=5)
    M @ X
    M @ X
    assert ("chunk form", False) in M._small.values
    with torch.no_grad():
        M.B.mul_(3.0)
    close(M @ X, M.to_dense() @ X)
    Bg = B.clone().requires_grad_()
    Mg = sm.SSS(M.A, Bg, M.C, D=M.D)
    x = randn(T, chunk_form.after_columns(T, 2), seed=6)
    (Mg @ x).sum().backward()
    assert Mg.__dict__.get("_small") is None  # nothing kept for a parameter that wants a gradient
    Bd = B.clone().requires_grad_()
    (sm.SSS(M.A, Bd, M.C, D=M.D).to_dense() @ x).sum().backward()
    close(Bg.grad, Bd.grad)


def test_form_is_bounded_and_cpu_only():
    x = torch.zeros(8192, 1, dtype=F64)
    assert chunk_form.applies(F64, x, 8192, 4, 1)
    assert not chunk_form.applies(F64, x, 8192, 4, 3)  # the batch counts
    assert not chunk_form.applies(F64, torch.zeros(20000, 1, dtype=F64), 20000, 4, 1)
    assert not chunk_form.applies(torch.float32, x, 8192, 4, 1)  # X in another dtype
    assert not chunk_form.applies(F64, x[:32], 32, 4, 1)  # one chunk: nothing to couple
    # the chunk length makes the form smallest: checked against every power of two from FORM_CHUNK
    for T, r in ((33, 1), (1024, 4), (4096, 4), (2048, 32), (512, 64), (7000, 16)):
        L = chunk_form.chunk_length(T, r)
        size = lambda L: -(-T // L) * L * L + (-(-T // L) * r) ** 2 + 2 * -(-T // L) * L * r  # noqa: E731
        assert L >= chunk_form.FORM_CHUNK and all(size(L) <= size(chunk_form.FORM_CHUNK << k) for k in range(8))


@settings(max_examples=40, deadline=None)
@given(T=st.integers(1, 90), L=st.integers(1, 24), N=st.integers(1, 3), kind=st.sampled_from(["log", "scalar", "diag", "dense"]),
       special=st.sampled_from([0.0, 1.0, 1e-30]), K=st.integers(1, 3), seed=st.integers(0, 2**16))
def test_forms_property(T, L, N, kind, special, K, seed):
    """Random lengths, chunk lengths, orders and kinds, with decays of exactly 0, 1 or 1e-30 over a stretch."""
    G, A = _generators(kind, T, N, seed=seed)
    if kind != "dense":  # (a stretch of special decays)
        A[T // 3:T // 2] = special
        values = torch.log(A) if kind == "log" else A
        G = Generators(Transitions(values, kind), G.B / 2, G.C / 2, G.D)
    M = _dense(G, A, kind, ())
    X = randn(T, K, seed=seed + 1)
    close(chunk_form.apply(chunk_form.lower_form(G, L), X), M @ X)
    close(M @ chunk_form.apply(chunk_form.lower_inverse_form(G, L), X), X, rtol=1e-8, atol=1e-10)
