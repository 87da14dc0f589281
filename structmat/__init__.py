"""structmat: structured matrices as a first-class tool for sequence models.

Structured masks (semiseparable, 1-semiseparable, low-rank, ...) with fast matvecs and a closed
algebra (``+``, ``@``, ``inv``, ``.T``) computed in structured form, never by materialising
``T x T``.

>>> import torch, structmat as sm
>>> M = sm.OneSS.from_decays(torch.rand(6, dtype=torch.float64))
>>> P = M @ M                      # closure: an SSS of order 2
>>> P
SSS(shape=(6, 6), order=2, dtype=float64)
>>> torch.allclose(P.to_dense(), M.to_dense() @ M.to_dense())
True
"""

from structmat import sma
from structmat.base import SingularMatrixError, StructuredMatrix
from structmat.bidiagonal import Bidiagonal
from structmat.dense import Dense
from structmat.diagonal import Diagonal
from structmat.fourier import DFT, Fourier
from structmat.lazy import Inverse, Product, Sum, Transpose
from structmat.linop import aslinearoperator
from structmat.lowrank import LowRank
from structmat.one_ss import OneSS
from structmat.quasiseparable import Quasiseparable
from structmat.rank import semiseparable_rank
from structmat.sma import sma_plan
from structmat.ssd import ssd
from structmat.sss import SSS
from structmat.toeplitz import Toeplitz, ToeplitzInverse

__version__ = "0.1.0"

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
    "aslinearoperator",
    "semiseparable_rank",
    "ssd",
    "sma",
    "sma_plan",
]
