"""The closure rules, in one place: which class ``M op N`` returns, keyed by the operand classes.

Lookup walks both operands' MROs (most specific pair first), so ``OneSS`` uses the ``SSS`` rules
unless it has its own. A rule may return ``NotImplemented`` (e.g. a lower and an upper operand)
to pass to the next match; the last resort is the lazy :class:`Sum` / :class:`Product`.

==========================  ====================  ==========================================
op                           operands              result
==========================  ====================  ==========================================
``+``                        SSS, SSS              SSS, orders add (block-diagonal ``A``)
``+``                        SSS, Diagonal         SSS, same order
``+``                        Diagonal, Diagonal    Diagonal
``+``                        LowRank, LowRank      LowRank, ranks add
``+``                        Dense, Dense          Dense
``+``                        Bidiagonal, Diagonal  Bidiagonal (also Bidiagonal + Bidiagonal)
``+`` ``@``                  Bidiagonal, SSS       SSS, through ``Bidiagonal.to_sss()`` (order 2)
``@``                        Diagonal, Bidiagonal  Bidiagonal
``@``                        SSS, SSS              SSS, orders add (block-triangular ``A``)
``@``                        Diagonal, SSS         SSS (OneSS stays OneSS), same order
``@``                        LowRank, any          LowRank ``U (M^T V)^T``
``@``                        Diagonal, Diagonal    Diagonal
``@``                        Dense, Dense          Dense
``hadamard``                 OneSS, OneSS          OneSS (log decays add)
``hadamard``                 SSS, SSS              SSS, orders multiply
``hadamard``                 Diagonal, any         Diagonal
``hadamard``                 Dense, any            Dense
``+``                        SSS lower, SSS upper  Quasiseparable
``+`` ``@``                  Quasiseparable, QS / SSS / OneSS / Diagonal   Quasiseparable, orders add
``@``                        SSS lower, SSS upper  Quasiseparable
``+`` ``hadamard``           Toeplitz, Toeplitz    Toeplitz (causal if both are)
``@``                        causal Toeplitz x2    causal Toeplitz (truncated polynomial product)
``+`` ``@`` ``hadamard``     Fourier, Fourier      Fourier
anything else                                      lazy Sum / Product; hadamard: TypeError
==========================  ====================  ==========================================
"""

from __future__ import annotations

import torch

from structmat.base import StructuredMatrix
from structmat.bidiagonal import Bidiagonal
from structmat.dense import Dense
from structmat.diagonal import Diagonal
from structmat.fourier import Fourier
from structmat.lazy import Product, Sum
from structmat.lowrank import LowRank
from structmat.one_ss import OneSS
from structmat.quasiseparable import (
    Quasiseparable,
    as_quasiseparable,
    qs_add,
    qs_add_diagonal,
    qs_add_sss,
    sss_add_mixed,
)
from structmat.quasiseparable_algebra import qs_matmul
from structmat.sss import SSS
from structmat.sss_algebra import (
    diagonal_matmul_sss,
    sss_add,
    sss_add_diagonal,
    sss_hadamard,
    sss_matmul,
    sss_matmul_diagonal,
)
from structmat.toeplitz import Toeplitz, _conv

__all__ = ["add", "matmul", "hadamard", "ADD", "MATMUL", "HADAMARD", "register"]


def _swap(rule):
    return lambda a, b: rule(b, a)


def _oness_hadamard(a: OneSS, b: OneSS):
    if a.lower != b.lower:
        return NotImplemented
    return OneSS(a.log_a + b.log_a, b=a.B[..., 0] * b.B[..., 0], c=a.C[..., 0] * b.C[..., 0], lower=a.lower)


def _diagonal_matmul_oness(d: Diagonal, m: OneSS):
    if not m.lower:
        return _oness_matmul_diagonal(m.T, d).T
    return OneSS(m.log_a, b=m.B[..., 0], c=m.C[..., 0] * d.d, lower=True)


def _oness_matmul_diagonal(m: OneSS, d: Diagonal):
    if not m.lower:
        return _diagonal_matmul_oness(d, m.T).T
    return OneSS(m.log_a, b=m.B[..., 0] * d.d, c=m.C[..., 0], lower=True)


def _bidiagonal_add(a: Bidiagonal, b: Bidiagonal | Diagonal):
    sub = b.sub if isinstance(b, Bidiagonal) else torch.zeros_like(a.sub)
    return Bidiagonal(a.diag + b.diagonal(), a.sub + sub)


def _diagonal_matmul_bidiagonal(d: Diagonal, m: Bidiagonal):
    return Bidiagonal(d.d * m.diag, d.d[..., 1:] * m.sub)


def _bidiagonal_matmul_diagonal(m: Bidiagonal, d: Diagonal):
    return Bidiagonal(m.diag * d.d, m.sub * d.d[..., :-1])


def _via_sss(rule, left: bool):
    """Apply an SSS rule with a Bidiagonal operand converted to its order-2 SSS."""
    return (lambda a, b: rule(a.to_sss(), b)) if left else (lambda a, b: rule(a, b.to_sss()))


def _toeplitz_add(a: Toeplitz, b: Toeplitz):
    if a.causal and b.causal:
        return Toeplitz(a.c + b.c, causal=True)
    return Toeplitz(a.c + b.c, a.r + b.r)


def _toeplitz_matmul(a: Toeplitz, b: Toeplitz):
    """Causal @ causal is causal (a truncated polynomial product); general products are not Toeplitz."""
    if not (a.causal and b.causal):
        return NotImplemented
    return Toeplitz(_conv(a.c, b.c, a.shape[-1]), causal=True)


def _toeplitz_hadamard(a: Toeplitz, b: Toeplitz):
    if a.causal or b.causal:
        return Toeplitz(a.c * b.c, causal=True)
    return Toeplitz(a.c * b.c, a.r * b.r)


def _fourier_hadamard(a: Fourier, b: Fourier):
    # elementwise product of circulants: kernels multiply
    out = Fourier.from_kernel(a.kernel * b.kernel)
    return out


def _lowrank_matmul(a: LowRank, m: StructuredMatrix):
    return LowRank(a.U, m.T.matmul(a.V))


def _matmul_lowrank(m: StructuredMatrix, b: LowRank):
    return LowRank(m.matmul(b.U), b.V)


def _diagonal_hadamard(d: Diagonal, m: StructuredMatrix):
    if not hasattr(m, "diagonal"):
        return NotImplemented
    return Diagonal(d.d * m.diagonal())


def _dense_hadamard(a: Dense, m: StructuredMatrix):
    # Only reached with a Dense operand, which is O(T S) already: densifying m costs no more.
    return Dense(a.M * m.to_dense())


ADD = {
    (SSS, SSS): sss_add,
    (Quasiseparable, Quasiseparable): qs_add,
    (Quasiseparable, SSS): qs_add_sss,
    (SSS, Quasiseparable): _swap(qs_add_sss),
    (Quasiseparable, Diagonal): qs_add_diagonal,
    (Diagonal, Quasiseparable): _swap(qs_add_diagonal),
    (Toeplitz, Toeplitz): _toeplitz_add,
    (Fourier, Fourier): lambda a, b: Fourier(a.eigvals + b.eigvals, real=a.real and b.real),
    (Bidiagonal, SSS): _via_sss(sss_add, left=True),
    (SSS, Bidiagonal): _via_sss(sss_add, left=False),
    (Bidiagonal, Bidiagonal): _bidiagonal_add,
    (Bidiagonal, Diagonal): _bidiagonal_add,
    (Diagonal, Bidiagonal): _swap(_bidiagonal_add),
    (Dense, Diagonal): lambda a, b: Dense(a.M + b.to_dense()),
    (Diagonal, Dense): lambda a, b: Dense(a.to_dense() + b.M),
    (SSS, Diagonal): sss_add_diagonal,
    (Diagonal, SSS): _swap(sss_add_diagonal),
    (Diagonal, Diagonal): lambda a, b: Diagonal(a.d + b.d),
    (LowRank, LowRank): lambda a, b: LowRank(torch.cat([a.U, b.U], -1), torch.cat([a.V, b.V], -1)),
    (Dense, Dense): lambda a, b: Dense(a.M + b.M),
}
ADD[(SSS, SSS)] = lambda a, b: _first_of(sss_add(a, b), sss_add_mixed(a, b))

MATMUL = {
    (Quasiseparable, Quasiseparable): qs_matmul,
    (Quasiseparable, SSS): lambda a, b: qs_matmul(a, as_quasiseparable(b)),
    (SSS, Quasiseparable): lambda a, b: qs_matmul(as_quasiseparable(a), b),
    (Quasiseparable, Diagonal): lambda a, d: Quasiseparable(a.lower_part @ d, a.upper_part @ d, a.diag * d.d),
    (Diagonal, Quasiseparable): lambda d, a: Quasiseparable(d @ a.lower_part, d @ a.upper_part, d.d * a.diag),
    (Toeplitz, Toeplitz): _toeplitz_matmul,
    (Fourier, Fourier): lambda a, b: Fourier(a.eigvals * b.eigvals, real=a.real and b.real),
    (OneSS, Diagonal): _oness_matmul_diagonal,
    (Diagonal, OneSS): _diagonal_matmul_oness,
    (SSS, SSS): lambda a, b: _first_of(sss_matmul(a, b), qs_matmul(as_quasiseparable(a), as_quasiseparable(b))),
    (Bidiagonal, SSS): _via_sss(sss_matmul, left=True),
    (SSS, Bidiagonal): _via_sss(sss_matmul, left=False),
    (Diagonal, Bidiagonal): _diagonal_matmul_bidiagonal,
    (Bidiagonal, Diagonal): _bidiagonal_matmul_diagonal,
    (Diagonal, SSS): diagonal_matmul_sss,
    (SSS, Diagonal): sss_matmul_diagonal,
    (Diagonal, Diagonal): lambda a, b: Diagonal(a.d * b.d),
    (LowRank, StructuredMatrix): _lowrank_matmul,
    (StructuredMatrix, LowRank): _matmul_lowrank,
    (Dense, Dense): lambda a, b: Dense(a.M @ b.M),
}

HADAMARD = {
    (Toeplitz, Toeplitz): _toeplitz_hadamard,
    (Fourier, Fourier): _fourier_hadamard,
    (OneSS, OneSS): _oness_hadamard,
    (SSS, SSS): sss_hadamard,
    (Diagonal, StructuredMatrix): _diagonal_hadamard,
    (StructuredMatrix, Diagonal): _swap(_diagonal_hadamard),
    (Dense, StructuredMatrix): _dense_hadamard,
    (StructuredMatrix, Dense): _swap(_dense_hadamard),
}


def _first_of(*results):
    return next((r for r in results if r is not NotImplemented), NotImplemented)


def register(table: dict, left: type, right: type):
    """Decorator adding a rule for ``(left, right)`` to ``table`` (for mask families and users)."""

    def wrap(rule):
        table[(left, right)] = rule
        return rule

    return wrap


def _candidates(table: dict, a, b):
    pairs = [
        (i + j, ta, tb)
        for i, ta in enumerate(type(a).__mro__)
        for j, tb in enumerate(type(b).__mro__)
        if (ta, tb) in table
    ]
    return [table[(ta, tb)] for _, ta, tb in sorted(pairs, key=lambda p: p[0])]


def _dispatch(table: dict, a, b):
    for rule in _candidates(table, a, b):
        out = rule(a, b)
        if out is not NotImplemented:
            return out
    return NotImplemented


def _common(a: StructuredMatrix, b: StructuredMatrix):
    if a.device != b.device:
        raise ValueError(f"operands are on different devices: {a.device} and {b.device}")
    dtype = torch.promote_types(a.dtype, b.dtype)
    return (a if a.dtype == dtype else a.to(dtype)), (b if b.dtype == dtype else b.to(dtype))


def add(a: StructuredMatrix, b: StructuredMatrix) -> StructuredMatrix:
    """``a + b`` by the table, else a lazy :class:`Sum`."""
    if a.shape[-2:] != b.shape[-2:]:
        raise ValueError(f"cannot add matrices of shapes {tuple(a.shape)} and {tuple(b.shape)}")
    torch.broadcast_shapes(a.batch_shape, b.batch_shape)
    a, b = _common(a, b)
    out = _dispatch(ADD, a, b)
    return Sum(a, b) if out is NotImplemented else out


def matmul(a: StructuredMatrix, b: StructuredMatrix) -> StructuredMatrix:
    """``a @ b`` by the table, else a lazy :class:`Product`."""
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"cannot multiply matrices of shapes {tuple(a.shape)} and {tuple(b.shape)}")
    torch.broadcast_shapes(a.batch_shape, b.batch_shape)
    a, b = _common(a, b)
    out = _dispatch(MATMUL, a, b)
    return Product(a, b) if out is NotImplemented else out


def hadamard(a: StructuredMatrix, b: StructuredMatrix) -> StructuredMatrix:
    """Elementwise ``a * b`` by the table; no lazy fallback exists, so an unknown pair raises."""
    if a.shape[-2:] != b.shape[-2:]:
        raise ValueError(f"hadamard needs equal shapes; got {tuple(a.shape)} and {tuple(b.shape)}")
    a, b = _common(a, b)
    out = _dispatch(HADAMARD, a, b)
    if out is NotImplemented:
        raise TypeError(
            f"no structured Hadamard product for {type(a).__name__} and {type(b).__name__}; "
            "use Dense(a.to_dense()).hadamard(b) if densifying is intended"
        )
    return out
