"""One explicit example per defect the random tests found (``tests/fuzz/DEFECTS.md``, same ids).

Each test fails today and passes once its defect is fixed. The random tests skip the corner of a
recorded defect (``fuzz_helpers.KNOWN`` and the ``D..`` markers), so that it does not hide the next
one; these examples keep it pinned. The malformed-input defects (D15 onwards) are pinned by the
table of ``test_fuzz_malformed.py``.
"""

import pytest
import torch
from expression_builder import leaves
from fuzz_helpers import C128, F64, check_close
from hypothesis import given, settings
from hypothesis import strategies as st

import structmat as sm
import structmat.testing as smt
from structmat.attention import admissible


def test_D1_one_ss_times_zero_columns():
    M = sm.OneSS.from_decays(torch.tensor([0.5, 0.4, 0.3], dtype=F64))
    Y = M @ torch.ones(3, 0, dtype=F64)
    assert Y.shape == (3, 0)


@pytest.mark.parametrize("causal", [False, True])
def test_D2_toeplitz_of_length_zero_solves(causal):
    M = sm.Toeplitz.causal(torch.ones(0, dtype=F64)) if causal else sm.Toeplitz(torch.ones(0, dtype=F64), torch.ones(0, dtype=F64))
    assert M.solve(torch.ones(0, dtype=F64)).shape == (0,)
    assert (M.inv() @ torch.ones(0, 2, dtype=F64)).shape == (0, 2)


def test_D3_fourier_of_length_zero_inverts():
    M = sm.Fourier.from_kernel(torch.ones(0, dtype=F64))
    assert (M.inv() @ torch.ones(0, dtype=F64)).shape == (0,)


def test_D4_dft_of_length_zero_inverts():
    assert sm.DFT(0).solve(torch.ones(0, dtype=torch.complex64)).shape == (0,)


def test_D5_complex_bidiagonal_inverts():
    M = sm.Bidiagonal(torch.tensor([1.0 + 1.0j, 2.0], dtype=C128), torch.tensor([0.5j], dtype=C128))
    y = torch.tensor([1.0, 1.0j], dtype=C128)
    check_close(M.solve(y), torch.linalg.solve(M.to_dense(), y), 1e-12, 1.0, "solve")
    check_close(M.inv().to_dense(), torch.linalg.inv(M.to_dense()), 1e-12, 1.0, "inv")


@pytest.mark.parametrize("T", [1, 2])
def test_D6_dft_real_part_is_invertible_for_t_1_and_2(T):
    M = sm.DFT(T, dtype=torch.complex128).real
    y = torch.ones(T, dtype=F64)
    check_close(M.solve(y), torch.linalg.solve(M.to_dense(), y), 1e-12, 1.0, "DFT(T).real.solve")


@pytest.mark.parametrize("M", [sm.Toeplitz(torch.ones(0, dtype=F64), torch.ones(0, dtype=F64)),
                               sm.Fourier.from_kernel(torch.ones(0, dtype=F64))], ids=["Toeplitz", "Fourier"])
def test_D7_lazy_transpose_of_an_empty_matrix(M):
    assert (sm.Transpose(M) @ torch.ones(0, 2, dtype=F64)).shape == (0, 2)


def test_D8_lazy_transpose_of_a_real_fourier_under_inference_mode():
    with torch.inference_mode():
        M = sm.Fourier.from_kernel(torch.tensor([3.0, 1.0, 0.5], dtype=F64))
        x = torch.tensor([1.0, 2.0, 3.0], dtype=F64)
        check_close(sm.Transpose(M) @ x, M.to_dense().T @ x, 1e-12, 10.0, "Transpose(Fourier) @ x")


def test_D9_sma_result_dtype_promotes_with_the_mask():
    q = k = v = torch.ones(1, 3, 1, 2, dtype=torch.float32)
    mask = sm.Diagonal(torch.ones(3, dtype=F64))
    for order in admissible(mask):
        assert sm.sma(q, k, v, mask, order=order).dtype == F64, order


def test_D10_sma_lowrank_order_with_broadcasting_factors():
    mask = sm.LowRank(torch.rand(1, 5, 2, dtype=F64), torch.rand(3, 5, 2, dtype=F64))  # batch (3,) = H
    q, k, v = (torch.rand(1, 5, 3, d, dtype=F64) for d in (2, 2, 4))
    check_close(sm.sma(q, k, v, mask, order="lowrank"), sm.sma(q, k, v, mask, order="quadratic"), 1e-12, 10.0, "lowrank order")


def test_D11_toeplitz_with_zero_columns_times_x():
    M = sm.Toeplitz(torch.ones(3, dtype=F64), torch.ones(0, dtype=F64))
    assert M.shape == (3, 0)
    Y = M @ torch.ones(0, 2, dtype=F64)
    assert Y.shape == (3, 2) and bool((Y == 0).all())


@pytest.mark.parametrize("compose", ["Product", "Sum", "Transpose"])
def test_D12_conj_of_a_composite_holding_a_dft(compose):
    F = sm.DFT(3, dtype=C128)
    D = sm.Diagonal(torch.tensor([1.0, 2.0, 3.0], dtype=F64))
    M = {"Product": lambda: F @ D, "Sum": lambda: F + D, "Transpose": lambda: sm.Transpose(F)}[compose]()
    check_close(M.conj().to_dense(), M.to_dense().conj(), 1e-12, 10.0, f"{compose}.conj()")
    check_close(M.H.to_dense(), M.to_dense().mH, 1e-12, 10.0, f"{compose}.H")
    x = torch.ones(3, dtype=C128).numpy()
    assert abs(sm.aslinearoperator(M).rmatvec(x) - M.to_dense().mH.resolve_conj().numpy() @ x).max() < 1e-12


def test_D13_chunked_order_admissibility_at_length_zero():
    M = sm.SSS(torch.rand(0, 2, dtype=F64), torch.rand(0, 2, dtype=F64), torch.rand(0, 2, dtype=F64))
    assert "chunked" in admissible(M)
    q, v = torch.rand(1, 0, 1, 2, dtype=F64), torch.rand(1, 0, 1, 3, dtype=F64)
    assert sm.sma(q, q, v, M, order="chunked").shape == (1, 0, 1, 3)


@pytest.mark.parametrize("cls", [sm.Bidiagonal, sm.Toeplitz, sm.Fourier], ids=lambda c: c.__name__)
@settings(max_examples=5, deadline=None)
@given(data=st.data())
def test_D14_testing_strategies_draw_length_zero(cls, data):
    """``structmat.testing``'s strategies take any ``T`` (the docstring: "Every strategy takes T").."""
    M = data.draw(smt.matrices_of(cls, T=0))
    assert M.shape[-2:] == (0, 0)
    node = data.draw(leaves(1, (), F64, (cls,)))
    assert node.M.shape[-1] == 1


def test_D35_semiseparable_rank_never_exceeds_the_largest_block():
    """A 2 x 2 matrix has on-and-below blocks of sizes 2 x 1 and 1 x 2: its semiseparable rank is at most 1."""
    U = torch.tensor([[-0.6249850648539308, -0.18625443137724473], [-0.5134846701666846, -0.4281230266203644]], dtype=F64)
    V = torch.tensor([[-0.30140738855886395, 0.607186409160861], [-0.11185529506249581, -0.35646829283697956]], dtype=F64)
    M = sm.LowRank(U, V)
    assert sm.semiseparable_rank(M.to_dense()) == 1
    assert sm.semiseparable_rank(M) == 1
    assert sm.semiseparable_rank(M.tril()) == 1


def test_D36_dividing_by_a_float32_zero_dim_tensor_keeps_double_precision():
    M = sm.Diagonal(torch.ones(3, dtype=F64))
    assert (M / torch.tensor(2.5)).to_dense()[0, 0].item() == torch.ones(3, dtype=F64)[0].item() / torch.tensor(2.5).item()
    assert ((M / torch.tensor(2.5)).to_dense() == torch.eye(3, dtype=F64) / torch.tensor(2.5)).all()


@pytest.mark.parametrize("inverse", ["Inverse", "ToeplitzInverse"])
def test_D36_scaling_an_inverse_by_a_float32_zero_dim_tensor_keeps_double_precision(inverse):
    """D36 again, found by the expression fuzz in session 14: ``s M^{-1}`` is ``(M / s)^{-1}``, whose ``1 / s`` was
    taken in float32."""
    T = sm.Toeplitz(torch.tensor([3.0, 1.0, 0.5], dtype=F64), torch.tensor([3.0, 0.25, 0.125], dtype=F64))
    M = sm.Inverse(T) if inverse == "Inverse" else T.inv()
    assert type(M).__name__ == inverse
    s = torch.tensor(2.5)  # float32, not exactly 1 / (a float32)
    want = torch.linalg.inv(T.to_dense()) * 2.5
    check_close((M * s).to_dense(), want, 1e-14, 1.0, f"{inverse} * float32 s")
    check_close((s * M * s).to_dense(), want * 2.5, 1e-14, 1.0, f"s * {inverse} * s")


@pytest.mark.parametrize("compose", ["Sum", "Product", "Transpose"])
def test_D37_conj_of_a_composite_holding_a_complex_fourier(compose):
    Fc = sm.Fourier.from_kernel(torch.tensor([3.0, 1.0j, 0.5], dtype=C128))
    D = sm.Diagonal(torch.ones(3, dtype=F64))
    M = {"Sum": lambda: Fc + D, "Product": lambda: Fc @ sm.Toeplitz.causal(torch.ones(3, dtype=F64)),
         "Transpose": lambda: sm.Transpose(Fc)}[compose]()
    check_close(M.conj().to_dense(), M.to_dense().conj(), 1e-12, 10.0, f"{compose}.conj()")
    check_close(M.H.to_dense(), M.to_dense().mH, 1e-12, 10.0, f"{compose}.H")


def test_D38_linear_order_with_a_float32_dense_transition_mask_and_float64_inputs():
    q = k = v = torch.ones(1, 2, 1, 1, dtype=F64)
    g = torch.Generator().manual_seed(0)
    mask = sm.SSS(torch.rand(2, 2, 2, generator=g) / 2, torch.rand(2, 2, generator=g), torch.rand(2, 2, generator=g))  # float32
    check_close(sm.sma(q, k, v, mask, order="linear"), sm.sma(q, k, v, mask, order="quadratic"), 1e-6, 10.0, "linear order")


def test_D39_semiseparable_rank_of_an_empty_batch():
    assert sm.semiseparable_rank(torch.zeros(0, 3, 3, dtype=F64)) == 0


def test_D44_hadamard_of_a_diagonal_and_a_sum_holding_a_product():
    """Found by the long expression fuzz in session 14: the rule for ``Diagonal * M`` applied to a lazy ``Sum`` whose
    ``diagonal()`` exists, but one of whose terms (a lazy ``Product``) has none, and raised that term's message, which
    names no Hadamard product. Now the rule does not apply, and the error says there is no structured Hadamard
    product; with structured diagonals in every term the rule still applies."""
    d = sm.Diagonal(torch.ones(3, dtype=F64))
    P = sm.Product(sm.Dense(torch.ones(3, 3, dtype=F64)), sm.Dense(torch.eye(3, dtype=F64)))
    with pytest.raises(TypeError, match="hadamard"):
        d.hadamard(sm.Sum(d, P))
    with pytest.raises(TypeError, match="hadamard"):
        d.hadamard(sm.Transpose(sm.Sum(P, d)))
    S = sm.Sum(d, sm.Dense(2 * torch.ones(3, 3, dtype=F64)))
    out = d.hadamard(sm.Transpose(S))
    assert isinstance(out, sm.Diagonal)
    check_close(out.to_dense(), torch.diag_embed(torch.full((3,), 3.0, dtype=F64)), 1e-15, 1.0, "d * S.T")
