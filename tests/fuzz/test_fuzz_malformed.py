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
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch
from fuzz_helpers import F64, Unchanged, assert_clear_error, fuzz, raises_clear, tensor
from hypothesis import assume, given
from hypothesis import strategies as st

import structmat as sm
from structmat.core import dispatch

T, N, BATCH = 4, 3, 2


def _decays(seed=0):
    return tensor(seed, (BATCH, T), F64, 0.05, 1.0)


@dataclass
class Entry:
    """A public entry point: ``call(**kwargs)``, valid ``kwargs`` from ``good()``, malformations per argument."""

    name: str
    call: Callable
    good: Callable[[], dict]
    bad: dict[str, tuple[str, ...]]
    names: dict[str, tuple[str, ...]] = field(default_factory=dict)


def _lower(seed=0, T_=T, batch=(BATCH,)):
    return sm.OneSS.from_decays(tensor(seed, (*batch, T_), F64, 0.1, 1.0), b=tensor(seed + 1, (*batch, T_)))


def _qkv(B=2, T_=T, H=2, Hk=1, Nq=3, P=2, seed=0):
    return dict(q=tensor(seed, (B, T_, H, Nq)), k=tensor(seed + 1, (B, T_, Hk, Nq)), v=tensor(seed + 2, (B, T_, H, P)))


def _ssd_args(b=2, l=T, h=2, p=3, g=1, n=2, seed=0):
    return dict(x=tensor(seed, (b, l, h, p)), dt=tensor(seed + 1, (b, l, h), F64, 0.0, 1.0), A=-tensor(seed + 2, (h,), F64, 0.1, 1.0),
                B=tensor(seed + 3, (b, l, g, n)), C=tensor(seed + 4, (b, l, g, n)), chunk_size=2)


def _ssd_step_args(b=2, h=2, p=3, g=1, n=2, seed=0):
    return dict(state=tensor(seed, (b, h, p, n)), x=tensor(seed + 1, (b, h, p)), dt=tensor(seed + 2, (b, h, p), F64, 0.0, 1.0),
                A=-tensor(seed + 3, (h, p, n), F64, 0.1, 1.0), B=tensor(seed + 4, (b, g, n)), C=tensor(seed + 5, (b, g, n)))


ARRAY = ("None", "string", "ragged", "structured", "nan", "inf", "scalar", "meta")
ONLY = ("None", "string", "ragged", "structured", "nan", "inf", "scalar")  # the only tensor argument: meta is a valid device
OPTIONAL = ("string", "ragged", "structured", "nan", "inf", "meta")
COUNT = ("negative", "fraction", "string", "None")

ENTRIES = [
    Entry("OneSS", lambda **kw: sm.OneSS(**kw), lambda: dict(log_a=torch.log(_decays()), b=tensor(1, (BATCH, T)), c=tensor(2, (BATCH, T))),
          {"log_a": ("None", "string", "ragged", "structured", "nan", "pos_inf", "complex", "scalar", "meta"),
           "b": OPTIONAL + ("longer", "batch", "scalar"), "c": OPTIONAL + ("longer", "batch", "scalar")}),
    Entry("OneSS.from_decays", lambda **kw: sm.OneSS.from_decays(**kw), lambda: dict(a=_decays(), b=tensor(1, (BATCH, T))),
          {"a": ARRAY + ("negative", "complex"), "b": OPTIONAL + ("longer", "batch"), "dtype": ("string", "int_dtype"),
           "device": ("string",)}),
    Entry("OneSS.causal", lambda **kw: sm.OneSS.causal(**kw), lambda: dict(T=T), {"T": COUNT, "dtype": ("string",), "device": ("string",)}),
    Entry("OneSS.decay", lambda **kw: sm.OneSS.decay(**kw), lambda: dict(gamma=torch.tensor([0.5, 0.9], dtype=F64), T=T),
          {"gamma": ("None", "string", "ragged", "structured", "nan", "inf", "negative", "complex"), "T": COUNT}),
    Entry("SSS", lambda **kw: sm.SSS(**kw),
          lambda: dict(A=tensor(0, (BATCH, T, N)), B=tensor(1, (BATCH, T, N)), C=tensor(2, (BATCH, T, N)), D=tensor(3, (BATCH, T))),
          {"A": ARRAY + ("longer", "batch"), "B": ARRAY + ("longer", "longer_T", "batch"), "C": ARRAY + ("longer", "longer_T", "batch"),
           "D": OPTIONAL + ("longer", "batch", "scalar")},
          {"B": ("B", "C"), "C": ("B", "C"), "A": ("A",)}),
    Entry("SSS.from_generators", lambda **kw: sm.SSS.from_generators(**kw),
          lambda: dict(U=tensor(0, (BATCH, T, 2)), V=tensor(1, (BATCH, T, 2))),
          {"U": ARRAY + ("longer", "longer_T", "batch"), "V": ARRAY + ("longer", "longer_T", "batch")},
          {"U": ("U",), "V": ("V",)}),
    Entry("Bidiagonal", lambda **kw: sm.Bidiagonal(**kw), lambda: dict(diag=tensor(0, (BATCH, T)), sub=tensor(1, (BATCH, T - 1))),
          {"diag": ARRAY + ("batch",), "sub": ARRAY + ("longer", "batch")}, {"diag": ("diag",), "sub": ("sub",)}),
    Entry("Diagonal", lambda **kw: sm.Diagonal(**kw), lambda: dict(d=tensor(0, (BATCH, T))), {"d": ONLY}),
    Entry("Dense", lambda **kw: sm.Dense(**kw), lambda: dict(M=tensor(0, (BATCH, T, T))), {"M": ONLY + ("vector",)}),
    Entry("LowRank", lambda **kw: sm.LowRank(**kw), lambda: dict(U=tensor(0, (BATCH, T, 2)), V=tensor(1, (BATCH, T, 2))),
          {"U": ARRAY + ("longer", "batch", "vector"), "V": ARRAY + ("longer", "batch", "vector")}),
    Entry("Toeplitz", lambda **kw: sm.Toeplitz(**kw), lambda: dict(c=tensor(0, (BATCH, T)), r=tensor(1, (BATCH, T))),
          {"c": ARRAY + ("batch",), "r": OPTIONAL + ("batch", "scalar")}),
    Entry("Toeplitz.causal", lambda **kw: sm.Toeplitz.causal(**kw), lambda: dict(c=tensor(0, (BATCH, T))), {"c": ONLY}),
    Entry("Fourier", lambda **kw: sm.Fourier(**kw), lambda: dict(eigvals=torch.fft.fft(tensor(0, (BATCH, T)))), {"eigvals": ONLY}),
    Entry("Fourier.from_kernel", lambda **kw: sm.Fourier.from_kernel(**kw), lambda: dict(c=tensor(0, (BATCH, T))), {"c": ONLY}),
    Entry("DFT", lambda **kw: sm.DFT(**kw), lambda: dict(T=T, scale=0.5),
          {"T": COUNT, "scale": ("None", "string", "nan_scalar", "inf_scalar"), "part": ("string",), "dtype": ("string",),
           "device": ("string",)}),
    Entry("Quasiseparable", lambda **kw: sm.Quasiseparable(**kw),
          lambda: dict(lower=_lower(0), upper=_lower(3).T, diag=tensor(6, (BATCH, T))),
          {"lower": ("None", "tensor", "upper_sss", "other_T", "other_batch", "meta_matrix"),
           "upper": ("None", "tensor", "lower_sss", "other_T_upper", "other_batch_upper", "meta_upper"),
           "diag": ARRAY + ("longer", "batch")},
          {"lower": ("lower",), "upper": ("upper",)}),
    Entry("Quasiseparable.bidirectional", lambda **kw: sm.Quasiseparable.bidirectional(**kw),
          lambda: dict(forward=_lower(0), backward=_lower(3), diag=tensor(6, (BATCH, T))),
          {"forward": ("None", "tensor", "upper_sss", "other_T", "other_batch", "meta_matrix"),
           "backward": ("None", "tensor", "upper_sss", "other_T", "other_batch", "meta_matrix"),
           "diag": OPTIONAL + ("longer", "batch", "scalar")},
          {"forward": ("forward", "lower"), "backward": ("backward", "upper", "lower")}),
    Entry("Sum", lambda terms: sm.Sum(*terms), lambda: dict(terms=[_lower(0), sm.Diagonal(tensor(1, (T,)))]),
          {"terms": ("tensor_items", "other_T_items", "other_batch_items", "one_item", "meta_items")},
          {"terms": ("term", "terms", "Sum")}),
    Entry("Product", lambda factors: sm.Product(*factors), lambda: dict(factors=[_lower(0), sm.Diagonal(tensor(1, (T,)))]),
          {"factors": ("tensor_items", "other_T_items", "other_batch_items", "one_item", "meta_items")},
          {"factors": ("factor", "factors", "Product")}),
    Entry("Inverse", lambda **kw: sm.Inverse(**kw), lambda: dict(M=_lower(0)), {"M": ("None", "tensor", "string", "rectangular")},
          {"M": ("M", "square", "StructuredMatrix")}),
    Entry("Transpose", lambda **kw: sm.Transpose(**kw), lambda: dict(M=_lower(0)), {"M": ("None", "tensor", "string")}),
    Entry("ToeplitzInverse", lambda **kw: sm.ToeplitzInverse(**kw), lambda: dict(M=sm.Toeplitz(tensor(0, (T,)) + 3)),
          {"M": ("None", "tensor", "diagonal_matrix", "rectangular_toeplitz")}, {"M": ("M", "square", "Toeplitz")}),
    Entry("Transitions", lambda **kw: sm.Transitions(**kw), lambda: dict(values=tensor(0, (T,)), kind="scalar"),
          {"values": ("None", "string", "ragged"), "kind": ("string", "None")}),
    Entry("rules", lambda **kw: sm.rules(**kw), lambda: dict(op="add"), {"op": ("string", "int")}),
    Entry("register", lambda op, classes, fn, **kw: sm.register(op, *classes, **kw)(fn),
          lambda: dict(op="inv", classes=(sm.Diagonal,), fn=lambda a: a),
          {"op": ("string", "int", "list"), "classes": ("int_items", "string_items", "one_item_too_many"), "when": ("int",),
           "precedence": ("string",), "fn": ("int", "None")},
          {"classes": ("classes", "class", "type", "operand"), "fn": ("fn", "rule", "callable")}),
    Entry("aslinearoperator", lambda **kw: sm.aslinearoperator(**kw), lambda: dict(M=_lower(0, batch=())),
          {"M": ("None", "tensor", "string", "batched_matrix")}, {"M": ("M", "2-D", "StructuredMatrix")}),
    Entry("semiseparable_rank", lambda **kw: sm.semiseparable_rank(**kw), lambda: dict(M=tensor(0, (T, T))),
          {"M": ("None", "string", "ragged", "nan", "inf", "vector", "rectangular_array"),
           "tol": ("string", "nan_scalar", "negative_scalar")}),
    Entry("sma", lambda **kw: sm.sma(**kw), lambda: dict(**_qkv(), mask=_lower(0, batch=())),
          {"q": ("None", "string", "rank3", "other_N", "other_B", "other_heads", "meta"),
           "k": ("None", "string", "rank3", "other_N", "other_B", "other_heads", "meta", "other_S"),
           "v": ("None", "string", "rank3", "other_B", "other_heads", "meta", "other_S"),
           "mask": ("None", "tensor", "string", "other_T", "other_batch_mask", "meta_matrix"),
           "order": ("string", "inadmissible", "None"), "scale": ("string", "None", "nan_scalar", "inf_scalar"),
           "chunk": ("negative", "zero", "fraction", "string")},
          {"q": ("q", "heads"), "k": ("k", "heads"), "v": ("v", "heads"), "mask": ("mask",), "order": ("order",)}),
    Entry("sma_plan", lambda **kw: sm.sma_plan(**kw), lambda: dict(**_qkv(), mask=_lower(0, batch=())),
          {"q": ("None", "string", "rank3", "other_N"), "mask": ("None", "tensor", "other_T"), "chunk": ("negative", "zero", "fraction")}),
    Entry("SMADecoder", lambda **kw: sm.SMADecoder(**kw), lambda: dict(mask=_lower(0, batch=())),
          {"mask": ("None", "tensor", "string"), "scale": ("string", "nan_scalar")}, {"mask": ("mask", "masks")}),
    Entry("SMADecoder.step", lambda mask, q_t, k_t, v_t: sm.SMADecoder(mask).step(q_t, k_t, v_t),
          lambda: dict(mask=_lower(0, batch=()), q_t=tensor(0, (2, 2, 3)), k_t=tensor(1, (2, 1, 3)), v_t=tensor(2, (2, 2, 4))),
          {"q_t": ("None", "string", "vector", "other_N"), "k_t": ("None", "string", "vector", "other_heads3"),
           "v_t": ("None", "string", "vector", "other_B")},
          {"q_t": ("q", "q_t"), "k_t": ("k", "k_t"), "v_t": ("v", "v_t")}),
    Entry("ssd", lambda **kw: sm.ssd(**kw), _ssd_args,
          {"x": ("None", "string", "rank3", "meta"), "dt": ("None", "string", "longer", "meta"),
           "A": ("None", "string", "longer", "nan", "meta"), "B": ("None", "string", "longer", "rank3", "meta"),
           "C": ("None", "string", "longer", "rank3", "meta"), "chunk_size": ("negative", "zero", "fraction", "string", "None"),
           "D": ("string", "longer", "meta"), "z": ("string", "longer", "meta"), "dt_bias": ("string", "longer", "meta"),
           "initial_states": ("string", "longer", "meta"), "seq_idx": ("string", "longer", "decreasing"),
           "dt_limit": ("string", "reversed_pair", "None"), "backend": ("string", "None")},
          {"B": ("B", "ngroups"), "C": ("C", "B"), "chunk_size": ("chunk_size",)}),
    Entry("ssd_step", lambda **kw: sm.ssd_step(**kw), _ssd_step_args,
          {"state": ("None", "string", "rank3_state"), "x": ("None", "string", "longer", "meta"),
           "dt": ("None", "string", "longer", "meta"), "A": ("None", "string", "longer", "meta"),
           "B": ("None", "string", "longer", "meta"), "C": ("None", "string", "longer", "meta"),
           "D": ("string", "longer"), "z": ("string", "longer"), "dt_bias": ("string", "longer"),
           "state_batch_indices": ("string", "ragged", "scalar", "meta")},
          {"B": ("B", "ngroups"), "C": ("C", "B")}),
]


def malformed(kind: str, good, name: str):
    """The malformed value of ``kind`` for an argument whose valid value is ``good``."""
    t = good if isinstance(good, torch.Tensor) else None
    simple = {
        "None": None, "string": "abc", "ragged": [[1.0, 2.0], [3.0]], "structured": sm.Diagonal(torch.ones(T, dtype=F64)),
        "tensor": torch.ones(T, T, dtype=F64), "int": 3, "negative": -1, "zero": 0, "fraction": 2.5, "huge_float": 1e30,
        "nan_scalar": math.nan, "inf_scalar": math.inf, "negative_scalar": -1.0, "int_dtype": torch.int64,
        "inadmissible": "lowrank", "reversed_pair": (1.0, 0.5), "diagonal_matrix": sm.Diagonal(torch.ones(T, dtype=F64)),
        "rectangular_toeplitz": sm.Toeplitz(torch.ones(T, dtype=F64) * 3, torch.ones(T + 1, dtype=F64)),
        "rectangular": sm.LowRank(torch.ones(T, 1, dtype=F64), torch.ones(T + 1, 1, dtype=F64)),
        "upper_sss": _lower(5).T, "meta_upper": _lower(5).T.to("meta"), "lower_sss": _lower(5), "other_T": _lower(5, T_=T + 1),
        "other_batch": _lower(5, batch=(3,)),
        "meta_matrix": _lower(5).to("meta"), "batched_matrix": _lower(5),
        "other_batch_mask": _lower(5, batch=(3,)), "other_batch_upper": _lower(5, batch=(3,)).T,
        "other_T_upper": _lower(5, T_=T + 1).T,
    }
    if kind in simple:
        return simple[kind]
    if kind.endswith("_items") and kind not in ("int_items", "string_items"):
        first = good[0]
        other = {"tensor_items": torch.ones(T, T, dtype=F64), "other_T_items": _lower(5, T_=T + 1),
                 "other_batch_items": _lower(5, batch=(3,)), "meta_items": _lower(5).to("meta")}[kind]
        return [first, other]
    if kind == "one_item":
        return [good[0]]
    if kind in ("int_items", "string_items"):  # register's operand classes
        return (3,) if kind == "int_items" else ("Diagonal",)
    if kind == "one_item_too_many":
        return (*good, good[0])
    if kind == "list":
        return ["inv"]
    assert t is not None, (name, kind)
    if kind in ("nan", "inf", "pos_inf"):
        out = t.clone()
        out.view(-1)[-1] = math.nan if kind == "nan" else math.inf
        return out
    if kind == "complex":
        return t.to(torch.complex128) + 0.5j
    if kind == "scalar":
        return t.reshape(-1)[0].clone()
    if kind == "vector":
        return t.reshape(-1)[:T].clone()
    if kind == "meta":
        return t.to("meta")
    if kind == "longer":
        return torch.cat([t, t[..., -1:]], dim=-1)
    if kind == "longer_T":
        return torch.cat([t, t[..., -1:, :]], dim=-2)
    if kind == "batch":
        return torch.cat([t, t[:1]], dim=0)
    if kind == "rank3":
        return t[..., 0]
    if kind == "rank3_state":
        return t[:, 0]
    if kind == "rectangular_array":
        return torch.cat([t, t[..., -1:]], dim=-1)
    if kind == "other_N":
        return torch.cat([t, t[..., -1:]], dim=-1)
    if kind == "other_B":
        return torch.cat([t, t[:1]], dim=0)
    if kind == "other_S":
        return torch.cat([t, t[:, -1:]], dim=1)
    if kind == "other_heads":
        return torch.cat([t, t[:, :, -1:]], dim=2) if t.shape[2] > 1 else torch.cat([t, t, t], dim=2)
    if kind == "other_heads3":
        return torch.cat([t, t, t], dim=1)
    if kind == "decreasing":
        return torch.tensor([[1, 1, 0, 0]] * t.shape[0], dtype=torch.int32) if t is not None else None
    raise AssertionError(kind)


def _good_value(entry: Entry, kwargs: dict, name: str):
    if name in kwargs:
        return kwargs[name]
    if entry.name == "ssd" and name == "seq_idx":
        return torch.zeros(BATCH, T, dtype=torch.int32)
    if entry.name == "ssd" and name in ("D", "dt_bias"):
        return tensor(9, (2,))
    if entry.name == "ssd" and name == "z":
        return kwargs["x"]
    if entry.name == "ssd" and name == "initial_states":
        return tensor(9, (BATCH, 2, 3, 2))
    if entry.name == "ssd_step" and name in ("D", "dt_bias"):
        return tensor(9, (2, 3))
    if entry.name == "ssd_step" and name == "z":
        return kwargs["x"]
    if entry.name == "ssd_step" and name == "state_batch_indices":
        return torch.tensor([1, 0])
    if entry.name == "SSS" and name == "D":
        return kwargs["D"]
    return None


#: Reasons a message must give besides the argument's name, per malformation.
REASON = {"meta": ("device", "meta"), "meta_matrix": ("device", "meta"), "meta_items": ("device", "meta"), "meta_upper": ("device", "meta")}


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
