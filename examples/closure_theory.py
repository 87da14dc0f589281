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
rows = [("M1 (N=2)", M1), ("M2 (N=3)", M2), ("M1 + M2", M1 + M2), ("M1 @ M2", M1 @ M2), ("M1.inv()", M1.inv()),
        ("OneSS(a) + OneSS(a)", a + a), ("(a + a).compress()", (a + a).compress()), ("(M1 + M1).compress()", (M1 + M1).compress())]
ranks = {}
for name, M in rows:
    ranks[name] = (rank(M), rank(M, strict=True))
    print(f"{name:<28} {type(M).__name__:<10} {M.order:>5} {ranks[name][0]:>8} {ranks[name][1]:>7}")

# the theory, checked: sums and products add ranks; an N-SS inverse is N strictly, N + 1 inclusive
assert ranks["M1 + M2"][1] <= 5 and ranks["M1 @ M2"][1] <= 5
assert ranks["M1.inv()"][1] <= 2 and ranks["M1.inv()"][0] <= 3
assert ranks["(a + a).compress()"] == ranks["OneSS(a) + OneSS(a)"] == (1, 1)
print("every bound of Mamba-2 Prop. C.1 holds")
