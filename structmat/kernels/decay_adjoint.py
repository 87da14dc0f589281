"""The exact gradient of the chunked-decay recurrence with respect to its decays, in linear space.

Per batch and head, with ``S_t = a_t S_{t-1} + x_t B_t^T`` (``S_{-1} = 0``) and ``y_t = S_t C_t``,

    dL/da_t = <Lambda_t, S_{t-1}>,     Lambda_t = sum_{j >= t} (a_{t+1} ... a_j) dy_j C_j^T,

the adjoint state against the state before the step. No division by ``a_t`` enters, so it is exact at
``a_t = 0``, where the chain rule through ``log a_t = -inf`` (what the chunked primitive differentiates)
gives 0. :func:`with_exact_decay_gradient` attaches it to an output of :func:`~structmat.kernels.chunked_decay`
computed with detached log decays; :func:`decay_gradient` computes it by chunks of ``Q`` steps:
inside a chunk the pairs ``(i < t <= j)`` are the subdiagonal of ``Lc^T G Lc^T`` (``Lc`` the chunk's decay
products, ``G[j, i] = (dy_j . x_i)(C_j . B_i)``); pairs reaching outside it go through the states entering
the chunk from the left (``S``) and from the right (``Lambda``), two scans over the chunks.
``O(B H T (Q (N + P) + Q^2 + N P))``, all on the device (no host reads: it traces under ``torch.compile``).
"""

from __future__ import annotations

import torch

from structmat.core.dtypes import real_dtype
from structmat.linalg.scan import decay_scan

__all__ = ["decay_gradient", "with_exact_decay_gradient", "ADJOINT_CHUNK", "ADJOINT_BLOCK"]

#: Steps per chunk of :func:`decay_gradient`: the ``Q x Q`` products inside chunks cost ``O(T Q (N + P + Q))``,
#: the chunk states ``O(T N P)`` plus ``O(T / Q)`` small steps. Measured on the CPU (one thread, B = 1, H = 4):
#: Q = 8 / 16 / 32 / 64 took 3.6 / 2.7 / 2.5 / 3.0 ms at T = 256, N = P = 16; 24 / 18 / 20 / 42 ms at T = 4096,
#: N = P = 16; 283 / 125 / 82 / 82 ms at T = 4096, N = P = 64 (the chunked forward: 3.0, 30 and 66 ms).
ADJOINT_CHUNK = 32

#: Elements of the ``(B, H, chunks, Q, Q)`` tensors built at once; more chunks are taken in groups
#: (about 32 MB in float64), so long sequences keep the memory of one group.
ADJOINT_BLOCK = 1 << 22


def _chunks(t: torch.Tensor, n: int, Q: int) -> torch.Tensor:
    """``(B, T, H, *)`` padded with zeros to ``n Q`` steps, as a contiguous ``(B, H, n, Q, *)`` (every product below
    is then a batched matmul without a copy)."""
    Bsz, T, H = t.shape[:3]
    t = torch.nn.functional.pad(t, (0, 0) * (t.dim() - 3) + (0, 0, 0, n * Q - T))
    return t.reshape(Bsz, n, Q, H, *t.shape[3:]).movedim(3, 1).contiguous()


def _segment_products(a: torch.Tensor) -> torch.Tensor:
    """``L[..., j, i] = a_{i+1} ... a_j`` for ``j >= i`` (0 above) from ``a (*, Q)``: a masked cumulative product down
    each column, every entry its own product of at most ``Q`` factors (no ratio: zeros stay exact)."""
    Q = a.shape[-1]
    below = torch.ones(Q, Q, dtype=torch.bool, device=a.device).tril(-1)
    column = torch.where(below, a[..., :, None], torch.ones((), dtype=a.dtype, device=a.device))
    return torch.cumprod(column, dim=-2).tril()


def _entering(log_total: torch.Tensor, local: torch.Tensor) -> torch.Tensor:
    """States entering each chunk ``(B, H, n, P, N)``: ``E_c = total_c E_{c-1} + local_c``, shifted by one chunk."""
    ends = decay_scan(log_total, local.flatten(-2)).unflatten(-1, local.shape[-2:])
    return torch.cat([torch.zeros_like(ends[:, :, :1]), ends[:, :, :-1]], dim=2)


def _within(a, x, B, C, dy, S_in, R_out) -> torch.Tensor:
    """``dL/da`` ``(B, H, n, Q)`` for the chunks of decays ``a (B, H, n, Q)`` given the states entering them from the
    left (``S_in``) and the adjoint states entering them from the right (``R_out``), both ``(B, H, n, P, N)``."""
    L = _segment_products(a).to(dy.dtype)  # L[j, i] = a_{i+1} ... a_j inside the chunk
    prev = torch.nn.functional.pad(L[..., :-1, :], (0, 0, 1, 0))  # prev[t, i] = L[t-1, i]: the state before step t
    into = (a[..., :1, None] * L[..., :, :1])[..., 0]  # a_0 ... a_t: from the entering state to step t
    before = torch.nn.functional.pad(into[..., :-1], (1, 0), value=1.0)  # ... to step t - 1
    after = L[..., -1, :]  # a_{t+1} ... a_{Q-1}: from step t to the chunk's end
    G = (dy @ x.mT) * (C @ B.mT)  # G[j, i] = (dy_j . x_i)(C_j . B_i)
    inside = ((L.mT @ G) * prev).sum(-1)
    left = before * (((dy @ S_in) * C).sum(-1)[..., None, :] @ L)[..., 0, :]
    right = after * (prev @ ((x @ R_out) * B).sum(-1)[..., None])[..., 0]
    through = after * before * (R_out * S_in).sum((-1, -2))[..., None]
    return inside + left + right + through


def decay_gradient(x, log_a, B, C, dy, chunk: int = ADJOINT_CHUNK) -> torch.Tensor:
    """``dL/da (B, T, H)`` of ``y = chunked_decay(x, log_a, B, C)`` (no ``scale``, ``D``, ``z``, initial state or
    ``seq_idx``) for the incoming gradient ``dy (B, T, H, P)``; ``x (B, T, H, P)``, ``B, C (B, T, H, N)``,
    ``log_a (B, T, H)`` (``a_0`` multiplies the zero state: its gradient is 0). Real decays; complex ``x``,
    ``B``, ``C`` give the real gradient of a real loss.

    Examples
    --------
    >>> x, B, C = torch.randn(1, 5, 1, 2), torch.randn(1, 5, 1, 3), torch.randn(1, 5, 1, 3)
    >>> a = torch.tensor([[1.0, 0.5, 0.0, 0.5, 0.5]]).T[None]   # (1, 5, 1)
    >>> g = decay_gradient(x, torch.log(a), B, C, torch.ones(1, 5, 1, 2))
    >>> bool(g[0, 2, 0] != 0)   # d/da_2 at a_2 = 0: the paths through step 2
    True
    """
    Bsz, T, H, P = x.shape
    dtype = torch.promote_types(torch.promote_types(x.dtype, B.dtype), torch.promote_types(C.dtype, dy.dtype))
    real = real_dtype(dtype)
    if T < 2:
        return torch.zeros(Bsz, T, H, dtype=real, device=x.device)
    Q = min(chunk, T)
    n = -(-T // Q)
    la = _chunks(torch.cat([torch.zeros_like(log_a[:, :1]), log_a[:, 1:]], 1).to(real)[..., None], n, Q)[..., 0]
    # with x, B, C conjugated every product is bilinear: Re <Lambda_t, conj(S_{t-1})> is the gradient of a real loss
    x, B, C = (_chunks(t.to(dtype).conj(), n, Q) for t in (x, B, C))
    dy = _chunks(dy.to(dtype), n, Q)
    total = la.sum(-1)  # log of a chunk's whole product
    later = torch.flip(torch.cumsum(torch.flip(la[..., 1:], (-1,)), -1), (-1,))  # sums over steps t+1 .. Q-1
    to_end = torch.exp(torch.nn.functional.pad(later, (0, 1))).to(dtype)  # a_{t+1} ... a_{Q-1} (no difference of sums)
    S_in = _entering(total, (x * to_end[..., None]).mT @ B)
    from_start = torch.exp(torch.cumsum(la, -1)).to(dtype)  # a_0 ... a_t: the adjoint entering chunk c, seen at c - 1
    R_out = torch.flip(_entering(torch.flip(total, (-1,)), torch.flip((dy * from_start[..., None]).mT @ C, (2,))), (2,))
    a, g = torch.exp(la), torch.empty(Bsz, H, n, Q, dtype=dtype, device=x.device)
    group = max(1, ADJOINT_BLOCK // max(1, Bsz * H * Q * Q))
    for c in range(0, n, group):
        part = slice(c, c + group)
        g[:, :, part] = _within(a[:, :, part], x[:, :, part], B[:, :, part], C[:, :, part], dy[:, :, part],
                                S_in[:, :, part], R_out[:, :, part])
    g = g.real if g.is_complex() else g
    return g.flatten(2, 3)[..., :T].transpose(1, 2)


class _ExactDecayGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y, decays, x, log_a, B, C, chunk):
        ctx.save_for_backward(x, log_a, B, C, decays)
        ctx.chunk = chunk
        return y

    @staticmethod
    def backward(ctx, dy):
        x, log_a, B, C, decays = ctx.saved_tensors
        with torch.no_grad():
            grad = decay_gradient(x, log_a, B, C, dy, ctx.chunk).to(decays.dtype).sum_to_size(decays.shape)
        # the gradients of x, B, C come from the chunked primitive run on detached logs: differentiated again
        # (create_graph=True) they would miss their dependence on the decays, so that path raises too
        return _not_twice(dy, decays), _not_twice(grad, decays), None, None, None, None, None


class _NotDifferentiableTwice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, grad, decays):
        return grad.clone()

    @staticmethod
    def backward(ctx, _):
        raise RuntimeError("the chunked SMA order with decays in linear space is not differentiable twice (its backward "
                           "is written by hand): for second derivatives take order='linear' or 'quadratic'")


def _not_twice(grad: torch.Tensor, decays: torch.Tensor) -> torch.Tensor:
    """``grad``, whose derivative raises where the backward is differentiated (``create_graph=True``) while the
    decays want a gradient: the pure second derivative in the decays (the hand-written adjoint) and the mixed ones
    (the gradients of ``q``, ``k``, ``v`` and the maps, computed with the decays held fixed) would miss terms. torch's
    ``once_differentiable`` hangs its error on a new leaf, which a derivative with respect to the decays never
    visits: a second derivative lost these terms without a word wherever the decays also entered the loss another
    way (``(y * w).sum() + f(a)``)."""
    if not torch.is_grad_enabled():
        return grad
    return _NotDifferentiableTwice.apply(grad, decays)


def with_exact_decay_gradient(y, decays, x, log_a, B, C, chunk: int = ADJOINT_CHUNK) -> torch.Tensor:
    """``y`` (the output of ``chunked_decay(x, log_a, B, C)`` run with ``log_a`` detached), whose gradient also
    reaches ``decays`` (``exp(log_a)`` with its graph, shape ``(B, T, H)`` or broadcast to it) through
    :func:`decay_gradient`. Not differentiable twice while the decays want a gradient: a second derivative raises."""
    return _ExactDecayGradient.apply(y, decays, *(t.detach() for t in (x, log_a, B, C)), chunk)
