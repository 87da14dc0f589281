"""``semiseparable_rank`` from parameters against the dense definition, and the theorems it checks."""

import numpy as np
import pytest
import torch
from conftest import F64, randn
from hypothesis import given
from hypothesis import strategies as st

import structmat as sm
import structmat.testing as smt


@given(st.one_of(smt.sss(batch=(), T=25), smt.one_ss(batch=(), T=25), smt.bidiagonals(batch=(), T=25)), st.booleans())
def test_structured_rank_matches_dense(M, strict):
    assert sm.semiseparable_rank(M, strict=strict) == sm.semiseparable_rank(M.to_dense(), strict=strict)


@given(st.integers(2, 40).flatmap(lambda T: st.tuples(smt.sss(T=T, batch=(), lower=True), smt.sss(T=T, batch=(), lower=True))))
def test_sum_product_and_inverse_bounds(pair):
    """Mamba-2 Prop. C.1: sums and products add orders; an N-SS inverse is N-SS strictly, N+1 inclusive."""
    M1, M2 = pair
    r = sm.semiseparable_rank
    n1, n2 = M1.order, M2.order
    assert r((M1 + M2).to_dense(), strict=True) <= n1 + n2
    assert r((M1 @ M2).to_dense(), strict=True) <= n1 + n2
    inv = np.linalg.inv(M1.to_dense().numpy())
    assert r(inv, strict=True) <= n1
    assert r(inv) <= n1 + 1


def test_banded_inverse_theorem():
    """Mamba-2 Thm. C.3: the inverse of a (k+1)-banded lower-triangular matrix is (k+1)-SS (k strictly)."""
    T, k = 30, 2
    band = torch.tril(torch.triu(randn(T, T), -k)) + 4 * torch.eye(T, dtype=F64)
    inv = torch.linalg.inv(band)
    assert sm.semiseparable_rank(inv) <= k + 1
    assert sm.semiseparable_rank(inv, strict=True) == k


def test_structured_paths_and_errors():
    M = sm.OneSS.from_decays(torch.rand(20, dtype=F64))
    assert (sm.semiseparable_rank(M), sm.semiseparable_rank(M.inv()), sm.semiseparable_rank(M.inv(), strict=True)) == (1, 2, 1)
    assert sm.semiseparable_rank(sm.Diagonal(torch.ones(4)), strict=True) == 0
    assert sm.semiseparable_rank(sm.LowRank(randn(6, 2), randn(6, 2, seed=1))) == 2
    with pytest.raises(TypeError, match="no structured path"):
        sm.semiseparable_rank(M + sm.Dense(torch.ones(20, 20, dtype=F64)))
    with pytest.raises(ValueError, match=r"M must have shape \(\*, T, T\)"):
        sm.semiseparable_rank(torch.ones(3, 4))
