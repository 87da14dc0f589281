"""SSS sums and products of operands of one shape whose parameters broadcast inside each matrix (size-1 batch dims
beside full ones): the closure rules join them without expanding the operands first. Every result against dense
complex128 arithmetic, with its class, order and shape; gradients through broadcast parameters."""

import pytest
import torch
from conftest import C128, F64, close, rand, randn
from hypothesis import given
from hypothesis import strategies as st

import structmat as sm
from structmat.core.joined_transitions import block_diagonal, block_triangular

KINDS = ["scalar", "diag", "dense"]


def _sss(kind, T, sizes, dtype, seed, D, lower, n=2):
    """An SSS of batch (2, 3) whose parameters have the batch sizes ``sizes[name]`` (each (2, 3), (1, 3), (2, 1) or
    (1, 1))."""
    real = dtype.to_real() if dtype.is_complex else dtype
    shape = lambda name, *tail: (*sizes[name], T, *tail)  # noqa: E731
    A = {"scalar": lambda: 0.5 + 0.5 * rand(*shape("A"), seed=seed, dtype=real),
         "diag": lambda: 0.5 + 0.5 * rand(*shape("A", n), seed=seed, dtype=real),
         "dense": lambda: randn(*shape("A", n, n), seed=seed, dtype=dtype) / (2 * n)}[kind]()
    B, C = randn(*shape("B", n), seed=seed + 1, dtype=dtype) / 2, randn(*shape("C", n), seed=seed + 2, dtype=dtype) / 2
    D = 2 + randn(*shape("D"), seed=seed + 3, dtype=dtype) / 4 if D else None
    return sm.SSS(A, B, C, D, lower=lower)


SIZES = st.sampled_from([(2, 3), (1, 3), (2, 1), (1, 1)])
PARAMETER_SIZES = st.fixed_dictionaries({"A": SIZES, "B": SIZES, "C": SIZES, "D": SIZES})


@given(st.sampled_from(KINDS), st.sampled_from(KINDS), PARAMETER_SIZES, PARAMETER_SIZES, st.booleans(), st.booleans(),
       st.booleans(), st.sampled_from([0, 1, 5]), st.sampled_from([F64, C128, torch.float32]))
def test_broadcast_parameters_in_sums_and_products(left, right, sizes1, sizes2, D1, D2, lower, T, dtype):
    sizes1["B"] = sizes2["B"] = (2, 3)  # (each matrix's batch: one parameter has it)
    a = _sss(left, T, sizes1, dtype, seed=1, D=D1, lower=lower)
    b = _sss(right, T, sizes2, dtype, seed=11, D=D2, lower=lower)
    rtol = 1e-4 if dtype == torch.float32 else 1e-9
    for R, want in ((a + b, a.to_dense().to(C128) + b.to_dense().to(C128)),
                    (a @ b, a.to_dense().to(C128) @ b.to_dense().to(C128)),
                    (b @ a, b.to_dense().to(C128) @ a.to_dense().to(C128))):
        assert type(R) is sm.SSS and R.order == 4 and R.lower == lower and R.dtype == dtype
        assert R.shape == want.shape == (2, 3, T, T)
        assert R.B.dim() == R.C.dim() == 4 and len(R.transitions.batch_shape) == 2 and (R.D is None or R.D.dim() == 3)
        close(R.to_dense().to(C128), want, rtol=rtol, atol=rtol)
        x = randn(2, 3, T, 2, seed=5, dtype=dtype)
        close((R @ x).to(C128), want @ x.to(C128), rtol=rtol, atol=rtol)


@pytest.mark.parametrize("kinds", [("diag", "diag"), ("dense", "dense"), ("diag", "dense"), ("scalar", "diag")])
@pytest.mark.parametrize("with_D", [True, False])
def test_gradients_through_broadcast_parameters(kinds, with_D):
    """``gradcheck`` of the sum and both products with a transition and a map shared across the batch."""
    T = 4
    sizes = {"A": (1, 3), "B": (2, 3), "C": (2, 1), "D": (1, 1)}
    base_a = _sss(kinds[0], T, sizes, F64, seed=3, D=with_D, lower=True)
    base_b = _sss(kinds[1], T, {**sizes, "A": (2, 1)}, F64, seed=13, D=True, lower=True)
    A = base_a.transitions.values.clone().requires_grad_()
    C = base_b.C.clone().requires_grad_()

    def results(A, C):
        a = sm.SSS(A, base_a.B, base_a.C, base_a.D)
        b = sm.SSS(base_b.transitions.values, base_b.B, C, base_b.D)
        return (a + b).to_dense(), (a @ b).to_dense(), (b @ a).to_dense()

    assert torch.autograd.gradcheck(results, (A, C))


def test_transitions_block_forms_with_broadcast_batches():
    """``block_diagonal`` and ``block_triangular`` of transitions whose batch sizes differ (1 against 3) equal the
    blocks placed by hand."""
    a = sm.Transitions(rand(1, 5, 2, seed=1), "diag")
    b = sm.Transitions(randn(3, 5, 3, 3, seed=2), "dense")
    coupling = randn(3, 5, 2, 3, seed=3)
    want = torch.zeros(3, 5, 5, 5, dtype=F64)
    want[..., :2, :2] = torch.diag_embed(a.values)
    want[..., 2:, 2:] = b.values
    close(block_diagonal(a, b, 2, 3).values, want)
    want[..., :2, 2:] = coupling
    close(block_triangular(a, b, coupling).values, want)
    c = sm.Transitions(rand(3, 5, 3, seed=4), "diag")  # both diagonal, the coupling broadcast against them
    want = torch.diag_embed(torch.cat([a.values.expand(3, 5, 2), c.values], -1))
    want[..., :2, 2:] = coupling[:1]
    close(block_triangular(a, c, coupling[:1]).values, want)
    close(block_triangular(a, c, coupling[:1].expand(3, 5, 2, 3)).values, want)
