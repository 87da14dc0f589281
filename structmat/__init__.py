"""structmat: structured matrices as a first-class tool for sequence models.

Structured masks (semiseparable, 1-semiseparable, Toeplitz, Fourier, low-rank, ...) with fast
matvecs and a closed algebra (``+``, ``@``, ``inv``, ``.T``, ``hadamard``) computed in structured
form, never by materialising ``T x T``; structured masked attention on top, and the Mamba-2 SSD
layer as its 1-SS case.

>>> import torch, structmat as sm
>>> M = sm.OneSS.from_decays(torch.rand(6, dtype=torch.float64))
>>> P = M @ M                      # closure: an SSS of order 2
>>> P
SSS(shape=(6, 6), order=2, dtype=float64)
>>> torch.allclose(P.to_dense(), M.to_dense() @ M.to_dense())
True
"""

from structmat import algebra as _algebra  # noqa: F401  (registers the closure rules)
from structmat import nn
from structmat.algebra.rank import semiseparable_rank
from structmat.attention import SMADecoder, Tuning, sma, sma_plan, sma_state, sma_step
from structmat.core import (
    Inverse,
    Product,
    Rule,
    SingularMatrixError,
    StructuredMatrix,
    Sum,
    Transitions,
    Transpose,
    register,
    rules,
    skip_finite_checks,
)
from structmat.interop.scipy import aslinearoperator
from structmat.matrices import (
    DFT,
    SSS,
    Bidiagonal,
    Dense,
    Diagonal,
    Fourier,
    LowRank,
    OneSS,
    Quasiseparable,
    Toeplitz,
    ToeplitzInverse,
)
from structmat.ssd import ssd
from structmat.ssd_step import ssd_step

__version__ = "0.2.0"

__all__ = [
    "StructuredMatrix",
    "SingularMatrixError",
    "OneSS",
    "SSS",
    "Bidiagonal",
    "Diagonal",
    "Dense",
    "LowRank",
    "Toeplitz",
    "ToeplitzInverse",
    "Fourier",
    "DFT",
    "Quasiseparable",
    "Sum",
    "Product",
    "Inverse",
    "Transpose",
    "Transitions",
    "Rule",
    "register",
    "rules",
    "skip_finite_checks",
    "aslinearoperator",
    "semiseparable_rank",
    "sma",
    "sma_plan",
    "SMADecoder",
    "sma_step",
    "sma_state",
    "Tuning",
    "ssd",
    "ssd_step",
    "nn",
]
