"""The dense form of a lower SSS from its generators, in chunks for long sequences.

:meth:`Generators.dense <structmat.linalg.semiseparable.Generators.dense>` builds ``M[j, i] = sum_n C_j[n]
P_n[j, i] B_i[n]`` from whole ``T x T`` segment products: several passes over ``T^2 N`` entries. For long
sequences :func:`sss_dense` cuts time into chunks of ``L`` (:func:`~structmat.linalg.block_solve.chunk_maps`,
whose ``L x L`` diagonal blocks are assembled the same way from shorter pieces), and the block ``(J, I)`` below
them is ``W_J Psi_JI R_I^T``, with ``Psi_JI`` the product of the chunk transitions strictly between ``I`` and ``J``
(segment products of the ``T / L`` chunk transitions), all blocks in one contraction over the states
(:func:`~structmat.linalg.block_solve.dense_from_maps`).
"""

from __future__ import annotations

import torch

from structmat.linalg.block_solve import assembles, chunk_maps, dense_from_maps
from structmat.linalg.semiseparable import Generators

__all__ = ["sss_dense", "DENSE_CHUNKED_T", "DENSE_CHUNK"]

#: Longest sequence whose dense form comes from whole ``T x T`` segment products; longer ones go in chunks of
#: :data:`DENSE_CHUNK`. Measured (one thread, float32, two heads; ``SSS(4)`` / a 1-SS quasiseparable mask), whole
#: against chunks: T = 128 2.1 / 1.1 ms against 3.0 / 2.5 ms; T = 256 16.7 / 3.1 against 4.2 / 3.2; T = 512
#: 33 / 7.3 against 6.6 / 5.0; T = 4096 (SSS(4)) 3.3 s against 0.22 s.
DENSE_CHUNKED_T = 128

#: Chunk length of the chunked dense form.
DENSE_CHUNK = 64


def sss_dense(G: Generators) -> torch.Tensor:
    """The lower matrix ``(*, T, T)`` of the generators ``G``: whole segment products up to :data:`DENSE_CHUNKED_T`
    steps, for dense transitions and for log decays whose gradient is wanted in linear space, else in chunks
    (module docstring). ``O(T^2 N)`` for scalar and diagonal transitions.

    Examples
    --------
    >>> from structmat.core.transitions import Transitions
    >>> G = Generators(Transitions(torch.full((3,), 0.5), "scalar"), torch.ones(3, 1), torch.ones(3, 1))
    >>> sss_dense(G)
    tensor([[1.0000, 0.0000, 0.0000],
            [0.5000, 1.0000, 0.0000],
            [0.2500, 0.5000, 1.0000]])
    """
    if G.length <= DENSE_CHUNKED_T or not assembles(G):
        return G.dense()
    return dense_from_maps(chunk_maps(G.expand(G.batch_shape), DENSE_CHUNK), G.length)
