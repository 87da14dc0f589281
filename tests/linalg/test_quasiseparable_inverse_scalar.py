"""The order-1 scans of the host inverse (structmat.linalg.quasiseparable_inverse_scalar) against the row recursion they
replace (the blocked LU and backward states of quasiseparable_inverse_host) and against dense float64 inverses:
lengths up to the scans' limit, decays 0, 1 and 1e-30, complex maps, batches, zero minors named as the recursion
names them."""

import pytest
import torch
from conftest import C128, F64, close
from hypothesis import given
from hypothesis import strategies as st

import structmat as sm
import structmat.linalg.quasiseparable_inverse_host as qs_host
from structmat.core.host import host
from structmat.linalg.quasiseparable_inverse_scalar import SCALAR_SCAN_MAX, scalar_backward_states, scalar_lu
from structmat.linalg.quasiseparable_lu import dense_parts


def _lion(T, batch, dtype, seed, special=None):
    """A bidirectional matrix of 1-SS sides with maps and a diagonal that keeps it well conditioned; ``special``
    sets every third decay of the lower side to that value."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.rand(*batch, *s, generator=g, dtype=F64)  # noqa: E731
    a_lower, a_upper = 0.2 + 0.75 * r(T), 0.2 + 0.75 * r(T)
    if special is not None:
        a_lower[..., ::3] = special
    maps = (r(T) - 0.5, r(T) - 0.5, r(T) - 0.5, r(T) - 0.5)
    if dtype.is_complex:
        maps = tuple(m * (1 + 0.7j) for m in maps)
    lower = sm.OneSS.from_decays(a_lower, b=maps[0], c=maps[1])
    upper = sm.OneSS.from_decays(a_upper, b=maps[2], c=maps[3])
    return sm.Quasiseparable.bidirectional(lower, upper, 3 + r(T)).to(dtype)


def _parts(M):
    P = dense_parts(M.lower_part.generators, M.upper_part.generators, M.diag, M.batch_shape)
    return {k: host(getattr(P, k)) for k in ("A", "B", "C", "Au", "Bu", "Cu", "d")}


@given(T=st.integers(1, SCALAR_SCAN_MAX), batch=st.sampled_from([(), (3,), (2, 1)]), complex_=st.booleans(),
       special=st.sampled_from([None, 0.0, 1.0, 1e-30]), seed=st.integers(0, 10_000))
def test_scans_equal_the_row_recursion(T, batch, complex_, special, seed):
    """``s, g, delta`` and the backward states ``Z`` of the scans equal the blocked recursion's to rounding."""
    M = _lion(T, batch, C128 if complex_ else F64, seed, special)
    p = _parts(M)
    s, g, delta = scalar_lu(p)
    s_rows, g_rows, delta_rows = qs_host._lu(p, qs_host.HOST_BLOCK)
    for got, want in ((s, s_rows), (g, g_rows), (delta, delta_rows)):
        assert got.shape == want.shape and got.dtype == want.dtype
        close(got, want, rtol=1e-11)
    v = g_rows / delta_rows[..., None]
    Z, Z_rows = scalar_backward_states(p, s_rows, v, delta_rows), qs_host._backward_states(p, s_rows, v, delta_rows, 16)
    assert Z.shape == Z_rows.shape
    close(Z, Z_rows, rtol=1e-11, atol=1e-14)


@pytest.mark.parametrize("T", [1, 2, 5, 16, 17, SCALAR_SCAN_MAX])
@pytest.mark.parametrize("dtype,rtol", [(torch.float32, 2e-5), (F64, 1e-11), (C128, 1e-11)])
def test_inverse_through_the_scans_matches_dense(T, dtype, rtol):
    M = _lion(T, (2,), dtype, T)
    with torch.no_grad():  # (the numpy path)
        X = M.inv()
    assert X.dtype == dtype and X.order == (1, 1)
    want = torch.linalg.inv(M.to_dense().to(C128 if dtype.is_complex else F64))
    close(X.to_dense().to(want.dtype), want, rtol=rtol)


def test_longer_sequences_keep_the_row_recursion(monkeypatch):
    """Past :data:`SCALAR_SCAN_MAX` steps the blocked recursion runs (the scans' products would span the sequence)."""
    calls = []
    monkeypatch.setattr(qs_host, "scalar_lu", lambda p: calls.append(p) or scalar_lu(p))
    for T in (SCALAR_SCAN_MAX, SCALAR_SCAN_MAX + 1):
        M = _lion(T, (), F64, 1)
        with torch.no_grad():
            close(M.inv().to_dense(), torch.linalg.inv(M.to_dense()), rtol=1e-11)
    assert len(calls) == 1 and calls[0]["d"].shape[-1] == SCALAR_SCAN_MAX


@pytest.mark.parametrize("k", [0, 1, 5, 20])
def test_zero_minor_is_named(k):
    """``a_k = 0`` cuts row and column ``k`` off from the rows before, so ``d_k = 0`` makes minor ``k + 1`` exactly 0."""
    T = 24
    a = torch.full((T,), 0.5, dtype=F64)
    a[k] = 0.0
    d = torch.full((T,), 2.0, dtype=F64)
    d[k] = 0.0
    lower = sm.OneSS.from_decays(a)
    with torch.no_grad(), pytest.raises(sm.SingularMatrixError, match=f"leading principal minor {k + 1} is zero"):
        sm.Quasiseparable(lower, lower.T, d).inv()


@pytest.mark.parametrize("size", [1e-3, 1e-6, 1e-9, 1e-12])
def test_nearly_singular_leading_minor(monkeypatch, size):
    """A leading minor of relative ``size`` (``d_5`` moved to ``size`` times its Schur complement): the inverse is as
    accurate as the row recursion makes it (within 10x). At 1e-9 the pivot cancels and the row recursion runs: the
    scans alone gave 4e-8 there, the recursion 8e-12."""
    T = 12
    M = _lion(T, (), F64, 3)
    lead = M.to_dense()[:6, :6]
    schur = lead[5, 5] - lead[5, :5] @ torch.linalg.solve(lead[:5, :5], lead[:5, 5])
    diag = M.diag.clone()
    diag[5] -= schur * (1 - size)
    N = sm.Quasiseparable(M.lower_part, M.upper_part, diag)
    want = torch.linalg.inv(N.to_dense())
    errors = []
    for limit in (SCALAR_SCAN_MAX, 0):  # the scans (where they stand), then the row recursion alone
        monkeypatch.setattr(qs_host, "SCALAR_SCAN_MAX", limit)
        with torch.no_grad():
            got = N.inv().to_dense()
        errors.append(float((got - want).abs().max() / want.abs().max()))
    assert errors[0] <= 10 * errors[1] + 1e-15, errors
