"""Edge cases drawn at random: decays that are exactly 0, exactly 1 or 1e-30; NaN in the data; parameters
whose batch shapes differ but broadcast; rectangular matrices with zero rows or columns; the numpy,
scipy and rank views of the same matrices."""

import numpy as np
import scipy.sparse.linalg as sla
import torch
from expression_builder import Node, apply_binary, apply_unary, check_node, dft_inside, expressions, leaves
from fuzz_helpers import (
    C128,
    DTYPES,
    F32,
    F64,
    LENGTHS,
    WIDE,
    Unchanged,
    check_close,
    fro,
    fuzz,
    maybe_inference,
    raises_clear,
    tensor,
    tolerate_known,
)
from hypothesis import assume, event, given
from hypothesis import strategies as st

import structmat as sm
import structmat.testing as smt
from structmat.attention import admissible

EDGE = (0.0, 1.0, 1e-30, 1.0 - 1e-7)


@st.composite
def edge_decays(draw, shape):
    """Decays where most entries are edge values (0, 1, 1e-30, 1 - 1e-7), the rest uniform."""
    n = int(np.prod(shape))
    values = draw(st.lists(st.one_of(st.sampled_from(EDGE), st.floats(0.0, 1.0)), min_size=n, max_size=n))
    return torch.tensor(values, dtype=F64).reshape(shape)


@st.composite
def edge_one_ss(draw, T, batch=()):
    a = draw(edge_decays((*batch, T)))
    seed = draw(st.integers(0, 2**20))
    kw = {}
    if draw(st.booleans()):  # b, c away from 0 so that the inverse stays well conditioned
        kw = dict(b=tensor(seed, (*batch, T), F64, 0.5, 1.5), c=tensor(seed + 1, (*batch, T), F64, 0.5, 1.5))
    M = sm.OneSS.from_decays(a, **kw)
    return M if draw(st.booleans()) else M.T


@fuzz(30)
@given(T=st.sampled_from(LENGTHS), dtype=st.sampled_from([F64, F32]), batch=st.sampled_from([(), (2,)]),
       inference=st.booleans(), data=st.data())
def test_edge_decays_in_every_operation(T, dtype, batch, inference, data):
    """Decays 0 (exact zeros, never NaN), 1 (no decay), 1e-30 (no underflow to NaN), in float32 and float64:
    matvecs, inverse, solve, products, sums, Hadamard products, compression, SMA orders."""
    M64 = data.draw(edge_one_ss(T, batch), label="M")
    N64 = data.draw(edge_one_ss(T, batch), label="N")
    tol = smt.tolerance(dtype)
    with tolerate_known(), maybe_inference(inference):
        a = Node(M64.to(dtype), M64.to_dense(), fro(M64.to_dense()), tol, dtype, "M")
        b = Node(N64.to(dtype), N64.to_dense(), fro(N64.to_dense()), tol, dtype, "N")
        dense = M64.to_dense()
        assert bool(torch.isfinite(dense).all()) and bool((dense.triu(1) == 0).all() if M64.lower else (dense.tril(-1) == 0).all())
        check_node(data.draw, a)
        for op in ("matmul", "add", "hadamard"):
            check_node(data.draw, apply_binary(op, a, b))
        for op in ("inv", "compress", "T"):
            check_node(data.draw, apply_unary(data.draw, op, a))
        if T:
            q, k, v = tensor(1, (1, T, 2, 2), dtype), tensor(2, (1, T, 2, 2), dtype), tensor(3, (1, T, 2, 3), dtype)
            mask = a.M.reshape(1, *a.M.shape) if hasattr(a.M, "reshape") else a.M
            if len(batch) == 0:
                want = torch.einsum("ts,bthn,bshn,bshp->bthp", dense, q.to(F64), k.to(F64), v.to(F64))
                for order in admissible(mask):
                    got = sm.sma(q, k, v, mask, order=order, chunk=4)
                    check_close(got, want, 10 * tol, fro(dense) * fro(q) * fro(k) * fro(v), f"sma order={order}")


@fuzz(25)
@given(T=st.sampled_from([1, 2, 3, 17]), data=st.data())
def test_nan_in_the_data_propagates_where_it_is_used(T, data):
    """``M @ X`` with NaN in ``X``: NaN wherever a NaN entry meets a nonzero matrix entry (never silently
    finite there); elsewhere NaN (dense FFT-style mixing) or the value with the NaN entries zeroed."""
    node = data.draw(leaves(T, (), F64), label="M")
    M, ref = node.M, node.ref
    X = tensor(data.draw(st.integers(0, 2**20)), (T, 2), M.dtype if M.dtype.is_complex else F64)
    rows = data.draw(st.lists(st.integers(0, T - 1), min_size=1, max_size=2, unique=True), label="NaN rows")
    X[rows, 0] = float("nan")
    with tolerate_known(), Unchanged(M):
        got = M @ X
    touched = (ref[:, rows] != 0).any(-1)
    assert bool(torch.isnan(got[touched, 0]).all()), f"{node.text} @ X: NaN in X did not reach rows {touched.nonzero().flatten().tolist()}"
    clean = torch.nan_to_num(X, nan=0.0)
    want = (ref.to(C128) @ clean.to(C128))
    ok = torch.isnan(got[:, 0]) | torch.isclose(got[:, 0].to(C128), want[:, 0], rtol=1e-9, atol=1e-9 * fro(ref) * fro(clean))
    assert bool(ok[~touched].all()), f"{node.text} @ X: rows untouched by the NaN are wrong"
    clean_column = ref.to(C128) @ X[:, 1].to(C128)  # real for a real matrix: its imaginary part is exactly 0
    want_column = (clean_column if got.is_complex() else clean_column.real).to(got.dtype)
    check_close(got[:, 1], want_column, 1e-9, fro(ref) * fro(clean), f"{node.text} @ X (clean column)")


@st.composite
def broadcast_parameters(draw, T):
    """Constructors fed parameters with different (broadcasting) batch shapes: ``(1, T)`` decays with
    ``(H, T)`` scalings, ``(H, 1, ...)`` beside ``(1, B, ...)``, as masks of ``(B, H)`` problems do."""
    H, B = 2, 3
    shapes = draw(st.sampled_from([((1,), (H,)), ((H,), (1,)), ((H, 1), (1, B)), ((1, B), (H, 1))]))
    s1, s2 = shapes
    seed = draw(st.integers(0, 2**20))
    kind = draw(st.sampled_from(["OneSS", "SSS", "Bidiagonal", "LowRank", "Toeplitz", "Quasiseparable"]))
    if kind == "OneSS":
        return sm.OneSS.from_decays(tensor(seed, (*s1, T), F64, 0.0, 1.0), b=tensor(seed + 1, (*s2, T)), c=tensor(seed + 2, (*s1, T)))
    if kind == "SSS":
        return sm.SSS(tensor(seed, (*s1, T, 2)), tensor(seed + 1, (*s2, T, 2)), tensor(seed + 2, (*s1, T, 2)),
                      D=2 + tensor(seed + 3, (*s2, T)))
    if kind == "Bidiagonal":
        return sm.Bidiagonal(2 + tensor(seed, (*s1, T)), tensor(seed + 1, (*s2, max(T - 1, 0))))
    if kind == "LowRank":
        return sm.LowRank(tensor(seed, (*s1, T, 2)), tensor(seed + 1, (*s2, T, 2)))
    if kind == "Toeplitz":
        return sm.Toeplitz(tensor(seed, (*s1, T)) + 3 * (torch.arange(T) == 0), tensor(seed + 1, (*s2, T)))
    lower = sm.OneSS.from_decays(tensor(seed, (*s1, T), F64, 0.0, 1.0), b=tensor(seed + 1, (*s2, T)))
    upper = sm.SSS(tensor(seed + 2, (*s2, T)), tensor(seed + 3, (*s2, T, 1)), tensor(seed + 4, (*s1, T, 1))).T
    return sm.Quasiseparable(lower, upper, 4 + tensor(seed + 5, (*s1, T)))


@fuzz(30)
@given(T=st.sampled_from(LENGTHS), data=st.data())
def test_parameters_with_broadcasting_batches(T, data):
    M = data.draw(broadcast_parameters(T), label="M")
    with tolerate_known():
        ref = M.to_dense()
        assert tuple(ref.shape) == tuple(M.shape)
        node = Node(M, ref.to(WIDE[ref.dtype]), fro(ref), 1e-9, M.dtype, f"{type(M).__name__}{tuple(M.shape)}")
        check_node(data.draw, node)
        other = data.draw(leaves(T, tuple(M.batch_shape), F64), label="other")
        for op in ("add", "matmul"):
            check_node(data.draw, apply_binary(op, node, other))
        check_node(data.draw, apply_unary(data.draw, "inv", node))
        if T and M.ndim == 4:  # a (B?, H?) mask: every SMA order
            Bm, Hm = M.batch_shape
            Bq, H = max(Bm, 1), max(Hm, 1)
            q, k, v = tensor(1, (Bq, T, H, 2)), tensor(2, (Bq, T, H, 2)), tensor(3, (Bq, T, H, 3))
            want = torch.einsum("bhts,bthn,bshn,bshp->bthp", ref.expand(Bq, H, T, T), q, k, v)
            for order in admissible(M):
                check_close(sm.sma(q, k, v, M, order=order, chunk=2), want, 1e-9, fro(ref) * fro(q) * fro(k) * fro(v), f"sma {order}")


@st.composite
def rectangular(draw):
    """``(*, T, S)`` matrices with ``T`` and ``S`` in {0, 1, 3, 17} (zero rows or columns included)."""
    T, S = draw(st.sampled_from(LENGTHS)), draw(st.sampled_from(LENGTHS))
    batch = draw(st.sampled_from([(), (2,)]))
    dtype = draw(st.sampled_from(DTYPES))
    seed = draw(st.integers(0, 2**20))
    wide = WIDE[dtype]
    kind = draw(st.sampled_from(["LowRank", "Dense", "Toeplitz", "DFT part"]))
    if kind == "LowRank":
        M64 = sm.LowRank(tensor(seed, (*batch, T, 2), wide), tensor(seed + 1, (*batch, S, 2), wide))
    elif kind == "Dense":
        M64 = sm.Dense(tensor(seed, (*batch, T, S), wide))
    elif kind == "Toeplitz":
        assume(min(T, S) > 0 or T == S)  # D11 (recorded, pinned in test_fuzz_defects): wrong shape of M @ X when S = 0 < T
        # (and of X @ M when T = 0 < S, through M.T)
        M64 = sm.Toeplitz(tensor(seed, (*batch, T), wide), tensor(seed + 1, (*batch, S), wide))
    else:
        M64 = sm.LowRank(tensor(seed, (T, 1), wide), tensor(seed + 1, (S, 1), wide))
    M = M64 if dtype == wide else M64.to(dtype)
    return Node(M, M64.to_dense(), fro(M64.to_dense()), smt.tolerance(dtype), dtype, f"{kind}{tuple(M.shape)}")


@fuzz(30)
@given(a=rectangular(), data=st.data(), inference=st.booleans())
def test_rectangular_and_empty_matrices(a, data, inference):
    """Products and sums of rectangular matrices, ``.T``, ``.H``, scalars, zero rows / columns."""
    with tolerate_known(), maybe_inference(inference):
        check_node(data.draw, a)
        for op in ("T", "H", "scale", "conj"):
            check_node(data.draw, apply_unary(data.draw, op, a))
        check_node(data.draw, apply_binary("add", a, a))
        check_node(data.draw, apply_binary("matmul", a, apply_unary(data.draw, "H", a)))
        raises_clear(lambda: a.M + a.M.T, "shape", "shapes") if a.ref.shape[-1] != a.ref.shape[-2] else None


@fuzz(25)
@given(T=st.sampled_from([1, 2, 3, 17]), dtype=st.sampled_from([F64, C128]), data=st.data())
def test_aslinearoperator_matches_dense(T, dtype, data):
    """scipy's view: ``matvec``, ``rmatvec`` (conjugate transpose), ``matmat`` against the dense matrix."""
    node = data.draw(expressions(T, (), dtype, depth=1), label="M")
    assume(not dft_inside(node))  # D12 / D37 (recorded, pinned): rmatvec uses M.H, wrong for a composite holding a DFT / Fourier
    with tolerate_known():
        op = sm.aslinearoperator(node.M)
        ref = node.ref.to(C128).resolve_conj().numpy()
        x = tensor(1, (T,), C128 if node.M.dtype.is_complex else F64).numpy()
        X = tensor(2, (T, 2), C128 if node.M.dtype.is_complex else F64).numpy()
        bound = max(fro(node.ref), node.bound) * np.linalg.norm(X) * node.rtol * 10 + 1e-300  # node.bound: M - M is 0 up to rounding of M
        assert np.abs(op.matvec(x) - ref @ x).max() <= bound, f"{node.text}: matvec"
        assert np.abs(op.rmatvec(x) - ref.conj().T @ x).max() <= bound, f"{node.text}: rmatvec (conjugate transpose)"
        assert np.abs(op.matmat(X) - ref @ X).max() <= bound, f"{node.text}: matmat"
        assert np.abs(op.H.matvec(x) - ref.conj().T @ x).max() <= bound, f"{node.text}: H.matvec"
        if T > 1 and np.linalg.cond(ref) < 1e6:
            y = ref @ x
            sol, info = sla.gmres(op, y, rtol=1e-12, atol=0, maxiter=200)
            assert info == 0 and np.abs(ref @ sol - y).max() <= 1e-6 * np.abs(y).max(), f"{node.text}: gmres"


def _dense_rank(M: torch.Tensor, strict: bool, cut: float) -> int:
    """The largest rank of a block on-and-below (strictly below) the diagonal, singular values above ``cut * max|M|``."""
    T = M.shape[-1]
    M = M.to(C128)
    best = 0
    for k in range(T):
        sub = M[..., k + 1:, : k + 1] if strict else M[..., k:, : k + 1]
        if sub.numel():
            s = torch.linalg.svdvals(sub)
            best = max(best, int((s > cut * max(float(M.abs().max()), 1e-300)).sum(-1).max()))
    return best


@fuzz(25)
@given(T=st.sampled_from([1, 2, 3, 17]), strict=st.booleans(), data=st.data())
def test_semiseparable_rank_matches_dense(T, strict, data):
    """``semiseparable_rank`` of a structured matrix (and of its closure results) equals the rank computed
    from its dense form, and never exceeds the non-strict rank when ``strict``."""
    classes = (sm.OneSS, sm.SSS, sm.Bidiagonal, sm.LowRank, sm.Diagonal, sm.Dense)
    a = data.draw(leaves(T, (), F64, classes), label="A")
    b = data.draw(leaves(T, (), F64, classes), label="B")
    op = data.draw(st.sampled_from(["leaf", "add", "matmul", "inv"]))
    with tolerate_known():
        node = a if op == "leaf" else apply_unary(data.draw, "inv", a) if op == "inv" else apply_binary(op, a, b)
        try:
            got = sm.semiseparable_rank(node.M, strict=strict)
        except TypeError as err:
            assert "no structured path" in str(err)
            return
        low, high = _dense_rank(node.ref, strict, 1e-6), _dense_rank(node.ref, strict, 1e-13)  # numerical rank brackets
        if got > high:
            event("known defect D35")  # an overestimate (pinned in test_fuzz_defects)
            return
        assert low <= got, f"semiseparable_rank({node.text}, strict={strict}) = {got}, dense says {low} to {high}"
        assert low <= sm.semiseparable_rank(node.ref, strict=strict) <= high
