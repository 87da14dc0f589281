"""Linear recurrences ``h_t = A_t h_{t-1} + u_t``: the engine under every semiseparable matvec.

Two algorithms side by side:

* :func:`linear_scan_sequential` -- the plain recurrence, one step per time index. The reference.
* :func:`linear_scan` -- a blocked scan: the sequence is cut into chunks of ``L`` steps, each
  chunk is scanned locally (all chunks at once), the chunk-end states are combined by the *same*
  scan one level up (recursively), and the entering states are pushed back through the prefix
  transitions of each chunk. Work is ``O(T)`` and Python-level steps ``O(L log_L T)``.

:func:`decay_scan` is the 1-SS hot path (scalar log decays, no state axis).
``A[..., 0]`` is never used unless a state ``h0`` enters before the first step.
"""

from __future__ import annotations

import torch

from structmat.core.transitions import Transitions

__all__ = ["linear_scan", "linear_scan_sequential", "decay_scan", "SCAN_CHUNK"]

#: Block length of the blocked scans: long enough that the Python steps of a block amortise, short
#: enough that the ``O(L)`` sequential part stays small (measured on the CPU: 16-64 are within 10%).
SCAN_CHUNK = 32


def linear_scan_sequential(A: Transitions, u: torch.Tensor, h0: torch.Tensor | None = None) -> torch.Tensor:
    """Plain recurrence ``h_t = A_t h_{t-1} + u_t`` (``h_{-1} = h0`` or 0); returns ``h`` like ``u (*, T, N, K)``.

    ``O(T)`` Python steps; the reference for :func:`linear_scan`.
    """
    steps = u.shape[-3]
    if steps == 0:
        return u.clone()
    a, u_t, step = A.step_factors(), u.movedim(-3, 0), A.stepper()
    h = u_t[0] if h0 is None else step(u_t[0], a[0], h0)
    out = [h]
    for t in range(1, steps):
        h = step(u_t[t], a[t], h)
        out.append(h)
    return torch.stack(out, dim=-3)


def linear_scan(A: Transitions, u: torch.Tensor, h0: torch.Tensor | None = None, chunk: int = SCAN_CHUNK) -> torch.Tensor:
    """Blocked scan for ``h_t = A_t h_{t-1} + u_t``; same result as :func:`linear_scan_sequential`.

    Parameters
    ----------
    A : Transitions
        ``T`` steps, batch dims equal to ``u``'s (or broadcastable).
    u : Tensor, shape ``(*, T, N, K)``
    h0 : Tensor, shape ``(*, N, K)``, optional
        State before the first step.
    chunk : int
        Block length ``L``.

    Returns
    -------
    Tensor, shape ``(*, T, N, K)``

    Notes
    -----
    ``O(T N K)`` work for scalar and diagonal transitions, ``O(T N^2 K + T N^3 / L)`` for dense.

    Examples
    --------
    >>> import torch
    >>> a = Transitions.from_log(torch.full((100,), 0.5).log())
    >>> h = linear_scan(a, torch.ones(100, 1, 1))
    >>> round(float(h[-1, 0, 0]), 6)  # geometric series 1 + 1/2 + 1/4 + ...
    2.0
    """
    steps = u.shape[-3]
    if steps <= 2 * chunk:
        return linear_scan_sequential(A, u, h0)
    n_chunks = -(-steps // chunk)
    A_c = A.chunked(chunk)
    if n_chunks * chunk != steps:  # (a zero pad would still copy u)
        u = torch.nn.functional.pad(u, (0, 0, 0, 0, 0, n_chunks * chunk - steps))
    u_c = u.reshape(*u.shape[:-3], n_chunks, chunk, *u.shape[-2:])
    h_local = linear_scan_sequential(A_c, u_c)
    phi = A_c.prefix()
    h_end = linear_scan(phi.last(), h_local[..., -1, :, :], h0, chunk)
    first = torch.zeros_like(h_end[..., :1, :, :]) if h0 is None else h0[..., None, :, :].expand_as(h_end[..., :1, :, :])
    h_in = torch.cat([first, h_end[..., :-1, :, :]], dim=-3)
    h = h_local + phi.apply(h_in[..., None, :, :])
    return h.reshape(*u.shape[:-3], n_chunks * chunk, *u.shape[-2:])[..., :steps, :, :]


def decay_scan(log_a: torch.Tensor, u: torch.Tensor, chunk: int = SCAN_CHUNK) -> torch.Tensor:
    """``h_t = exp(log_a_t) h_{t-1} + u_t`` for ``u (*, T, K)`` and ``log_a (*, T)``: :func:`linear_scan`
    of the log kind without the state axis, in fewer and larger tensor operations.

    Examples
    --------
    >>> decay_scan(torch.log(torch.tensor([1.0, 0.5, 0.0, 0.5])), torch.ones(4, 1))[:, 0]
    tensor([1.0000, 1.5000, 1.0000, 1.5000])
    """
    steps = u.shape[-2]
    a = torch.exp(log_a)
    if steps <= 2 * chunk:
        if steps == 0:
            return u.clone()
        h, out = u[..., 0, :], [u[..., 0, :]]
        for t in range(1, steps):
            h = torch.addcmul(u[..., t, :], a[..., t, None], h)
            out.append(h)
        return torch.stack(out, dim=-2)
    n_chunks = -(-steps // chunk)
    pad = n_chunks * chunk - steps
    if pad:  # (a zero pad would still copy)
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
