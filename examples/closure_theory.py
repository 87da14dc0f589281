"""Check the closure theory of semiseparable matrices numerically, from the parameters.

Run: ``python examples/closure_theory.py``. Sums and products of N-SS matrices are (N1 + N2)-SS;
the inverse of an N-SS matrix is N-SS strictly below the diagonal and (N + 1)-SS inclusive; the
inverse of a (k + 1)-banded lower-triangular matrix is (k + 1)-SS (Mamba-2, Theorem C.3).
"""

import torch

import structmat as sm

torch.manual_seed(0)
T = 200
F64 = torch.float64


def random_sss(n):
    return sm.SSS(torch.rand(T, n, dtype=F64), torch.randn(T, n, dtype=F64), torch.randn(T, n, dtype=F64),
                  D=2 + torch.rand(T, dtype=F64))


M1, M2 = random_sss(2), random_sss(3)
a = sm.OneSS.from_decays(torch.rand(T, dtype=F64))
rank = sm.semiseparable_rank
print(f"{'matrix':<28} {'class':<10} {'order':>5} {'SS rank':>8} {'strict':>7}")
for name, M in [("M1 (N=2)", M1), ("M2 (N=3)", M2), ("M1 + M2", M1 + M2), ("M1 @ M2", M1 @ M2),
                ("M1.inv()", M1.inv()), ("OneSS(a) + OneSS(a)", a + a), ("(a + a).compress()", (a + a).compress()),
                ("(M1 + M1).compress()", (M1 + M1).compress())]:
    print(f"{name:<28} {type(M).__name__:<10} {M.order:>5} {rank(M):>8} {rank(M, strict=True):>7}")
