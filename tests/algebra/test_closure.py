"""The closure contract of DESIGN section 4: result classes and orders, with dense float64 values."""

import numpy as np
import pytest
import torch
from conftest import C128, F64, close, rand, randn
from hypothesis import given
from hypothesis import strategies as st

import structmat as sm
import structmat.testing as smt

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
    H = M1.hadamard(M2)
    close(H.to_dense(), d1 * d2)
    if M1.lower == M2.lower:
        assert isinstance(H, sm.OneSS)
        for R in (M1 + M2, M1 @ M2):
            assert type(R) is sm.SSS and R.order == 2
        assert (M1 + M2).transitions.kind == "diag"
    else:
        assert isinstance(H, sm.Diagonal)  # a lower and an upper triangle meet on the diagonal
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


@given(smt.sss())
def test_sss_inverse(M):
    T = M.shape[-1]
    inverse = M.inv()
    assert isinstance(inverse, sm.SSS)
    assert inverse.order in (M.order, M.order + 1)
    if M.D is not None:
        assert inverse.D is not None
    rtol = max(1e-8, 1e-13 * float(torch.linalg.cond(M.to_dense()).max()))  # backward-stable up to cond(M)
    close(inverse.to_dense() @ M.to_dense(), torch.eye(T, dtype=F64).expand(M.shape), rtol=rtol)


def test_sss_inverse_order_unchanged_with_explicit_d():
    M = sm.SSS(rand(30, 3, seed=1), randn(30, 3, seed=2), randn(30, 3, seed=3), D=5 + rand(30, seed=4))
    inverse = M.inv()
    assert inverse.order == 3 and inverse.D is not None
    close(inverse.to_dense() @ M.to_dense(), torch.eye(30, dtype=F64))


@pytest.mark.parametrize("mode", [torch.no_grad, torch.inference_mode])
def test_sss_inverse_used_without_grad_first_keeps_its_gradients(mode):
    """The inverse's generators are built on first use and kept: built under no_grad / inference_mode they had
    no graph, and every later closure result or dense form lost the gradient (silently, beside other terms)."""
    A = rand(6, 2, seed=1).requires_grad_()
    inverse = sm.SSS(A, randn(6, 2, seed=2), randn(6, 2, seed=3), D=3 + rand(6, seed=4)).inv()
    with mode():
        dense = inverse.to_dense()
    grad, = torch.autograd.grad((inverse.to_dense() * randn(6, 6, seed=5)).sum(), A)
    A2 = A.detach().clone().requires_grad_()
    fresh = sm.SSS(A2, randn(6, 2, seed=2), randn(6, 2, seed=3), D=3 + rand(6, seed=4)).inv().to_dense()
    want, = torch.autograd.grad((fresh * randn(6, 6, seed=5)).sum(), A2)
    close(grad, want)
    close(dense, fresh.detach())


@given(st.one_of(smt.one_ss(scaled=True), smt.bidiagonals()))
def test_one_ss_bidiagonal_inverse_pair(M):
    if isinstance(M, sm.OneSS) and bool((M.B == 0).any() | (M.C == 0).any()):
        with pytest.raises(sm.SingularMatrixError):
            M.inv()
        return
    inverse = M.inv()
    T = M.shape[-1]
    close(inverse.to_dense() @ M.to_dense(), torch.eye(T, dtype=F64).expand(M.shape), rtol=1e-7)
    assert isinstance(inverse, sm.OneSS if isinstance(M, sm.Bidiagonal) else sm.Bidiagonal)
    assert inverse.lower == M.lower
    close(inverse.inv().to_dense(), M.to_dense(), rtol=1e-7)


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


def test_batched_operands_broadcast_inside_closure_ops():
    T = 6
    O = sm.OneSS.from_decays(rand(T))
    Dg = sm.Diagonal(1 + rand(3, T, seed=1))
    Bd = sm.Bidiagonal(2 + rand(T, seed=2), randn(T - 1, seed=3))
    L1, L2 = sm.LowRank(randn(2, T, 1, seed=4), randn(2, T, 1, seed=5)), sm.LowRank(randn(T, 2, seed=6), randn(T, 2, seed=7))
    for R, want in ((Dg @ O, Dg.to_dense() @ O.to_dense()), (O @ Dg, O.to_dense() @ Dg.to_dense()),
                    (Bd + Dg, Bd.to_dense() + Dg.to_dense()), (L1 + L2, L1.to_dense() + L2.to_dense()),
                    (sm.Toeplitz(randn(2, T), randn(T)) + sm.Toeplitz(randn(T), randn(T)), None)):
        if want is not None:
            close(R.to_dense(), want)
        assert R.batch_shape in ((3,), (2,))


def test_inference_mode_transposes_and_products():
    Bd = sm.Bidiagonal(2 + rand(5), randn(4))
    x = randn(5, 2)
    with torch.inference_mode():
        close(Bd.T @ x, Bd.to_dense().T @ x)
        close(x.T @ Bd, x.T @ Bd.to_dense())
        close((sm.LowRank(randn(5, 1), randn(5, 1)) @ Bd).to_dense(), randn(5, 1) @ randn(5, 1).T @ Bd.to_dense())
        M = sm.OneSS.from_decays(rand(5))
        close(sm.Transpose(M) @ x, M.to_dense().T @ x)
        cosine = sm.DFT(5, dtype=C128).real
        close((cosine * 2j).to_dense(), cosine.to_dense() * 2j)
