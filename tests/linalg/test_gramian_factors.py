"""Square-root Gramians by the blocked scan (structmat.linalg.gramian_factors) against the step-by-step Gram
recurrences, and what rests on them: ``SSS.compress`` (equal to the original, minimal order) and
``semiseparable_rank`` (numpy's rank of the Hankel blocks), at lengths straddling the chunks and their recursion."""

import numpy as np
import pytest
import torch
from conftest import C128, F64, close, randn
from hypothesis import given
from hypothesis import strategies as st

import structmat as sm
from structmat.linalg.gramian_factors import observability_factors, reachability_factors


def _gram_recurrences(A, B, C):
    """``P_t = A_t P_{t-1} A_t^H + B_t B_t^H`` forwards and ``O_t = conj(C_t) C_t^T + A_{t+1}^H O_{t+1} A_{t+1}``
    backwards, one step at a time."""
    T = A.shape[-3]
    P = torch.zeros_like(A[..., 0, :, :])
    reach = []
    for t in range(T):
        P = (A[..., t, :, :] @ P @ A[..., t, :, :].mH if t else 0) + B[..., t, :, :] @ B[..., t, :, :].mH
        reach.append(P)
    O, obs = torch.zeros_like(P), [None] * T
    for t in reversed(range(T)):
        O = C[..., t, :, :].conj() @ C[..., t, :, :].mT + (A[..., t + 1, :, :].mH @ O @ A[..., t + 1, :, :] if t + 1 < T else 0)
        obs[t] = O
    return torch.stack(reach, -3), torch.stack(obs, -3)


@given(st.sampled_from([1, 2, 3, 4, 5, 15, 16, 17, 64, 65]), st.sampled_from([2, 4, 32]), st.sampled_from([1, 3]),
       st.sampled_from([F64, C128]), st.sampled_from([(), (2,)]))
def test_factors_square_to_the_gram_recurrences(T, chunk, K, dtype, batch):
    N = 3
    A = randn(*batch, T, N, N, seed=T, dtype=dtype) / 2
    B, C = randn(*batch, T, N, K, seed=T + 1, dtype=dtype), randn(*batch, T, N, K, seed=T + 2, dtype=dtype)
    A[..., 0, :, :] = 1e300  # step 0's transition is unused: no overflow from it
    reach, obs = _gram_recurrences(A, B, C)
    S, F = reachability_factors(A, B, chunk), observability_factors(A, C, chunk)
    assert S.shape == F.shape == (*batch, T, N, N)
    close(S @ S.mH, reach, rtol=1e-12)
    close(F @ F.mH, obs, rtol=1e-12)


def test_empty_and_scaled_factors_keep_small_weights():
    """T = 0 gives no factors; a direction weighted 1e-12 of the largest keeps its weight (the Gramian's square
    would lose it in rounding)."""
    assert reachability_factors(torch.zeros(0, 2, 2, dtype=F64), torch.zeros(0, 2, 1, dtype=F64)).shape == (0, 2, 2)
    T = 70
    A = torch.eye(2, dtype=F64).expand(T, 2, 2) * 0.9
    B = torch.zeros(T, 2, 2, dtype=F64)  # two inputs: one in each state
    B[:, 0, 0], B[5, 1, 1] = 1.0, 1e-12
    s = torch.linalg.svdvals(reachability_factors(A, B, chunk=8))
    want = (1e-12 * 0.9 ** torch.arange(-5.0, T - 5, dtype=F64)).clamp_min(0)
    close(s[6:, 1] / want[6:], torch.ones(T - 6, dtype=F64), rtol=1e-6)


def _hankel_rank(M: np.ndarray, strict: bool) -> int:
    """The largest numpy rank of the Hankel blocks ``M[k+1:, :k+1]`` (strict) or ``M[k:, :k+1]``."""
    T = M.shape[-1]
    return max((np.linalg.matrix_rank(M[k + strict:, : k + 1]) for k in range(T - strict)), default=0)


def _sum_of_factors(T, kind, seed, dtype=F64):
    """``M1 + M2 + M1`` of two SSS: order 6 by construction, 4 at most once compressed."""
    n = lambda *s, k: randn(*s, seed=seed + k, dtype=dtype)  # noqa: E731
    A = {"diag": lambda k: 0.5 + 0.4 * n(T, 2, k=k).real.tanh(), "dense": lambda k: n(T, 2, 2, k=k) / 3}[kind]
    M1 = sm.SSS(A(0), n(T, 2, k=1), n(T, 2, k=2))
    M2 = sm.SSS(A(3), n(T, 2, k=4), n(T, 2, k=5), D=2 + n(T, k=6))
    return M1 + M2 + M1


@pytest.mark.parametrize("T", [1, 2, 31, 33, 100, 1030])
@pytest.mark.parametrize("kind", ["diag", "dense"])
def test_compress_is_exact_and_minimal_across_chunks(T, kind):
    M = _sum_of_factors(T, kind, seed=T)
    R = M.compress()
    dense = M.to_dense()
    assert type(R) is sm.SSS and M.order == 6
    close(R.to_dense(), dense, rtol=1e-10)
    if T <= 100:  # the strict blocks' largest rank (0 at T = 1: the sum's explicit diagonal needs no state)
        assert M.D is not None and R.order == _hankel_rank(dense.numpy(), strict=True)
    else:
        assert R.order == 4


@pytest.mark.parametrize("T", [40, 130])
def test_compress_complex_and_batched(T):
    M = sm.SSS(0.9 * randn(2, T, 3, 3, seed=1, dtype=C128) / 3, randn(2, T, 3, seed=2, dtype=C128),
               randn(2, T, 3, seed=3, dtype=C128))
    R = (M + M).compress()
    assert R.order == 3 and R.batch_shape == (2,)
    close(R.to_dense(), 2 * M.to_dense(), rtol=1e-10)


@pytest.mark.parametrize("T", [2, 33, 90])
@pytest.mark.parametrize("strict", [False, True])
def test_rank_equals_numpy_rank_of_the_hankel_blocks(T, strict):
    M = _sum_of_factors(T, "dense", seed=7 * T)
    assert sm.semiseparable_rank(M, strict=strict) == _hankel_rank(M.to_dense().numpy(), strict)
