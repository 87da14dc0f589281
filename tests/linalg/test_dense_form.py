"""Dense forms without Python loops over time: segment products, blocked decay products, chunked SSS dense forms.

References: the entry-by-entry SSS of ``conftest.sss_dense`` (numpy loops) and plain cumulative products."""

import pytest
import torch
from conftest import C128, F64, close, rand, randn, sss_dense

import structmat as sm
import structmat.linalg.dense_form as dense_form
import structmat.linalg.segsum as segsum_module
from structmat.core.transitions import Transitions
from structmat.linalg.segsum import decay_products, segment_products, segsum


def _products_reference(a: torch.Tensor) -> torch.Tensor:
    """``P[j, i] = a[i+1] ... a[j]`` by explicit products (one sequence)."""
    T = a.shape[-1]
    P = torch.zeros(T, T, dtype=a.dtype)
    for j in range(T):
        for i in range(j + 1):
            P[j, i] = torch.prod(a[i + 1 : j + 1]) if j > i else 1
    return P


@pytest.mark.parametrize("kind", ["signed", "complex", "positive", "zeros"])
def test_segment_products_are_products_of_consecutive_steps(kind):
    T = 9
    a = {"signed": randn(T, seed=1), "complex": randn(T, seed=1, dtype=C128), "positive": 0.2 + rand(T, seed=1),
         "zeros": rand(T, seed=1) * (torch.arange(T) % 4 != 2)}[kind]
    close(segment_products(Transitions(a, "scalar")), _products_reference(a))
    diag = torch.stack([a, a.flip(0)], -1)  # (T, 2): one product matrix per state
    P = segment_products(Transitions(diag, "diag"))
    close(P[0], _products_reference(a))
    close(P[1], _products_reference(a.flip(0)))
    if kind in ("positive", "zeros"):
        close(segment_products(Transitions(torch.log(a), "log")), _products_reference(a))
    assert segment_products(Transitions(randn(T, 2, 2), "dense")) is None


def test_segment_products_gradients_with_exact_zeros():
    a = (0.3 + rand(7, seed=2)).requires_grad_()
    cut = torch.tensor([1.0, 1, 1, 0, 1, 1, 1], dtype=F64)
    assert torch.autograd.gradcheck(lambda a: segment_products(Transitions(a * cut, "scalar")), (a,))
    assert torch.autograd.gradcheck(lambda a: segment_products(Transitions(a[:, None] * a[:, None], "diag")), (a,))


@pytest.mark.parametrize("T", [1, 7, 8, 9, 23])
def test_decay_products_in_blocks_equal_one_segment_sum(monkeypatch, T):
    monkeypatch.setattr(segsum_module, "DECAY_BLOCK", 4)  # blocks of 4: every case of the block structure
    x = torch.log(rand(2, T, seed=T))
    if T > 5:
        x[0, 5] = float("-inf")  # an exact zero decay
    close(decay_products(x), torch.exp(segsum(x)), rtol=1e-13)
    assert torch.autograd.gradcheck(decay_products, (torch.log(0.1 + rand(T, seed=3)).requires_grad_(),))



@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_decay_products_flush_underflow_to_exact_zeros(dtype):
    """Products below the smallest normal number are exact zeros (the CPU exp's slow path is skipped); the rest,
    gradients included, are those of the plain ``exp``; NaN still comes out as NaN."""
    T = 80  # 80 x 80 entries: over FLUSH_MIN_ENTRIES
    assert T * T >= segsum_module.FLUSH_MIN_ENTRIES
    x = torch.log(torch.full((2, T), 1e-3 if dtype == torch.float32 else 1e-12, dtype=F64) + 0.5 * rand(2, T, seed=4))
    x[1, 30] = float("-inf")
    P = decay_products(x.to(dtype))
    reference = torch.exp(segsum(x))
    tiny = torch.finfo(dtype).tiny
    assert bool((P[reference < tiny] == 0).all()) and bool((reference < tiny).any())
    close(P.to(F64), torch.where(reference < 3 * tiny, 0.0, reference), rtol=1e-5 if dtype == torch.float32 else 1e-13)
    y = x.clone()
    y[0, 40] = float("nan")
    assert bool(decay_products(y.to(dtype))[0, 40:, :40].isnan().all())
    strong = x[:1, :12].clone().requires_grad_()  # a short stretch: the gradient of products that stay normal
    assert torch.autograd.gradcheck(lambda t: decay_products(t.expand(6, 12).reshape(1, 72)), (strong,))


def _sss_cases():
    g = torch.Generator().manual_seed(0)
    n = lambda *s: torch.randn(*s, generator=g, dtype=F64)  # noqa: E731
    return {
        "scalar": (n(2, 21), "scalar"),
        "diag": (n(2, 21, 3) / 2, "diag"),
        "positive diag": (0.3 + 0.7 * torch.rand(2, 21, 3, generator=g, dtype=F64), "diag"),
        "dense": (n(2, 21, 3, 3) / 3, "dense"),
    }


@pytest.mark.parametrize("case", list(_sss_cases()))
@pytest.mark.parametrize("explicit_d", [False, True])
@pytest.mark.parametrize("chunked", [False, True])
def test_sss_dense_matches_the_definition(monkeypatch, case, explicit_d, chunked):
    if chunked:  # chunks of 4 over 21 steps: padded last chunk, several blocks below the diagonal
        monkeypatch.setattr(dense_form, "DENSE_CHUNKED_T", 4)
        monkeypatch.setattr(dense_form, "DENSE_CHUNK", 4)
    A, kind = _sss_cases()[case]
    B, C = randn(2, 21, 3, seed=4), randn(2, 21, 3, seed=5)
    D = randn(2, 21, seed=6) if explicit_d else None
    M = sm.SSS(A, B, C, D)
    for b in range(2):
        close(M.to_dense()[b], sss_dense(A[b], B[b], C[b], None if D is None else D[b], kind))
        close(M.T.to_dense()[b], sss_dense(A[b], B[b], C[b], None if D is None else D[b], kind).T)


@pytest.mark.parametrize("chunked", [False, True])
def test_dense_forms_keep_dtype_batch_gradients_and_empty_inputs(monkeypatch, chunked):
    if chunked:
        monkeypatch.setattr(dense_form, "DENSE_CHUNKED_T", 4)
        monkeypatch.setattr(dense_form, "DENSE_CHUNK", 4)
    a = (0.2 + 0.8 * rand(3, 1, 13, seed=7)).requires_grad_()
    b = randn(1, 2, 13, seed=8, dtype=C128)
    M = sm.OneSS.from_decays(a.detach(), b=b)
    close(M.to_dense(), M @ torch.eye(13, dtype=C128))
    assert M.to_dense().shape == (3, 2, 13, 13) and M.to_dense().dtype == C128
    f32 = sm.SSS(0.5 + rand(13, 2, seed=9, dtype=torch.float32), randn(13, 2, seed=10, dtype=torch.float32),
                 randn(13, 2, seed=11, dtype=torch.float32))
    assert f32.to_dense().dtype == torch.float32
    close(f32.to_dense().double(), f32.double() @ torch.eye(13, dtype=F64), rtol=1e-5)
    B, C = randn(13, 2, seed=12).requires_grad_(), randn(13, 2, seed=13)
    assert torch.autograd.gradcheck(lambda a, B: sm.SSS(a[0, 0, :, None].expand(13, 2), B, C).to_dense(), (a, B))
    assert torch.autograd.gradcheck(lambda a: sm.OneSS(torch.log(a)).to_dense(), (a,))
    empty = sm.SSS(torch.ones(0, 2), torch.ones(0, 2), torch.ones(0, 2))
    assert empty.to_dense().shape == (0, 0)
    with torch.inference_mode():
        close(M.to_dense(), M @ torch.eye(13, dtype=C128))
