"""Quasiseparable masks (LION, Hydra) against their dense definitions; products, inverses, LU."""

import numpy as np
import pytest
import torch
from conftest import F64, close, randn, reversal
from hypothesis import given
from hypothesis import strategies as st

import structmat as sm
import structmat.testing as smt


def rand(*shape, seed=0, dtype=F64):
    return randn(*shape, seed=seed, dtype=dtype)

J = reversal


@given(st.integers(1, 40), st.integers(0, 100))
def test_lion_masks_match_their_definitions(T, seed):
    g = torch.Generator().manual_seed(seed)
    a = torch.rand(T, generator=g, dtype=F64)
    # selective LION: forward decays a_t, backward the flipped decays
    fwd = sm.OneSS.from_decays(a)
    bwd = sm.OneSS.from_decays(torch.flip(torch.roll(a, -1), (0,)))
    Q = sm.Quasiseparable.bidirectional(fwd, bwd)
    want = np.zeros((T, T))
    for i in range(T):
        for j in range(T):
            lo, hi = min(i, j), max(i, j)
            want[i, j] = np.prod(a[lo + 1 : hi + 1].numpy())
    close(Q.to_dense(), want)
    close(Q.to_dense(), fwd.to_dense() + J(T) @ bwd.to_dense() @ J(T) - torch.eye(T, dtype=F64))
    smt.assert_matches_dense(Q)
    dec = sm.Quasiseparable.bidirectional(sm.OneSS.decay(torch.tensor(0.7, dtype=F64), T),
                                          sm.OneSS.decay(torch.tensor(0.7, dtype=F64), T))
    close(dec.to_dense(), 0.7 ** np.abs(np.subtract.outer(np.arange(T), np.arange(T))))


@given(st.integers(2, 30), st.integers(0, 100))
def test_hydra_mask_and_closure(T, seed):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=F64)  # noqa: E731
    fwd = sm.SSS(torch.rand(T, 2, generator=g, dtype=F64), r(T, 2), r(T, 2))
    bwd = sm.SSS(torch.rand(T, 3, generator=g, dtype=F64), r(T, 3), r(T, 3))
    d = r(T)
    Q = sm.Quasiseparable.bidirectional(fwd, bwd, diag=d)  # Hydra: free diagonal
    want = torch.tril(fwd.to_dense(), -1) + torch.triu(J(T) @ bwd.to_dense() @ J(T), 1) + torch.diag(d)
    close(Q.to_dense(), want)
    assert Q.order == (2, 3)
    for R, wantR, order in (
        (Q + Q, 2 * want, (4, 6)),
        (Q + fwd, want + fwd.to_dense(), (4, 3)),
        (Q + sm.Diagonal(d), want + torch.diag(d), (2, 3)),
        (Q + sm.OneSS.from_decays(torch.rand(T, generator=g, dtype=F64)).T, None, (2, 4)),
    ):
        assert isinstance(R, sm.Quasiseparable) and R.order == order
        if wantR is not None:
            close(R.to_dense(), wantR)
    close(Q.T.to_dense(), want.T)
    close(Q.tril().to_dense(), torch.tril(want))
    close(Q.triu().to_dense(), torch.triu(want))
    C = (Q + Q).compress()
    assert C.order[0] <= 2 and C.order[1] <= 3
    close(C.to_dense(), 2 * want, rtol=1e-8)


def _hydra(T, n_l, n_u, seed, batch=()):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.rand(*batch, *s, generator=g, dtype=F64)  # noqa: E731
    n = lambda *s: torch.randn(*batch, *s, generator=g, dtype=F64)  # noqa: E731
    fwd = sm.SSS(r(T, n_l), n(T, n_l), n(T, n_l))
    bwd = sm.SSS(r(T, n_u, n_u) / n_u, n(T, n_u), n(T, n_u))
    return sm.Quasiseparable.bidirectional(fwd, bwd, diag=4 + n(T))


@given(st.integers(1, 30), st.integers(1, 3), st.integers(1, 3), st.sampled_from([(), (2,)]), st.integers(0, 100))
def test_quasiseparable_product_and_inverse(T, n_l, n_u, batch, seed):
    Q1, Q2 = _hydra(T, n_l, n_u, seed, batch), _hydra(T, n_u, n_l, seed + 1)
    P = Q1 @ Q2
    assert isinstance(P, sm.Quasiseparable) and P.order == (n_l + n_u, n_u + n_l)
    close(P.to_dense(), Q1.to_dense() @ Q2.to_dense(), rtol=1e-9)
    inv = Q1.inv()
    assert isinstance(inv, sm.Quasiseparable) and inv.order == (n_l, n_u)
    close(inv.to_dense() @ Q1.to_dense(), torch.eye(T, dtype=F64).expand(Q1.shape), rtol=1e-8)
    y = torch.randn(T, 2, dtype=F64)
    close(Q1 @ Q1.solve(y), y.expand(*batch, T, 2), rtol=1e-8)
    L, U = Q1.lu()
    close(L.to_dense() @ U.to_dense(), Q1.to_dense(), rtol=1e-9)


@given(st.integers(2, 25), st.integers(0, 100))
def test_quasiseparable_with_sss_oness_diagonal(T, seed):
    Q = _hydra(T, 2, 1, seed)
    g = torch.Generator().manual_seed(seed + 5)
    S = sm.SSS(torch.rand(T, 3, generator=g, dtype=F64), torch.randn(T, 3, generator=g, dtype=F64),
               torch.randn(T, 3, generator=g, dtype=F64), D=2 + torch.rand(T, generator=g, dtype=F64))
    O = sm.OneSS.from_decays(torch.rand(T, generator=g, dtype=F64))
    Dg = sm.Diagonal(1 + torch.rand(T, generator=g, dtype=F64))
    cases = [(Q @ S, Q.to_dense() @ S.to_dense(), (5, 1)), (S @ Q, S.to_dense() @ Q.to_dense(), (5, 1)),
             (Q @ O.T, Q.to_dense() @ O.to_dense().T, (2, 2)), (Q @ Dg, Q.to_dense() @ Dg.to_dense(), (2, 1)),
             (Dg @ Q, Dg.to_dense() @ Q.to_dense(), (2, 1)), (S @ O.T, S.to_dense() @ O.to_dense().T, (3, 1))]
    for R, want, order in cases:
        assert isinstance(R, sm.Quasiseparable) and R.order == order
        close(R.to_dense(), want, rtol=1e-9)


def test_quasiseparable_gradcheck_and_errors():
    T = 8
    a, x = torch.rand(T, dtype=F64, requires_grad=True), torch.randn(T, 2, dtype=F64, requires_grad=True)
    f = lambda a, x: sm.Quasiseparable.bidirectional(sm.OneSS.from_decays(a), sm.OneSS.from_decays(a.flip(0))) @ x  # noqa: E731
    assert torch.autograd.gradcheck(f, (a, x))
    d = torch.rand(T, dtype=F64, requires_grad=True)

    def g(a, d, x):
        Q = sm.Quasiseparable.bidirectional(sm.OneSS.from_decays(a), sm.OneSS.from_decays(a.flip(0)), diag=3 + d)
        return (Q @ Q) @ x + Q.inv() @ x

    assert torch.autograd.gradcheck(g, (a, d, x))
    with pytest.raises(TypeError, match="upper must be"):
        sm.Quasiseparable(sm.OneSS.causal(3), sm.OneSS.causal(3), torch.ones(3))
    with pytest.raises(sm.SingularMatrixError, match="leading principal minor"):
        sm.Quasiseparable.bidirectional(sm.OneSS.causal(3), sm.OneSS.causal(3), diag=torch.zeros(3)).inv()


def _lion_reference(a, b, c):
    """``c_i prod_{k = min(i,j)+1 .. max(i,j)} a_k b_j`` entry by entry (numpy, unbatched)."""
    a, b, c = (np.asarray(t, dtype=float) for t in (a, b, c))
    T = len(a)
    want = np.zeros((T, T))
    for i in range(T):
        for j in range(T):
            lo, hi = min(i, j), max(i, j)
            want[i, j] = c[i] * np.prod(a[lo + 1 : hi + 1]) * b[j]
    return want


@given(st.integers(1, 30), st.integers(0, 100), st.booleans())
def test_lion_constructor_from_forward_decays(T, seed, scaled):
    g = torch.Generator().manual_seed(seed)
    a = torch.rand(2, T, generator=g, dtype=F64)
    a[0, T // 2] = 0.0  # a cut: exact zeros across it
    a[1, 0] = 1.0
    b = c = None
    if scaled:
        b, c = torch.randn(2, T, generator=g, dtype=F64), torch.randn(2, T, generator=g, dtype=F64)
    M = sm.Quasiseparable.lion(a, b=b, c=c)
    assert isinstance(M, sm.Quasiseparable) and M.order == (1, 1) and M.shape == (2, T, T)
    ones = torch.ones(T, dtype=F64)
    for k in range(2):
        want = _lion_reference(a[k], ones if b is None else b[k], ones if c is None else c[k])
        close(M.to_dense()[k], want)
    if not scaled:  # the same mask as the flip(roll) construction it replaces
        old = sm.Quasiseparable.bidirectional(sm.OneSS.from_decays(a), sm.OneSS.from_decays(torch.flip(torch.roll(a, -1, -1), (-1,))))
        close(M.to_dense(), old.to_dense())
    smt.assert_matches_dense(M)


def test_lion_decay_constructor_and_gradients():
    gamma = torch.tensor([0.5, 0.9], dtype=F64)
    M = sm.Quasiseparable.lion_decay(gamma, 6)
    idx = np.arange(6)
    want = np.stack([g ** np.abs(np.subtract.outer(idx, idx)) for g in (0.5, 0.9)])
    assert M.shape == (2, 6, 6) and M.order == (1, 1)
    close(M.to_dense(), want)
    assert sm.Quasiseparable.lion_decay(0.5, 4, dtype=torch.float64).dtype == torch.float64
    close(sm.Quasiseparable.lion_decay(0.0, 3).to_dense(), np.eye(3))
    a = torch.rand(7, dtype=F64, requires_grad=True)
    b, c = torch.randn(7, dtype=F64, requires_grad=True), torch.randn(7, dtype=F64, requires_grad=True)
    x = torch.randn(7, 2, dtype=F64)
    assert torch.autograd.gradcheck(lambda a, b, c: sm.Quasiseparable.lion(a, b=b, c=c) @ x, (a, b, c))
    with pytest.raises(ValueError, match="a must be real and >= 0"):
        sm.Quasiseparable.lion(torch.tensor([0.5, -0.1]))
    with pytest.raises(ValueError, match="b must have shape"):
        sm.Quasiseparable.lion(torch.rand(4), b=torch.ones(5))
    with pytest.raises(ValueError, match="gamma must be >= 0"):
        sm.Quasiseparable.lion_decay(-0.5, 4)


def test_bad_input_names_the_argument_and_the_expected_shape():
    O = sm.OneSS
    with pytest.raises(ValueError, match=r"upper must have shape \(\*, 3, 3\) like lower; got \(4, 4\)"):
        sm.Quasiseparable(O.causal(3), O.causal(4).T, torch.ones(3))
    with pytest.raises(ValueError, match=r"diag must have shape \(\*, T\) with T=3; got \(4,\)"):
        sm.Quasiseparable(O.causal(3), O.causal(3).T, torch.ones(4))
    with pytest.raises(ValueError, match=r"batch shapes .*broadcast.*lower \(2, 3, 3\), upper \(3, 3, 3\), diag \(3,\)"):
        sm.Quasiseparable(O(torch.zeros(2, 3)), O(torch.zeros(3, 3)).T, torch.ones(3))
    with pytest.raises(ValueError, match=r"diag \(4, 3\)"):
        sm.Quasiseparable(O(torch.zeros(2, 3)), O(torch.zeros(2, 3)).T, torch.ones(4, 3))
    with pytest.raises(TypeError, match="lower must be a lower SSS or OneSS; got Tensor"):
        sm.Quasiseparable(torch.ones(3, 3), O.causal(3).T, torch.ones(3))
    with pytest.raises(ValueError, match=r"backward must have shape \(\*, 3, 3\) like forward; got \(4, 4\)"):
        sm.Quasiseparable.bidirectional(O.causal(3), O.causal(4))
    with pytest.raises(TypeError, match="backward must be a lower SSS or OneSS; got Tensor"):
        sm.Quasiseparable.bidirectional(O.causal(3), torch.ones(3, 3))
    with pytest.raises(ValueError, match=r"a must have shape \(\*, T\); got a scalar"):
        sm.Quasiseparable.lion(torch.tensor(0.5))
    with pytest.raises(ValueError, match=r"b must have shape \(\*, T\) like a \(3,\); got \(2, 3\)"):
        sm.Quasiseparable.lion(torch.rand(3), b=torch.ones(2, 3))
    with pytest.raises(ValueError, match="T must be a non-negative integer"):
        sm.Quasiseparable.lion_decay(0.5, -1)
    Q = sm.Quasiseparable.lion(torch.rand(3))
    with pytest.raises(ValueError, match=r"Y has shape \(4,\); expected \(3,\)"):
        Q.solve(torch.ones(4))
    with pytest.raises(ValueError, match=r"Y has shape \(2, 4, 1\); expected \(\*, 3, K\)"):
        Q.solve(torch.ones(2, 4, 1))
    with pytest.raises(ValueError, match=r"batch shapes do not broadcast: matrix \(2,\), Y \(3,\)"):
        sm.Quasiseparable.lion(torch.rand(2, 3)).solve(torch.ones(3, 3, 1))


@pytest.mark.parametrize("what", ["matvec", "to_dense", "quadratic", "linear", "chunked"])
def test_lion_decay_gradient_at_an_exact_zero(what):
    """``d/da_t`` at ``a_t = 0`` of a LION mask: the generic halves hold log decays, whose gradient there is 0; the
    mask keeps its 1-SS halves (with the decays) for the matvec, the dense form and sma."""
    T, B, H = 7, 2, 3
    a = randn(H, T, seed=1).abs().clamp(max=0.9)
    a[0, 3], a[1, 2], a[1, 6] = 0.0, 0.0, 0.0
    b, c = randn(H, T, seed=2), randn(H, T, seed=3)
    q, k, v = (randn(B, T, H, 2, seed=s) for s in (4, 5, 6))
    X = randn(H, T, 2, seed=7)

    def dense(a):  # entry by entry: polynomials in a, exact derivatives at 0
        L = torch.stack([torch.stack([a[:, i + 1:j + 1].prod(-1) if j >= i else a.new_zeros(H) for i in range(T)], -1)
                         for j in range(T)], -2)
        return c[..., None] * (L + L.transpose(-1, -2) - torch.eye(T, dtype=F64)) * b[..., None, :]

    def run(M, exact):
        if what in ("matvec", "to_dense"):
            L = dense(M) if exact else (M.to_dense() if what == "to_dense" else None)
            return L @ X if L is not None else M @ X
        if exact:
            return torch.einsum("hts,bthn,bshn,bshp->bthp", dense(M), q, k, v)
        return sm.sma(q, k, v, M, order=what, chunk=3)

    a1, a2 = a.clone().requires_grad_(), a.clone().requires_grad_()
    got, want = run(sm.Quasiseparable.lion(a1, b=b, c=c), False), run(a2, True)
    close(got, want)
    w = randn(*got.shape, seed=8)
    expected = torch.autograd.grad((want * w).sum(), a2)[0]
    close(torch.autograd.grad((got * w).sum(), a1)[0], expected)
    assert expected[1, 6] != 0 and expected[0, 3] != 0
