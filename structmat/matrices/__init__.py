"""The mask classes, one module each."""

from structmat.matrices.bidiagonal import Bidiagonal
from structmat.matrices.dense import Dense
from structmat.matrices.dft import DFT
from structmat.matrices.diagonal import Diagonal
from structmat.matrices.fourier import Fourier
from structmat.matrices.lowrank import LowRank
from structmat.matrices.one_ss import OneSS
from structmat.matrices.quasiseparable import Quasiseparable
from structmat.matrices.sss import SSS, SSSInverse
from structmat.matrices.toeplitz import Toeplitz, ToeplitzInverse

__all__ = ["Bidiagonal", "Dense", "DFT", "Diagonal", "Fourier", "LowRank", "OneSS", "Quasiseparable", "SSS", "SSSInverse", "Toeplitz",
           "ToeplitzInverse"]
