"""The lazy composites of ``structmat.core.lazy``: exact matvecs and gradients without a structured rule."""

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
