"""The table of the malformed-argument fuzz test: every public entry point with its valid arguments and, per
argument, the malformations that make a call invalid (:func:`malformed` builds them), and the words an error must
give besides the argument's name (``REASON``)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from fuzz_helpers import F64, tensor

import structmat as sm

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
