"""Small matrices: products and solves through a cached dense form, below a measured size.

A scan or a pair of FFTs costs tens of small tensor operations whatever ``T``; below a few hundred steps one
dense ``T x S`` product (or a triangular solve, or an LU solve with kept factors) is faster than that fixed
cost. A class whose products cost scans or FFTs sets ``small_dense = True``; then, for an instance with at
most :data:`DENSE_MAX_ENTRIES` entries (batch included) and a product of at most :data:`DENSE_MAX_WORK`
multiply-adds, the dense form is built once (``to_dense()``) and kept with the instance.

Never for a large matrix (the bound is on the entries, so memory stays below 512 KiB in float64), never
where a gradient is wanted (a kept tensor carries no graph: those calls take the structured path), never
while ``torch.compile`` traces, and only on the CPU (where the crossover was measured). A parameter changed
in place after the form was built (its ``_version`` moved; an inference tensor's values compared) drops the form. A
write through ``.data`` moves no version counter (autograd does not see it either): build the matrix again after one.
"""

from __future__ import annotations

import cmath
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg.blas
import torch

from structmat.core.dtypes import compute_dtype
from structmat.core.host import host
from structmat.core.validation import SingularMatrixError, finite_checks_enabled

__all__ = ["DENSE_MAX_ENTRIES", "DENSE_MAX_WORK", "dense_form", "dense_solve", "held_tensors", "in_place_stamp", "keep",
           "keep_when_used", "vector_solve"]

#: Most entries (``T * S`` times the batch) of a matrix whose products and solves run through its kept
#: dense form: ``256 x 256``. Measured (one thread, float64, ``x (T, 1)``): a 1-SS, SSS(4), Toeplitz,
#: Fourier or quasiseparable product costs 60-500 us of fixed work at T = 256 against 20 us for the dense
#: one; at T = 1024 the dense product costs 650-800 us (it reads 8 MiB), more than the structured ones.
DENSE_MAX_ENTRIES = 256 * 256

#: Most multiply-adds ``T * S * K`` of a product (or solve) taken through the dense form: with many columns
#: the structured product's fixed cost is shared by all of them and it wins. Measured at T = 256 (one
#: thread, 64 columns): the dense product 0.6 ms, the structured ones 0.4-1 ms (FFTs), 1-2 ms (1-SS, SSS(4)
#: banded), 3-5 ms (quasiseparable); the dense triangular solve 0.4 ms, the structured ones 0.15 (1-SS) to 1.8 ms.
DENSE_MAX_WORK = 256 * 256 * 64


@dataclass(eq=False)
class _Kept:
    """What an instance keeps (by key: its dense form by dtype, factors, bands), and its parameters with their
    stamps (:func:`in_place_stamp`) when it was kept."""

    params: list[tuple[torch.Tensor, int]]
    values: dict = field(default_factory=dict)


def held_tensors(M) -> list[torch.Tensor]:
    """Every tensor a structured matrix holds: its parameters, those of its parts and transitions (with repeats)."""
    return _tensors(M, [], set())


def _tensors(obj, out: list, seen: set) -> list:
    """Every tensor held by a matrix (its parameters, those of its parts and transitions)."""
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            _tensors(item, out, seen)
    elif id(obj) not in seen and (getattr(obj, "__structured_matrix__", False) or hasattr(obj, "kind")):
        seen.add(id(obj))
        attrs = vars(obj) if hasattr(obj, "__dict__") else {s: getattr(obj, s) for s in obj.__slots__}
        for key, value in attrs.items():
            if key != "_small":
                _tensors(value, out, seen)
    return out


_DTYPES = (torch.float32, torch.float64, torch.complex64, torch.complex128)  # half precisions: no CPU matmul


def _applies(M, X: torch.Tensor) -> bool:
    """Whether a product with ``X (*, S, K)`` takes ``M``'s dense form (not while ``torch.compile`` traces): what
    depends on ``M`` alone is worked out once per matrix (a product at T = 256 costs 4 us, these checks 1)."""
    columns = M.__dict__.get("_dense_columns")
    if columns is None:
        shape = M.shape
        fits = type(M).small_dense and shape.numel() <= DENSE_MAX_ENTRIES and M.dtype in _DTYPES and M.device.type == "cpu"
        columns = M._dense_columns = DENSE_MAX_WORK // max(shape[-1] * shape[-2], 1) if fits else -1
    return X.shape[-1] <= columns and X.dtype in _DTYPES and not torch.compiler.is_compiling()


#: Most entries of a parameter compared whole by :func:`unchanged`; a larger one is compared at this many entries
#: spread over it (an optimizer's step moves them all). Measured (one thread, an order-128 SSS at T = 256 whose
#: parameters want a gradient, a product under ``no_grad``): 27 us with version stamps alone, 84 comparing whole
#: parameters, 46 at 4096 entries, 39 at 256.
STAMP_ENTRIES = 256


def _sample(p: torch.Tensor) -> torch.Tensor:
    """``p``'s entries, or :data:`STAMP_ENTRIES` of them spread over it."""
    flat = p.detach().reshape(-1)
    return flat if flat.numel() <= STAMP_ENTRIES else flat[:: -(-flat.numel() // STAMP_ENTRIES)]


def in_place_stamp(p: torch.Tensor) -> int | torch.Tensor | tuple[int, torch.Tensor]:
    """What tells a later use whether ``p`` was changed in place: its version counter and, for a CPU tensor that wants
    a gradient (what an optimizer updates), a copy of its values (of :data:`STAMP_ENTRIES` of them for a large one),
    compared by :func:`unchanged`: a fused optimizer's step (``Adam(fused=True)``) and writes through ``.data`` move
    no version counter. An inference tensor has no version: a copy of its values. Other tensors, and other devices (a
    comparison would wait for the device at every use), the version alone: a write that bypasses it (through a numpy
    array sharing the memory, DLPack) is not seen (documented)."""
    if p.is_inference():
        return p.clone()
    return (p._version, _sample(p).clone()) if p.requires_grad and p.device.type == "cpu" else p._version


def unchanged(p: torch.Tensor, stamp: int | torch.Tensor | tuple[int, torch.Tensor]) -> bool:
    """Whether ``p`` is as it was when :func:`in_place_stamp` gave ``stamp`` (a tensor stamped by its version alone
    that wants a gradient now, on the CPU, counts as changed: an optimizer may step it without moving the version)."""
    if isinstance(stamp, tuple):
        return p._version == stamp[0] and torch.equal(_sample(p), stamp[1])
    if isinstance(stamp, torch.Tensor):
        return torch.equal(p, stamp)
    return p._version == stamp and not (p.requires_grad and p.device.type == "cpu")


def _record(M, compiling: bool | None = None) -> _Kept | None:
    """The record of what ``M`` keeps (a fresh one where a parameter changed in place); None where a
    gradient is wanted (a kept tensor carries no graph), or while ``torch.compile`` traces (a kept value is Python
    state the graph cannot guard; torch 2.11's dynamo breaks the graph on the walk over the parameters);
    ``compiling``: whether it traces, where the caller asked already."""
    if compiling or (compiling is None and torch.compiler.is_compiling()):
        return None
    kept = M.__dict__.get("_small")
    grad = torch.is_grad_enabled()
    if kept is not None:
        for p, stamp in kept.params:
            if not (unchanged(p, stamp) if type(stamp) is not int  # (the common stamp inline: see unchanged)
                    else p._version == stamp and not (p.requires_grad and p.device.type == "cpu")):
                kept = None
                break
            if grad and p.requires_grad:
                return None
        if kept is not None:
            return kept
    params = _tensors(M, [], set())
    if grad and any(p.requires_grad for p in params):
        return None
    M._small = _Kept([(p, in_place_stamp(p)) for p in _distinct(params)])
    return M._small


def _distinct(params: list[torch.Tensor]) -> list[torch.Tensor]:
    """``params`` without repeats and without views of others among them (a view shares its base's version counter
    and gradient flag): each costs a check on every use of the record."""
    ids = {id(p) for p in params}
    seen: set[int] = set()
    out = []
    for p in params:
        if id(p) not in seen and id(p._base) not in ids:
            seen.add(id(p))
            out.append(p)
    return out


def keep(M, key, build: Callable[[], object]) -> object:
    """``build()``, kept with the instance ``M`` under ``key`` (built again where a gradient is wanted or a
    parameter of ``M`` changed in place since)."""
    kept = _record(M)
    if kept is None:
        return build()
    if key not in kept.values:
        kept.values[key] = _built(build)
    return kept.values[key]


def keep_when_used(M, key, build: Callable[[], object], columns: float, after: int, replaces: tuple = ()) -> object | None:
    """:func:`keep` for a value that costs many calls to build: ``None`` (the caller takes its other path) until the
    earlier calls with ``M`` recorded under ``key`` have brought ``after`` columns (this call's ``columns`` are recorded
    for the next: a matrix used once never pays for the build); then ``build()``, kept in place of the values kept
    under the keys ``replaces`` (which it serves instead). None where a gradient is wanted (nothing is kept)."""
    kept = _record(M)
    if kept is None:
        return None
    values = kept.values
    if key not in values:
        used = values.get(("columns", key), 0)
        values[("columns", key)] = used + columns
        if used < after:
            return None
        values[key] = _built(build)
        for other in replaces:
            values.pop(other, None)
    return values[key]


def _built(build: Callable[[], object]) -> object:
    """``build()`` for keeping: outside inference mode (a kept inference tensor could not be saved for a later call's
    backward) and without a graph (nothing is kept for parameters that need a gradient, :func:`_record`)."""
    with torch.inference_mode(False), torch.no_grad():
        return build()


def dense_form(M, X: torch.Tensor) -> torch.Tensor | None:
    """``M``'s kept dense form in ``X``'s dtype where a product with ``X (*, S, K)`` should use it, else None."""
    if not _applies(M, X) or (kept := _record(M, compiling=False)) is None:  # (_applies asked is_compiling)
        return None
    values = kept.values
    if ("dense", X.dtype) not in values:  # (entries computed in X's dtype, the promoted one, as the other paths do)
        source = M if X.dtype == M.dtype else M._cast(X.dtype)
        values[("dense", X.dtype)] = _built(lambda: source.to_dense().expand(M.shape).contiguous())
    return values[("dense", X.dtype)]


def dense_solve(M, Y: torch.Tensor, triangle: str | None, singular: str) -> torch.Tensor | None:
    """``M^{-1} Y`` for ``Y (*, T, K)`` (prepared as for a product) through the kept dense form: a triangular
    solve (``triangle`` ``"lower"`` or ``"upper"``) or an LU solve with kept factors (``triangle=None``).
    None where the dense form does not apply. Raises :class:`SingularMatrixError` with the message
    ``singular`` for a zero pivot, and for a result that overflows from a finite ``Y``. Half precisions solve in
    float32 (LAPACK has none), the solution rounded to ``Y``'s dtype."""
    if (work := compute_dtype(Y.dtype)) != Y.dtype:
        X = dense_solve(M, Y.to(work), triangle, singular)
        return None if X is None else X.to(Y.dtype)
    A = dense_form(M, Y)
    if A is None:
        return None
    values = M._small.values
    if ("factors", Y.dtype) not in values:
        if triangle is None:  # (kept: built outside inference mode, as the form, for a later call's backward)
            LU, pivots, info = _built(lambda: torch.linalg.lu_factor_ex(A))
            values[("factors", Y.dtype)] = (LU, pivots, bool((info != 0).any()))
        else:
            values[("factors", Y.dtype)] = (None, None, bool((A.diagonal(0, -2, -1) == 0).any()))
    LU, pivots, is_singular = values[("factors", Y.dtype)]
    if is_singular:
        raise SingularMatrixError(singular)
    if triangle is not None and A.dim() == 2 and Y.dtype in _TRSV:
        At = values[("trsv", triangle, Y.dtype)] = host(A).T  # a Fortran-ordered view, for :func:`vector_solve`
        if Y.dim() == 2 and Y.shape[-1] == 1 and Y.shape[0] and not Y.requires_grad:  # (BLAS takes no empty vector)
            return torch.from_numpy(_trsv(M, At, host(Y)[:, 0], triangle == "upper")[:, None])
    if triangle is None:
        X = torch.linalg.lu_solve(LU, pivots, Y)
    else:
        X = torch.linalg.solve_triangular(A, Y, upper=triangle == "upper")
    # one reduction sees any inf or NaN; NaN in gives NaN out, as torch.linalg.solve does
    if finite_checks_enabled() and not cmath.isfinite(X.sum().item()) and bool(torch.isfinite(Y).all()):
        if bool(torch.isfinite(X).all()):
            return X  # only the sum overflowed
        _overflow(M, str(X.dtype))
    return X


def _overflow(M, dtype: str) -> None:
    raise SingularMatrixError(f"{type(M).__name__}.solve: the solution overflows {dtype.replace('torch.', '')} "
                              "(the matrix is singular or too close to singular in this dtype)")


#: BLAS ``trsv`` and ``dot`` by real dtype: one column solved by BLAS on numpy views of the kept form costs about
#: half of ``torch.linalg.solve_triangular`` plus ``X.sum().item()`` at T = 256 (measured 24 against 34 us, one
#: thread): the two torch calls' dispatch is most of a small solve.
_TRSV = {torch.float64: (scipy.linalg.blas.dtrsv, scipy.linalg.blas.ddot),
         torch.float32: (scipy.linalg.blas.strsv, scipy.linalg.blas.sdot)}
_TRSV.update({np.float64: _TRSV[torch.float64], np.float32: _TRSV[torch.float32]})  # by the kept form's dtype


def vector_solve(M, Y: torch.Tensor, triangle: str) -> torch.Tensor | None:
    """:func:`dense_solve` of a triangular ``M (T, T)`` (no batch) with one real column ``Y`` of shape ``(T,)`` or
    ``(T, 1)`` in ``M``'s dtype, without the checks that an earlier solve made: where that solve kept the form
    and nothing has changed since (parameters, gradient mode), else None."""
    kept = M.__dict__.get("_small")
    if kept is None or (At := kept.values.get(("trsv", triangle, Y.dtype))) is None:
        return None  # (kept for Y's dtype only where that is the common dtype of M and Y)
    T = M._shape[-1]
    if Y.shape != (T,) and Y.shape != (T, 1) or not T or Y.requires_grad or Y.device.type != "cpu":
        return None
    if _record(M) is not kept or torch.compiler.is_compiling():
        return None
    x = _trsv(M, At, host(Y).reshape(T), triangle == "upper")
    return torch.from_numpy(x if Y.dim() == 1 else x[:, None])


def _trsv(M, At: np.ndarray, y: np.ndarray, upper: bool) -> np.ndarray:
    """``A^{-1} y`` for ``At`` the kept triangular form's transpose (Fortran-ordered) and one real vector ``y (T,)``,
    by BLAS; overflow checked as in :func:`dense_solve`, through one dot product (an inf or NaN makes it non-finite;
    one that merely overflows gets the exact check)."""
    trsv, dot = _TRSV[At.dtype.type]
    x = trsv(At, y, lower=int(upper), trans=1)
    if finite_checks_enabled() and not math.isfinite(dot(x, x)) and bool(np.isfinite(y).all()) \
            and not np.isfinite(x).all():
        _overflow(M, str(x.dtype))
    return x
