"""The lazy composites of ``structmat.core.lazy``: exact matvecs and gradients without a structured rule."""

import pytest
import torch
from conftest import F64, rand

import structmat as sm


def test_lazy_transpose_of_a_one_ss_passes_gradients_to_its_decays():
    """``Transpose(OneSS) @ X`` went through the VJP of the matvec, whose fast scan is differentiable once:
    the result did not depend on the decays for autograd (``backward`` raised); it takes ``M.T`` now."""
    a, X = rand(6, seed=1).requires_grad_(), rand(6, 2, seed=2).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, X: sm.Transpose(sm.OneSS.from_decays(a)) @ X, (a, X))
    with torch.inference_mode():
        M = sm.OneSS.from_decays(a.detach())
        torch.testing.assert_close(sm.Transpose(M) @ X.detach(), M.to_dense().T @ X.detach())
    assert (sm.Transpose(M) @ torch.ones(6, 0, dtype=F64)).shape == (6, 0)


def test_a_class_without_its_own_solve_says_so():
    """A user's class with ``to_dense``, ``_matmat``, ``_map`` and ``_scale`` only: ``inv()`` is a lazy ``Inverse``
    (its dense form works), and products with it and ``solve`` raise a ``TypeError`` naming the way out (they
    recursed without end: ``Inverse`` applies ``M.solve``, which went through ``inv()`` back to it)."""

    class UnitBidiagonal(sm.StructuredMatrix):
        def __init__(self, T):
            super().__init__((T, T), torch.float64, "cpu")

        def to_dense(self):
            T = self.shape[-1]
            return torch.eye(T, dtype=torch.float64) + torch.diag(torch.ones(T - 1, dtype=torch.float64), -1)

        def _matmat(self, X):
            return X + torch.nn.functional.pad(X[..., :-1, :], (0, 0, 1, 0))

        def _map(self, fn):
            return self

        def _scale(self, s):
            return sm.Dense(self.to_dense() * s)

    U = UnitBidiagonal(5)
    x = torch.arange(5.0, dtype=torch.float64)
    assert torch.allclose(U.inv().to_dense() @ U.to_dense(), torch.eye(5, dtype=torch.float64))
    with pytest.raises(TypeError, match="no solve of its own.*gmres"):
        U.inv() @ x
    with pytest.raises(TypeError, match="no solve of its own"):
        U.solve(x)
