"""LION / Hydra style bidirectional attention with a quasiseparable mask, three ways.

Run: ``python examples/bidirectional_attention.py``. LION's selective mask
``M[i, j] = a_{min(i,j)+1} ... a_{max(i,j)}`` (one set of decays for both directions) is built in
structured form, applied as structured masked attention with every admissible contraction order,
and inverted (orders kept) to solve a system.
"""

import torch

import structmat as sm

torch.manual_seed(0)
B, T, H, N, P = 2, 512, 4, 16, 16
decay = torch.sigmoid(torch.randn(B, H, T) + 2)  # selective decays in (0, 1)
mask = sm.Quasiseparable.lion(decay)  # forward decays; the backward half reuses them
print(mask)

q, k, v = torch.randn(B, T, H, N), torch.randn(B, T, H, N), torch.randn(B, T, H, P)
print(sm.sma_plan(q, k, v, mask))
reference = sm.sma(q, k, v, mask, order="quadratic")
for order in ("linear", "chunked"):
    y = sm.sma(q, k, v, mask, order=order)
    err = (y - reference).abs().max()
    print(f"{order:<9} max |y - quadratic| = {err:.2e}")
    assert err < 1e-3 * reference.abs().max(), order

one = sm.Quasiseparable.lion(decay[0, 0].double()) + sm.Diagonal(torch.ones(T, dtype=torch.float64))
x = torch.randn(T, dtype=torch.float64)
inv = one.inv()
residual = (one @ (inv @ x) - x).abs().max()
print(f"inverse: {inv}, residual {residual:.1e}")
assert residual < 1e-10
residual = (one @ one.solve(x) - x).abs().max()  # blocked LU, without forming the inverse
print(f"solve: residual {residual:.1e}")
assert residual < 1e-10
