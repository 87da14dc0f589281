"""The first-order recurrence ``h_t = a_t h_{t-1} + x_t`` with exact gradients: the 1-SS matvec.

The forward runs compiled code on the CPU (:mod:`structmat.linalg.iir`: ``lfilter`` for a constant
decay, LAPACK's banded solve otherwise) and the blocked scan elsewhere
(:func:`structmat.linalg.scan.decay_scan`), reading the decays from their logs (products of decays
are sums of logs). The backward is the transposed recurrence ``l_t = g_t + a_{t+1} l_{t+1}`` by the
same solver, and the gradient of a decay is ``dL/da_t = <l_t, h_{t-1}>``: finite and exact at
``a_t = 0`` and at subnormal decays, where a chain rule through ``log a`` would give ``0 / 0``.
:func:`decay_matrix` is the same recurrence on the identity: the dense 1-SS decay mask.

Where the backward is itself differentiated (``create_graph=True``) its transposed recurrence is recorded as
another first-order scan, so second (and higher) derivatives are exact; a plain backward runs the solver
directly.
"""

from __future__ import annotations

import torch

from structmat.core.validation import broadcast_shapes
from structmat.linalg import iir
from structmat.linalg.scan import decay_scan
from structmat.linalg.segsum import decay_products

__all__ = ["first_order_scan", "decay_matrix", "scalar_sss_product"]


def _blocked(log_a: torch.Tensor, X: torch.Tensor, transpose: bool) -> torch.Tensor:
    """The blocked torch scan; ``transpose`` runs the adjoint (reversed time, decays shifted by one)."""
    if transpose:
        rev = torch.roll(torch.flip(log_a, (-1,)), 1, dims=-1)
        return torch.flip(_blocked(rev, torch.flip(X, (-2,)), False), (-2,))
    return decay_scan(torch.cat([torch.zeros_like(log_a[..., :1]), log_a[..., 1:]], dim=-1), X)


def _adjoint(log_a: torch.Tensor, a: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """``(I - S diag(a))^{-T} grad``: the transposed recurrence (compiled code on the CPU, not while
    torch.compile traces the backward: the scan, which it can trace); ``a`` the decays whose gradient it carries
    where the backward is differentiated (:func:`_transposed`)."""
    traced = torch.compiler.is_compiling() or grad.is_complex()
    compiled, a_const = (False, None) if traced else iir.compiled_path(log_a, grad)
    return _transposed(log_a, a, grad, compiled, a_const, False)


def _transposed(log_a: torch.Tensor, a: torch.Tensor, grad: torch.Tensor, compiled: bool, a_const, transpose: bool):
    """The transposed recurrence of a backward pass on ``grad``: recorded as a first-order scan (differentiable in
    ``a`` and ``grad``) where the backward is differentiated, else the solver alone. A backward marked
    ``once_differentiable`` lost the terms of a second derivative silently wherever the decays also entered the
    result another way (``a * scan(x)``): torch wraps its outputs in an error only when its incoming gradient
    requires grad."""
    if torch.is_grad_enabled():
        return _FirstOrderScan.apply(log_a, a, grad, compiled, a_const, not transpose)
    return _run(log_a, grad, compiled, a_const, not transpose)


def _decay_gradient(lam: torch.Tensor, h: torch.Tensor, shape: torch.Size, transpose: bool = False) -> torch.Tensor:
    """``dL/da_t = <l_t, h_{t-1}>``, or ``<h_t, l_{t-1}>`` for the transposed recurrence (``a_0`` enters
    nothing), real, summed to the decays' ``shape``."""
    ga = (lam[..., 1:, :] * h[..., :-1, :].conj() if not transpose else h[..., 1:, :] * lam[..., :-1, :].conj()).sum(-1)
    ga = torch.nn.functional.pad(ga.real if ga.is_complex() else ga, (1, 0))
    return ga.sum_to_size(shape)


def _run(log_a, X, compiled, a_const, transpose):
    if compiled:
        return iir.solve(log_a.to(torch.float64), X.to(torch.float64), a_const, transpose).to(X.dtype)
    return _blocked(log_a.to(X.real.dtype if X.is_complex() else X.dtype), X, transpose)


class _FirstOrderScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, log_a, a, X, compiled, a_const, transpose):
        h = _run(log_a, X, compiled, a_const, transpose)
        ctx.save_for_backward(log_a, a, h)
        ctx.compiled, ctx.a_const, ctx.transpose = compiled, a_const, transpose
        return h

    @staticmethod
    def backward(ctx, grad):
        log_a, a, h = ctx.saved_tensors
        lam = _transposed(log_a, a, grad, ctx.compiled, ctx.a_const, ctx.transpose)
        grad_a = _decay_gradient(lam, h, a.shape, ctx.transpose) if ctx.needs_input_grad[1] else None
        return None, grad_a, lam, None, None, None


class _DecayMatrix(torch.autograd.Function):
    @staticmethod
    def forward(ctx, log_a, a):
        L = decay_products(log_a)  # log_a[..., 0] never enters
        ctx.save_for_backward(log_a, a, L)
        return L

    @staticmethod
    def backward(ctx, grad):
        log_a, a, L = ctx.saved_tensors
        if L.shape[-1] < 2:  # no decay enters a product
            return None, torch.zeros(a.shape, dtype=L.dtype, device=L.device)
        return None, _decay_gradient(_adjoint(log_a, a, grad.to(L.dtype)), L, a.shape)


def first_order_scan(log_a: torch.Tensor, X: torch.Tensor, decays: torch.Tensor | None = None,
                     transpose: bool = False) -> torch.Tensor:
    """``h_t = exp(log_a_t) h_{t-1} + X_t`` for ``X (*, T, K)`` and ``log_a (*, T)`` (batch broadcast;
    ``log_a[..., 0]`` unused). ``O(T K)`` per batch row. ``transpose``: the transposed system, the recurrence
    ``h_t = X_t + exp(log_a_{t+1}) h_{t+1}`` run backwards in time (same solvers, no reversal of the data).

    Gradients reach ``X`` and, exactly, ``decays`` (the same decays as ``exp(log_a)``, where the caller
    has them) or else ``log_a`` (``a_t dL/da_t``).

    Examples
    --------
    >>> a = torch.tensor([1.0, 0.5, 0.0, 0.5], requires_grad=True)
    >>> h = first_order_scan(torch.log(a.detach()), torch.ones(4, 1), decays=a)
    >>> h[:, 0]
    tensor([1.0000, 1.5000, 1.0000, 1.5000], grad_fn=<SelectBackward0>)
    >>> h.sum().backward(); a.grad  # d/da_2 at a_2 = 0 is h_1 (1 + a_3) = 2.25
    tensor([0.0000, 1.0000, 2.2500, 1.0000])
    """
    batch = broadcast_shapes(log_a.shape[:-1], X.shape[:-2])
    X = X.expand(*batch, *X.shape[-2:])
    compiled, a_const = iir.compiled_path(log_a, X) if not X.is_complex() else (False, None)
    if decays is not None:
        a = decays
    elif log_a.requires_grad and torch.is_grad_enabled():
        a = torch.exp(log_a)  # the decays' gradient reaches log_a through it
    else:
        a = log_a  # no gradient wanted: only its shape is read (exp of a T-long expanded decay costs a pass)
    return _FirstOrderScan.apply(log_a.detach(), a, X, compiled, a_const, transpose)


def decay_matrix(log_a: torch.Tensor, decays: torch.Tensor) -> torch.Tensor:
    """``L[..., j, i] = a_{i+1} ... a_j`` for ``j >= i`` (0 above) from ``log_a (*, T)``: ``exp`` of the segment
    sums (exact zeros), with the gradient of ``decays`` (the same decays, ``(*, T)``) in linear space.

    ``L = (I - S diag(a))^{-1}`` is :func:`first_order_scan` of the identity, so
    ``dL/da_t = sum_i (L^T G)[t, i] L[t-1, i]`` for the incoming gradient ``G``: one transposed scan of
    ``T`` columns, ``O(T^2)``, exact at ``a_t = 0``.

    Examples
    --------
    >>> a = torch.tensor([1.0, 0.5, 0.0], requires_grad=True)
    >>> L = decay_matrix(torch.log(a.detach()), a)
    >>> L[2, 0].backward(); a.grad  # d(a_1 a_2)/da_2 = a_1 at a_2 = 0
    tensor([0.0000, 0.0000, 0.5000])
    """
    return _DecayMatrix.apply(log_a.detach(), decays)


def scalar_sss_product(log_a: torch.Tensor, B: torch.Tensor, C: torch.Tensor, D: torch.Tensor | None, X: torch.Tensor,
                       decays: torch.Tensor | None = None, lower: bool = True) -> torch.Tensor:
    """``M X`` for the order-1 semiseparable ``M`` of scalar decays ``a = exp(log_a) (*, T)``, ``B, C (*, T, 1)``,
    ``D (*, T)`` or None, ``X (*, T, K)``: ``y_t = c_t a_t h_{t-1} + d_t x_t`` with ``h_t = a_t h_{t-1} + b_t x_t``
    (``lower``), or the transpose ``y = b o F^T shift_up(a o c o x) + d o x`` (``F`` the first-order recurrence):
    one :func:`first_order_scan`, compiled on the CPU, ``O(T K)``. The strict part ``a_t h_{t-1}`` is read from the
    shifted state, never as ``h_t - b_t x_t`` (which would cancel where the decays are strong).

    Examples
    --------
    >>> la = torch.log(torch.tensor([1.0, 0.5, 0.5]))
    >>> one = torch.ones(3, 1)
    >>> scalar_sss_product(la, one, one, None, torch.eye(3))  # the strictly lower decay mask
    tensor([[0.0000, 0.0000, 0.0000],
            [0.5000, 0.0000, 0.0000],
            [0.2500, 0.5000, 0.0000]])
    """
    if X.shape[-2] == 0:
        return X * B.sum()  # (T = 0: nothing to shift; keeps the broadcast batch and dtype)
    a = (decays if decays is not None else torch.exp(log_a))[..., None]
    pad = torch.nn.functional.pad
    if lower:
        h = first_order_scan(log_a, B * X, decays)
        y = C * a * pad(h[..., :-1, :], (0, 0, 1, 0))
    else:
        u = pad((a * C * X)[..., 1:, :], (0, 0, 0, 1))
        y = B * first_order_scan(log_a, u, decays, transpose=True)
    return y if D is None else y + D[..., None] * X

