"""Numerics (DESIGN section 5), gradients, errors and input immutability."""

import numpy as np
import pytest
import torch
from conftest import LONG, sequential_one_ss

import structmat as sm
from structmat.linalg.scan import decay_scan

F64 = torch.float64


def rel_err(got, want):
    got, want = torch.as_tensor(got, dtype=F64), torch.as_tensor(want, dtype=F64)
    return ((got - want).norm() / want.norm()).item()


# --- stability -------------------------------------------------------------------------------


def test_zero_decay_gives_exact_zeros_and_finite_gradients():
    a = torch.tensor([0.9, 0.0, 0.8, 0.7, 0.0, 0.5], dtype=F64, requires_grad=True)
    M = sm.OneSS.from_decays(a)
    dense = M.to_dense()
    assert (dense[1:, :1] == 0).all() and (dense[4:, :4] == 0).all()
    x = torch.randn(6, 2, dtype=F64, requires_grad=True)
    y = M @ x
    assert torch.allclose(y[1:4], dense[1:4, 1:4] @ x[1:4], rtol=1e-14)
    y.sum().backward()
    assert torch.isfinite(a.grad).all() and torch.isfinite(x.grad).all()
    log_a = torch.tensor([0.0, -0.1, float("-inf"), -0.2], dtype=F64, requires_grad=True)
    (sm.OneSS(log_a) @ torch.ones(4, dtype=F64)).sum().backward()
    assert torch.isfinite(log_a.grad).all()


def _dense_decay_mask(a):
    """``prod_{k=i+1..j} a_k`` entry by entry, ``a (*, T)``: polynomials in ``a``, whose derivative autograd gets
    exactly at 0 (no logarithm)."""
    T = a.shape[-1]
    entry = lambda j, i: a[..., i + 1:j + 1].prod(-1) if j >= i else a.new_zeros(a.shape[:-1])  # noqa: E731
    return torch.stack([torch.stack([entry(j, i) for i in range(T)], -1) for j in range(T)], -2)


@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("order", ["matvec", "to_dense", "solve", "inv", "quadratic", "linear", "chunked"])
def test_decay_gradient_at_an_exact_zero(order, upper):
    """``d/da_t`` at ``a_t = 0`` is finite and non-zero (the entries are polynomials in ``a``). The SMA orders form
    products of decays in log space, where it was 0: several zeros per head (first and last steps included),
    per-head decays, scalings with a larger batch than the decays, grouped keys."""
    g = torch.Generator().manual_seed(0)
    B, T, H = 2, 9, 3
    q, k, v = (torch.randn(B, T, h, d, generator=g, dtype=F64) for h, d in ((H, 2), (1, 2), (H, 3)))
    a = torch.rand(H, T, generator=g, dtype=F64)
    a[0, [2, 5]], a[1, [1, 8]], a[2, 4] = 0.0, 0.0, 0.0
    c = torch.randn(H, T, generator=g, dtype=F64)
    leaves = [t.clone().requires_grad_() for t in (a, q, k, v, c)]

    def run(exact, a, q, k, v, c):
        M = sm.OneSS.from_decays(a, c=c)
        M = M.T if upper else M
        dense = c[:, :, None] * _dense_decay_mask(a)
        dense = dense.transpose(-1, -2) if upper else dense
        X = v[0].transpose(0, 1)
        if order in ("solve", "inv"):  # the inverse is bidiagonal: its subdiagonal is linear in a
            return torch.linalg.solve(dense, X) if exact else M.solve(X) if order == "solve" else M.inv() @ X
        if order in ("matvec", "to_dense"):
            return dense @ X if exact else M @ X if order == "matvec" else M.to_dense() @ X
        if not exact:
            return sm.sma(q, k, v, M, order=order, chunk=4)
        L = dense * torch.einsum("bthn,bsn->bhts", q, k[:, :, 0])
        return torch.einsum("bhts,bshp->bthp", L, v)

    w = torch.randn(run(True, *leaves).shape, generator=g, dtype=F64)
    got = torch.autograd.grad((run(False, *leaves) * w).sum(), leaves, allow_unused=True)
    want = torch.autograd.grad((run(True, *leaves) * w).sum(), leaves, allow_unused=True)
    assert want[0][0, 2] != 0 and want[0][1, 8] != 0
    for x, y in zip(got, want):
        if y is not None:
            torch.testing.assert_close(x, y)


def test_tiny_decays_underflow_to_zero_without_nan():
    a = torch.full((500,), 1e-30, dtype=F64)
    y = sm.OneSS.from_decays(a) @ torch.ones(500, dtype=F64)
    assert torch.isfinite(y).all()
    assert rel_err(y, torch.ones(500, dtype=F64) + torch.cat([torch.zeros(1, dtype=F64), torch.full((499,), 1e-30, dtype=F64)])) < 1e-12


def _blocked(log_a, x):
    """The blocked torch scan (the path off the CPU), bypassing the compiled CPU solvers."""
    log_a = torch.cat([torch.zeros_like(log_a[:1]), log_a[1:]])
    return decay_scan(log_a, x[:, None])[:, 0]


# the IIR filter (constant decay), the banded LAPACK solve (varying decay), the blocked scan
@pytest.mark.parametrize("path", ["iir", "banded", "blocked"])
@pytest.mark.parametrize("decay", [1e-3, 1 - 1e-7])
def test_million_steps_float32_matches_float64(decay, path):
    T = 10**6
    g = torch.Generator().manual_seed(1)
    log_a = torch.full((T,), float(np.log(decay)), dtype=F64)
    if path != "iir":
        log_a = log_a * (1 + 0.5 * torch.rand(T, generator=g, dtype=F64))
    x = torch.randn(T, generator=g, dtype=F64)
    matvec = _blocked if path == "blocked" else lambda la, x: sm.OneSS(la) @ x
    y64 = matvec(log_a, x)
    y32 = matvec(log_a.float(), x.float())
    assert torch.isfinite(y32).all()
    assert rel_err(y32, y64) < 1e-4
    a = np.exp(log_a.numpy()[:2000])
    want = sequential_one_ss(a, np.ones(2000), np.ones(2000), x.numpy()[:2000])
    assert rel_err(y64[:2000], want) < 1e-12


# --- gradients -------------------------------------------------------------------------------


def _params(*shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g, dtype=F64, requires_grad=True) for s in shapes]


def test_gradcheck_one_ss_matvec():
    T = 70  # above the blocked-scan threshold
    log_a, b, c, x = _params((T,), (T,), (T,), (T, 2))
    f = lambda la, b, c, x: sm.OneSS(-la.abs(), b=b, c=c) @ x  # noqa: E731
    assert torch.autograd.gradcheck(f, (log_a, b, c, x))


@pytest.mark.parametrize("kind", ["scalar", "diag", "dense"])
def test_gradcheck_sss_matvec_and_transpose(kind):
    T, N = 67, 2
    shape = {"scalar": (T,), "diag": (T, N), "dense": (T, N, N)}[kind]
    A, B, C, D, x = _params(shape, (T, N), (T, N), (T,), (T, 2), seed=1)
    f = lambda A, B, C, D, x: sm.SSS(0.5 * A, B, C, D) @ x + sm.SSS(0.5 * A, B, C).T @ x  # noqa: E731
    assert torch.autograd.gradcheck(f, (A, B, C, D, x))


def test_gradcheck_closure_results_and_solve():
    T = 20
    A1, B1, C1, A2, B2, C2, y = _params((T,), (T, 2), (T, 2), (T, 1), (T, 1), (T, 1), (T, 2), seed=2)

    def f(A1, B1, C1, A2, B2, C2, y):
        M1 = sm.SSS(0.5 * A1, B1, C1, D=3 + C1[:, 0] ** 2)
        M2 = sm.SSS(0.5 * A2, B2, C2, D=3 + B2[:, 0] ** 2)
        return (M1 @ M2) @ y + (M1 + M2) @ y + M1.solve(y) + (M1 @ M2).inv() @ y

    assert torch.autograd.gradcheck(f, (A1, B1, C1, A2, B2, C2, y))


@pytest.mark.parametrize("T", [200_000] + ([10**6] if LONG else []))
def test_chunked_sma_float32_over_long_sequences_matches_float64(T):
    """The chunked order multiplies T / L chunk decays: without a bias (float64 products), float32 stays
    within 1e-5 of float64 where a float32 product drifted to 1e-4 at T = 1e6."""
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, T, 1, 2, generator=g, dtype=F64) for _ in range(3))
    log_a = torch.full((T,), float(np.log1p(-1e-7)), dtype=F64)
    ref = sm.sma(q, k, v, sm.OneSS(log_a), order="linear")
    y = sm.sma(q.float(), k.float(), v.float(), sm.OneSS(log_a.float()), order="chunked")
    assert rel_err(y, ref) < 1e-5
