"""Block-diagonal transitions kept as blocks (the transitions of a sum): their values against blocks placed by hand
(``torch.block_diag`` per step), shapes read without writing them, kept values and in-place changes, gradients with
values written under ``no_grad`` or in inference mode, batch broadcasting, dtypes, copies and ``torch.compile``."""

import copy
import pickle

import pytest
import torch
from conftest import C128, F64, close, rand, randn
from hypothesis import given
from hypothesis import strategies as st

import structmat as sm
from structmat.core.joined_transitions import BlockDiagonal, block_diagonal


def _by_hand(blocks, batch, T):
    """``diag(B1_t, ..., Bk_t)`` per batch entry and step by ``torch.block_diag``."""
    blocks = [b.expand(*batch, T, *b.shape[-2:]) for b in blocks]
    n = sum(b.shape[-1] for b in blocks)
    dtype = blocks[0].dtype
    for b in blocks[1:]:
        dtype = torch.promote_types(dtype, b.dtype)
    out = torch.zeros(*batch, T, n, n, dtype=dtype)
    for index in torch.cartesian_prod(*(torch.arange(s) for s in (*batch, T))).reshape(-1, len(batch) + 1).tolist():
        out[tuple(index)] = torch.block_diag(*(b[tuple(index)] for b in blocks))
    return out


def _transitions(kind: str, batch, T: int, n: int, dtype, seed: int) -> tuple[sm.Transitions, torch.Tensor]:
    """Transitions of ``kind`` and their ``(*, T, n, n)`` matrices written out."""
    real = dtype.to_real() if dtype.is_complex else dtype
    if kind == "log":
        a = 0.5 + 0.5 * rand(*batch, T, seed=seed, dtype=real)
        return sm.Transitions(a.log(), "log"), torch.diag_embed(a[..., None].expand(*batch, T, n))
    if kind == "diag":
        a = randn(*batch, T, n, seed=seed, dtype=dtype)
        return sm.Transitions(a, "diag"), torch.diag_embed(a)
    a = randn(*batch, T, n, n, seed=seed, dtype=dtype)
    return sm.Transitions(a, "dense"), a


@given(st.sampled_from(["log", "diag", "dense"]), st.integers(1, 3), st.integers(1, 3), st.integers(0, 5),
       st.sampled_from([((), ()), ((2,), (2,)), ((1,), (3,)), ((2, 1), (1, 3))]), st.sampled_from([F64, C128]))
def test_values_are_the_blocks_placed_by_hand(kind, n1, n2, T, batches, dtype):
    """A dense block beside any kind: a ``BlockDiagonal`` whose values equal the blocks placed by hand, at the
    broadcast batch, read as dense transitions of ``n1 + n2`` states."""
    (A1, M1), (A2, M2) = _transitions(kind, batches[0], T, n1, dtype, 1), _transitions("dense", batches[1], T, n2, dtype, 2)
    batch = torch.broadcast_shapes(batches[0], batches[1])
    for A, want in ((block_diagonal(A1, A2, n1, n2), _by_hand([M1, M2], batch, T)),
                    (block_diagonal(A2, A1, n2, n1), _by_hand([M2, M1], batch, T))):
        assert isinstance(A, BlockDiagonal) and A.kind == "dense"
        assert (A.batch_shape, A.length, A.dtype, A.device) == (batch, T, dtype, torch.device("cpu"))
        assert A._kept is None  # (the shape was read off the blocks)
        close(A.values, want, rtol=1e-15, atol=0)
        close(A.matrices(n1 + n2), want, rtol=1e-15, atol=0)


def test_sums_of_sums_keep_every_block_once():
    """A sum of sums holds the blocks of all its terms side by side (nothing written in between); its values and the
    matrix equal the dense sums."""
    A = [randn(4, n, n, seed=n) / 4 for n in (1, 2, 3)]
    S = block_diagonal(block_diagonal(*(sm.Transitions(a, "dense") for a in A[:2]), 1, 2), sm.Transitions(A[2], "dense"), 3, 3)
    assert len(S.blocks) == 3 and all(b is a for b, a in zip(S.blocks, A))
    close(S.values, _by_hand(A, (), 4), rtol=0, atol=0)
    M = [sm.SSS(a, randn(4, a.shape[-1], seed=9), randn(4, a.shape[-1], seed=10), D=rand(4, seed=11)) for a in A]
    total = M[0] + M[1] + M[2]
    assert isinstance(total.transitions, BlockDiagonal) and len(total.transitions.blocks) == 3
    assert total.transitions._kept is None  # (the sums wrote nothing)
    close(total.to_dense(), M[0].to_dense() + M[1].to_dense() + M[2].to_dense())


def test_values_are_kept_and_written_again_after_an_in_place_change():
    """Read twice: one tensor. A block changed in place (the operand's own transitions): the values show it."""
    a, b = randn(5, 2, 2, seed=1), randn(5, 3, 3, seed=2)
    A = block_diagonal(sm.Transitions(a, "dense"), sm.Transitions(b, "dense"), 2, 3)
    first = A.values
    assert A.values is first
    a.mul_(2.0)
    close(A.values, _by_hand([a, b], (), 5), rtol=0, atol=0)
    assert A.values is not first


def test_inference_blocks_changed_in_place_are_written_again():
    """Inference tensors have no version counter: the kept values compare the blocks' values instead."""
    with torch.inference_mode():
        a, b = randn(5, 2, 2, seed=1), randn(5, 3, 3, seed=2)
        A = block_diagonal(sm.Transitions(a, "dense"), sm.Transitions(b, "dense"), 2, 3)
        first = A.values
        assert A.values is first
        b.add_(1.0)
        close(A.values, _by_hand([a, b], (), 5), rtol=0, atol=0)


def test_a_sum_of_matrices_sees_its_operands_transitions_changed_in_place():
    """``S = M1 + M2`` keeps ``M1``'s dense transitions as a block: a change to them in place shows in ``S`` (its
    kept dense form included), as the sum of the changed ``M1`` and ``M2``."""
    A1 = randn(6, 2, 2, seed=1) / 4
    M1 = sm.SSS(A1, randn(6, 2, seed=2), randn(6, 2, seed=3), D=rand(6, seed=4))
    M2 = sm.SSS(randn(6, 3, 3, seed=5) / 4, randn(6, 3, seed=6), randn(6, 3, seed=7))
    x = randn(6, 2, seed=8)
    S = M1 + M2
    close(S @ x, (M1.to_dense() + M2.to_dense()) @ x)
    A1.mul_(-1.0)
    close(S @ x, (M1.to_dense() + M2.to_dense()) @ x)


def test_gradients_after_values_written_without_a_graph():
    """Values first written under ``no_grad`` and in inference mode, then differentiated: the gradients of the blocks
    equal those of the dense sum (gradcheck in float64)."""
    B1, B2 = randn(4, 2, seed=2), randn(4, 3, seed=3)

    def sum_matvec(a1, a2, x):
        S = sm.SSS(a1, B1, B1) + sm.SSS(a2, B2, B2)
        with torch.no_grad():
            S @ x
        with torch.inference_mode():
            S @ x
        return S @ x

    a1, a2 = (randn(4, n, n, seed=n) / 4 for n in (2, 3))
    x = randn(4, 1, seed=5)
    assert torch.autograd.gradcheck(sum_matvec, (a1.requires_grad_(), a2.requires_grad_(), x))
    S = sm.SSS(a1, B1, B1) + sm.SSS(a2, B2, B2)
    with torch.no_grad():  # written without a graph, kept for reads without one
        written = S.transitions.values
        assert written.grad_fn is None and S.transitions.values is written
    assert S.transitions.values is not written  # a gradient wanted: written again, with the graph
    (S @ x).sum().backward()
    want = [torch.autograd.grad((M.to_dense() @ x).sum(), a)[0] for M, a in ((sm.SSS(a1, B1, B1), a1), (sm.SSS(a2, B2, B2), a2))]
    close(a1.grad, want[0])
    close(a2.grad, want[1])


def test_expand_cast_and_reshape_keep_the_blocks():
    A = block_diagonal(sm.Transitions(randn(1, 4, 2, 2, seed=1), "dense"), sm.Transitions(rand(1, 4, 1, seed=2), "diag"),
                       2, 1)
    for out, want in ((A.expand((3,)), A.values.expand(3, 4, 3, 3)), (A.cast(C128), A.values.to(C128)),
                      (A.reshape_batch((1, 1)), A.values.reshape(1, 1, 4, 3, 3))):
        assert isinstance(out, BlockDiagonal) and out._kept is None
        close(out.values, want, rtol=0, atol=0)
    assert A.cast(F64) is A


def test_dtype_promotion_of_the_blocks():
    a = sm.Transitions(randn(3, 2, 2, seed=1).float(), "dense")
    b = sm.Transitions(randn(3, 1, 1, seed=2, dtype=C128), "dense")
    A = block_diagonal(a, b, 2, 1)
    assert A.dtype == C128 and all(x.dtype == C128 for x in A.blocks)
    close(A.values, _by_hand([a.values.to(C128), b.values], (), 3), rtol=0, atol=0)


def test_finite_check_names_the_argument():
    bad = randn(3, 2, 2, seed=1)
    bad[1, 0, 1] = float("nan")
    A = block_diagonal(sm.Transitions(randn(3, 1, 1, seed=2), "dense"), sm.Transitions(bad, "dense"), 1, 2)
    with pytest.raises(ValueError, match="A"):
        A.check_finite("A")


def test_copies_and_pickles_of_a_sum():
    M = [sm.SSS(randn(5, n, n, seed=n) / 4, randn(5, n, seed=n + 1), randn(5, n, seed=n + 2)) for n in (2, 3)]
    S = M[0] + M[1]
    for R in (copy.deepcopy(S), pickle.loads(pickle.dumps(S))):
        assert isinstance(R.transitions, BlockDiagonal)
        close(R.to_dense(), S.to_dense(), rtol=0, atol=0)


def test_compiled_sum_writes_dense_transitions():
    """Inside ``torch.compile`` the sum writes its transitions (no kept state is traced): same matrix."""
    M = [sm.SSS(randn(5, n, n, seed=n) / 4, randn(5, n, seed=n + 1), randn(5, n, seed=n + 2)) for n in (2, 3)]
    x = randn(5, 2, seed=9)
    compiled = torch.compile(lambda a, b, x: (a + b) @ x, backend="eager")
    close(compiled(M[0], M[1], x), (M[0].to_dense() + M[1].to_dense()) @ x)


def _written_out(S: sm.SSS) -> sm.SSS:
    """The same matrix with its transitions placed by hand (:func:`_by_hand`) as a plain dense tensor."""
    blocks = S.transitions.blocks
    return sm.SSS(_by_hand(blocks, blocks[0].shape[:-3], blocks[0].shape[-3]), S.B, S.C, D=S.D)


OPERATIONS = {
    "to_dense": lambda M, x: M.to_dense(), "matvec": lambda M, x: M @ x, "transpose matvec": lambda M, x: M.T @ x,
    "solve": lambda M, x: M.solve(x), "inv": lambda M, x: M.inv().to_dense(), "conj": lambda M, x: M.conj().to_dense(),
    "to complex": lambda M, x: M.to(C128).to_dense(), "reverse": lambda M, x: M.reverse().to_dense(),
    "product": lambda M, x: (M @ M).to_dense(), "sum": lambda M, x: (M + M).to_dense(),
    "hadamard": lambda M, x: M.hadamard(M).to_dense(), "scaled": lambda M, x: (-2.5 * M).to_dense(),
    "diagonal times": lambda M, x: (sm.Diagonal(torch.arange(1.0, 9.0, dtype=F64)) @ M).to_dense(),
    "bidirectional": lambda M, x: sm.Quasiseparable(M, M.T, torch.ones(8, dtype=F64)) @ x,
    "deepcopy": lambda M, x: copy.deepcopy(M).to_dense(),
}


@pytest.mark.parametrize("name", list(OPERATIONS))
def test_every_operation_on_a_sum_equals_the_written_out_matrix(name):
    """Each operation on a sum whose transitions are kept as blocks gives what it gives on the same matrix with the
    transitions written out (the same arithmetic: equal to rounding, batch of two)."""
    M = [sm.SSS(randn(2, 8, n, n, seed=n) / 4, randn(2, 8, n, seed=n + 1), randn(2, 8, n, seed=n + 2),
                D=2 + rand(2, 8, seed=n + 3)) for n in (2, 3)]
    S = M[0] + M[1]
    assert isinstance(S.transitions, BlockDiagonal)
    x = randn(2, 8, 3, seed=7)
    close(OPERATIONS[name](S, x), OPERATIONS[name](_written_out(S), x), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("order", ["auto", "quadratic", "linear"])
def test_sma_and_decoding_with_a_summed_mask(order):
    """``sma`` (each order) and token-by-token decoding with a sum of per-head dense-transition masks equal those with
    the written-out mask."""
    heads = (2, 2)
    M = [sm.SSS(randn(*heads, 6, n, n, seed=n) / 4, randn(*heads, 6, n, seed=n + 1), randn(*heads, 6, n, seed=n + 2))
         for n in (2, 3)]
    S = M[0] + M[1]
    q, k, v = randn(2, 6, 2, 4, seed=1), randn(2, 6, 2, 4, seed=2), randn(2, 6, 2, 3, seed=3)
    close(sm.sma(q, k, v, S, order=order), sm.sma(q, k, v, _written_out(S), order=order), rtol=1e-12, atol=1e-12)
    ours, theirs = sm.SMADecoder(S), sm.SMADecoder(_written_out(S))
    for t in range(6):
        close(ours.step(q[:, t], k[:, t], v[:, t]), theirs.step(q[:, t], k[:, t], v[:, t]), rtol=1e-12, atol=1e-12)
