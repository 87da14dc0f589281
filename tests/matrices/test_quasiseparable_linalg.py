"""Quasiseparable inverse: float32 accuracy against dense float64, orders, gradients."""

import pytest
import torch
from conftest import F64, close

import structmat as sm


def conditioned(T=100, n=5, seed=0, shift=2.0, batch=()):
    """A random order-(n, n) quasiseparable matrix: dense transitions of spectral norm 0.9 on both sides,
    Gaussian maps, diagonal ``shift + N(0, 1)`` (no diagonal dominance: some pivots are small)."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*batch, *s, generator=g, dtype=F64)  # noqa: E731

    def part():
        A = r(T, n, n)
        return sm.SSS(0.9 * A / torch.linalg.matrix_norm(A, ord=2)[..., None, None], r(T, n), r(T, n))

    return sm.Quasiseparable.bidirectional(part(), part(), diag=shift + r(T))


def residual(M, X, Y):
    """``max |M X - Y| / max |Y|`` in float64."""
    return ((M @ X.to(F64) - Y).abs().max() / Y.abs().max()).item()


# seeds and shifts whose matrices have condition numbers near 1e3 (asserted below)
CONDITIONED = [(0, 2.0), (2, 2.0), (3, 1.0)]


def _conditioned_pair(seed, shift):
    Q = conditioned(seed=seed, shift=shift)
    dense = Q.to_dense()
    cond = torch.linalg.cond(dense).item()
    assert 3e2 < cond < 3e3, cond
    return Q.to(torch.float32), dense


@pytest.mark.parametrize("seed,shift", CONDITIONED)
def test_float32_inverse_reaches_the_stable_recursions_accuracy(seed, shift):
    """The inverse's entries within 5e-4 of the largest (tinygp's recursion reaches 5.3e-5 on such matrices;
    forming U^{-1} L^{-1} lost 5e-3)."""
    Q32, dense = _conditioned_pair(seed, shift)
    inv = Q32.inv()
    assert isinstance(inv, sm.Quasiseparable) and inv.dtype == torch.float32
    assert inv.order in {(5, 5), (5, 6), (6, 5), (6, 6)}
    close(inv.to_dense().to(F64), torch.linalg.inv(dense), rtol=5e-4)
    y = torch.randn(100, 3, generator=torch.Generator().manual_seed(seed), dtype=F64)
    assert residual(dense, inv @ y.to(torch.float32), y) < 5e-3


def test_inverse_orders_and_fallback_realization():
    """LION's decay mask gamma^|i-j| has a tridiagonal inverse: one more order per side (deviations, item 1)."""
    T = 12
    M = sm.Quasiseparable.bidirectional(sm.OneSS.decay(torch.tensor(0.6, dtype=F64), T),
                                        sm.OneSS.decay(torch.tensor(0.6, dtype=F64), T))
    inv = M.inv()
    assert inv.order == (2, 2)
    close(inv.to_dense(), torch.linalg.inv(M.to_dense()), rtol=1e-10)
    Q = conditioned(T=30, n=2, seed=4, shift=6.0)
    assert Q.inv().order == (2, 2)
    close(Q.inv().to_dense(), torch.linalg.inv(Q.to_dense()), rtol=1e-10)


def test_inverse_gradcheck():
    T = 9
    g = torch.Generator().manual_seed(3)
    a = torch.rand(T, 2, generator=g, dtype=F64, requires_grad=True)
    B = torch.randn(T, 2, generator=g, dtype=F64, requires_grad=True)
    d = (4 + torch.rand(T, generator=g, dtype=F64)).requires_grad_()
    y = torch.randn(T, 2, generator=g, dtype=F64, requires_grad=True)
    bwd = sm.OneSS.from_decays(torch.rand(T, generator=g, dtype=F64))
    inv = lambda a, B, d, y: sm.Quasiseparable.bidirectional(sm.SSS(a, B, B.flip(0)), bwd, diag=d).inv() @ y  # noqa: E731
    assert torch.autograd.gradcheck(inv, (a, B, d, y))
