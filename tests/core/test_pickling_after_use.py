"""Pickles and copies of matrices after the uses that make them keep things (session 23's audit: a causal Toeplitz
kept a local closure after a batched or complex solve and could no longer be pickled; ``torch.save`` of a module
holding it failed after some calls only). What a matrix keeps (``core.small``) is not part of it: neither pickled
nor copied, built again on use."""

import copy
import pickle

import pytest
import torch
from conftest import C128, F64, close, randn

import structmat as sm

T = 300  # (above the kept dense forms' 256 x 256: the structured paths keep their own values)


def _matrices():
    c = randn(T, seed=1, dtype=F64)
    c[0] += 5
    a = 0.5 + 0.4 * torch.rand(T, dtype=F64, generator=torch.Generator().manual_seed(2))
    return {
        "causal Toeplitz": sm.Toeplitz.causal(c),
        "Toeplitz": sm.Toeplitz(torch.cat([T + c[:1], c[1:]]), torch.cat([c[:1], randn(T - 1, seed=3, dtype=F64)])),
        "OneSS": sm.OneSS.from_decays(a),
        "SSS": sm.SSS(0.5 * a[:, None].expand(T, 2), randn(T, 2, seed=4, dtype=F64), randn(T, 2, seed=5, dtype=F64),
                      D=2 + a),
        "Quasiseparable": sm.Quasiseparable.lion(a),
        "Fourier": sm.Fourier.from_kernel(torch.cat([2 + c[:1], c[1:] / T])),
    }


@pytest.mark.parametrize("name", list(_matrices()))
def test_pickle_and_deepcopy_after_use(name):
    M = _matrices()[name]
    for Y in (randn(3, T, 2, seed=6, dtype=F64), randn(T, 2, seed=7, dtype=C128), randn(T, 70, seed=8, dtype=F64)):
        M.solve(Y), M @ Y
    x = randn(T, 2, seed=9, dtype=F64)
    for copied in (pickle.loads(pickle.dumps(M)), copy.deepcopy(M)):
        close(copied @ x, M @ x, rtol=1e-12, atol=1e-12)
        close(copied.solve(x), M.solve(x), rtol=1e-10, atol=1e-10)
