"""First-order recurrences ``h_t = a_t h_{t-1} + x_t`` on the CPU, in compiled code.

The recurrence is the lower bidiagonal system ``(I - S diag(a)) h = x`` (``S`` the down-shift), so
compiled solvers run it step for step with the same arithmetic as the loop (no powers, no ratios,
``a_t = 0`` exact):

* a constant decay is the IIR filter ``1 / (1 - a z^-1)``: :func:`scipy.signal.lfilter`;
* time-varying decays are a banded triangular solve: LAPACK ``dtbtrs`` with one subdiagonal.

Both run in float64 whatever the input dtype: a float32 decay such as ``1 - 1e-7`` would round by
``~2e-8`` per step, and that error compounds over ``10^6`` steps. The backward pass is the
transposed system, the same recurrence in reversed time (:mod:`structmat.linalg.first_order` holds
the autograd). On other devices, for complex data, and for many columns per decay (where the
vectorised blocked scan of :mod:`structmat.linalg.scan` is faster) that scan runs instead.
"""

from __future__ import annotations

import threading

import numpy as np
import scipy.linalg.lapack
import torch

from structmat.core.host import host

__all__ = ["compiled_path", "solve", "MAX_BANDED_COLUMNS"]

#: Above this many columns per decay row the blocked scan beats ``dtbtrs`` (one column at a time).
MAX_BANDED_COLUMNS = 64

# The band is written into a per-thread workspace: a fresh megabyte-sized buffer costs a page
# fault per 4 KiB on first touch, as much again as the solve itself at T = 1e5.
_WORKSPACE = threading.local()


def _constant(log_a: torch.Tensor) -> float | None:
    """The common decay ``a`` if every ``log_a[..., 1:]`` is the same number, else None."""
    tail = log_a.detach()[..., 1:]
    if all(stride == 0 for stride in tail.stride()):  # one number expanded (OneSS.decay): no pass over T
        tail = tail.reshape(-1)[:1]
    lo, hi = torch.aminmax(tail)
    return float(torch.exp(lo.double())) if bool(lo == hi) else None


def compiled_path(log_a: torch.Tensor, X: torch.Tensor) -> tuple[bool, float | None]:
    """``(applies, a_const)``: whether a compiled solver runs ``X (*, T, K)`` (real CPU data, and a
    constant decay or at most :data:`MAX_BANDED_COLUMNS` columns), and the constant decay if there is one."""
    if X.device.type != "cpu" or X.dtype not in (torch.float32, torch.float64) or X.shape[-2] < 2 or X.numel() == 0:
        return False, None  # (an empty operand: LAPACK's reshapes cannot take it, the scan can)
    a_const = _constant(log_a)
    return a_const is not None or X.shape[-1] <= MAX_BANDED_COLUMNS, a_const


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
    np.exp(host(log_a)[..., 1:], out=band[..., :-1, 1])
    np.negative(band[..., :-1, 1], out=band[..., :-1, 1])
    return band


def solve(log_a: torch.Tensor, X: torch.Tensor, a_const: float | None, transpose: bool) -> torch.Tensor:
    """``(I - S diag(a))^{-1} X`` (or its transpose) for float64 ``log_a (*a, T)``, ``X (*, T, K)``.

    Pure numpy/LAPACK on purpose: small torch ops between sequential solves wake torch's idle
    thread pool each time, which costs more than the solve on a 2-core machine. Not differentiated.

    Examples
    --------
    >>> log_a = torch.log(torch.tensor([1.0, 0.5, 0.0, 0.5], dtype=torch.float64))
    >>> solve(log_a, torch.ones(4, 1, dtype=torch.float64), None, transpose=False)[:, 0]
    tensor([1.0000, 1.5000, 1.0000, 1.5000], dtype=torch.float64)
    """
    if a_const is not None:  # time last and contiguous: lfilter runs fastest along a contiguous axis
        import scipy.signal  # (here: importing it costs 0.2-0.4 s of scipy.stats and scipy.ndimage)

        x = np.ascontiguousarray(np.swapaxes(host(X), -1, -2))
        x = x[..., ::-1] if transpose else x
        y = scipy.signal.lfilter([1.0], [1.0, -a_const], x, axis=-1)
        return torch.from_numpy(np.ascontiguousarray(np.swapaxes(y[..., ::-1] if transpose else y, -1, -2)))
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
    out = np.array(host(cols), dtype=np.float64, order="C")  # per row (T, K) in Fortran order, solved in place
    for r in range(out.shape[0]):
        ab = band[which[r]].T
        _, info = scipy.linalg.lapack.dtbtrs(ab, out[r].T, uplo="L", trans="T" if transpose else "N", diag="U",
                                             overwrite_b=1)
        if info != 0:  # a unit-diagonal solve cannot be singular; only bad arguments land here
            raise RuntimeError(f"LAPACK dtbtrs failed with info = {info}")
    return torch.from_numpy(out)
