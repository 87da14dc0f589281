"""The decays' gradient of the chunked-decay recurrence in linear space against autograd of the plain recurrence."""

import pytest
import torch
from conftest import C128, F64, close, rand, randn

from structmat.kernels import decay_adjoint
from structmat.kernels.chunked_decay import chunked_decay
from structmat.kernels.decay_adjoint import decay_gradient, with_exact_decay_gradient


def recurrence(x, a, B, C):
    """``S_t = a_t S_{t-1} + x_t B_t^T``, ``y_t = S_t C_t`` step by step in linear decays (autograd is exact at 0)."""
    S, ys = 0, []
    for t in range(x.shape[1]):
        S = a[:, t, :, None, None] * S + x[:, t, :, :, None] * B[:, t, :, None, :]
        ys.append((S @ C[:, t, :, :, None])[..., 0])
    return torch.stack(ys, 1)


def _case(T, dtype=F64, seed=0):
    Bsz, H, P, N = 2, 3, 2, 3
    a = 0.1 + 0.9 * rand(Bsz, T, H, seed=seed)
    for t in (0, 3, 4, 8, T - 1):  # zeros on chunk boundaries (chunk 4), inside chunks and at both ends
        if t < T:
            a[t % Bsz, t, t % H] = 0.0
    x, B, C, dy = (randn(Bsz, T, H, n, seed=seed + i, dtype=dtype) for i, n in ((1, P), (2, N), (3, N), (4, P)))
    return a, x, B, C, dy


@pytest.mark.parametrize("chunk", [1, 4, 64])
@pytest.mark.parametrize("T", [1, 2, 11])
def test_gradient_is_the_recurrences_at_zero_decays(T, chunk):
    a, x, B, C, dy = _case(T)
    a = a.requires_grad_()
    (want,) = torch.autograd.grad((recurrence(x, a, B, C) * dy).sum(), a)
    got = decay_gradient(x, torch.log(a.detach()), B, C, dy, chunk)
    close(got, want)
    if T > 8:
        assert want[0, 4, 1] != 0 and want[1, 3, 0] != 0  # the derivative at a zero decay is not 0


def test_chunks_in_groups_and_complex_inputs(monkeypatch):
    """Several passes over groups of chunks; complex ``x``, ``B``, ``C`` with real decays and a real loss."""
    monkeypatch.setattr(decay_adjoint, "ADJOINT_BLOCK", 1)  # one chunk per pass
    a, x, B, C, dy = _case(13, dtype=C128, seed=5)
    a = a.requires_grad_()
    y = recurrence(x, a.to(C128), B, C)
    (want,) = torch.autograd.grad((y * dy).real.sum(), a)
    log_a = torch.log(a.detach())
    out = with_exact_decay_gradient(y.detach(), a, x, log_a, B, C, 4)
    (got,) = torch.autograd.grad((out * dy).real.sum(), a)
    close(got, want)


def test_attached_to_the_chunked_primitive_with_broadcast_decays():
    """``with_exact_decay_gradient`` on ``chunked_decay``'s output (log decays detached): the other inputs keep
    their gradients from the primitive, decays of one head per batch get theirs summed over the broadcast."""
    a, x, B, C, dy = _case(10, seed=2)
    shared = a[:, :, :1].clone().requires_grad_()  # (B, T, 1): one decay row for every head
    leaves = [t.clone().requires_grad_() for t in (x, B, C)]
    decays = shared.expand_as(a)
    log_a = torch.log(decays.detach())
    y, _ = chunked_decay(leaves[0], log_a, leaves[1], leaves[2], chunk_size=4)
    y = with_exact_decay_gradient(y, decays, leaves[0], log_a, leaves[1], leaves[2], chunk=4)
    got = torch.autograd.grad((y * dy).sum(), [shared, *leaves])
    ref = [t.clone().requires_grad_() for t in (shared, x, B, C)]
    want = torch.autograd.grad((recurrence(ref[1], ref[0].expand_as(a), ref[2], ref[3]) * dy).sum(), ref)
    for g, w in zip(got, want):
        close(g, w)


def test_float32():
    a, x, B, C, dy = _case(9, seed=3)
    a = a.requires_grad_()
    (want,) = torch.autograd.grad((recurrence(x, a, B, C) * dy).sum(), a)
    got = decay_gradient(x.float(), torch.log(a.detach()).float(), B.float(), C.float(), dy.float(), 4)
    assert got.dtype == torch.float32
    close(got, want, rtol=1e-5)
