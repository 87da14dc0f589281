"""Every public entry point fed malformed input: a ``ValueError`` / ``TypeError`` that names the argument
(raised by structmat's own checks, not deep inside torch), never an ``IndexError`` / ``RuntimeError`` /
``AttributeError``, never a silent wrong result, and the inputs unchanged.

Each entry point lists its valid arguments and, per argument, the malformations that make the call
invalid: ``None``, a string, a ragged list, a structured matrix where an array belongs, NaN / inf, a
complex value where a real one belongs, a negative decay, a 0-d tensor, a wrong length, a batch that
does not broadcast, a tensor on the ``meta`` device beside CPU tensors, a bad integer (``-1``, ``2.5``),
an integer dtype. The deterministic table runs every combination; the hypothesis test below feeds
random tensors (random rank, sizes and dtype) to random arguments.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from fuzz_helpers import F64, Unchanged, assert_clear_error, fuzz, raises_clear, tensor
from hypothesis import assume, given
from hypothesis import strategies as st
from malformed_cases import BATCH, ENTRIES, REASON, Entry, N, T, _good_value, _lower, malformed

import structmat as sm
from structmat.core import dispatch


def _call(entry: Entry, arg: str, kind: str):
    kwargs = entry.good()
    good = _good_value(entry, kwargs, arg)
    kwargs[arg] = malformed(kind, good, arg)
    names = entry.names.get(arg, (arg,))
    return kwargs, names


def _word(name: str, msg: str) -> bool:
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", msg, flags=re.IGNORECASE) is not None


def _inputs(entry: Entry, kwargs: dict) -> list:
    """The arguments that must come back unchanged (``ssd_step`` updates ``state`` in place, as documented)."""
    return [v for k, v in kwargs.items() if not (entry.name == "ssd_step" and k == "state")]


def _check_malformed(entry: Entry, arg: str, kind: str) -> None:
    kwargs, names = _call(entry, arg, kind)
    saved = {op: list(rules) for op, rules in dispatch._REGISTRY.items()}
    try:
        with Unchanged(_inputs(entry, kwargs)):
            err = raises_clear(lambda: entry.call(**kwargs))
    finally:
        for op, rules in saved.items():
            dispatch._REGISTRY[op][:] = rules
    msg = str(err)
    assert any(_word(n, msg) for n in names), f"message {msg!r} does not name {names}"
    if kind in REASON:
        assert any(r in msg.lower() for r in REASON[kind]), f"message {msg!r} does not say the device"


def _failures(checks) -> list[str]:
    problems = []
    for label, check in checks:
        try:
            check()
        except AssertionError as err:
            problems.append(f"{label}: {str(err).splitlines()[0]}")
    return problems


GROUPS = [(e, arg) for e in ENTRIES for arg in e.bad]


@pytest.mark.parametrize(("entry", "arg"), GROUPS, ids=[f"{e.name}-{a}" for e, a in GROUPS])
def test_malformed_argument_raises_a_clear_error(entry, arg):
    """Every malformation of the argument (one failure message lists all that misbehave)."""
    problems = _failures((kind, lambda kind=kind: _check_malformed(entry, arg, kind)) for kind in entry.bad[arg])
    if problems:
        pytest.fail(f"{entry.name}({arg}=...):\n  " + "\n  ".join(problems), pytrace=False)


# --- methods of every class ---------------------------------------------------------------------

def _matrices():
    """One matrix of each class, batch ``(2,)`` (DFT: none), ``T = 4``, float64 (complex128 for DFT)."""
    d = lambda i, *shape: tensor(i, (BATCH, *shape))  # noqa: E731
    return {
        "OneSS": _lower(0),
        "SSS": sm.SSS(d(1, T, N), d(2, T, N), d(3, T, N), D=3 + d(4, T)),
        "Diagonal": sm.Diagonal(2 + d(5, T)),
        "Bidiagonal": sm.Bidiagonal(2 + d(6, T), d(7, T - 1)),
        "LowRank": sm.LowRank(d(8, T, T), d(9, T, T)),
        "Dense": sm.Dense(3 * torch.eye(T, dtype=F64) + d(10, T, T)),
        "Toeplitz": sm.Toeplitz(d(11, T) + torch.tensor([3.0, 0, 0, 0], dtype=F64), d(12, T)),
        "Fourier": sm.Fourier.from_kernel(d(13, T) + torch.tensor([3.0, 0, 0, 0], dtype=F64)),
        "DFT": sm.DFT(T, dtype=torch.complex128),
        "Quasiseparable": sm.Quasiseparable.bidirectional(_lower(14), _lower(15), 4 + d(16, T)),
        "Sum": sm.Sum(_lower(17), sm.Dense(d(18, T, T))),
        "Product": sm.Product(_lower(19), sm.Toeplitz.causal(3 + d(20, T))),
    }


MATRICES = _matrices()

#: ``(method, malformation) -> (call, names)``: the call takes the matrix; the message must name one of ``names``.
_X = lambda M, *shape, dtype=F64: tensor(30, shape, M.dtype if M.dtype.is_complex else dtype)  # noqa: E731
METHOD_CASES = {
    ("matmul", "None"): (lambda M: M @ None, ("X",)),
    ("matmul", "string"): (lambda M: M @ "abc", ("X",)),
    ("matmul", "ragged"): (lambda M: M @ [[1.0, 2.0], [3.0]], ("X",)),
    ("matmul", "scalar"): (lambda M: M @ torch.tensor(2.0, dtype=F64), ("X",)),
    ("matmul", "longer"): (lambda M: M @ _X(M, T + 1, 2), ("X",)),
    ("matmul", "longer 1-D"): (lambda M: M @ _X(M, T + 1), ("X",)),
    ("matmul", "batch"): (lambda M: M @ _X(M, 3, T, 2), ("X", "batch")),
    ("matmul", "meta"): (lambda M: M @ _X(M, T, 2).to("meta"), ("X",)),
    ("rmatmul", "longer"): (lambda M: _X(M, 2, T + 1) @ M, ("X",)),
    ("rmatmul", "batch"): (lambda M: _X(M, 3, 2, T) @ M, ("X", "batch")),
    ("rmatmul", "string"): (lambda M: M.__rmatmul__("abc"), ("X",)),
    ("solve", "None"): (lambda M: M.solve(None), ("Y",)),
    ("solve", "string"): (lambda M: M.solve("abc"), ("Y",)),
    ("solve", "scalar"): (lambda M: M.solve(torch.tensor(1.0, dtype=F64)), ("Y",)),
    ("solve", "longer"): (lambda M: M.solve(_X(M, T + 1, 2)), ("Y",)),
    ("solve", "longer 1-D"): (lambda M: M.solve(_X(M, T + 1)), ("Y",)),
    ("solve", "batch"): (lambda M: M.solve(_X(M, 3, T, 2)), ("Y", "batch")),
    ("solve", "meta"): (lambda M: M.solve(_X(M, T, 2).to("meta")), ("Y",)),
    ("hadamard", "tensor"): (lambda M: M.hadamard(torch.ones(T, T, dtype=F64)), ("hadamard", "StructuredMatrix")),
    ("hadamard", "None"): (lambda M: M.hadamard(None), ("hadamard", "StructuredMatrix")),
    ("hadamard", "other T"): (lambda M: M.hadamard(sm.Diagonal(torch.ones(T + 1, dtype=F64))), ("shape", "shapes")),
    ("hadamard", "other batch"): (lambda M: M.hadamard(sm.Diagonal(torch.ones(3, T, dtype=F64))), ("batch",)),
    ("add", "other T"): (lambda M: M + sm.Diagonal(torch.ones(T + 1, dtype=F64)), ("shape", "shapes")),
    ("add", "other batch"): (lambda M: M + sm.Diagonal(torch.ones(3, T, dtype=F64)), ("batch",)),
    ("add", "meta"): (lambda M: M + sm.Diagonal(torch.ones(T, dtype=F64)).to("meta"), ("device", "devices")),
    ("add", "tensor"): (lambda M: M + torch.ones(T, T, dtype=F64), ("unsupported operand",)),
    ("sub", "other T"): (lambda M: M - sm.Diagonal(torch.ones(T + 1, dtype=F64)), ("shape", "shapes")),
    ("matmul structured", "other T"): (lambda M: M @ sm.Diagonal(torch.ones(T + 1, dtype=F64)), ("shape", "shapes")),
    ("matmul structured", "other batch"): (lambda M: M @ sm.Diagonal(torch.ones(3, T, dtype=F64)), ("batch",)),
    ("matmul structured", "meta"): (lambda M: M @ sm.Diagonal(torch.ones(T, dtype=F64)).to("meta"), ("device", "devices")),
    ("scale", "nan"): (lambda M: M * math.nan, ("scalar", "scale", "factor")),
    ("scale", "inf"): (lambda M: M * np.float64(math.inf), ("scalar", "scale", "factor")),
    ("scale", "nan tensor"): (lambda M: M * torch.tensor(math.nan), ("scalar", "scale", "factor")),
    ("scale", "string"): (lambda M: M * "abc", ("unsupported operand", "can't multiply")),
    ("scale", "vector"): (lambda M: M * torch.ones(2, dtype=F64), ("unsupported operand",)),
    ("divide", "zero"): (lambda M: M / 0.0, ("zero", "division")),
    ("divide", "zero tensor"): (lambda M: M / torch.tensor(0.0, dtype=F64), ("zero", "division")),
    ("to", "bad device"): (lambda M: M.to("abc"), ("device", "dtype")),
    ("to", "integer dtype"): (lambda M: M.to(torch.int64), ("dtype", "int64")),
    ("to", "bool dtype"): (lambda M: M.to(torch.bool), ("dtype", "bool")),
}
METHODS = [(cls, key) for cls in MATRICES for key in METHOD_CASES
           if not (cls == "DFT" and "batch" in key[1])  # a DFT has no batch: every batch broadcasts with it
           and not (cls == "Sum" and key[0] == "solve")]  # a lazy Sum has no solve (a documented TypeError, tested below)


def test_lazy_sum_solve_is_a_documented_type_error():
    raises_clear(lambda: MATRICES["Sum"].solve(torch.ones(T, dtype=F64)), "no fast inverse")


def _check_method(cls: str, case) -> None:
    M = MATRICES[cls]
    call, names = METHOD_CASES[case]
    with Unchanged(M):
        err = raises_clear(lambda: call(M), allow=(ZeroDivisionError,) if case[0] == "divide" else ())
    msg = str(err)
    assert any(n.lower() in msg.lower() for n in names), f"message {msg!r} names none of {names}"
    if "meta" in case[1]:
        assert "device" in msg.lower() or "meta" in msg.lower(), f"message {msg!r} does not say the device"


METHOD_GROUPS = sorted({(cls, method) for cls, (method, _) in METHODS}, key=lambda g: (list(MATRICES).index(g[0]), g[1]))


@pytest.mark.parametrize(("cls", "method"), METHOD_GROUPS, ids=[f"{c}-{m}" for c, m in METHOD_GROUPS])
def test_methods_reject_malformed_operands(cls, method):
    cases = [case for c, case in METHODS if c == cls and case[0] == method]
    problems = _failures((case[1], lambda case=case: _check_method(cls, case)) for case in cases)
    if problems:
        pytest.fail(f"{cls}.{method}:\n  " + "\n  ".join(problems), pytrace=False)


RECTANGULAR = {"LowRank": sm.LowRank(tensor(0, (T, 2)), tensor(1, (T + 1, 2))), "Dense": sm.Dense(tensor(2, (T, T + 1))),
               "Toeplitz": sm.Toeplitz(tensor(3, (T,)), tensor(4, (T + 1,)))}


@pytest.mark.parametrize("cls", RECTANGULAR)
@pytest.mark.parametrize("method", ["inv", "solve", "tril"])
def test_square_only_methods_reject_rectangular_matrices(cls, method):
    M = RECTANGULAR[cls]
    call = {"inv": lambda: M.inv(), "solve": lambda: M.solve(torch.ones(T, dtype=F64)), "tril": lambda: M.tril()}[method]
    if method == "tril" and not hasattr(M, "tril"):
        return
    raises_clear(call, "square")


@pytest.mark.parametrize("cls", ["SSS", "OneSS", "Quasiseparable"])
@pytest.mark.parametrize("tol", ["abc", math.nan, math.inf, -1.0, 1.0, 2.0], ids=str)
def test_compress_rejects_bad_tolerances(cls, tol):
    M = {"SSS": MATRICES["SSS"], "OneSS": MATRICES["OneSS"], "Quasiseparable": MATRICES["Quasiseparable"]}[cls]
    with Unchanged(M):
        raises_clear(lambda: M.compress(tol), "tol")


# --- random tensors for random arguments ------------------------------------------------------------

TENSOR_ARGS = [(e, arg) for e in ENTRIES for arg, value in e.good().items() if isinstance(value, torch.Tensor)]


@st.composite
def random_tensors(draw):
    shape = tuple(draw(st.lists(st.integers(0, 5), max_size=4)))
    dtype = draw(st.sampled_from([torch.bool, torch.int64, torch.float32, F64, torch.complex128]))
    t = tensor(draw(st.integers(0, 2**20)), shape, F64 if dtype in (torch.bool, torch.int64) else dtype, -2.0, 2.0)
    return t.round().to(dtype) if dtype in (torch.bool, torch.int64) else t


def _recorded(name: str, arg: str, value: torch.Tensor) -> str | None:
    """The recorded defect (DEFECTS.md, pinned by the table above) a random value would hit, if any."""
    if name == "sma_plan" and arg in ("q", "k", "v"):
        return "D30"
    if name == "SMADecoder.step" and value.dim() == 0:
        return "D31"
    if name == "ssd_step" and (arg == "state" and (value.dim() not in (3, 4) or not value.is_floating_point())
                               or arg == "B" and value.dim() > 1 and value.shape[1] == 0):
        return "D33"
    if name == "semiseparable_rank" and value.numel() == 0 and value.dim() > 2:
        return "D39"
    if name == "OneSS.decay" and arg == "gamma" and value.is_complex():
        return "D22"
    return None


@fuzz(60)
@given(pick=st.sampled_from(TENSOR_ARGS), value=random_tensors())
def test_random_tensor_arguments_give_a_result_or_a_clear_error(pick, value):
    """A random tensor (any rank, sizes 0-5, bool/int/float/complex) in place of one argument: either a
    consistent result or a clear error naming an argument; never a crash from deep inside."""
    entry, arg = pick
    assume(_recorded(entry.name, arg, value) is None)
    kwargs = entry.good()
    kwargs[arg] = value
    names = tuple(kwargs) + tuple(n for ns in entry.names.values() for n in ns)
    with Unchanged(_inputs(entry, kwargs)):
        try:
            result = entry.call(**kwargs)
        except (AssertionError, KeyboardInterrupt):
            raise
        except BaseException as err:  # noqa: BLE001
            assert_clear_error(err)
            msg = str(err)
            assert any(_word(n, msg) for n in names) or "shape" in msg or "finite" in msg, \
                f"{entry.name}({arg}={tuple(value.shape)} {value.dtype}): message {msg!r} names no argument"
            return
    if isinstance(result, sm.StructuredMatrix):
        dense = result.to_dense()
        assert tuple(dense.shape) == tuple(result.shape), f"{entry.name}: to_dense() {tuple(dense.shape)} != shape {tuple(result.shape)}"
        assert bool(torch.isfinite(dense).all()), f"{entry.name}({arg}={tuple(value.shape)} {value.dtype}): non-finite matrix"
    results = result if isinstance(result, tuple) else (result,)
    for r in results:
        if isinstance(r, torch.Tensor) and r.is_floating_point() or isinstance(r, torch.Tensor) and r.is_complex():
            assert bool(torch.isfinite(r).all()), f"{entry.name}({arg}={tuple(value.shape)} {value.dtype}): non-finite result"
