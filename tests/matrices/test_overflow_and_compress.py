"""Solutions that overflow, sums of parts of other batch ranks, minimal compressions, lazy inverses of singular
matrices and nearly zero leading minors of the unpivoted quasiseparable LU (defects D96-D101, found by the session-21 audit of
the closure algebra).

References: dense float64 forms, the strict ranks of the dense matrices (``semiseparable_rank``)."""

import numpy as np
import pytest
import torch
from conftest import C128, F64, close, rand, randn

import structmat as sm


def _sss_with_a_subnormal_pivot(T: int, kind: str, dtype=F64) -> sm.SSS:
    A = {"diag": 0.5 + 0.4 * rand(T, 3, seed=1), "scalar": 0.5 + 0.4 * rand(T, seed=1),
         "dense": randn(T, 3, 3, seed=1) / 4}[kind]
    D = 1 + rand(T, seed=2)
    D[T // 2] = 1e-310
    return sm.SSS(A.to(dtype), randn(T, 3, seed=3, dtype=dtype), randn(T, 3, seed=4, dtype=dtype), D=D.to(dtype))


@pytest.mark.parametrize("T", [8, 300, 3000])
@pytest.mark.parametrize("kind", ["diag", "scalar", "dense"])
def test_sss_solutions_that_overflow_raise(T, kind):
    """D96: past the small dense path ``SSS.solve`` returned NaN where the solution overflows (a subnormal pivot);
    likewise upper matrices, complex data and a solve that differentiates."""
    M = _sss_with_a_subnormal_pivot(T, kind)
    y = randn(T, 2, seed=5)
    for matrix in (M, M.T):
        with pytest.raises(sm.SingularMatrixError, match="overflows"):
            matrix.solve(y)
    with pytest.raises(sm.SingularMatrixError, match="overflows"):
        _sss_with_a_subnormal_pivot(T, "diag", C128).solve(y.to(C128))
    B = randn(T, 3, seed=3).requires_grad_()
    differentiated = sm.SSS(M.transitions.values, B, M.C, D=M.D)
    with pytest.raises(sm.SingularMatrixError, match="overflows"):
        differentiated.solve(y)
    nan_in = y.clone()
    nan_in[0, 0] = float("nan")
    assert bool(M.solve(nan_in).isnan().any())  # NaN in, NaN out (as torch.linalg.solve)


def test_dense_lowrank_diagonal_solutions_that_overflow_raise():
    """D97: ``Dense.solve`` / ``inv()``, ``LowRank.solve``, ``Diagonal.solve`` returned NaN or inf."""
    d = torch.tensor([1.0, 1.0, 1e-310], dtype=F64)
    y = torch.ones(3, dtype=F64)
    for call in (lambda: sm.Dense(torch.diag(d)).solve(y), lambda: sm.Dense(torch.diag(d)).inv(),
                 lambda: sm.LowRank(torch.eye(3, dtype=F64), torch.diag(d)).solve(y),
                 lambda: sm.LowRank(torch.eye(3, dtype=F64), torch.diag(d)).inv() @ y,
                 lambda: sm.Diagonal(torch.tensor([1e-200, 1.0], dtype=F64)).solve(torch.tensor([1e200, 1.0], dtype=F64))):
        with pytest.raises(sm.SingularMatrixError, match="overflows"):
            call()


def test_a_sum_of_quasiseparable_matrices_with_parts_of_other_batch_ranks_scales():
    """D98: a sum whose parts had unbatched maps beside a batched zero diagonal raised on ``* 2`` and ``.to``."""
    T = 3
    Q1 = sm.SSS(rand(T, 2, seed=1), rand(T, 2, seed=2), rand(T, 2, seed=3)).T + sm.OneSS.from_decays(rand(2, T, seed=4))
    Q = Q1 + sm.Quasiseparable.lion(rand(T, seed=5))
    dense = Q.to_dense()
    close((Q * 2).to_dense(), 2 * dense)
    close((Q / 2).to_dense(), dense / 2)
    close((Q * 1j).to_dense(), 1j * dense)
    close(Q.to(torch.float32).to_dense().double(), dense, rtol=1e-6)


def _strict_ranks(M) -> tuple[int, int]:
    D = M.to_dense()
    return sm.semiseparable_rank(D, strict=True), sm.semiseparable_rank(D.mT, strict=True)


def test_compress_reaches_the_strict_ranks():
    """D99: ``compress`` kept states that only the part's own diagonal (which a quasiseparable matrix ignores) or a
    zero transition used: a zero lower part stayed at order 1, a state that no later row reads at its order. (``Q @
    Q.inv()``, the identity, stays at (1, 1): its states are cut off by transitions that are small, not zero.)"""
    a = torch.tensor([0.9, 0.5, 0.7, 0.3, 0.8, 0.6], dtype=F64)
    Q = sm.Quasiseparable.lion(a)
    zero_lower = sm.Quasiseparable(sm.OneSS.from_decays(torch.zeros(6, dtype=F64)), sm.OneSS.from_decays(a).T,
                                   torch.ones(6, dtype=F64))
    A = rand(8, 2, seed=6)
    A[:, 1] = 0  # the second state reaches no later row
    half_used = sm.Quasiseparable(sm.SSS(A, randn(8, 2, seed=7), randn(8, 2, seed=8)),
                                  sm.OneSS.from_decays(rand(8, seed=9)).T, torch.ones(8, dtype=F64))
    for M in (Q - Q, Q + Q, zero_lower, half_used):
        R = M.compress()
        assert R.order == _strict_ranks(M)
        close(R.to_dense(), M.to_dense(), rtol=1e-10, atol=1e-12)
    S = sm.SSS(torch.zeros(5, 2, dtype=F64), randn(5, 2, seed=10), randn(5, 2, seed=11), D=rand(5, seed=12))
    assert S.compress().order == 0 and torch.equal(S.compress().to_dense(), torch.diag(S.D))
    complex_part = sm.SSS(randn(7, 2, 2, seed=13, dtype=C128) / 2, randn(7, 2, seed=14, dtype=C128),
                          randn(7, 2, seed=15, dtype=C128), D=randn(7, seed=16, dtype=C128))
    close(complex_part.compress().to_dense(), complex_part.to_dense(), rtol=1e-10)


def test_the_dense_form_of_a_lazy_inverse_of_a_singular_matrix_raises_singular_matrix_error():
    """D100: ``Inverse(M).to_dense()`` (and ``np.asarray``) raised torch's ``LinAlgError``."""
    for M in (sm.Inverse(sm.DFT(4).imag), sm.LowRank(torch.eye(3), torch.diag(torch.tensor([1.0, 1.0, 0.0]))).inv()):
        with pytest.raises(sm.SingularMatrixError, match="singular"):
            M.to_dense()
        with pytest.raises(sm.SingularMatrixError):
            np.asarray(M)


@pytest.mark.parametrize("grad", [False, True])
def test_quasiseparable_inverse_raises_on_a_nearly_zero_leading_minor(grad):
    """D101: the unpivoted LU of ``inv()`` lost accuracy silently where a leading minor is nearly zero (not exactly):
    ``d[0] = 1e-14`` on a matrix of condition 83 gave an inverse off by 5e-4. It raises where the factors' growth
    passes ``eps^(-2/3)``; a smaller minor's inverse stays accurate, and ``solve`` (pivoted) is exact throughout."""
    T = 6
    lower = sm.OneSS.from_decays(torch.full((T,), 0.9, dtype=F64), b=2 * rand(T, seed=1) - 1, c=2 * rand(T, seed=2) - 1)
    upper = sm.OneSS.from_decays(torch.full((T,), 0.9, dtype=F64), b=2 * rand(T, seed=3) - 1, c=2 * rand(T, seed=4) - 1)
    for first, raises in ((1e-6, False), (1e-14, True), (1e-18, True)):
        d = 2 + 2 * rand(T, seed=5) - 1
        d[0] = first
        M = sm.Quasiseparable(lower, upper.T, d.requires_grad_(grad))
        want = torch.linalg.inv(M.to_dense().detach())
        close(M.solve(torch.eye(T, dtype=F64)).detach(), want, rtol=1e-10, atol=1e-12)
        if raises:
            with pytest.raises(sm.SingularMatrixError, match="leading principal minor 1 is nearly zero"):
                M.inv()
        else:
            close(M.inv().to_dense().detach(), want, rtol=1e-9, atol=1e-12)


def test_a_lazy_inverse_of_a_transpose_solves_through_the_inverse_it_has():
    """D113 (found by the expression fuzz's replay): ``Inverse(Transpose(LowRank)) @ x`` raised "Transpose has no solve
    of its own and no structured inverse" although the transpose's inverse is the lazy inverse of a ``LowRank``,
    which solves."""
    L = sm.LowRank(randn(3, 3, seed=1), randn(3, 3, seed=2))
    x = randn(3, 2, seed=3)
    close(sm.Inverse(sm.Transpose(L)) @ x, torch.linalg.solve(L.to_dense().T, x))
    empty = sm.LowRank(randn(0, 1, seed=4), randn(0, 1, seed=5))
    assert (sm.Inverse(sm.Transpose(empty)) @ torch.ones(0, 2, dtype=F64)).shape == (0, 2)


def test_the_growth_check_passes_well_conditioned_matrices():
    """D114 (the audit of session 21's changes): the first growth estimate raised on matrices of condition 2 whose
    generators are rescaled per time step (its maxima came from different steps), and on growing transitions."""
    T = 16
    a = torch.full((T,), 0.5, dtype=F64)
    a[T // 2] = 0.0
    B, C = torch.ones(T, 1, dtype=F64), torch.ones(T, 1, dtype=F64)
    B[: T // 2], C[: T // 2], B[T // 2:], C[T // 2:] = 1e6, 1e-6, 1e-6, 1e6  # entries O(1) near the diagonal
    M = sm.Quasiseparable(sm.SSS(a, B, C), sm.SSS(a, B.clone(), C.clone(), lower=False), torch.full((T,), 3.0, dtype=F64))
    close(M.inv().to_dense(), torch.linalg.inv(M.to_dense()), rtol=1e-12)
    grow = sm.Quasiseparable.lion(torch.full((64,), 1.2, dtype=F64))
    grow = sm.Quasiseparable(grow.lower_part, grow.upper_part, grow.diag + 2)
    want = torch.linalg.inv(grow.to_dense())
    close(grow.inv().to_dense(), want, rtol=1e-6)


@pytest.mark.parametrize("dtype, big", [(torch.float32, 1e5), (F64, 1e40)])
def test_dense_forms_of_growing_pieces_beside_a_zero_decay_stay_finite(dtype, big):
    """D114: the chunks' blocks assembled from pieces met ``inf * 0`` where a growing piece, a zero decay and a growing
    piece follow each other (NaN where the entries are 0); pieces are not used where a transition grows."""
    T = 256
    a = torch.full((T,), 0.5, dtype=F64)
    a[4:8], a[8:16], a[16:20] = big, 0.0, big
    M = sm.SSS(a.to(dtype), torch.ones(T, 1, dtype=dtype), torch.ones(T, 1, dtype=dtype),
               torch.full((T,), 2.0, dtype=dtype))
    dense = M.to_dense()
    assert bool(torch.isfinite(dense).all()) and dense[19, 3] == 0
