"""Chunk maps: the chunks' dense diagonal blocks assembled from pieces, and the block forward substitution on them.

References: the entry-by-entry SSS of ``conftest.sss_dense`` (numpy loops) and a dense triangular solve."""

import pytest
import torch
from conftest import C128, F64, close, rand, randn, sss_dense

import structmat.linalg.block_solve as block_solve_module
from structmat.core.transitions import Transitions
from structmat.linalg.block_solve import block_solve, chunk_maps
from structmat.linalg.semiseparable import Generators

T, N = 23, 3


def _transitions(case: str) -> tuple[torch.Tensor, str]:
    return {
        "scalar": (randn(T, seed=1), "scalar"),
        "signed diag": (randn(T, N, seed=1) / 2, "diag"),
        "positive diag": (0.3 + 0.7 * rand(T, N, seed=1), "diag"),
        "zero decays": (rand(T, N, seed=1) * (torch.arange(T) % 5 != 3)[:, None], "diag"),
        "complex diag": (randn(T, N, seed=1, dtype=C128) / 2, "diag"),
        "log": (torch.log(0.2 + 0.8 * rand(T, seed=1)), "log"),
        "dense": (randn(T, N, N, seed=1) / 3, "dense"),
    }[case]


def _generators(case: str, explicit_d: bool) -> tuple[Generators, torch.Tensor]:
    """The generators of one case and their dense matrix from the definition."""
    A, kind = _transitions(case)
    dtype = C128 if case == "complex diag" else F64
    B, C = randn(T, N, seed=2, dtype=dtype), randn(T, N, seed=3, dtype=dtype)
    D = 2 + rand(T, seed=4) if explicit_d else None
    return Generators(Transitions(A, kind), B, C, D), torch.as_tensor(sss_dense(A, B, C, D, kind))


@pytest.mark.parametrize("case", ["scalar", "signed diag", "positive diag", "zero decays", "complex diag", "log",
                                  "dense"])
@pytest.mark.parametrize("explicit_d", [False, True])
@pytest.mark.parametrize("chunk, piece", [(11, 4), (23, 4), (8, 4), (16, 8), (5, 8)])
def test_chunk_blocks_are_the_diagonal_blocks_of_the_matrix(monkeypatch, case, explicit_d, chunk, piece):
    """Chunks of 11 in pieces of 4: a padded last piece inside a padded last chunk; the blocks below the pieces'
    diagonal through one, two and three pieces' transitions."""
    monkeypatch.setattr(block_solve_module, "BLOCK_PIECE", piece)
    G, dense = _generators(case, explicit_d)
    maps = chunk_maps(G, chunk)
    padded = torch.zeros(maps.blocks.shape[0] * maps.L, maps.blocks.shape[0] * maps.L, dtype=dense.dtype)
    padded[:T, :T] = dense
    for c in range(maps.blocks.shape[0]):
        rows = slice(c * maps.L, (c + 1) * maps.L)
        want = padded[rows, rows] + torch.diag((torch.arange(rows.start, rows.stop) >= T).to(dense.dtype))
        close(maps.blocks[c], want, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("case", ["positive diag", "complex diag", "zero decays", "log"])
def test_block_solve_on_assembled_blocks(monkeypatch, case):
    monkeypatch.setattr(block_solve_module, "BLOCK_PIECE", 4)
    G, dense = _generators(case, explicit_d=True)
    Y = randn(2, T, 3, seed=5, dtype=dense.dtype)
    close(block_solve(G, Y, chunk=11), torch.linalg.solve_triangular(dense, Y, upper=False), rtol=1e-10)


def test_assembled_blocks_are_differentiable(monkeypatch):
    monkeypatch.setattr(block_solve_module, "BLOCK_PIECE", 2)
    a = (0.3 + 0.7 * rand(9, 2, seed=6)).requires_grad_()
    B, C = randn(9, 2, seed=7).requires_grad_(), randn(9, 2, seed=8)
    D = 2 + rand(9, seed=9)
    Y = randn(9, 2, seed=10)
    solve = lambda a, B: block_solve(Generators(Transitions(a, "diag"), B, C, D), Y, chunk=6)  # noqa: E731
    assert torch.autograd.gradcheck(solve, (a, B))
    assert torch.autograd.gradcheck(lambda a, B: chunk_maps(Generators(Transitions(a, "diag"), B, C, D), 6).blocks,
                                    (a, B))
