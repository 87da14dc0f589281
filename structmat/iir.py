"""A constant-decay 1-SS matvec on the CPU is an IIR filter: ``scipy.signal.lfilter``.

``y = M0 x`` with ``M0[j, i] = a^(j - i)`` is the recurrence ``h_t = a h_{t-1} + x_t``, the filter
``1 / (1 - a z^-1)``. ``lfilter`` runs it in compiled code, step for step the same arithmetic as the
recurrence (no powers or ratios, ``a = 0`` exact). The backward is the time-reversed filter.
Time-varying decays go through the blocked scan of :mod:`structmat.scan` instead.
"""

from __future__ import annotations

import numpy as np
import scipy.signal
import torch

__all__ = ["constant_decay", "iir_scan"]


def constant_decay(log_a: torch.Tensor, X: torch.Tensor) -> float | None:
    """The common decay ``a`` if the filter path applies (CPU, real float, one decay), else None."""
    if X.device.type != "cpu" or X.dtype not in (torch.float32, torch.float64) or X.shape[-2] < 2:
        return None
    tail = log_a.detach()[..., 1:]
    lo, hi = torch.aminmax(tail)
    return float(torch.exp(lo.double())) if bool(lo == hi) else None


def _filter(a: float, X: torch.Tensor, reverse: bool) -> torch.Tensor:
    # always in float64: a float32 decay such as 1 - 1e-7 would round by ~2e-8 per step, and
    # that error compounds over 10^6 steps
    x = X.detach().numpy()
    if reverse:
        x = x[..., ::-1, :]
    y = scipy.signal.lfilter([1.0], [1.0, -a], x.astype(np.float64, copy=False), axis=-2)
    if reverse:
        y = y[..., ::-1, :]
    return torch.from_numpy(np.ascontiguousarray(y, dtype=x.dtype))


class _IIRScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, log_a, X, a):
        h = _filter(a, X, reverse=False)
        ctx.save_for_backward(log_a, h)
        ctx.a = a
        return h

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        log_a, h = ctx.saved_tensors
        lam = _filter(ctx.a, grad.contiguous(), reverse=True)  # M0^T grad
        grad_log_a = None
        if ctx.needs_input_grad[0]:
            # h_t = a_t h_{t-1} + x_t: dL/d log_a_t = a_t <lam_t, h_{t-1}>
            ga = (lam[..., 1:, :] * h[..., :-1, :]).sum(-1) * torch.exp(log_a[..., 1:])
            grad_log_a = torch.cat([torch.zeros_like(ga[..., :1]), ga], dim=-1)
            while grad_log_a.dim() > log_a.dim():
                grad_log_a = grad_log_a.sum(0)
            for i, n in enumerate(log_a.shape):
                if n == 1 and grad_log_a.shape[i] != 1:
                    grad_log_a = grad_log_a.sum(i, keepdim=True)
        return grad_log_a, lam, None


def iir_scan(log_a: torch.Tensor, X: torch.Tensor, a: float) -> torch.Tensor:
    """``h_t = a h_{t-1} + X_t`` for ``X (*, T, K)``; differentiable once in ``log_a`` and ``X``."""
    batch = torch.broadcast_shapes(log_a.shape[:-1], X.shape[:-2])
    return _IIRScan.apply(log_a.to(X.dtype), X.expand(*batch, *X.shape[-2:]), a)
