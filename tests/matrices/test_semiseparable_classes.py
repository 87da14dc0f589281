"""OneSS, SSS, Bidiagonal, Diagonal, LowRank, Dense: matvecs, dense forms, solves, compression."""

import pytest
import torch
from conftest import F64, close, dense_of, rand, randn
from hypothesis import given
from hypothesis import strategies as st

import structmat as sm
import structmat.testing as smt


@given(st.one_of(smt.one_ss(), smt.sss(), smt.diagonals(), smt.bidiagonals(), smt.lowranks(), smt.denses()))
def test_matvec_matches_dense(M):
    smt.assert_matches_dense(M)


@given(st.one_of(smt.one_ss(batch=()), smt.sss(batch=())))
def test_to_dense_matches_definition(M):
    close(M.to_dense(), dense_of(M))


@given(smt.sss(dtype=torch.complex128))
def test_complex_sss(M):
    smt.assert_matches_dense(M)
    close(M.H @ torch.eye(M.shape[-1], dtype=M.dtype), M.to_dense().mH)


@given(st.one_of(smt.sss(), smt.one_ss(scaled=True), smt.bidiagonals()))
def test_solve_matches_dense_solve(M):
    """Block forward substitution (SSS, either orientation), the O(T) inverse scan (Bidiagonal)."""
    dense = M.to_dense()
    if bool((torch.diagonal(dense, dim1=-2, dim2=-1) == 0).any()):
        with pytest.raises(sm.SingularMatrixError):
            M.solve(torch.ones(M.shape[-1], dtype=F64))
        return
    Y = randn(*M.batch_shape, M.shape[-1], 2, seed=1)
    cond = float(torch.linalg.cond(dense).max())
    close(dense @ M.solve(Y), Y, rtol=max(1e-8, 1e-13 * cond))
    y = randn(M.shape[-1], seed=2)
    assert M.solve(y).shape == (*M.batch_shape, M.shape[-1])


def test_compress_oness_plus_itself():
    M = sm.OneSS.from_decays(rand(60))
    S = M + M
    assert S.order == 2
    C = S.compress()
    assert C.order == 1
    close(C.to_dense(), 2 * M.to_dense())


@given(st.integers(1, 40).flatmap(lambda T: st.tuples(smt.sss(T=T, batch=()), smt.sss(T=T, batch=()))))
def test_compress_is_exact_and_not_larger(pair):
    M1, M2 = pair
    S = M1 + (M2 if M2.lower == M1.lower else M2.T)
    C = S.compress()
    assert C.order <= S.order
    close(C.to_dense(), S.to_dense(), rtol=1e-8)


def test_constructors_and_conventions():
    close(sm.OneSS.causal(4) @ torch.ones(4), torch.arange(1.0, 5.0))
    close(sm.OneSS.decay(0.5, 4).to_dense(), torch.tensor(0.5).pow((torch.arange(4)[:, None] - torch.arange(4)).clamp(min=0))
          * torch.ones(4, 4).tril())
    assert sm.OneSS.decay(0.9, 3, dtype=F64).dtype == F64 and sm.OneSS.causal(3, dtype=F64).dtype == F64
    assert sm.OneSS.from_decays([0.5, 0.5], dtype=F64).dtype == F64
    G = sm.SSS.from_generators(randn(6, 2), randn(6, 2, seed=1))
    close(G.to_dense(), torch.tril(randn(6, 2) @ randn(6, 2, seed=1).T))
    M = sm.SSS(rand(5, 2), randn(5, 2), randn(5, 2))
    close(M.reverse().to_dense(), M.to_dense().flip(0, 1))
    O = sm.OneSS.from_decays(rand(5), b=randn(5))
    assert isinstance(O.reverse(), sm.OneSS)
    close(O.reverse().to_dense(), O.to_dense().flip(0, 1))
    close(O.T.reverse().to_dense(), O.T.to_dense().flip(0, 1))
    Bd = sm.Bidiagonal(rand(5) + 1, randn(4))
    assert isinstance(Bd.T, sm.Bidiagonal) and not Bd.T.lower
    close(Bd.T.to_dense(), Bd.to_dense().T)
    close(Bd.T.to_sss().to_dense(), Bd.to_dense().T)


def test_constructor_errors_name_the_argument():
    with pytest.raises(ValueError, match="B and C"):
        sm.SSS(torch.ones(5), torch.ones(5, 2), torch.ones(4, 2))
    with pytest.raises(ValueError, match="A must have shape"):
        sm.SSS(torch.ones(5, 3), torch.ones(5, 2), torch.ones(5, 2))
    with pytest.raises(ValueError, match="D must have shape"):
        sm.SSS(torch.ones(5), torch.ones(5, 2), torch.ones(5, 2), D=torch.ones(4))
    with pytest.raises(ValueError, match="log_a must be finite"):
        sm.OneSS(torch.tensor([0.0, float("nan")]))
    with pytest.raises(ValueError, match="log_a must be finite"):
        sm.OneSS(torch.tensor([0.0, float("inf")]))
    with pytest.raises(ValueError, match="a must be real and >= 0"):
        sm.OneSS.from_decays(torch.tensor([0.5, -0.1]))
    with pytest.raises(ValueError, match="a must be finite"):
        sm.OneSS.from_decays(torch.tensor([1.0, float("nan"), 0.5]))
    with pytest.raises(ValueError, match="gamma must be finite"):
        sm.OneSS.decay(float("nan"), 3)
    with pytest.raises(ValueError, match="b must have shape"):
        sm.OneSS(torch.zeros(4), b=torch.ones(3))
    with pytest.raises(TypeError, match="log_a must be real"):
        sm.OneSS(torch.zeros(4, dtype=torch.complex64))
    with pytest.raises(TypeError, match="array-like"):
        sm.OneSS("abc")
    with pytest.raises(ValueError, match="diag and sub must have shapes"):
        sm.Bidiagonal(torch.ones(4), torch.ones(4))
    with pytest.raises(ValueError, match=r"batch shapes do not broadcast: U \(2,\), V \(3,\)"):
        sm.LowRank(torch.ones(2, 4, 1), torch.ones(3, 4, 1))
    with pytest.raises(ValueError, match="tol must be a finite relative cutoff"):
        sm.OneSS.causal(4).compress(float("nan"))


def test_singular_matrices_raise():
    with pytest.raises(sm.SingularMatrixError):
        sm.SSS(torch.ones(3), torch.ones(3, 1), torch.ones(3, 1), D=torch.tensor([1.0, 0.0, 1.0])).inv()
    with pytest.raises(sm.SingularMatrixError):
        sm.Diagonal(torch.tensor([1.0, 0.0])).inv()
    with pytest.raises(sm.SingularMatrixError):
        sm.OneSS(torch.zeros(3), b=torch.tensor([1.0, 0.0, 1.0])).inv()
    with pytest.raises(sm.SingularMatrixError):
        sm.Bidiagonal(torch.tensor([1.0, 0.0]), torch.ones(1)).inv()
    with pytest.raises(sm.SingularMatrixError):
        sm.LowRank(torch.ones(3, 1), torch.ones(3, 1)).inv()
    assert issubclass(sm.SingularMatrixError, ValueError)


def test_full_rank_lowrank_solves_instead_of_recursing():
    U, V = randn(4, 4) + 4 * torch.eye(4, dtype=F64), torch.eye(4, dtype=F64)
    L = sm.LowRank(U, V)
    y = randn(4, 2, seed=1)
    close(L.solve(y), torch.linalg.solve(U, y))
    close(L.inv() @ y, torch.linalg.solve(U, y))


def test_inputs_never_mutated():
    A, B, C, D = rand(40, 2, seed=5), randn(40, 2, seed=6), randn(40, 2, seed=7), 3 + rand(40, seed=8)
    A[0] = 7.0  # A[0] is unused: any finite value must leave the result alone
    x = randn(40, 3, seed=9)
    saved = [t.clone() for t in (A, B, C, D, x)]
    M = sm.SSS(A, B, C, D)
    for R in (M @ x, (M + M) @ x, (M @ M) @ x, M.inv() @ x, M.solve(x), M.compress() @ x, M.T @ x):
        assert torch.isfinite(R).all()
    for before, after in zip(saved, (A, B, C, D, x)):
        assert torch.equal(before, after)


@pytest.mark.parametrize("seed", [51, 192])  # unstable dense A over long T: rounding noise is amplified
def test_compress_of_a_sum_with_itself_is_minimal(seed):
    g = torch.Generator().manual_seed(seed)
    T = int(torch.randint(2, 80, (1,), generator=g))
    A = torch.randn(T, 3, 3, generator=g, dtype=F64) * float(torch.rand(1, generator=g)) * 2 / 3
    D = None if seed % 2 else torch.randn(T, generator=g, dtype=F64)
    M = sm.SSS(A, torch.randn(T, 3, generator=g, dtype=F64), torch.randn(T, 3, generator=g, dtype=F64), D)
    S = (M + M).compress()
    assert S.order == (2 * M).compress().order == 3
    close(S.to_dense(), 2 * M.to_dense(), rtol=1e-12)


def test_solve_checks_the_right_hand_side():
    for M in (sm.SSS(rand(5), randn(5, 1), randn(5, 1), D=3 + rand(5)), sm.OneSS.from_decays(rand(5)),
              sm.Bidiagonal(1 + rand(5), randn(4)), sm.Dense(torch.eye(5, dtype=F64))):
        with pytest.raises(ValueError, match=r"Y has shape \(4,\); expected \(5,\)|X has shape \(4,\); expected \(5,\)"):
            M.solve(torch.ones(4, dtype=F64))
        with pytest.raises(ValueError, match="got a scalar"):
            M.solve(torch.tensor(1.0))


def test_every_constructor_takes_dtype_and_device():
    F = F64
    made = [sm.SSS(torch.rand(4), torch.ones(4, 1), torch.ones(4, 1), D=torch.ones(4), dtype=F, device="cpu"),
            sm.OneSS(torch.zeros(4), dtype=F), sm.OneSS.decay(0.9, 4, dtype=F), sm.OneSS.causal(4, dtype=F),
            sm.OneSS.from_decays([0.5, 0.5], dtype=F), sm.Diagonal([1, 2], dtype=F), sm.Dense(torch.eye(2), dtype=F),
            sm.LowRank(torch.ones(3, 1), torch.ones(3, 1), dtype=F), sm.Bidiagonal([1.0, 2.0], [3.0], dtype=F),
            sm.Quasiseparable(sm.OneSS.causal(3), sm.OneSS.causal(3).T, torch.ones(3), dtype=F),
            sm.Quasiseparable.bidirectional(sm.OneSS.causal(3), sm.OneSS.causal(3), dtype=F, device="cpu"),
            sm.Quasiseparable.lion([0.5, 0.5], dtype=F), sm.Quasiseparable.lion_decay(0.5, 3, dtype=F),
            sm.SSS.from_generators(torch.ones(3, 1), torch.ones(3, 1), dtype=F, device="cpu"),
            sm.Toeplitz(torch.ones(3), dtype=F, device="cpu"), sm.Toeplitz([1, 2], [1, 3, 4], dtype=F),
            sm.Toeplitz.causal(torch.ones(3), dtype=F, device="cpu"), sm.Fourier(torch.ones(3), dtype=F),
            sm.Fourier.from_kernel(torch.ones(3), dtype=F, device="cpu"), sm.DFT(3, dtype=torch.complex128)]
    assert all(M.dtype == F for M in made[:-1]) and made[-1].dtype == torch.complex128
    assert sm.Toeplitz.causal(torch.ones(3), device="meta").device.type == "meta"
    assert sm.SSS.from_generators(torch.ones(3, 1), torch.ones(3, 1), device="meta").device.type == "meta"
    Mc = sm.OneSS(torch.zeros(4), dtype=torch.complex128)
    assert Mc.dtype == torch.complex128 and Mc.log_a.dtype == F
    assert sm.SSS(torch.rand(4), torch.ones(4, 1), torch.ones(4, 1), device="meta").device.type == "meta"


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_bidiagonal_inverse_beyond_the_dtype_range_raises(dtype):
    """The inverse's entries reach ``1000**199``: held in log space, they gave infinities (then NaN) in every
    matvec; now a ``SingularMatrixError`` at ``inv()`` / ``solve``. Zero subdiagonal entries cut the growth."""
    M = sm.Bidiagonal(torch.full((200,), 1e-3, dtype=dtype), torch.ones(199, dtype=dtype))
    with pytest.raises(sm.SingularMatrixError, match=r"Bidiagonal.inv\(\) has entries up to about 1e600"):
        M.inv()
    with pytest.raises(sm.SingularMatrixError):
        M.solve(torch.ones(200, dtype=dtype))
    with pytest.raises(sm.SingularMatrixError, match=r"sub\[t-1\] / diag\[t\] overflows"):  # not an internal name
        sm.Bidiagonal(torch.tensor([1.0, 1e-3], dtype=dtype), torch.tensor([torch.finfo(dtype).max / 10], dtype=dtype)).inv()
    sub = torch.ones(199, dtype=dtype).index_fill(0, torch.arange(4, 199, 5), 0.0)  # blocks of 5: entries <= 1e15
    cut = sm.Bidiagonal(torch.full((200,), 1e-3, dtype=dtype), sub)
    y = cut.solve(torch.ones(200, dtype=dtype))
    close(y, torch.linalg.solve(cut.to_dense().to(F64), torch.ones(200, dtype=F64)), rtol=1e-5)


def test_length_zero_and_zero_columns():
    """numpy's answers for empty operands: ``(0, K)`` and ``(T, 0)`` products, empty solves."""
    empty = [sm.OneSS.from_decays(torch.ones(0, dtype=F64)), sm.SSS(torch.ones(0, 2, dtype=F64), torch.ones(0, 2, dtype=F64),
             torch.ones(0, 2, dtype=F64)), sm.Quasiseparable.bidirectional(sm.OneSS.causal(0, dtype=F64), sm.OneSS.causal(0, dtype=F64))]
    for M in empty:
        assert (M @ torch.ones(0, 3, dtype=F64)).shape == (0, 3) and (M @ torch.ones(0, dtype=F64)).shape == (0,)
    for M in (sm.OneSS.from_decays(rand(5)), sm.SSS(rand(5, 2), randn(5, 2), randn(5, 2)), sm.Bidiagonal(1 + rand(5), rand(4))):
        assert (M @ torch.ones(5, 0, dtype=F64)).shape == (5, 0)
        assert (M.T @ torch.ones(2, 5, 0, dtype=F64)).shape == (2, 5, 0)


def test_bidiagonal_batches_broadcast_between_diag_and_sub():
    """``diag (2, T)`` with ``sub (T - 1,)``, as a sum with a batched Diagonal builds it: the constructor (and so a
    scaling of that sum) takes it like any broadcast batch (fuzz: ``(Bidiagonal + Diagonal) * s`` at T = 0 raised)."""
    for T in (0, 1, 5):
        d, s = torch.rand(2, T, dtype=torch.float64) + 1, torch.rand(max(T - 1, 0), dtype=torch.float64)
        M = sm.Bidiagonal(d, s)
        want = torch.diag_embed(d) + torch.diag_embed(s, -1)
        assert M.shape == (2, T, T) and torch.equal(M.to_dense(), want)
        S = (sm.Bidiagonal(torch.ones(T, dtype=torch.float64), s) + sm.Diagonal(d)) * 2.0
        assert torch.allclose(S.to_dense(), 2 * (torch.eye(T, dtype=torch.float64) + want))


def test_compress_drops_a_strict_part_that_cancels():
    """Where the strictly lower part cancels to rounding noise, the noise keeps no state (each sweep's cutoff was
    relative to its own step only, and one state was always kept: ``(S - S).compress().order`` was 3, D49): order 0,
    as ``semiseparable_rank`` says; a part that survives keeps its order and its values."""
    g = torch.Generator().manual_seed(11)
    r = lambda *s: torch.rand(*s, generator=g, dtype=F64)  # noqa: E731
    a, b = sm.SSS(r(12, 2), r(12, 2), r(12, 2)), sm.SSS(r(12, 3), r(12, 3), r(12, 3))
    x = torch.randn(12, 2, generator=g, dtype=F64)
    for M in (a - a, sm.OneSS.from_decays(r(12)) * 2 - sm.OneSS.from_decays(r(12)) * 0, b - b):
        want = sm.semiseparable_rank(M, strict=True)
        assert M.compress().order == want
        close(M.compress() @ x, M.to_dense() @ x)
    S = sm.SSS(r(9, 3, 3) * 0.5, r(9, 3), r(9, 3), D=r(9) + 1)
    identity = (S @ S.inv()).compress(1e-8)
    assert identity.order == 0
    close(identity.to_dense(), torch.eye(9, dtype=F64), atol=1e-12)
    kept = ((a + b) - b).compress()
    assert kept.order == 2
    close(kept @ x, a @ x)


def test_sss_inverse_pickles_and_copies_on_its_own():
    """``SSS.inv()`` built its generators by a closure: it did not pickle, and a deep copy kept reading the
    original's data (changed in place afterwards, the copy's dense form and products disagreed by 0.07)."""
    import copy
    import io
    import pickle

    B = randn(6, 2, seed=1)
    M = sm.SSS(rand(6, 2, seed=2), B, randn(6, 2, seed=3), D=3 + rand(6, seed=4))
    x = randn(6, seed=5)
    for inverse in (M.inv(), M.inv().T, M.inv().to(torch.float32)):
        buffer = io.BytesIO()
        torch.save(inverse, buffer)
        buffer.seek(0)
        for loaded in (pickle.loads(pickle.dumps(inverse)), torch.load(buffer, weights_only=False)):
            close(loaded.to_dense(), inverse.to_dense())
            close(loaded @ x.to(loaded.dtype), inverse @ x.to(inverse.dtype))
    copied = copy.deepcopy(M.inv())
    B.mul_(2.0)
    close(copied.to_dense() @ x, copied @ x)
