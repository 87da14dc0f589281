"""Linear recurrences ``h_t = A_t h_{t-1} + u_t``: the engine under every semiseparable matvec.

Two algorithms side by side:

* :func:`linear_scan_sequential` -- the plain recurrence, one step per time index. The reference.
* :func:`linear_scan` -- a blocked scan: the sequence is cut into chunks of ``L`` steps, each
  chunk is scanned locally (all chunks at once), the chunk-end states are combined by the *same*
  scan one level up (recursively), and the entering states are pushed back through the prefix
  transitions of each chunk. Work is ``O(T)`` and Python-level steps ``O(L log_L T)``.

Transitions come in four kinds, with ``u`` of shape ``(*, T, N, K)``:

========  ======================  ===================================================
kind      ``A`` shape             meaning
========  ======================  ===================================================
``log``   ``(*, T)``, real        scalar decay ``exp(A_t)``; prefix products are
                                  ``exp(cumsum(A))`` (no ratios, ``-inf`` gives 0)
``scalar`` ``(*, T)``             scalar ``A_t`` (real or complex, any sign)
``diag``  ``(*, T, N)``           diagonal ``A_t``
``dense`` ``(*, T, N, N)``        dense ``A_t``
========  ======================  ===================================================

``A[..., 0, ...]`` is never used (there is no ``h_{-1}`` unless ``h0`` is given).
"""

from __future__ import annotations

import torch

__all__ = ["linear_scan", "linear_scan_sequential", "decay_scan", "apply_transition", "KINDS"]

KINDS = ("log", "scalar", "diag", "dense")
_CHUNK = 32

_TIME_AXIS = {"log": -1, "scalar": -1, "diag": -2, "dense": -3}


def apply_transition(A: torch.Tensor, h: torch.Tensor, kind: str) -> torch.Tensor:
    """Return ``A h`` for one transition ``A`` (no time axis) and states ``h`` of shape ``(*, N, K)``."""
    if kind == "log":
        return torch.exp(A)[..., None, None] * h
    if kind == "scalar":
        return A[..., None, None] * h
    if kind == "diag":
        return A[..., None] * h
    return A @ h


def _step_factors(A: torch.Tensor, kind: str) -> torch.Tensor:
    """Per-step multipliers shaped to broadcast against ``h_t`` of shape ``(*, N, K)``, time first."""
    if kind == "log":
        A = torch.exp(A)
    if kind in ("log", "scalar"):
        return A[..., None, None].movedim(-3, 0)
    if kind == "diag":
        return A[..., None].movedim(-3, 0)
    return A.movedim(-3, 0)


def linear_scan_sequential(
    A: torch.Tensor, u: torch.Tensor, kind: str, h0: torch.Tensor | None = None
) -> torch.Tensor:
    """Plain recurrence ``h_t = A_t h_{t-1} + u_t`` (``h_{-1} = h0`` or 0); returns ``h`` like ``u``.

    ``O(T)`` Python steps; the reference for :func:`linear_scan`.
    """
    steps = u.shape[-3]
    a = _step_factors(A, kind)
    u_t = u.movedim(-3, 0)
    if kind == "dense":
        step = lambda t, h: u_t[t] + a[t] @ h  # noqa: E731
    else:
        step = lambda t, h: torch.addcmul(u_t[t], a[t], h)  # noqa: E731
    h = u_t[0] if h0 is None else step(0, h0)
    out = [h]
    for t in range(1, steps):
        h = step(t, h)
        out.append(h)
    return torch.stack(out, dim=-3)


def _prefix_transitions(A: torch.Tensor, kind: str) -> torch.Tensor:
    """``Phi_j = A_j ... A_0`` along the (chunk-local) time axis; for ``log`` the summed logs."""
    if kind == "log":
        return torch.cumsum(A, dim=-1)
    if kind in ("scalar", "diag"):
        return torch.cumprod(A, dim=_TIME_AXIS[kind])
    phi = [A[..., 0, :, :]]
    for t in range(1, A.shape[-3]):
        phi.append(A[..., t, :, :] @ phi[-1])
    return torch.stack(phi, dim=-3)


def _pad_time(x: torch.Tensor, axis: int, pad: int, value: torch.Tensor) -> torch.Tensor:
    shape = list(x.shape)
    shape[axis] = pad
    return torch.cat([x, value.to(x).expand(shape)], dim=axis)


def _identity(A: torch.Tensor, kind: str) -> torch.Tensor:
    if kind == "log":
        return torch.zeros((), dtype=A.dtype, device=A.device)
    if kind == "dense":
        return torch.eye(A.shape[-1], dtype=A.dtype, device=A.device)
    return torch.ones((), dtype=A.dtype, device=A.device)


def linear_scan(
    A: torch.Tensor, u: torch.Tensor, kind: str, h0: torch.Tensor | None = None, chunk: int = _CHUNK
) -> torch.Tensor:
    """Blocked scan for ``h_t = A_t h_{t-1} + u_t``; same result as :func:`linear_scan_sequential`.

    Parameters
    ----------
    A : Tensor
        Transitions, shaped by ``kind`` (see the module docstring); batch dims equal to ``u``'s.
    u : Tensor, shape ``(*, T, N, K)``
        Inputs.
    kind : {"log", "scalar", "diag", "dense"}
    h0 : Tensor, shape ``(*, N, K)``, optional
        State before the first step.
    chunk : int
        Block length ``L``.

    Returns
    -------
    Tensor, shape ``(*, T, N, K)``

    Notes
    -----
    ``O(T N K)`` work for scalar and diagonal kinds, ``O(T N^2 K + T N^3 / L)`` for dense.

    Examples
    --------
    >>> import torch
    >>> a = torch.full((100,), 0.5).log()
    >>> u = torch.ones(100, 1, 1)
    >>> h = linear_scan(a, u, "log")
    >>> round(float(h[-1, 0, 0]), 6)  # geometric series 1 + 1/2 + 1/4 + ...
    2.0
    """
    steps = u.shape[-3]
    if steps <= 2 * chunk:
        return linear_scan_sequential(A, u, kind, h0)
    t_axis = A.dim() + _TIME_AXIS[kind]
    n_chunks = -(-steps // chunk)
    pad = n_chunks * chunk - steps
    if pad:
        A = _pad_time(A, t_axis, pad, _identity(A, kind))
        u = _pad_time(u, u.dim() - 3, pad, torch.zeros((), dtype=u.dtype, device=u.device))
    A_c = A.reshape(*A.shape[:t_axis], n_chunks, chunk, *A.shape[t_axis + 1 :])
    u_c = u.reshape(*u.shape[:-3], n_chunks, chunk, *u.shape[-2:])

    h_local = linear_scan_sequential(A_c, u_c, kind)
    phi = _prefix_transitions(A_c, kind)
    chunk_transition = phi.select(t_axis + 1, chunk - 1)
    h_end = linear_scan(chunk_transition, h_local[..., -1, :, :], kind, h0, chunk)
    h_in = h_end[..., :-1, :, :]
    first = torch.zeros_like(h_end[..., :1, :, :]) if h0 is None else h0[..., None, :, :].expand_as(h_end[..., :1, :, :])
    h_in = torch.cat([first, h_in], dim=-3)
    h = h_local + apply_transition(phi, h_in[..., None, :, :], kind)
    h = h.reshape(*u.shape[:-3], n_chunks * chunk, *u.shape[-2:])
    return h[..., :steps, :, :]


def decay_scan(log_a: torch.Tensor, u: torch.Tensor, chunk: int = 32) -> torch.Tensor:
    """``linear_scan(log_a, u[..., None, :], "log")[..., 0, :]`` without the state axis.

    The 1-SS hot path: ``u`` of shape ``(*, T, K)``, ``log_a`` of shape ``(*, T)``. Same blocked
    algorithm, fewer and larger tensor operations.
    """
    steps = u.shape[-2]
    a = torch.exp(log_a)
    if steps <= 2 * chunk:
        h, out = u[..., 0, :], [u[..., 0, :]]
        for t in range(1, steps):
            h = torch.addcmul(u[..., t, :], a[..., t, None], h)
            out.append(h)
        return torch.stack(out, dim=-2)
    n_chunks = -(-steps // chunk)
    pad = n_chunks * chunk - steps
    if pad:
        log_a = torch.nn.functional.pad(log_a, (0, pad))
        a = torch.nn.functional.pad(a, (0, pad), value=1.0)
        u = torch.nn.functional.pad(u, (0, 0, 0, pad))
    a_c = a.reshape(*a.shape[:-1], n_chunks, chunk)
    u_c = u.reshape(*u.shape[:-2], n_chunks, chunk, u.shape[-1])
    h = u_c[..., 0, :]
    local = [h]
    for t in range(1, chunk):
        h = torch.addcmul(u_c[..., t, :], a_c[..., t, None], h)
        local.append(h)
    local = torch.stack(local, dim=-2)
    # prefix products inside a chunk: a product of at most `chunk` factors (never a ratio); the
    # chunk totals go up a level as sums of logs, so long spans stay accurate
    phi = torch.cumprod(a_c, dim=-1)
    h_end = decay_scan(log_a.reshape(*log_a.shape[:-1], n_chunks, chunk).sum(-1), local[..., -1, :], chunk)
    h_in = torch.cat([torch.zeros_like(h_end[..., :1, :]), h_end[..., :-1, :]], dim=-2)
    out = torch.addcmul(local, phi[..., None], h_in[..., None, :])
    return out.reshape(*u.shape[:-2], n_chunks * chunk, u.shape[-1])[..., :steps, :]
