"""``semiseparable_rank`` from parameters against the dense definition, and the theorems it checks."""

import numpy as np
import pytest
import torch
from conftest import F64, rand, randn
from hypothesis import given
from hypothesis import strategies as st

import structmat as sm
import structmat.testing as smt
from structmat.algebra.rank import DENSE_RANK_MAX


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
    S = M + sm.Dense(torch.ones(20, 20, dtype=F64))  # a lazy Sum: its dense form below DENSE_RANK_MAX
    assert sm.semiseparable_rank(S) == sm.semiseparable_rank(S.to_dense())
    with pytest.raises(TypeError, match="no structured path for Toeplitz"):
        sm.semiseparable_rank(sm.Toeplitz(torch.ones(DENSE_RANK_MAX + 1, dtype=F64)))
    with pytest.raises(ValueError, match=r"M must have shape \(\*, T, T\)"):
        sm.semiseparable_rank(torch.ones(3, 4))
    for rectangular in (sm.LowRank(randn(6, 2), randn(4, 2, seed=1)), sm.Toeplitz(randn(6), randn(4, seed=1))):
        with pytest.raises(ValueError, match=r"M must have shape \(\*, T, T\); got \(6, 4\)"):
            sm.semiseparable_rank(rectangular)  # (LowRank failed inside tril, Toeplitz returned a number)


def test_cancellation_scale_and_quasiseparable_paths():
    M = sm.SSS(rand(20, 3), randn(20, 3), randn(20, 3, seed=1), D=3 + rand(20, seed=2))
    r = sm.semiseparable_rank
    identity = M.inv() @ M  # an SSS of order 6 whose strictly lower part cancels exactly
    assert (r(identity), r(identity, strict=True)) == (1, 0)
    assert (r(M - M), r(M - M, strict=True)) == (0, 0)
    assert r(M * 1e-170) == r(M * 1e160) == r(M) == r(M.to_dense()) == 4
    assert r(identity.to_dense(), strict=True) == 0  # dense blocks of noise count against the matrix's norm
    Q = sm.Quasiseparable.bidirectional(M, sm.OneSS.from_decays(rand(20, seed=3)))
    assert r(Q) == r(Q.to_dense()) and r(Q.T) == r(Q.to_dense().T)
    T = sm.Toeplitz(randn(12, seed=4))
    assert r(T, strict=True) == r(T.to_dense(), strict=True)


def test_vanishing_generators_beside_a_diagonal():
    """D40: ``B`` or ``C`` all zero beside a non-zero diagonal (a ``Bidiagonal`` of length 1 or with a zero
    subdiagonal, an SSS with ``C = 0``): the normalisation divided the diagonal by 1e-300, then svd met inf."""
    r = sm.semiseparable_rank
    for M in (sm.Bidiagonal(torch.tensor([2.44], dtype=F64), torch.ones(0, dtype=F64)),
              sm.Bidiagonal(1 + rand(5), torch.zeros(4, dtype=F64)),
              sm.SSS(rand(6), randn(6, 2), torch.zeros(6, 2, dtype=F64), D=1 + rand(6, seed=1)),
              sm.SSS(rand(6), 1e-200 * randn(6, 2), 1e-200 * randn(6, 2, seed=2), D=1 + rand(6, seed=1))):
        assert (r(M), r(M, strict=True)) == (r(M.to_dense()), r(M.to_dense(), strict=True)) == (1, 0)


def test_structured_matrices_with_an_empty_batch():
    """D39 fixed the dense path; the structured paths still crashed (``max()`` of an empty tensor): 0 now."""
    T = 4
    for M in (sm.OneSS.from_decays(rand(0, T)), sm.SSS(rand(0, T, 2, 2), randn(0, T, 2), randn(0, T, 2)),
              sm.Bidiagonal(1 + rand(0, T), rand(0, T - 1)), sm.LowRank(randn(0, T, 2), randn(0, T, 2)),
              sm.Quasiseparable.lion(rand(0, T))):
        assert sm.semiseparable_rank(M) == sm.semiseparable_rank(M, strict=True) == sm.semiseparable_rank(M.to_dense()) == 0


def test_dense_rank_at_the_data_precision():
    """A float32 matrix's blocks are counted at float32's precision (at float64's, its rounding counted as rank:
    a float32 1-SS decay had dense rank 8, a causal Toeplitz of the same decay 8), as numpy's ``matrix_rank`` does."""
    O = sm.OneSS.decay(0.9, 16).to(torch.float32)
    assert sm.semiseparable_rank(O) == sm.semiseparable_rank(O.to_dense()) == 1
    assert sm.semiseparable_rank(sm.Toeplitz.causal(0.9 ** torch.arange(16, dtype=torch.float32))) == 1
    dense = O.to_dense().numpy()
    assert max(np.linalg.matrix_rank(dense[k:, : k + 1]) for k in range(16)) == 1


def _block_ranks(M: torch.Tensor, cut: float, strict: bool) -> int:
    """The definition: an SVD of every block, ``O(T^4)`` (the sweep in ``_dense_rank`` replaced it)."""
    T = M.shape[-1]
    return max([0] + [int((torch.linalg.svdvals(M[..., k + strict :, : k + 1]) > cut).sum(-1).max())
                      for k in range(T - strict)])


@pytest.mark.parametrize("strict", [False, True])
def test_dense_rank_sweep_equals_the_svd_of_every_block(strict):
    """The sweep over a square root of ``B_k B_k^H`` gives the ranks an SVD of every block gives: structured matrices
    of a few states (real, complex, batched), random dense ones (ranks up to T / 2), sums that cancel, and a general
    Toeplitz (the sweep takes 0.8 s at T = 1000 for rank 2, where the blocks' SVDs took about 40 s whatever the rank)."""
    from structmat.algebra.rank import _dense_rank

    cases = [sm.SSS(rand(40, 3, seed=1), randn(40, 3, seed=2), randn(40, 3, seed=3)).to_dense(),
             sm.Quasiseparable.lion(rand(2, 30, seed=4)).to_dense(),
             (sm.SSS(rand(30, 2, seed=5), randn(30, 2, seed=6), randn(30, 2, seed=7)).to(torch.complex128)
              * (1 + 1j)).to_dense(),
             randn(25, 25, seed=8), randn(24, 24, seed=9) @ randn(24, 24, seed=10).tril(),
             sm.Toeplitz(randn(33, seed=11), randn(33, seed=12)).to_dense()]
    M = sm.OneSS.from_decays(rand(30, seed=13))
    cases.append((M + M - 2 * M).to_dense())
    for D in cases:
        norm = torch.linalg.matrix_norm(D, ord=2).max()
        for tol in (None, 1e-6):
            cut = (D.shape[-1] * torch.finfo(D.dtype).eps if tol is None else tol) * norm
            assert _dense_rank(D, tol, strict) == _block_ranks(D, cut, strict)
    big = sm.SSS(rand(512, 2, seed=14), randn(512, 2, seed=15), randn(512, 2, seed=16)).to_dense()
    assert _dense_rank(big, None, strict) == 2
