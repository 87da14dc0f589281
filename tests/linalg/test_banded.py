"""SSS products and solves as banded LAPACK systems, against the dense matrix built entry by entry."""

import numpy as np
import pytest
import torch
from conftest import F64, close, rand, randn, sss_dense

import structmat as sm
from structmat.core.transitions import Transitions
from structmat.linalg import banded
from structmat.linalg.semiseparable import Generators


def _generators(kind, T, N, batch=(), seed=0, zero_decay=False):
    shape = {"log": (*batch, T), "scalar": (*batch, T), "diag": (*batch, T, N), "dense": (*batch, T, N, N)}[kind]
    A = rand(*shape, seed=seed) if kind != "dense" else randn(*shape, seed=seed) / (2 * N)
    if kind == "scalar":
        A = A - 0.5  # signed transitions
    if zero_decay and T > 3:
        A.select(len(batch), 3).zero_()  # an exact cut
    values = safe_log(A) if kind == "log" else A
    D = 2 + rand(*batch, T, seed=seed + 3)
    return Generators(Transitions(values, kind), randn(*batch, T, N, seed=seed + 1), randn(*batch, T, N, seed=seed + 2), D), A


def safe_log(a):
    return torch.where(a > 0, torch.log(torch.where(a > 0, a, 1.0)), float("-inf"))


def _dense(G, A, kind, batch):
    if not batch:
        return torch.from_numpy(sss_dense(A, G.B, G.C, G.D, "scalar" if kind == "log" else kind))
    return torch.stack([_dense(Generators(G.A, G.B[i], G.C[i], G.D[i]), A[i], kind, batch[1:]) for i in range(batch[0])])


@pytest.mark.parametrize("kind", ["log", "scalar", "diag", "dense"])
@pytest.mark.parametrize("batch,xbatch", [((), ()), ((), (3,)), ((2,), (2,)), ((2,), (3, 1))])
def test_products_and_solves_equal_dense(kind, batch, xbatch):
    G, A = _generators(kind, 23, 3, batch, seed=len(batch) + 5 * len(xbatch), zero_decay=True)
    M = _dense(G, A, kind, batch)
    X = randn(*xbatch, 23, 2, seed=9)
    close(banded.sss_matmat(G, X), M @ X)
    close(banded.sss_matmat(G, X, transpose=True), M.mT @ X)
    want = X.expand(*torch.broadcast_shapes(M.shape[:-2], X.shape[:-2]), 23, 2)
    close(M @ banded.sss_solve(G, X), want, rtol=1e-9)
    close(M.mT @ banded.sss_solve(G, X, transpose=True), want, rtol=1e-9)


def test_float32_and_singular():
    G, A = _generators("diag", 40, 2, seed=3)
    M = _dense(G, A, "diag", ())
    G32 = Generators(Transitions(G.A.values.float(), "diag"), G.B.float(), G.C.float(), G.D.float())
    X = randn(40, 1, seed=1, dtype=torch.float32)
    Y = banded.sss_matmat(G32, X)
    assert Y.dtype == torch.float32
    close(Y, M.float() @ X, rtol=1e-5)
    D = G.D.clone()
    D[7] = 0.0
    with pytest.raises(sm.SingularMatrixError, match="diagonal entry is zero"):
        banded.sss_solve(Generators(G.A, G.B, G.C, D), X.double())


def test_applies_only_where_it_should():
    G, _ = _generators("diag", 10, 2)
    X = randn(10, 1)
    assert banded.applies(G, X)
    assert not banded.applies(G, X.to(torch.complex128))
    assert not banded.applies(G, X.requires_grad_())
    with torch.no_grad():
        assert banded.applies(G, X)
    G9, _ = _generators("diag", 10, banded.MAX_ORDER + 1)
    assert not banded.applies(G9, X.detach())
    assert not banded.applies(G, randn(banded.MAX_ROWS + 1, 10, 1))


def _wide(T, K, N, kind, batch=()):
    """Generators and an operand of the given sizes without their memory (expanded zeros: only shapes are read)."""
    A = torch.zeros(()).expand(*batch, T, N, N) if kind == "dense" else torch.zeros(()).expand(*batch, T, N)
    maps = torch.zeros(()).expand(*batch, T, N)
    return Generators(Transitions(A, kind), maps, maps, torch.zeros(()).expand(*batch, T)), torch.zeros(()).expand(T, K)


@pytest.mark.parametrize("kind,N,below,from_", [("diag", 1, 8, 16), ("diag", 4, 8, 16), ("diag", 8, 8, 16),
                                                ("dense", 2, 64, 128), ("dense", 4, 32, 64), ("dense", 8, 16, 32)])
def test_products_with_many_columns_take_the_scans(kind, N, below, from_):
    """From SCAN_MIN_COLUMNS columns (SCAN_DENSE_MIN_COLUMNS_N columns times N for dense transitions) and
    SCAN_MIN_WORK entries a product leaves the band for the scans; solves keep it; above SCAN_MAX_WORK entries the band
    is back (the scans' temporaries leave the cache)."""
    T = 8192
    G, X = _wide(T, from_, N, kind)
    assert not banded.applies(G, X) and not banded.applies(G, X, transpose=True)
    assert banded.applies(G, X, solve=True)
    assert banded.applies(*_wide(T, below, N, kind))
    assert banded.applies(*_wide(16, from_, N, kind))  # too little work: the scans' fixed cost
    long = banded.SCAN_MAX_WORK["dense" if kind == "dense" else "diag"] // (from_ * N) + 1
    assert banded.applies(*_wide(long, from_, N, kind))
    G4, _ = _wide(T, 1, N, kind, batch=(4,))  # four systems share the columns' count
    assert not banded.applies(G4, torch.zeros(()).expand(4, T, -(-from_ // 4)))


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("kind,K", [("log", 256), ("scalar", 64), ("diag", 64), ("dense", 128)])
def test_sss_products_with_many_columns_equal_dense(kind, K, lower, monkeypatch):
    """Through the scans (never the band: a call would fail), both triangles, every kind of transitions; an order-1
    SSS of log decays through its one compiled scan."""
    from structmat.linalg import chunk_form

    monkeypatch.setattr(chunk_form, "applies", lambda *args: False)  # (else the kept chunked form serves these)
    monkeypatch.setattr(banded, "sss_matmat", lambda *args: pytest.fail("took the band"))
    T, N = 300, 1 if kind == "log" else 4
    G, A = _generators(kind, T, N, seed=4, zero_decay=True)
    M = sm.SSS(G.A, G.B, G.C, G.D, lower=lower)
    dense = torch.from_numpy(sss_dense(A, G.B, G.C, G.D, "scalar" if kind == "log" else kind, lower))
    X = randn(T, K, seed=5)
    close(M @ X, dense @ X)
    M32 = sm.SSS(Transitions(G.A.values.float(), kind), G.B.float(), G.C.float(), G.D.float(), lower=lower)
    Y = M32 @ X.float()
    assert Y.dtype == torch.float32
    close(Y, dense @ X, rtol=1e-4)


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("kind", ["diag", "dense"])
def test_sss_class_paths_at_mid_size(kind, lower):
    """T = 300 (above the dense form): products and solves through the band, both triangles, K = 1 and 5;
    with a gradient wanted, the torch paths give the same values and the gradients of the dense product."""
    T, N = 300, 4
    A = rand(T, N, seed=1) if kind == "diag" else randn(T, N, N, seed=1) / (2 * N)
    M = sm.SSS(A, randn(T, N, seed=2) / 4, randn(T, N, seed=3) / 4, D=2 + rand(T, seed=4), lower=lower)
    dense = torch.from_numpy(sss_dense(A, M.B, M.C, M.D, kind, lower))
    for K in (1, 5, 30):  # 30 columns: the solves take kept chunk maps
        Y = randn(T, K, seed=K)
        close(M @ Y, dense @ Y)
        close(M.solve(Y), torch.linalg.solve(dense, Y), rtol=1e-8)
        close(M.T @ Y, dense.mT @ Y)
        close(M.T.solve(Y), torch.linalg.solve(dense.mT, Y), rtol=1e-8)
    x = randn(T, 2, seed=7).requires_grad_()
    (M @ x).square().sum().backward()
    close(x.grad, 2 * dense.mT @ (dense @ x.detach()))


def test_zero_length_and_zero_columns():
    M = sm.SSS(rand(300, 2), randn(300, 2), randn(300, 2), D=2 + rand(300))
    assert (M @ torch.zeros(300, 0, dtype=F64)).shape == (300, 0)
    assert M.solve(torch.zeros(300, 0, dtype=F64)).shape == (300, 0)
    assert np.isfinite((M @ randn(300, 1)).numpy()).all()


@pytest.mark.parametrize("kind", ["log", "scalar", "diag", "dense"])
@pytest.mark.parametrize("batch,xbatch", [((), ()), ((), (3,)), ((2,), (2,)), ((2,), (3, 1))])
def test_time_blocks_equal_dense(kind, batch, xbatch, monkeypatch):
    """A long lower sequence in time blocks (a few steps each here): the pinned step carries the state across
    every block boundary, also across an exact cut (a_t = 0) and unit decays."""
    monkeypatch.setattr(banded, "KEEP_MAX_ENTRIES", 0)
    monkeypatch.setattr(banded, "BLOCK_ENTRIES", 7 * 4 * 9)  # blocks of about 7 steps
    G, A = _generators(kind, 41, 3, batch, seed=3 + len(batch), zero_decay=True)
    if kind == "log":  # unit decays over a stretch
        G = Generators(Transitions(G.A.values.clone().index_fill_(-1, torch.arange(10, 20), 0.0), "log"), G.B, G.C, G.D)
        A = G.A.values.exp()
    M = _dense(G, A, kind, batch)
    X = randn(*xbatch, 41, 2, seed=9)
    close(banded.sss_matmat(G, X), M @ X)
    want = X.expand(*torch.broadcast_shapes(M.shape[:-2], X.shape[:-2]), 41, 2)
    close(M @ banded.sss_solve(G, X), want, rtol=1e-9)
    X32 = X.float()
    G32 = Generators(Transitions(G.A.values.float(), kind), G.B.float(), G.C.float(), G.D.float())
    Y = banded.sss_matmat(G32, X32)
    assert Y.dtype == torch.float32
    close(Y, M @ X, rtol=1e-5)


def test_bands_kept_in_proportion_to_the_parameters(monkeypatch):
    """A band within KEEP_PER_PARAMETER_BYTE times the parameters' bytes is kept at any length; parameters broadcast
    over a large batch (a band much larger than them) take the time blocks, with the same results."""
    monkeypatch.setattr(banded, "KEEP_MAX_ENTRIES", 1000)
    G, A = _generators("diag", 3000, 2)
    assert banded.band_entries(G) > banded.KEEP_MAX_ENTRIES and banded.keeps(G, G.batch_shape)
    M = sm.SSS(G.A.values, G.B, G.C, G.D)
    x = randn(3000, 1, seed=1)
    y = M @ x
    assert ("band", False) in M._small.values
    Mb = sm.SSS(*(t.expand(40, *t.shape) for t in (G.A.values, G.B, G.C, G.D)))
    assert not banded.keeps(Mb.generators, Mb.batch_shape)
    close(Mb @ x, y.expand(40, 3000, 1))
    close(Mb.solve(y), x.expand(40, 3000, 1), rtol=1e-8)
    kept = Mb.__dict__.get("_small")
    assert kept is None or ("band", False) not in kept.values


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_bidiagonal_solves_by_lapack_match_scipy(lower, dtype):
    """T = 300 (above the dense form): Bidiagonal.solve through dtbtrs against scipy in float64, with batch
    broadcasting, vector and matrix right-hand sides, zero sub-diagonal entries (cuts); singular and overflow raise."""
    import scipy.linalg

    T = 300
    sub = randn(2, T - 1, seed=2) / 2
    sub[:, 50] = 0.0
    M = sm.Bidiagonal((1 + rand(1, T, seed=1)).to(dtype), sub.to(dtype), lower=lower)
    dense = M.to_dense().double().numpy()
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    for Y in (randn(T, seed=3), randn(T, 3, seed=4), randn(3, 1, T, 2, seed=5)):
        Y = Y.to(dtype)
        X = M.solve(Y)
        want = torch.linalg.solve_triangular(torch.from_numpy(dense), Y.double()[..., None] if Y.dim() == 1 else Y.double(),
                                             upper=not lower)
        assert X.dtype == dtype and X.shape == (want[..., 0] if Y.dim() == 1 else want).shape
        close(X.double(), want[..., 0] if Y.dim() == 1 else want, rtol=tol)
    close(M.solve(randn(T, seed=6))[0], scipy.linalg.solve_triangular(dense[0], randn(T, seed=6).numpy(), lower=lower),
          rtol=tol if dtype == F64 else 1e-12)
    zero = sm.Bidiagonal(torch.ones(T, dtype=dtype).index_fill_(0, torch.tensor([7]), 0.0), torch.ones(T - 1, dtype=dtype))
    with pytest.raises(sm.SingularMatrixError, match="Bidiagonal is singular"):
        zero.solve(torch.ones(T, dtype=dtype))
    tiny = sm.Bidiagonal(torch.full((T,), 1e-3, dtype=dtype), torch.ones(T - 1, dtype=dtype), lower=lower)
    with pytest.raises(sm.SingularMatrixError, match="overflows"):
        tiny.solve(torch.ones(T, dtype=dtype))
    y = torch.ones(T, dtype=dtype)
    y[4] = float("nan")
    assert torch.isnan(M.solve(y)).any()  # NaN in, NaN out


def test_bidiagonal_solve_gradients_take_the_inverse():
    d = (1 + rand(260, seed=1)).requires_grad_()
    s = (randn(259, seed=2) / 2).requires_grad_()
    y = randn(260, 1, seed=3).requires_grad_()
    assert torch.autograd.gradcheck(lambda d, s, y: sm.Bidiagonal(d, s).solve(y), (d, s, y))


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_wide_solves_keep_their_chunk_maps(lower, dtype):
    """A solve of many columns (T = 300) through kept chunk maps against scipy in float64; a batched right-hand
    side takes the band; an in-place change of a parameter drops the maps; zero decays (cuts) stay exact."""
    import scipy.linalg

    T, N, K = 300, 3, 32
    A = rand(T, N, seed=1)
    A[100] = 0.0
    M = sm.SSS(A.to(dtype), (randn(T, N, seed=2) / 4).to(dtype), (randn(T, N, seed=3) / 4).to(dtype),
               D=(2 + rand(T, seed=4)).to(dtype), lower=lower)
    dense = M.to_dense().double().numpy()
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    Y = randn(T, K, seed=5, dtype=dtype)
    X = M.solve(Y)
    assert X.dtype == dtype and "chunk maps" in M._small.values
    close(X.double(), scipy.linalg.solve_triangular(dense, Y.double().numpy(), lower=lower), rtol=tol)
    Yb = randn(2, T, K, seed=6, dtype=dtype)
    close(M.solve(Yb).double(), np.stack([scipy.linalg.solve_triangular(dense, y, lower=lower) for y in Yb.double().numpy()]),
          rtol=tol)
    M.D.mul_(2.0)  # in place
    dense2 = M.to_dense().double().numpy()
    close(M.solve(Y).double(), scipy.linalg.solve_triangular(dense2, Y.double().numpy(), lower=lower), rtol=tol)
