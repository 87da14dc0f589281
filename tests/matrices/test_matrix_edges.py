"""Matrices at their edges (each a defect of the session-20 audit): gradients through ``compress``, a Toeplitz
matrix's row under in-place writes, empty matrices, a zero scale of a lazy inverse, a learnable DFT scale, the errors
of ``X @ M`` and flags that are not bools."""

import pytest
import torch
from conftest import F64, close, rand, randn

import structmat as sm


def test_compress_raises_in_a_backward_pass_instead_of_nan_gradients():
    """``compress()`` chooses its states by ranks; its factorizations' derivatives were NaN where it removes states
    (silent NaN gradients): a backward pass through it now raises, its values are unchanged, and without a graph
    (``no_grad``, a detached copy) it runs as before."""
    a = (0.4 + rand(8, seed=1) / 2).requires_grad_()
    x = torch.ones(8, 2, dtype=F64)
    for M in (sm.OneSS.from_decays(a) + sm.OneSS.from_decays(a),
              sm.Quasiseparable.bidirectional(sm.OneSS.from_decays(a) + sm.OneSS.from_decays(a), sm.OneSS.from_decays(a))):
        C = M.compress()
        close(C.to_dense(), M.to_dense())
        y = (C @ x).sum()
        with pytest.raises(RuntimeError, match="compress\\(\\) is not differentiable"):
            torch.autograd.grad(y, a)
        with torch.no_grad():
            assert not (M.compress() @ x).requires_grad
        close(M.detach().compress().to_dense(), M.to_dense().detach())
    zero = (sm.OneSS.from_decays(a) - sm.OneSS.from_decays(a)).compress()  # order 0: the diagonal carries the guard
    assert zero.order == 0
    with pytest.raises(RuntimeError, match="not differentiable"):
        torch.autograd.grad((zero @ x).sum(), a)


def test_toeplitz_row_follows_in_place_writes_to_its_column():
    """The first row kept ``r[0] := c[0]`` in a copy made at construction: after ``c.mul_(2)``, ``M.T``, ``M.H`` and
    ``x @ M`` used the old corner while ``M @ x`` used the new one."""
    x = torch.tensor([1.0, 1.0, 1.0], dtype=F64)
    for make in (lambda c: sm.Toeplitz(c, torch.tensor([4.0, 2.0, 0.25], dtype=F64)), sm.Toeplitz,
                 lambda c: sm.Toeplitz(c, causal=True)):
        c = torch.tensor([4.0, 1.0, 0.5], dtype=F64)
        M = make(c)
        _ = M.T @ x  # (kept forms built before the write)
        with torch.no_grad():
            c.mul_(2)
        D = M.to_dense()
        assert D[0, 0] == 8.0
        close(M.T.to_dense(), D.T)
        close(M.H.to_dense(), D.T)
        close(x @ M, x @ D)
        close(M.T @ x, D.T @ x)


def test_empty_matrices_rank_and_compress():
    """``semiseparable_rank`` of a ``T = 0`` matrix crashed in a reduction (0, as for a dense one); ``compress`` of a
    zero-size batch crashed in ``amax`` (the matrix back, empty)."""
    for M in (sm.OneSS.from_decays(torch.ones(0, dtype=F64)), sm.SSS(torch.ones(0, 2), torch.ones(0, 2), torch.ones(0, 2)),
              sm.Bidiagonal(torch.ones(0), torch.ones(0)), sm.LowRank(torch.ones(0, 2), torch.ones(0, 2)),
              sm.Quasiseparable.lion(torch.ones(0))):
        assert sm.semiseparable_rank(M) == 0 and sm.semiseparable_rank(M, strict=True) == 0
    for M in (sm.SSS(torch.rand(0, 4, 2), torch.rand(0, 4, 2), torch.rand(0, 4, 2)),
              sm.OneSS.from_decays(torch.rand(0, 4)), sm.Quasiseparable.lion(torch.rand(0, 4))):
        C = M.compress()
        assert C.shape == M.shape and (C @ torch.ones(4, 1)).shape == (0, 4, 1)


def test_a_lazy_inverse_times_zero_is_the_zero_matrix():
    """``Inverse(M) * 0`` divided by zero (``M * (1 / s)``); now the zero matrix, whose gradient in a tensor scale
    is ``M^{-1}``, and whose inverse raises ``SingularMatrixError``."""
    D = 2 * torch.eye(3, dtype=F64) + randn(3, 3, seed=2) / 4
    x = randn(3, seed=3)
    toeplitz = sm.Toeplitz(torch.tensor([4.0, 1.0, 0.5], dtype=F64), torch.tensor([4.0, 2.0, 0.25], dtype=F64))
    for M in (sm.Dense(D), toeplitz):
        for zero in (0, 0.0, torch.tensor(0.0, dtype=F64)):
            Z = M.inv() * zero if isinstance(M, sm.Toeplitz) else sm.Inverse(M) * zero
            assert torch.equal(Z @ x, torch.zeros(3, dtype=F64)) and not Z.to_dense().any()
            with pytest.raises(sm.SingularMatrixError, match="zero matrix"):
                Z.inv()
        s = torch.tensor(0.0, dtype=F64, requires_grad=True)
        (g,) = torch.autograd.grad(((sm.Inverse(M) * s) @ x).sum(), s)
        close(g, torch.linalg.solve(M.to_dense(), x).sum())
        close((sm.Inverse(M) * 2.0) @ x, 2 * torch.linalg.solve(M.to_dense(), x))


def test_a_dft_scaled_by_a_learnable_tensor_keeps_its_gradient():
    """The DFT keeps its scale as a number: ``DFT * s`` took ``s.item()`` and dropped the graph without a word."""
    s = torch.tensor(1.5, dtype=F64, requires_grad=True)
    x = randn(4, seed=4).to(torch.complex128)
    assert torch.autograd.gradcheck(lambda s: ((sm.DFT(4, dtype=torch.complex128) * s) @ x).real, (s,))
    assert torch.autograd.gradcheck(lambda s: ((sm.DFT(4, dtype=torch.complex128) / s) @ x).imag, (s,))
    assert type(sm.DFT(4) * torch.tensor(2.0)).__name__ == "DFT"  # no gradient wanted: the scale kept


def test_x_at_m_errors_name_what_the_user_passed():
    M = sm.OneSS.causal(3)
    for bad, got in ((2.0, "a scalar"), (torch.tensor(2.0), "a scalar"), (torch.ones(2, 4), r"shape \(2, 4\)"),
                     ([1.0, 2.0], r"shape \(2,\)")):
        with pytest.raises(ValueError, match=rf"X in X @ M must have shape \(3,\) or \(\*, K, 3\).*got {got}"):
            bad @ M
    close(torch.ones(2, 3) @ M, torch.ones(2, 3) @ M.to_dense())


def test_flags_must_be_bools():
    """``SSS(..., lower="no")`` built a lower matrix, ``semiseparable_rank(M, strict="yes")`` was taken as true."""
    A = torch.rand(4, 2)
    calls = {"lower": lambda: sm.SSS(A, A, A, lower="no"), "causal": lambda: sm.Toeplitz(torch.ones(3), causal=1),
             "inverse": lambda: sm.DFT(3, "yes"), "strict": lambda: sm.semiseparable_rank(torch.eye(3), strict="yes")}
    calls["lower "] = lambda: sm.Bidiagonal(torch.ones(3), torch.ones(2), lower=None)
    for name, call in calls.items():
        with pytest.raises(TypeError, match=f"{name.strip()} must be a bool"):
            call()
    assert sm.SSS(A, A, A, lower=False).lower is False and sm.semiseparable_rank(torch.eye(3), strict=True) == 0
