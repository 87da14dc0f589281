"""LION / Hydra style bidirectional attention with a quasiseparable mask, three ways.

Run: ``python examples/bidirectional_attention.py``. The mask ``M = M_F + J M_B J - I`` (selective
decays forwards and backwards) is built in structured form, applied as structured masked attention
with every admissible contraction order, and inverted (orders kept) to solve a system.
"""

import torch

import structmat as sm

torch.manual_seed(0)
B, T, H, N, P = 2, 512, 4, 16, 16
decay = torch.sigmoid(torch.randn(B, H, T) + 2)  # selective decays in (0, 1)
forward = sm.OneSS.from_decays(decay)
backward = sm.OneSS.from_decays(torch.flip(torch.roll(decay, -1, dims=-1), (-1,)))
mask = sm.Quasiseparable.bidirectional(forward, backward)
print(mask)

q, k, v = torch.randn(B, T, H, N), torch.randn(B, T, H, N), torch.randn(B, T, H, P)
print(sm.sma_plan(q, k, v, mask))
reference = sm.sma(q, k, v, mask, order="quadratic")
for order in ("linear", "chunked"):
    y = sm.sma(q, k, v, mask, order=order)
    err = (y - reference).abs().max()
    print(f"{order:<9} max |y - quadratic| = {err:.2e}")
    assert err < 1e-3 * reference.abs().max(), order

one = sm.Quasiseparable.bidirectional(sm.OneSS.from_decays(decay[0, 0].double()),
                                      sm.OneSS.from_decays(decay[0, 0].double().flip(0)), diag=2 * torch.ones(T, dtype=torch.float64))
x = torch.randn(T, dtype=torch.float64)
inv = one.inv()
residual = (one @ (inv @ x) - x).abs().max()
print(f"inverse: {inv}, residual {residual:.1e}")
assert residual < 1e-10
