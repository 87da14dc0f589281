"""The Transitions type against dense products of its steps, for all four kinds."""

import pytest
import torch
from conftest import F64, close, rand
from hypothesis import given
from hypothesis import strategies as st

import structmat as sm
from structmat.core.joined_transitions import block_diagonal, kron

KINDS = ["log", "scalar", "diag", "dense"]


def make(kind, T, N, seed=0, batch=(2,)):
    shape = {"log": (*batch, T), "scalar": (*batch, T), "diag": (*batch, T, N), "dense": (*batch, T, N, N)}[kind]
    A = rand(*shape, seed=seed)
    return sm.Transitions(A.log() if kind == "log" else A / N, kind)


@given(st.sampled_from(KINDS), st.integers(1, 9), st.integers(1, 3))
def test_forms_products_and_reversal_against_dense(kind, T, N):
    A = make(kind, T, N)
    mats = A.matrices(N)  # (2, T, N, N)
    assert mats.shape == (2, T, N, N) and A.length == T and A.batch_shape == (2,)
    prefix = A.prefix().matrices(N)
    running = torch.eye(N, dtype=F64).expand(2, N, N)
    for t in range(T):
        running = mats[:, t] @ running
        close(prefix[:, t], running)
    close(A.total().matrices(N), running)
    suffix = A.suffix().matrices(N)
    for t in range(T):
        want = torch.eye(N, dtype=F64).expand(2, N, N)
        for s in range(t + 1, T):
            want = mats[:, s] @ want
        close(suffix[:, t], want)
    rev = A.reversed().matrices(N)
    for t in range(T):
        close(rev[:, t], mats[:, (T - t) % T].mT)
    h = torch.randn(2, T, N, 3, dtype=F64)
    close(A.apply(h), mats @ h)
    c = torch.randn(2, T, N, dtype=F64)
    close(A.left_apply(c), (c[..., None, :] @ mats)[..., 0, :])


@pytest.mark.parametrize("kind", KINDS)
def test_chunking_padding_and_identity_first(kind):
    A = make(kind, 7, 2)
    C = A.chunked(3)  # 3 chunks of 3, two neutral steps appended
    assert C.length == 3 and C.batch_shape == (2, 3)
    close(C.matrices(2)[:, 2, 1:], torch.eye(2, dtype=F64).expand(2, 2, 2, 2))
    close(A.with_identity_first().matrices(2)[:, 0], torch.eye(2, dtype=F64).expand(2, 2, 2))
    close(A.narrow(2, 3).matrices(2), A.matrices(2)[:, 2:5])


def test_combinations_and_log_diagonals():
    a, b = make("log", 5, 1, seed=1), make("diag", 5, 2, seed=2)
    S = block_diagonal(a, b, 1, 2)
    assert S.kind == "diag"
    close(S.matrices(3)[..., :1, :1], a.matrices(1))
    close(S.matrices(3)[..., 1:, 1:], b.matrices(2))
    close(S.matrices(3)[..., :1, 1:], torch.zeros(2, 5, 1, 2, dtype=F64))
    D = block_diagonal(a, make("dense", 5, 2, seed=4), 1, 2)
    assert D.kind == "dense"
    close(D.matrices(3)[..., 1:, 1:], make("dense", 5, 2, seed=4).matrices(2))
    K = kron(a, b, 1, 2, (2,))
    close(K.matrices(2), a.matrices(1) * b.matrices(2))
    assert kron(a, make("log", 5, 1, seed=3), 1, 1, (2,)).kind == "log"
    close(b.log_diagonals(2).exp()[:, 1:], b.diagonals(2)[:, 1:])
    assert make("dense", 5, 2).log_diagonals(2) is None
    assert sm.Transitions(-torch.ones(5), "scalar").log_diagonals(1) is None
    with pytest.raises(ValueError, match="kind must be one of"):
        sm.Transitions(torch.ones(3), "banded")
    with pytest.raises(TypeError, match="must be real"):
        sm.Transitions(torch.ones(3, dtype=torch.complex64), "log")


def test_log_transitions_carry_their_decays_through_every_operation():
    """Decays kept beside the logs follow every operation (the same numbers as ``exp`` of the values), and
    ``actual()`` differentiates them in linear space: a product across ``a_t = 0`` keeps ``d/da_t``."""
    a = rand(2, 6, seed=7)
    a[0, 2] = 0.0
    a.requires_grad_()
    log_a = torch.where(a > 0, a.detach().clamp_min(1e-300).log(), float("-inf"))
    A = sm.Transitions.from_log(log_a, a)
    other = sm.Transitions.from_log(rand(2, 6, seed=8).log())
    steps = {"narrow": A.narrow(1, 4), "padded": A.padded(2), "identity first": A.with_identity_first(),
             "chunked": A.chunked(4), "reversed": A.reversed(), "expand": A.expand((3, 2)),
             "reshape": A.reshape_batch((2, 1)), "map": A.map(lambda t: t.to(torch.complex128)),
             "cast": A.cast(torch.float32), "prefix": A.prefix(), "suffix": A.suffix(), "total": A.total(),
             "last": A.last(), "kron": kron(A, other, 1, 1, (2,))}
    for name, out in steps.items():
        assert out.decays is not None and out.decays.shape == out.values.shape, name
        close(out.decays, torch.exp(out.values), rtol=1e-6 if name == "cast" else 1e-12)
    (g,) = torch.autograd.grad(A.prefix().actual()[0, -1], a)  # a_0 ... a_5 with a_2 = 0
    close(g[0, 2], a.detach()[0, [0, 1, 3, 4, 5]].prod())
    with torch.no_grad():  # nothing to differentiate: they are left behind (and cost nothing)
        assert A.prefix().decays is None and A.narrow(1, 2).decays is None
    assert sm.Transitions.from_log(log_a, a.detach()).decays is None
    with pytest.raises(ValueError, match="only log transitions keep decays"):
        sm.Transitions(torch.ones(3), "scalar", a[0, :3])
