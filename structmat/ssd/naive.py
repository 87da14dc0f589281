"""The SSD recurrence step by step: the independent reference for every SSD backend.

``h_t = exp(dt_t A) h_{t-1} + dt_t x_t B_t^T`` (state ``(P, N)`` per head), ``y_t = h_t C_t``;
packed sequences reset the state where ``seq_idx`` changes. ``O(T)`` Python steps: tests only.
"""

from __future__ import annotations

import torch

__all__ = ["ssd_sequential"]


def ssd_sequential(x, dt, A, B, C, *, initial_states=None, seq_idx=None):
    """Sequential SSD on processed ``dt`` (no bias/softplus), without ``D``/``z``.

    Shapes: ``x (b, l, h, p)``, ``dt (b, l, h)``, ``A (h,)``, ``B, C (b, l, g, n)``,
    ``initial_states (b, h, p, n)``, ``seq_idx (b, l)``. Returns ``(y, final_states)``.
    """
    b, l, h, p = x.shape
    g, n = B.shape[2], B.shape[3]
    Bh = B.repeat_interleave(h // g, dim=2)
    Ch = C.repeat_interleave(h // g, dim=2)
    state = x.new_zeros(b, h, p, n) if initial_states is None else initial_states.clone()
    ys = []
    for t in range(l):
        decay = torch.exp(dt[:, t] * A)  # (b, h)
        if seq_idx is not None and t > 0:
            decay = decay * (seq_idx[:, t] == seq_idx[:, t - 1]).to(decay)[:, None]
        state = decay[..., None, None] * state + (dt[:, t, :, None] * x[:, t])[..., None] * Bh[:, t, :, None, :]
        ys.append(torch.einsum("bhpn,bhn->bhp", state, Ch[:, t]))
    return torch.stack(ys, dim=1), state
