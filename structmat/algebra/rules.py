"""The closure rules, in one table: which class ``M op N`` returns, for which operands, when.

Each row registers one :class:`~structmat.core.dispatch.Rule`: the operation, the operand classes,
the condition, the precedence and the documented result. The dispatcher tries the matching rules
by precedence, then by how close the rule's classes are to the operands' (a ``OneSS`` rule before
an ``SSS`` rule), then in the order of this table, and runs the first whose condition holds.
Symmetric rows register both operand orders. What no row covers falls to the lazy composites of
:mod:`structmat.core.lazy` (``Sum``, ``Product``, ``Inverse``, ``Transpose``; a Hadamard product
without a rule raises ``TypeError``). ``docs/architecture.md`` and the rule-table page are generated
from :func:`structmat.core.dispatch.rules`.
"""

from __future__ import annotations

from structmat.algebra import elementary as E
from structmat.algebra import quasiseparable as Q
from structmat.algebra import semiseparable as S
from structmat.algebra import spectral as F
from structmat.core.base import StructuredMatrix
from structmat.core.dispatch import register
from structmat.matrices.bidiagonal import Bidiagonal
from structmat.matrices.dense import Dense
from structmat.matrices.dft import DFT
from structmat.matrices.diagonal import Diagonal
from structmat.matrices.fourier import Fourier
from structmat.matrices.lowrank import LowRank
from structmat.matrices.one_ss import OneSS
from structmat.matrices.quasiseparable import Quasiseparable
from structmat.matrices.sss import SSS
from structmat.matrices.toeplitz import Toeplitz

__all__ = ["TABLE"]


#: ``(op, left, right, rule, result, condition, symmetric)``; ``right`` is None for ``inv``.
TABLE = [
    # semiseparable
    ("add", SSS, SSS, S.sss_add, "SSS, orders add (block-diagonal A)", S.same_orientation, False),
    ("matmul", SSS, SSS, S.sss_matmul, "SSS, orders add (block-triangular A)", S.same_orientation, False),
    ("hadamard", SSS, SSS, S.sss_hadamard, "SSS, orders multiply (OneSS for two OneSS)", S.same_orientation, False),
    ("hadamard", SSS, SSS, S.lower_times_upper_diagonal, "Diagonal (a lower and an upper meet on the diagonal)",
     S.different_orientation, False),
    ("inv", SSS, None, S.sss_inverse, "SSS, same order with an explicit D (N + 1 when D = C^T B)", None, False),
    ("inv", OneSS, None, E.oness_inverse, "Bidiagonal, O(T)", None, False),
    ("add", SSS, Diagonal, S.sss_add_diagonal, "SSS, same order (explicit D)", None, True),
    ("matmul", Diagonal, SSS, S.diagonal_matmul_sss, "SSS (OneSS stays OneSS), same order", None, False),
    ("matmul", SSS, Diagonal, S.sss_matmul_diagonal, "SSS (OneSS stays OneSS), same order", None, False),
    # quasiseparable (bidirectional)
    ("add", SSS, SSS, Q.sss_add_mixed, "Quasiseparable (a lower plus an upper)", S.different_orientation, False),
    ("matmul", SSS, SSS, Q.sss_matmul_mixed, "Quasiseparable, orders add (a lower times an upper)",
     S.different_orientation, False),
    ("add", Quasiseparable, Quasiseparable, Q.qs_add, "Quasiseparable, orders add", None, False),
    ("add", Quasiseparable, SSS, Q.qs_add_sss, "Quasiseparable, orders add on one side", None, True),
    ("add", Quasiseparable, Diagonal, Q.qs_add_diagonal, "Quasiseparable, same orders", None, True),
    ("matmul", Quasiseparable, Quasiseparable, Q.qs_matmul, "Quasiseparable, orders add", None, False),
    ("matmul", Quasiseparable, SSS, Q.qs_matmul_sss, "Quasiseparable, orders add", None, False),
    ("matmul", SSS, Quasiseparable, Q.sss_matmul_qs, "Quasiseparable, orders add", None, False),
    ("matmul", Quasiseparable, Diagonal, Q.qs_matmul_diagonal, "Quasiseparable, same orders", None, False),
    ("matmul", Diagonal, Quasiseparable, Q.diagonal_matmul_qs, "Quasiseparable, same orders", None, False),
    ("inv", Quasiseparable, None, Q.qs_inverse, "Quasiseparable, orders kept (Eidelman-Gohberg recursion)", None, False),
    ("hadamard", Quasiseparable, Quasiseparable, Q.qs_hadamard, "Quasiseparable, orders multiply on each side", None, False),
    ("hadamard", Quasiseparable, SSS, Q.qs_hadamard_sss, "SSS, orders multiply (an SSS meets one triangle and the diagonal)",
     None, True),
    # bidiagonal
    ("add", Bidiagonal, Bidiagonal, E.bidiagonal_add, "Bidiagonal", S.same_orientation, False),
    ("add", Bidiagonal, Diagonal, E.bidiagonal_add, "Bidiagonal", None, True),
    ("matmul", Diagonal, Bidiagonal, E.diagonal_matmul_bidiagonal, "Bidiagonal", None, False),
    ("matmul", Bidiagonal, Diagonal, E.bidiagonal_matmul_diagonal, "Bidiagonal", None, False),
    ("add", Bidiagonal, SSS, E.bidiagonal_sss_add, "SSS, through Bidiagonal.to_sss() (order 2)",
     S.same_orientation, True),
    ("matmul", Bidiagonal, SSS, E.bidiagonal_sss_matmul, "SSS, through Bidiagonal.to_sss() (order 2)",
     S.same_orientation, False),
    ("matmul", SSS, Bidiagonal, E.sss_bidiagonal_matmul, "SSS, through Bidiagonal.to_sss() (order 2)",
     S.same_orientation, False),
    ("inv", Bidiagonal, None, E.bidiagonal_inverse, "OneSS (with b and c), O(T)", None, False),
    ("hadamard", Bidiagonal, Bidiagonal, E.bidiagonal_hadamard, "Bidiagonal (Diagonal for a lower and an upper)", None,
     False),
    # diagonal, dense, low rank
    ("add", Diagonal, Diagonal, E.diagonal_add, "Diagonal", None, False),
    ("matmul", Diagonal, Diagonal, E.diagonal_matmul, "Diagonal", None, False),
    ("hadamard", Diagonal, StructuredMatrix, E.diagonal_hadamard, "Diagonal", E.has_diagonal, True),
    ("inv", Diagonal, None, E.diagonal_inverse, "Diagonal", None, False),
    ("add", Dense, Dense, E.dense_add, "Dense", None, False),
    ("add", Dense, Diagonal, E.dense_add, "Dense", None, True),
    ("matmul", Dense, Dense, E.dense_matmul, "Dense", None, False),
    ("hadamard", Dense, StructuredMatrix, E.dense_hadamard, "Dense (the other operand densified: no larger)", None, True),
    ("inv", Dense, None, E.dense_inverse, "Dense (LU)", None, False),
    ("add", LowRank, LowRank, E.lowrank_add, "LowRank, ranks add", None, False),
    ("matmul", LowRank, StructuredMatrix, E.lowrank_matmul, "LowRank U (M^T V)^T", None, False),
    ("matmul", StructuredMatrix, LowRank, E.matmul_lowrank, "LowRank (M U) V^T", None, False),
    ("hadamard", LowRank, LowRank, E.lowrank_hadamard, "LowRank, ranks multiply", None, False),
    ("inv", LowRank, None, E.lowrank_inverse, "Inverse (lazy) at full rank; SingularMatrixError below", None, False),
    # FFT family
    ("add", Toeplitz, Toeplitz, F.toeplitz_add, "Toeplitz (causal if both are)", None, False),
    ("matmul", Toeplitz, Toeplitz, F.causal_toeplitz_matmul, "causal Toeplitz (truncated polynomial product)",
     F.both_causal, False),
    ("hadamard", Toeplitz, Toeplitz, F.toeplitz_hadamard, "Toeplitz (causal if either is)", None, False),
    ("inv", Toeplitz, None, F.toeplitz_inverse, "causal Toeplitz (Newton, O(T log T)) or ToeplitzInverse", None, False),
    ("add", Fourier, Fourier, F.fourier_add, "Fourier", None, False),
    ("matmul", Fourier, Fourier, F.fourier_matmul, "Fourier", None, False),
    ("hadamard", Fourier, Fourier, F.fourier_hadamard, "Fourier", None, False),
    ("inv", Fourier, None, F.fourier_inverse, "Fourier (SingularMatrixError for a ~0 eigenvalue)", None, False),
    ("inv", DFT, None, F.dft_inverse, "DFT(inverse=True) / T; SingularMatrixError for .real / .imag", None, False),
]

for _op, _left, _right, _fn, _result, _when, _symmetric in TABLE:
    _classes = (_left,) if _right is None else (_left, _right)
    register(_op, *_classes, when=_when, result=_result, symmetric=_symmetric, trusted=True)(_fn)
