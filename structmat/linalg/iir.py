"""First-order recurrences ``h_t = a_t h_{t-1} + x_t`` on the CPU, in compiled code.

The recurrence is the lower bidiagonal system ``(I - S diag(a)) h = x`` (``S`` the down-shift), so
compiled solvers run it step for step with the same arithmetic as the loop (no powers, no ratios,
``a_t = 0`` exact):

* a constant decay is the IIR filter ``1 / (1 - a z^-1)``: :func:`scipy.signal.lfilter`;
* time-varying decays are a banded triangular solve: LAPACK ``dtbtrs`` with one subdiagonal.

Both run in float64 whatever the input dtype: a float32 decay such as ``1 - 1e-7`` would round by
``~2e-8`` per step, and that error compounds over ``10^6`` steps. The backward pass is the
transposed system, the same recurrence in reversed time. On other devices, for complex data, and
for many columns per decay (where the vectorised blocked scan of :mod:`structmat.linalg.scan` is faster)
the callers use that scan instead.
"""

from __future__ import annotations

import threading

import numpy as np
import scipy.linalg.lapack
import scipy.signal
import torch

__all__ = ["cpu_scan", "MAX_BANDED_COLUMNS"]

#: Above this many columns per decay row the blocked scan beats ``dtbtrs`` (one column at a time).
MAX_BANDED_COLUMNS = 64

# The band is written into a per-thread workspace: a fresh megabyte-sized buffer costs a page
# fault per 4 KiB on first touch, as much again as the solve itself at T = 1e5.
_WORKSPACE = threading.local()


def _constant(log_a: torch.Tensor) -> float | None:
    """The common decay ``a`` if every ``log_a[..., 1:]`` is the same number, else None."""
    lo, hi = torch.aminmax(log_a.detach()[..., 1:])
    return float(torch.exp(lo.double())) if bool(lo == hi) else None


def cpu_scan(log_a: torch.Tensor, X: torch.Tensor) -> torch.Tensor | None:
    """``h_t = exp(log_a_t) h_{t-1} + X_t`` for ``X (*, T, K)``, or None where no compiled path applies.

    Differentiable once in ``log_a`` and ``X``; ``log_a[..., 0]`` is unused. ``O(T K)`` per batch row.

    Examples
    --------
    >>> import torch
    >>> h = cpu_scan(torch.log(torch.tensor([1.0, 0.5, 0.0, 0.5])), torch.ones(4, 1))
    >>> h[:, 0]
    tensor([1.0000, 1.5000, 1.0000, 1.5000])
    """
    if X.device.type != "cpu" or X.dtype not in (torch.float32, torch.float64) or X.shape[-2] < 2:
        return None
    a_const = _constant(log_a)
    if a_const is None and X.shape[-1] > MAX_BANDED_COLUMNS:
        return None
    batch = torch.broadcast_shapes(log_a.shape[:-1], X.shape[:-2])
    h = _FirstOrder.apply(log_a.to(torch.float64), X.to(torch.float64).expand(*batch, *X.shape[-2:]), a_const)
    return h.to(X.dtype)


def _band(log_a: torch.Tensor) -> np.ndarray:
    """``(*, T, 2)`` float64 with ``[..., 0] = 1`` and ``[..., t, 1] = -a_{t+1}``: per row, the
    transpose is LAPACK's band storage of the unit lower bidiagonal ``I - S diag(a)``.

    A view of this thread's workspace, valid until the next call."""
    size = 2 * log_a.numel()
    buf = getattr(_WORKSPACE, "buf", None)
    if buf is None or buf.size < size:
        buf = _WORKSPACE.buf = np.empty(size)
    band = buf[:size].reshape(*log_a.shape, 2)
    band[..., 0] = 1.0
    band[..., -1, 1] = 0.0
    np.exp(log_a.detach().numpy()[..., 1:], out=band[..., :-1, 1])
    np.negative(band[..., :-1, 1], out=band[..., :-1, 1])
    return band


def _solve(log_a: torch.Tensor, X: torch.Tensor, a_const: float | None, transpose: bool) -> torch.Tensor:
    """``(I - S diag(a))^{-1} X`` (or its transpose) for float64 ``log_a (*a, T)``, ``X (*, T, K)``.

    Pure numpy/LAPACK on purpose: small torch ops between sequential solves wake torch's idle
    thread pool each time, which costs more than the solve on a 2-core machine.
    """
    if a_const is not None:
        x = X.detach().numpy()
        x = x[..., ::-1, :] if transpose else x
        y = scipy.signal.lfilter([1.0], [1.0, -a_const], x, axis=-2)
        return torch.from_numpy(np.ascontiguousarray(y[..., ::-1, :] if transpose else y))
    T, K = X.shape[-2:]
    rows = X.detach().reshape(-1, T, K)
    band = _band(log_a)
    if band.size == 2 * T:  # one decay row for the whole batch: fold the batch into the columns of one solve
        out = _banded_solve(band.reshape(1, T, 2), [0], rows.permute(0, 2, 1).reshape(1, -1, T), transpose)
        return out.reshape(rows.shape[0], K, T).transpose(1, 2).reshape(X.shape)
    a_batch = band.shape[:-2]
    which = np.broadcast_to(np.arange(band.size // (2 * T)).reshape(a_batch), X.shape[:-2]).ravel()
    out = _banded_solve(band.reshape(-1, T, 2), which, rows.transpose(1, 2), transpose)
    return out.transpose(1, 2).reshape(X.shape)


def _banded_solve(band: np.ndarray, which, cols: torch.Tensor, transpose: bool) -> torch.Tensor:
    """LAPACK ``dtbtrs`` per row ``r`` of ``cols (R, K, T)`` (time last) with the band ``band[which[r]]``."""
    out = np.array(cols.numpy(), dtype=np.float64, order="C")  # per row (T, K) in Fortran order, solved in place
    for r in range(out.shape[0]):
        ab = band[which[r]].T
        _, info = scipy.linalg.lapack.dtbtrs(ab, out[r].T, uplo="L", trans="T" if transpose else "N", diag="U",
                                             overwrite_b=1)
        if info != 0:  # a unit-diagonal solve cannot be singular; only bad arguments land here
            raise RuntimeError(f"LAPACK dtbtrs failed with info = {info}")
    return torch.from_numpy(out)


class _FirstOrder(torch.autograd.Function):
    @staticmethod
    def forward(ctx, log_a, X, a_const):
        h = _solve(log_a, X, a_const, transpose=False)
        ctx.save_for_backward(log_a, h)
        ctx.a_const = a_const
        return h

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        log_a, h = ctx.saved_tensors
        lam = _solve(log_a, grad, ctx.a_const, transpose=True)
        grad_log_a = None
        if ctx.needs_input_grad[0]:
            # h_t = a_t h_{t-1} + x_t: dL/dlog_a_t = a_t <lam_t, h_{t-1}>
            ga = (lam[..., 1:, :] * h[..., :-1, :]).sum(-1) * torch.exp(log_a[..., 1:])
            grad_log_a = torch.cat([torch.zeros_like(ga[..., :1]), ga], dim=-1).sum_to_size(log_a.shape)
        return grad_log_a, lam, None
