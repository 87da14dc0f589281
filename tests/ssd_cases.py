"""The inputs and the float64 reference the tests of ``ssd`` and ``ssd_step`` share."""

import math

import torch
from conftest import DEV, F64

from structmat.kernels.decay_naive import decay_naive
from structmat.ssd import process_dt


def inputs(b, l, h, p, g, n, *, seed=0, dtype=torch.float32, device=DEV):
    gen = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=gen, dtype=F64)  # noqa: E731
    x, dt, A = r(b, l, h, p), r(b, l, h).abs(), -torch.rand(h, generator=gen, dtype=F64) * 2
    B, C = r(b, l, g, n), r(b, l, g, n)
    D, z, bias, init = r(h, p), r(b, l, h, p), r(h), r(b, h, p, n)
    out = dict(x=x, dt=dt, A=A, B=B, C=C, D=D, z=z, dt_bias=bias, initial_states=init)
    return {k: v.to(device=device, dtype=dtype if k not in ("dt", "A", "dt_bias", "initial_states") else torch.float32)
            for k, v in out.items()}


def reference(x, dt, A, B, C, *, D=None, z=None, dt_bias=None, dt_softplus=False, dt_limit=(0.0, math.inf),
              initial_states=None, seq_idx=None):
    """Float64 sequential recurrence with the D and z terms, on the CPU."""
    cpu = lambda t: None if t is None else t.cpu().to(F64)  # noqa: E731
    dtp = process_dt(cpu(dt), cpu(dt_bias), dt_softplus, dt_limit).to(F64)
    return decay_naive(cpu(x), dtp * cpu(A), cpu(B), cpu(C), scale=dtp, D=cpu(D), z=cpu(z),
                       initial_state=cpu(initial_states), seq_idx=None if seq_idx is None else seq_idx.cpu())
