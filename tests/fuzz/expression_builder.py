"""The random-expression builder of the fuzz tests: structured leaves, scalars, unary and binary operations, each
node carrying a dense float64 reference beside its structured matrix, and :func:`check_node`, which compares a node's
products, solves and dense form with the reference (conventions: :mod:`fuzz_helpers`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import torch
from fuzz_helpers import (
    C64,
    C128,
    CLASSES,
    F32,
    F64,
    WIDE,
    Unchanged,
    assert_clear_error,
    check_close,
    fro,
    guarded,
    operand_batch,
    operand_dtype,
    sub_batch,
    tensor,
    wide_mm,
)
from hypothesis import event
from hypothesis import strategies as st

import structmat as sm
import structmat.testing as smt

# --- structured leaves ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Node:
    """A structured matrix with its dense double-precision reference."""

    M: sm.StructuredMatrix
    ref: torch.Tensor
    bound: float
    rtol: float
    dtype: torch.dtype
    text: str
    depth: int = 0
    classes: frozenset = frozenset()  # the classes of the leaves

    def __repr__(self) -> str:
        return f"Node({self.text}, dtype={self.dtype})"


def _empty_leaf(cls, batch, dtype):
    """Leaves of length 0 built by hand (``structmat.testing`` cannot draw some of them at T = 0: DEFECTS.md)."""
    z = torch.zeros(*batch, 0, dtype=dtype)
    if cls is sm.Bidiagonal:
        return sm.Bidiagonal(z, z)
    if cls is sm.Toeplitz:
        return sm.Toeplitz(z, z)
    return sm.Fourier.from_kernel(z)


_NO_T0 = (sm.Bidiagonal, sm.Toeplitz, sm.Fourier)


@st.composite
def leaves(draw, T: int, full: tuple[int, ...], dtype: torch.dtype, classes=CLASSES) -> Node:
    """A structured matrix of one of ``classes``, ``(*b, T, T)`` with ``b`` broadcasting to ``full``."""
    cls = draw(st.sampled_from(classes))
    batch = () if cls is sm.DFT else sub_batch(draw, full)
    wide = WIDE[dtype]
    if T == 0 and cls in _NO_T0:
        M64 = _empty_leaf(cls, batch, wide)
    else:
        M64 = draw(smt.matrices_of(cls, T=T, batch=batch, dtype=wide))
    M = M64 if dtype == wide else M64.to(dtype)
    ref = M64.to_dense().to(WIDE[M64.dtype]).resolve_conj()
    want = M64.dtype if dtype == wide else (_complexify(dtype) if cls is sm.DFT else dtype)
    return Node(M, ref, fro(ref), smt.tolerance(want), want, f"{type(M).__name__}{tuple(M.shape)}", 0, frozenset({cls.__name__}))


# --- scalars ---------------------------------------------------------------------------------------

@st.composite
def scalars(draw, complex_ok: bool = True):
    """A non-zero scalar in one of the forms users write: Python, numpy scalar, 0-d array, 0-d tensor."""
    value = draw(st.sampled_from([2.5, -0.5, 3.0, -1.0, 0.25, 1e-3]))
    if complex_ok and draw(st.integers(0, 4)) == 0:
        value = complex(value, draw(st.sampled_from([1.0, -0.5])))
    form = draw(st.sampled_from(["python", "int", "np.float64", "np.float32", "np.ndarray0", "tensor0", "tensor0_f32"]))
    if isinstance(value, complex):
        s = {"python": value, "int": value, "np.float64": np.complex128(value), "np.float32": np.complex64(value),
             "np.ndarray0": np.array(value), "tensor0": torch.tensor(value, dtype=C128),
             "tensor0_f32": torch.tensor(value, dtype=C64)}[form]
    else:
        s = {"python": value, "int": int(value) or 2, "np.float64": np.float64(value), "np.float32": np.float32(value),
             "np.ndarray0": np.array(value), "tensor0": torch.tensor(value, dtype=F64),
             "tensor0_f32": torch.tensor(value, dtype=F32)}[form]
    return s


def scalar_value(s) -> complex | float:
    if isinstance(s, (torch.Tensor, np.ndarray, np.generic)):
        return s.item()
    return s


def is_complex_scalar(s) -> bool:
    return isinstance(scalar_value(s), complex)


# --- the expression builder -----------------------------------------------------------------------

UNARY = ("scale", "divide", "neg", "T", "H", "conj", "inv", "to", "compress", "Transpose", "Inverse", "derived")
BINARY = ("add", "sub", "matmul", "hadamard", "Sum", "Product")

#: Errors an operation may raise instead of a result (documented in DESIGN.md or the docstrings), with
#: words its message must contain.
ALLOWED = {
    "hadamard": ("hadamard",),
    "inv": ("singular", "no fast inverse", "rectangular", "overflow"),
    "Inverse": ("singular", "no fast inverse", "rectangular", "overflow"),
}


def _cond(ref: torch.Tensor) -> float:
    if ref.shape[-1] == 0:
        return 1.0
    s = torch.linalg.svdvals(ref)
    smin = float(s[..., -1].min())
    return math.inf if smin == 0 else float((s[..., 0] / s[..., -1]).max())


def well_conditioned(node: Node, limit: float = 1e6) -> bool:
    return _cond(node.ref) <= limit


def promote(a: torch.dtype, b: torch.dtype) -> torch.dtype:
    return torch.promote_types(a, b)


def _complexify(dtype: torch.dtype) -> torch.dtype:
    return dtype if dtype.is_complex else (C64 if dtype == F32 else C128)


def apply_unary(draw, op: str, a: Node) -> Node:
    """``op`` applied to ``a`` with its reference; an allowed clear error returns ``a`` unchanged."""
    M, ref = a.M, a.ref
    grow = lambda out, ref_out, bound, rtol=None, dtype=None, text="": replace(  # noqa: E731
        a, M=out, ref=ref_out, bound=bound, rtol=a.rtol if rtol is None else rtol,
        dtype=a.dtype if dtype is None else dtype, text=text, depth=a.depth + 1)
    if op in ("scale", "divide"):
        s = draw(scalars(complex_ok=True))
        v = scalar_value(s)
        dtype = _complexify(a.dtype) if isinstance(v, complex) else a.dtype
        if op == "scale":
            out = (M * s) if draw(st.booleans()) else (s * M)
            return grow(out, ref * v, a.bound * abs(v), dtype=dtype, text=f"({a.text} * {s!r})")
        if isinstance(s, torch.Tensor) and s.dtype in (F32, C64) and a.dtype in (F64, C128):
            event("known defect D36")  # M / s computes 1 / s in single precision (pinned in test_fuzz_defects)
            s = s.to(WIDE[s.dtype])
        return grow(M / s, ref / v, a.bound / abs(v), dtype=dtype, text=f"({a.text} / {s!r})")
    if op == "neg":
        return grow(-M, -ref, a.bound, text=f"-{a.text}")
    if op == "T":
        return grow(M.T, ref.mT, a.bound, text=f"{a.text}.T")
    if op in ("conj", "H") and dft_inside(a):
        event("known defect D12/D37")  # conj of a composite holding a DFT / Fourier is wrong (pinned in test_fuzz_defects)
        return a
    if op == "H":
        return grow(M.H, ref.mH, a.bound, text=f"{a.text}.H")
    if op == "conj":
        return grow(M.conj(), ref.conj(), a.bound, text=f"{a.text}.conj()")
    if op == "Transpose":
        return grow(sm.Transpose(M), ref.mT, a.bound, text=f"Transpose({a.text})")
    if op in ("inv", "Inverse"):
        if ref.shape[-1] != ref.shape[-2] or not well_conditioned(a):
            return a
        inverse = torch.linalg.inv(ref)
        bound = fro(inverse) ** 2 * max(a.bound, 1e-300) + fro(inverse)
        try:
            out = M.inv()
            if op == "Inverse":  # the lazy inverse of a matrix with a fast solve (DESIGN 3); a Sum has none (M.inv() says so)
                out = sm.Inverse(M)
        except (ValueError, TypeError) as err:
            assert_clear_error(err, *ALLOWED[op])
            if isinstance(err, sm.SingularMatrixError):
                assert not well_conditioned(a, 1e4), f"{a.text}.inv(): SingularMatrixError on a matrix of condition {_cond(ref):.1e}: {err}"
            return a
        return grow(out, inverse, bound, rtol=a.rtol * 10, text=f"{a.text}.inv()")
    if op == "to":
        target = draw(st.sampled_from([F64, C128, F32, C64]))
        if a.dtype.is_complex and not target.is_complex:
            target = _complexify(target)  # dropping the imaginary part is torch's (warned) behaviour, not tested here
        rtol = max(a.rtol, smt.tolerance(target))
        how = draw(st.sampled_from(["to", "double", "float"] if a.dtype.is_complex == target.is_complex else ["to"]))
        if how == "double":
            target = C128 if a.dtype.is_complex else F64
            return grow(M.double(), ref, a.bound, rtol=rtol, dtype=target, text=f"{a.text}.double()")
        if how == "float":
            target = C64 if a.dtype.is_complex else F32
            return grow(M.float(), ref, a.bound, rtol=max(a.rtol, smt.tolerance(target)), dtype=target, text=f"{a.text}.float()")
        if isinstance(M, sm.DFT):
            target = _complexify(target)
        return grow(M.to(target), ref, a.bound, rtol=rtol, dtype=target, text=f"{a.text}.to({target})")
    if op == "compress":
        if not hasattr(M, "compress"):
            return a
        out = M.compress()
        return grow(out, ref, a.bound, rtol=a.rtol * 10, text=f"{a.text}.compress()")
    if op == "derived":
        return derived(draw, a)
    raise AssertionError(op)


def dft_inside(a: Node) -> bool:
    """``a`` is a complex composite with a DFT (D12) or a Fourier (D37) among its leaves but is not one itself:
    its ``conj()`` / ``.H`` are wrong (``_map(torch.conj)`` does not conjugate a spectral representation)."""
    spectral = (sm.DFT, sm.Fourier)
    return bool({"DFT", "Fourier"} & a.classes) and not isinstance(a.M, spectral) and a.M.dtype.is_complex


def derived(draw, a: Node) -> Node:
    """Class-specific constructors from a matrix: ``tril``, ``triu``, ``to_sss``, ``to_toeplitz``, ``lu``."""
    M, ref = a.M, a.ref
    grow = lambda out, ref_out, text: replace(a, M=out, ref=ref_out, bound=max(fro(ref_out), a.bound), text=text,  # noqa: E731
                                              depth=a.depth + 1)
    square = ref.shape[-1] == ref.shape[-2]
    if isinstance(M, (sm.LowRank, sm.Toeplitz, sm.Quasiseparable)) and square:
        if isinstance(M, sm.LowRank) or draw(st.booleans()):
            return grow(M.tril(), ref.tril(), f"{a.text}.tril()")
        return grow(M.triu(), ref.triu(), f"{a.text}.triu()")
    if isinstance(M, sm.Bidiagonal):
        return grow(M.to_sss(), ref, f"{a.text}.to_sss()")
    if isinstance(M, sm.Fourier):
        return grow(M.to_toeplitz(), ref, f"{a.text}.to_toeplitz()")
    if isinstance(M, sm.DFT) and M.part == "full" and not isinstance(M.scale, complex):
        real = M.dtype.to_real()
        if draw(st.booleans()):
            return replace(grow(M.real, ref.real, f"{a.text}.real"), dtype=real)
        return replace(grow(M.imag, ref.imag, f"{a.text}.imag"), dtype=real)
    if isinstance(M, sm.SSS) and M.lower and draw(st.booleans()):
        return grow(sm.Quasiseparable.bidirectional(M, M), ref.tril() + ref.flip(-1, -2).triu(1), f"bidirectional({a.text})")
    return a


def apply_binary(op: str, a: Node, b: Node) -> Node:
    dtype = promote(a.dtype, b.dtype)
    rtol = max(a.rtol, b.rtol) * 2
    node = lambda out, ref, bound, sym: Node(out, ref, bound, rtol, dtype, f"({a.text} {sym} {b.text})",  # noqa: E731
                                             max(a.depth, b.depth) + 1, a.classes | b.classes)
    if op == "add":
        return node(a.M + b.M, a.ref + b.ref, a.bound + b.bound, "+")
    if op == "sub":
        return node(a.M - b.M, a.ref - b.ref, a.bound + b.bound, "-")
    if op == "Sum":
        return node(sm.Sum(a.M, b.M), a.ref + b.ref, a.bound + b.bound, "Sum")
    if op == "matmul":
        return node(a.M @ b.M, wide_mm(a.ref, b.ref), a.bound * b.bound, "@")
    if op == "Product":
        return node(sm.Product(a.M, b.M), wide_mm(a.ref, b.ref), a.bound * b.bound, "Product")
    if op == "hadamard":
        try:
            out = a.M.hadamard(b.M)
        except TypeError as err:
            assert_clear_error(err, *ALLOWED["hadamard"])
            return a
        return node(out, a.ref * b.ref, a.bound * b.bound, "o")
    raise AssertionError(op)


@st.composite
def expressions(draw, T: int, full: tuple[int, ...], dtype: torch.dtype, depth: int = 2, classes=CLASSES,
                unary=UNARY, binary=BINARY) -> Node:
    """A random expression over structured ``(*, T, T)`` matrices (batches broadcasting to ``full``)."""
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        return draw(leaves(T, full, dtype, classes))
    if draw(st.booleans()):
        a = draw(expressions(T, full, dtype, depth - 1, classes, unary, binary))
        op = draw(st.sampled_from(unary))
        return guarded(lambda: apply_unary(draw, op, a), a)
    a = draw(expressions(T, full, dtype, depth - 1, classes, unary, binary))
    b = draw(expressions(T, full, dtype, depth - 1, classes, unary, binary))
    op = draw(st.sampled_from(binary))
    return guarded(lambda: apply_binary(op, a, b), a)


# --- checking a node ------------------------------------------------------------------------------

def check_node(draw, node: Node, *, solve: bool = True) -> None:
    """``to_dense``, ``shape``, ``dtype``, numpy, ``@`` (matrix, 1-D, zero columns, broadcast batches, from the
    left), ``diagonal()`` and ``solve`` of ``node.M`` against its reference."""
    M, ref, what = node.M, node.ref, node.text
    assert isinstance(M, sm.StructuredMatrix), f"{what}: {type(M).__name__} is not a StructuredMatrix"
    assert tuple(M.shape) == tuple(ref.shape), f"{what}: shape {tuple(M.shape)} != reference {tuple(ref.shape)}"
    assert M.batch_shape == M.shape[:-2] and M.ndim == len(M.shape)
    assert M.dtype == node.dtype, f"{what}: dtype {M.dtype}, expected {node.dtype}"
    dense = M.to_dense()
    assert dense.dtype == M.dtype, f"{what}: to_dense() is {dense.dtype} but the matrix says {M.dtype}"
    rtol = node.rtol
    check_close(dense, ref, rtol, node.bound, f"{what}.to_dense()")
    T, S = ref.shape[-2:]
    full = tuple(ref.shape[:-2])
    seed = draw(st.integers(0, 2**31 - 1))
    # M @ X with an independent batch and dtype, K possibly 0
    K = draw(st.sampled_from([0, 1, 3]))
    xb = operand_batch(draw, full)
    xdt = operand_dtype(draw, M.dtype)
    X = tensor(seed, (*xb, S, K), xdt)
    want = wide_mm(ref, X)
    out_dtype = promote(M.dtype, xdt)
    tol = max(rtol, smt.tolerance(out_dtype) if out_dtype in (F32, C64) else rtol)
    xbound = node.bound * max(fro(X), 1e-300)
    with Unchanged(X, M):
        got = M @ X
    assert got.dtype == out_dtype, f"{what} @ X ({xdt}): dtype {got.dtype}, expected {out_dtype}"
    check_close(got, want, tol, xbound, f"{what} @ X{tuple(X.shape)}")
    # 1-D operand
    x = tensor(seed + 1, (S,), xdt)
    check_close(M @ x, wide_mm(ref, x), tol, node.bound * max(fro(x), 1e-300), f"{what} @ x (1-D)")
    # from the left: Z @ M
    Z = tensor(seed + 2, (*operand_batch(draw, full), K, T), xdt)
    check_close(Z @ M, wide_mm(Z, ref), tol, node.bound * max(fro(Z), 1e-300), f"Z{tuple(Z.shape)} @ {what}")
    # numpy view
    arr = np.asarray(M)
    assert arr.shape == tuple(ref.shape), f"np.asarray({what}) has shape {arr.shape}"
    # diagonal: structured or a clear TypeError
    try:
        diag = M.diagonal()
    except TypeError as err:
        assert_clear_error(err, "diagonal")
    else:
        check_close(diag, torch.diagonal(ref, dim1=-2, dim2=-1), rtol, node.bound, f"{what}.diagonal()")
    if solve and T == S and well_conditioned(node):
        Yb = operand_batch(draw, full)
        Y = tensor(seed + 3, (*Yb, T, K) if draw(st.booleans()) else (T,), xdt)
        try:
            with Unchanged(Y, M):
                got = M.solve(Y)
        except (ValueError, TypeError) as err:
            assert_clear_error(err, *ALLOWED["inv"])
            if isinstance(err, sm.SingularMatrixError):
                assert not well_conditioned(node, 1e4), f"{what}.solve: SingularMatrixError at condition {_cond(ref):.1e}: {err}"
            return
        inverse = torch.linalg.inv(ref)
        want = wide_mm(inverse, Y)
        bound = (fro(inverse) ** 2 * node.bound + fro(inverse)) * max(fro(Y), 1e-300)
        check_close(got, want, tol * 10, bound, f"{what}.solve(Y{tuple(Y.shape)})")
