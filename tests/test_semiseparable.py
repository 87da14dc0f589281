"""Property tests of the semiseparable core against dense float64 references."""

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from reference import dense_of

import structmat as sm
import structmat.testing as smt
from structmat.iir import MAX_BANDED_COLUMNS, cpu_scan
from structmat.scan import decay_scan, linear_scan, linear_scan_sequential

F64 = torch.float64


def _np(x):
    return x.detach().resolve_conj().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def close(got, want, rtol=1e-9):
    got, want = _np(got), _np(want)
    scale = max(np.abs(want).max(initial=0.0), 1e-30)
    err = np.abs(got - want).max(initial=0.0)
    assert err <= rtol * scale + 1e-13, f"max error {err:.3e} > {rtol:.1e} * {scale:.3e}"


# --- matvec, transpose, to_dense -------------------------------------------------------------


@given(st.one_of(smt.one_ss(), smt.sss(), smt.diagonals(), smt.bidiagonals(), smt.lowranks(), smt.denses()))
def test_matvec_matches_dense(M):
    smt.assert_matches_dense(M)


@given(st.one_of(smt.one_ss(batch=()), smt.sss(batch=())))
def test_to_dense_matches_definition(M):
    close(M.to_dense(), dense_of(M))


@given(smt.sss(dtype=torch.complex128))
def test_complex_sss(M):
    smt.assert_matches_dense(M)
    close((M.H @ torch.eye(M.shape[-1], dtype=M.dtype)), M.to_dense().mH)


@given(st.sampled_from(["log", "scalar", "diag", "dense"]), st.integers(1, 300), st.integers(1, 3))
def test_blocked_scan_equals_sequential(kind, T, N):
    g = torch.Generator().manual_seed(T * 7 + N)
    shape = {"log": (2, T), "scalar": (2, T), "diag": (2, T, N), "dense": (2, T, N, N)}[kind]
    A = torch.rand(shape, generator=g, dtype=F64)
    A = A.log() if kind == "log" else A / N
    u = torch.randn(2, T, N, 2, generator=g, dtype=F64)
    h0 = torch.randn(2, N, 2, generator=g, dtype=F64)
    for init in (None, h0):
        close(linear_scan(A, u, kind, init, chunk=8), linear_scan_sequential(A, u, kind, init))


broadcast_pairs = st.sampled_from([((), ()), ((2,), (2,)), ((1,), (3,)), ((3, 1), (3, 2)), ((), (2, 2)), ((2, 3), (3,))])


@given(broadcast_pairs, st.integers(2, 90), st.integers(1, 3), st.booleans(), st.data())
def test_compiled_scan_matches_sequential_and_blocked(shapes, T, K, constant, data):
    """The CPU LAPACK / lfilter paths against the plain recurrence and the blocked scan (the GPU path)."""
    a_batch, x_batch = shapes
    a = data.draw(smt.decays((*a_batch, T)))
    if constant:
        a = a[..., 1:2].expand(*a_batch, T)
    log_a = sm.one_ss.safe_log(a)
    X = torch.randn(*x_batch, T, K, dtype=F64)
    h = cpu_scan(log_a, X)
    batch = torch.broadcast_shapes(a_batch, x_batch)
    la, Xb = log_a.expand(*batch, T), X.expand(*batch, T, K)
    close(h, linear_scan_sequential(la, Xb[..., None, :], "log")[..., 0, :])
    close(h, decay_scan(torch.cat([torch.zeros_like(la[..., :1]), la[..., 1:]], -1), Xb))


def test_compiled_scan_gradients_and_fallbacks():
    T = 40
    g = torch.Generator().manual_seed(3)
    x = torch.randn(3, T, 2, generator=g, dtype=F64, requires_grad=True)
    for shape in ((T,), (3, T), (2, 1, T)):
        la = (-torch.rand(shape, generator=g, dtype=F64)).requires_grad_()
        assert torch.autograd.gradcheck(lambda la, x: cpu_scan(la, x), (la, x))
    const = torch.full((T,), -0.3, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda la, x: cpu_scan(la, x), (const, x))
    assert cpu_scan(const, torch.ones(T, 1, dtype=torch.complex128)) is None  # complex: the blocked scan
    assert cpu_scan(-torch.rand(T, dtype=F64), torch.ones(T, MAX_BANDED_COLUMNS + 1, dtype=F64)) is None
    x32 = torch.randn(T, 2, generator=g)
    assert cpu_scan(-torch.rand(T), x32).dtype == torch.float32


def test_matmul_semantics_broadcasting():
    M = sm.OneSS.from_decays(torch.rand(2, 1, 7, dtype=F64))
    X = torch.randn(3, 7, 4, dtype=F64)
    Y = M @ X
    assert Y.shape == (2, 3, 7, 4)
    close(Y, M.to_dense() @ X)
    x = torch.randn(7, dtype=F64)
    assert (M @ x).shape == (2, 1, 7)
    close(x @ M, x @ M.to_dense())
    close(np.asarray(M), M.to_dense())
    assert (M @ x.float()).dtype == F64


# --- closure ---------------------------------------------------------------------------------

pairs_T = st.integers(1, 40)


@given(pairs_T.flatmap(lambda T: st.tuples(smt.sss(T=T), smt.sss(T=T))))
def test_sss_add_and_matmul(pair):
    M1, M2 = pair
    S, P = M1 + M2, M1 @ M2
    d1, d2 = M1.to_dense(), M2.to_dense()
    close(S.to_dense(), d1 + d2)
    close(P.to_dense(), d1 @ d2)
    if M1.lower == M2.lower:
        assert isinstance(S, sm.SSS) and S.order == M1.order + M2.order
        assert isinstance(P, sm.SSS) and P.order == M1.order + M2.order
        smt.assert_matches_dense(P)
    else:
        assert isinstance(S, sm.Quasiseparable) and isinstance(P, sm.Quasiseparable)
    close((M1 - M2).to_dense(), d1 - d2)
    close((2.5 * M1).to_dense(), 2.5 * d1)
    close((M1 / 4).to_dense(), d1 / 4)


@given(pairs_T.flatmap(lambda T: st.tuples(smt.one_ss(T=T), smt.one_ss(T=T))))
def test_one_ss_closure_types(pair):
    M1, M2 = pair
    d1, d2 = M1.to_dense(), M2.to_dense()
    if M1.lower == M2.lower:
        H = M1.hadamard(M2)
        assert isinstance(H, sm.OneSS)
        close(H.to_dense(), d1 * d2)
        for R in (M1 + M2, M1 @ M2):
            assert type(R) is sm.SSS and R.order == 2
        assert (M1 + M2).kind == "diag"
    close((M1 + M2).to_dense(), d1 + d2)
    close((M1 @ M2).to_dense(), d1 @ d2)


@given(pairs_T.flatmap(lambda T: st.tuples(smt.sss(T=T), smt.diagonals(T=T))))
def test_sss_with_diagonal(pair):
    M, Dg = pair
    dm, dd = M.to_dense(), Dg.to_dense()
    for R, want in ((M + Dg, dm + dd), (Dg + M, dd + dm), (Dg @ M, dd @ dm), (M @ Dg, dm @ dd)):
        assert isinstance(R, sm.SSS) and R.order == M.order
        close(R.to_dense(), want)
    H = Dg.hadamard(M)
    assert isinstance(H, sm.Diagonal)
    close(H.to_dense(), dd * dm)


@given(pairs_T.flatmap(lambda T: st.tuples(smt.sss(T=T, N=2), smt.sss(T=T, N=2))))
def test_sss_hadamard(pair):
    M1, M2 = pair
    if M1.lower != M2.lower:
        with pytest.raises(TypeError, match="no structured Hadamard"):
            M1.hadamard(M2)
        return
    H = M1.hadamard(M2)
    assert isinstance(H, sm.SSS) and H.order == 4
    close(H.to_dense(), M1.to_dense() * M2.to_dense())


@given(smt.sss())
def test_sss_inverse_and_solve(M):
    T = M.shape[-1]
    I = M.inv()
    assert isinstance(I, sm.SSS)
    assert I.order in (M.order, M.order + 1)
    if M.D is not None:
        assert I.D is not None
    eye = torch.eye(T, dtype=F64)
    rtol = max(1e-8, 1e-13 * float(torch.linalg.cond(M.to_dense()).max()))  # backward-stable up to cond(M)
    close(I.to_dense() @ M.to_dense(), eye.expand(M.shape), rtol=rtol)
    Y = torch.randn(*M.batch_shape, T, 2, dtype=F64)
    close(M @ M.solve(Y), Y, rtol=rtol)


def test_sss_inverse_order_unchanged_with_explicit_d():
    g = torch.Generator().manual_seed(3)
    M = sm.SSS(torch.rand(30, 3, generator=g, dtype=F64), torch.randn(30, 3, generator=g, dtype=F64),
               torch.randn(30, 3, generator=g, dtype=F64), D=5 + torch.rand(30, generator=g, dtype=F64))
    I = M.inv()
    assert I.order == 3 and I.D is not None
    close(I.to_dense() @ M.to_dense(), torch.eye(30, dtype=F64))


@given(st.one_of(smt.one_ss(scaled=True), smt.bidiagonals()))
def test_one_ss_bidiagonal_inverse_pair(M):
    if isinstance(M, sm.OneSS) and (M.B == 0).any() | (M.C == 0).any():
        with pytest.raises(sm.SingularMatrixError):
            M.inv()
        return
    I = M.inv()
    T = M.shape[-1]
    close(I.to_dense() @ M.to_dense(), torch.eye(T, dtype=F64).expand(M.shape), rtol=1e-7)
    if isinstance(M, sm.Bidiagonal):
        assert isinstance(I, sm.OneSS)
        close(I.inv().to_dense(), M.to_dense(), rtol=1e-7)
    elif M.lower:
        assert isinstance(I, sm.Bidiagonal)


@given(pairs_T.flatmap(lambda T: st.tuples(smt.lowranks(T=T), smt.sss(T=T))))
def test_lowrank_products_and_tril(pair):
    L, M = pair
    for R, want in ((L @ M, L.to_dense() @ M.to_dense()), (M @ L, M.to_dense() @ L.to_dense())):
        assert isinstance(R, sm.LowRank)
        close(R.to_dense(), want)
    S = L.tril()
    assert isinstance(S, sm.SSS) and S.order == L.order
    close(S.to_dense(), torch.tril(L.to_dense()))
    close((L + L).to_dense(), 2 * L.to_dense())


@given(pairs_T.flatmap(lambda T: st.tuples(smt.bidiagonals(T=T), smt.denses(T=T))))
def test_lazy_fallbacks(pair):
    Bd, Dn = pair
    S, P = Bd + Dn, Bd @ Dn
    assert isinstance(S, sm.Sum) and isinstance(P, sm.Product)
    close(S.to_dense(), Bd.to_dense() + Dn.to_dense())
    smt.assert_matches_dense(S)
    smt.assert_matches_dense(P)
    close(P.inv().to_dense(), np.linalg.inv(P.to_dense().numpy()), rtol=1e-7)
    with pytest.raises(TypeError, match="gmres"):
        S.inv()
    Tr = sm.Transpose(Bd)
    smt.assert_matches_dense(Tr)
    rhs = torch.ones(Bd.shape[-1], 1, dtype=F64)
    close(Tr.solve(rhs), torch.linalg.solve(Bd.to_dense().mT, rhs), rtol=1e-7)


# --- compress and semiseparable rank ---------------------------------------------------------


def test_compress_oness_plus_itself():
    M = sm.OneSS.from_decays(torch.rand(60, dtype=F64))
    S = M + M
    assert S.order == 2
    C = S.compress()
    assert C.order == 1
    close(C.to_dense(), 2 * M.to_dense())


@given(pairs_T.flatmap(lambda T: st.tuples(smt.sss(T=T, batch=()), smt.sss(T=T, batch=()))))
def test_compress_is_exact_and_not_larger(pair):
    M1, M2 = pair
    S = M1 + (M2 if M2.lower == M1.lower else M2.T)
    C = S.compress()
    assert C.order <= S.order
    close(C.to_dense(), S.to_dense(), rtol=1e-8)


@given(st.one_of(smt.sss(batch=(), T=25), smt.one_ss(batch=(), T=25), smt.bidiagonals(batch=(), T=25)), st.booleans())
def test_semiseparable_rank_structured_matches_dense(M, strict):
    assert sm.semiseparable_rank(M, strict=strict) == sm.semiseparable_rank(M.to_dense(), strict=strict)


@given(pairs_T.flatmap(lambda T: st.tuples(smt.sss(T=T, batch=()), smt.sss(T=T, batch=()))))
def test_rank_theorems(pair):
    M1, M2 = pair
    if M1.lower != M2.lower:
        return
    r = sm.semiseparable_rank
    n1, n2 = M1.order, M2.order
    assert r((M1 + M2).to_dense(), strict=True) <= n1 + n2
    assert r((M1 @ M2).to_dense(), strict=True) <= n1 + n2
    dense = M1.to_dense().numpy() if M1.lower else M1.to_dense().numpy().T
    inv = np.linalg.inv(dense)
    assert r(inv, strict=True) <= n1
    assert r(inv) <= n1 + 1


def test_banded_inverse_theorem():
    g = torch.Generator().manual_seed(0)
    T, k = 30, 2
    band = torch.tril(torch.triu(torch.randn(T, T, generator=g, dtype=F64), -k)) + 4 * torch.eye(T, dtype=F64)
    inv = torch.linalg.inv(band)  # inverse of a (k+1)-banded matrix: (k+1)-SS, generically k strictly
    assert sm.semiseparable_rank(inv) <= k + 1
    assert sm.semiseparable_rank(inv, strict=True) == k


# --- scipy and conversions -------------------------------------------------------------------


def test_aslinearoperator_gmres_and_rmatvec():
    import scipy.sparse.linalg as sla

    M = sm.SSS(torch.rand(50, 2, dtype=F64), torch.randn(50, 2, dtype=F64), torch.randn(50, 2, dtype=F64), D=3 + torch.rand(50, dtype=F64))
    op = sm.aslinearoperator(M)
    y = np.random.default_rng(0).standard_normal(50)
    x, info = sla.gmres(op, y, rtol=1e-12, atol=0)
    assert info == 0
    close(np.asarray(M) @ x, y, rtol=1e-8)
    close(op.rmatvec(y), np.asarray(M).T @ y)
    with pytest.raises(ValueError, match="2-D"):
        sm.aslinearoperator(sm.OneSS.causal(3).to(F64)._map(lambda t: t.expand(2, *t.shape)))


def test_to_and_repr():
    M = sm.OneSS.from_decays(torch.rand(5))
    assert M.to(F64).dtype == F64
    Mc = M.to(torch.complex128)
    assert Mc.dtype == torch.complex128 and Mc.log_a.dtype == F64
    close(Mc.to_dense(), M.to_dense().to(F64), rtol=1e-6)
    assert "OneSS" in repr(M) and "order=1" in repr(M) and "(5, 5)" in repr(M)
    close(sm.OneSS.causal(4) @ torch.ones(4), torch.arange(1.0, 5.0))
    close(sm.OneSS.decay(0.5, 4).to_dense(), np.tril(0.5 ** np.subtract.outer(np.arange(4), np.arange(4)).clip(0)))
