"""The decay recurrence step by step: the independent reference for every chunked-decay backend.

Per batch ``b`` and head ``h`` (group ``g = h // (H / G)``), with the state ``S_t`` of shape ``(P, N)``::

    S_t = exp(log_a[b, t, h]) S_{t-1} + (scale[b, t, h] x[b, t, h]) B[b, t, g]^T,   S_{-1} = initial_state or 0
    y[b, t, h] = S_t C[b, t, g] + D[h] x[b, t, h],     out = y * silu(z)

``log_a[:, 0]`` decays the initial state. Where ``seq_idx`` changes the state restarts from zero
(``initial_state`` feeds the first sequence only). ``O(T)`` Python steps: tests only.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["decay_naive"]


def decay_naive(x, log_a, B, C, *, scale=None, D=None, z=None, initial_state=None, seq_idx=None):
    """Sequential decay recurrence; returns ``(out, final_state)``.

    Shapes: ``x (b, l, h, p)``, ``log_a (b, l, h)`` (``-inf`` allowed: an exact cut), ``B, C (b, l, g, n)``,
    ``scale (b, l, h)``, ``D (h,)`` or ``(h, p)``, ``z`` like ``x``, ``initial_state (b, h, p, n)``,
    ``seq_idx (b, l)``. Computes in the dtype the inputs promote to; the final state is ``(b, h, p, n)``.

    Examples
    --------
    >>> import torch
    >>> x, B, C = torch.ones(1, 3, 1, 1), torch.ones(1, 3, 1, 1), torch.ones(1, 3, 1, 1)
    >>> y, _ = decay_naive(x, torch.log(torch.tensor([[[1.0], [0.5], [0.5]]])), B, C)
    >>> y[0, :, 0, 0]
    tensor([1.0000, 1.5000, 1.7500])
    """
    b, l, h, p = x.shape
    g = B.shape[2]
    Bh = B.repeat_interleave(h // g, dim=2)
    Ch = C.repeat_interleave(h // g, dim=2)
    u = x if scale is None else x * scale[..., None]
    state = x.new_zeros(b, h, p, B.shape[3]) if initial_state is None else initial_state.to(x.dtype).clone()
    ys = []
    for t in range(l):
        decay = torch.exp(log_a[:, t]).to(x.dtype)  # (b, h)
        if seq_idx is not None and t > 0:
            decay = decay * (seq_idx[:, t] == seq_idx[:, t - 1]).to(decay)[:, None]
        state = decay[..., None, None] * state + u[:, t, :, :, None] * Bh[:, t, :, None, :]
        ys.append(torch.einsum("bhpn,bhn->bhp", state, Ch[:, t]))
    y = torch.stack(ys, dim=1) if ys else x.new_zeros(x.shape[:2] + (h, p)).to(state.dtype)
    if D is not None:
        y = y + x * (D if D.dim() == 2 else D[:, None])
    if z is not None:
        y = y * F.silu(z)
    return y, state
