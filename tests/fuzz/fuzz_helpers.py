"""What the fuzz tests share: example budgets, clear-error and no-mutation checks, comparisons, batches and random
dense operands (the random-expression builder, with a dense float64 reference beside every structured matrix, is
:mod:`expression_builder`).

Conventions
-----------
* Every structured operand is built in float64 / complex128 (the reference, ``to_dense()`` of the
  operands in double precision), then cast with ``.to(dtype)`` when the test runs in single
  precision: single-precision results are compared with double-precision references at
  :func:`structmat.testing.tolerance`.
* A comparison is ``max |got - want| <= rtol * bound`` where ``bound`` is a Frobenius-norm bound of
  the quantities whose rounding errors add up in the result (``||A|| + ||B||`` for a sum,
  ``||A|| ||B||`` for a product, ``||A^{-1}||^2 ||A||`` for an inverse): generous, so a failure is a
  wrong result, not rounding.
* An operation may instead raise a *clear* error: a ``ValueError`` / ``TypeError`` (``SingularMatrixError``
  is a ``ValueError``) raised by structmat itself (not deep inside torch or numpy) whose message names
  the argument or the reason; :func:`assert_clear_error` checks that.
"""

from __future__ import annotations

import contextlib
import os
import re
import traceback

import numpy as np
import torch
from hypothesis import HealthCheck, Phase, event, settings
from hypothesis import strategies as st

import structmat as sm

F32, F64, C64, C128 = torch.float32, torch.float64, torch.complex64, torch.complex128
DTYPES = (F64, C128, F32, C64)
LENGTHS = (0, 1, 2, 3, 17)
WIDE = {F32: F64, F64: F64, C64: C128, C128: C128}
CLASSES = (sm.OneSS, sm.SSS, sm.Diagonal, sm.Bidiagonal, sm.LowRank, sm.Dense, sm.Toeplitz, sm.Fourier, sm.DFT,
           sm.Quasiseparable)

# --- budgets ---------------------------------------------------------------------------------------

#: The loaded hypothesis profile's size relative to "ci" (25 examples): 1 by default, 20 with
#: ``STRUCTMAT_TEST_PROFILE=long`` (500 examples). Every fuzz test scales its budget by it.
SCALE = max(1, round(settings.default.max_examples / 25))


#: ``STRUCTMAT_FUZZ_EXPLORE=1``: generate only (no shrinking), to survey many failures quickly.
EXPLORE = bool(os.environ.get("STRUCTMAT_FUZZ_EXPLORE"))


def fuzz(n: int, **kw) -> settings:
    """``@settings`` for a fuzz test: ``n`` examples in the default profile, ``n * SCALE`` in the long one."""
    if EXPLORE:
        kw.setdefault("phases", [Phase.explicit, Phase.generate])
    return settings(max_examples=n * SCALE, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
                    **kw)


# --- known defects ---------------------------------------------------------------------------------

#: Defects recorded in ``tests/fuzz/DEFECTS.md`` (each pinned by an explicit test that fails until it is
#: fixed), by the signature of the error they raise: ``(id, exception type, message regex, file it is raised
#: in)``. Defects without an error signature are skipped where the random part draws them. The random
#: tests stop checking an example that hits one (the rest of the space stays explored), so one recorded
#: defect does not hide the next.
KNOWN = [
    ("D1", RuntimeError, r"cannot reshape tensor of 0 elements", "linalg/iir.py"),
    ("D2", ValueError, r"cannot reshape array of size 0", "toeplitz"),
    ("D2", IndexError, r"index 0 is out of bounds for dimension \d+ with size 0", "toeplitz"),
    ("D3", IndexError, r"amax\(\): Expected reduction dim", "algebra/spectral.py"),
    ("D4", ZeroDivisionError, r"division by zero", "algebra/spectral.py"),
    ("D5", TypeError, r"Bidiagonal\.inv\(\) as OneSS needs real entries", ""),
    ("D6", sm.SingularMatrixError, r"part of the DFT matrix is singular for T > 2", ""),
    ("D7", RuntimeError, r"does not require grad and does not have a grad_fn", "core/lazy.py"),
    ("D8", RuntimeError, r"Inference tensors cannot be saved for backward", "core/lazy.py"),
    ("D10", RuntimeError, r"is invalid for input of size", "attention/orders/lowrank.py"),
    ("D13", IndexError, r"start out of range", "core/transitions.py"),
    ("D38", RuntimeError, r"expected scalar type (Float|Double) but found (Double|Float)", "core/transitions.py"),
]

_TOLERATING = []


class KnownDefect(Exception):
    """An example hit a defect recorded in DEFECTS.md (see :data:`KNOWN`)."""


def known_defect(err: BaseException) -> str | None:
    """The id of the recorded defect whose signature ``err`` has (only inside :func:`tolerate_known`)."""
    if not _TOLERATING:
        return None
    where = " ".join(f.filename for f in traceback.extract_tb(err.__traceback__))
    for ident, kind, pattern, place in KNOWN:
        if isinstance(err, kind) and re.search(pattern, str(err)) and place in where:
            return ident
    return None


@contextlib.contextmanager
def tolerate_known():
    """Around a random example: an example that hits a recorded defect ends there (its pinned test fails)."""
    _TOLERATING.append(True)
    try:
        yield
    except KnownDefect as err:
        event(f"known defect {err}")
    except Exception as err:  # noqa: BLE001
        ident = known_defect(err)
        if ident is None:
            raise
        event(f"known defect {ident}")
    finally:
        _TOLERATING.pop()


def guarded(fn, fallback):
    """``fn()``, or ``fallback`` where it hits a recorded defect (inside strategies, which run before the test body)."""
    _TOLERATING.append(True)
    try:
        return fn()
    except KnownDefect:
        return fallback
    except Exception as err:  # noqa: BLE001
        if known_defect(err) is None:
            raise
        return fallback
    finally:
        _TOLERATING.pop()


# --- errors ----------------------------------------------------------------------------------------

_FOREIGN = ("/torch/", "/numpy/", "/scipy/", "/opt_einsum/", "/triton/")


def assert_clear_error(err: BaseException, *names: str, allow: tuple[type, ...] = ()) -> None:
    """``err`` is a ValueError/TypeError (or one of ``allow``) raised by structmat (or by Python's operator
    protocol), whose message names one of ``names`` (case-insensitive)."""
    ident = known_defect(err)
    if ident is not None:
        raise KnownDefect(ident) from err
    assert isinstance(err, (ValueError, TypeError) + allow), f"{type(err).__name__} instead of ValueError/TypeError: {err}"
    msg = str(err)
    assert msg, f"{type(err).__name__} without a message"
    frames = traceback.extract_tb(err.__traceback__)
    if frames:
        where = frames[-1].filename
        assert not any(f in where for f in _FOREIGN), (
            f"{type(err).__name__} from deep inside {where}:{frames[-1].lineno} instead of a check naming the argument: {msg}")
    if names:
        assert any(n.lower() in msg.lower() for n in names), f"message {msg!r} names none of {names}"


def raises_clear(fn, *names: str, allow: tuple[type, ...] = ()):
    """Call ``fn``; it must raise a clear error (see :func:`assert_clear_error`). Returns the error."""
    try:
        result = fn()
    except BaseException as err:  # noqa: BLE001 (any other exception is the finding)
        if isinstance(err, (KeyboardInterrupt, AssertionError)):
            raise
        assert_clear_error(err, *names, allow=allow)
        return err
    raise AssertionError(f"no error; returned {_describe(result)} (expected a ValueError/TypeError naming {names})")


def _describe(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"tensor {tuple(x.shape)} {x.dtype} finite={bool(torch.isfinite(x).all()) if x.numel() and x.device.type != 'meta' else '-'}"
    return repr(x)[:200]


# --- no mutation -----------------------------------------------------------------------------------

def _tensors(obj, seen=None):
    """Every tensor / ndarray reachable from ``obj`` (structured matrices, Transitions, containers)."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, (torch.Tensor, np.ndarray)):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            yield from _tensors(x, seen)
    elif isinstance(obj, dict):
        for x in obj.values():
            yield from _tensors(x, seen)
    elif isinstance(obj, (sm.StructuredMatrix, sm.Transitions)):
        fields = getattr(obj, "__dict__", {}) or {s: getattr(obj, s) for s in getattr(type(obj), "__slots__", ())}
        for x in fields.values():
            yield from _tensors(x, seen)


def _copy(t):
    if isinstance(t, np.ndarray):
        return t.copy()
    if t.device.type == "meta":
        return None
    return t.detach().clone()


class Unchanged:
    """``with Unchanged(a, b, ...)``: every tensor reachable from the objects is unchanged afterwards."""

    def __init__(self, *objs):
        self.pairs = [(t, _copy(t)) for t in _tensors(objs)]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for t, before in self.pairs:
            if before is None:
                continue
            if isinstance(t, np.ndarray):
                assert np.array_equal(t, before, equal_nan=t.dtype.kind in "fc"), "an input ndarray was mutated"
            else:
                same = t.shape == before.shape and bool(torch.equal(t, before) or
                                                        (t.is_floating_point() or t.is_complex()) and
                                                        torch.allclose(t, before, rtol=0, atol=0, equal_nan=True))
                assert same, f"an input tensor {tuple(t.shape)} {t.dtype} was mutated"
        return False


# --- comparisons ----------------------------------------------------------------------------------

def max_err(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.detach().to(WIDE.get(got.dtype, got.dtype)), want.detach()
    if got.is_complex() or want.is_complex():
        got, want = got.to(C128), want.to(C128)
    else:
        got, want = got.to(F64), want.to(F64)
    return float((got - want).abs().max()) if got.numel() else 0.0


def check_close(got: torch.Tensor, want: torch.Tensor, rtol: float, bound: float, what: str) -> None:
    """Shape equal, finite, ``max |got - want| <= rtol * bound``."""
    assert isinstance(got, torch.Tensor), f"{what}: got {type(got).__name__}, not a tensor"
    assert tuple(got.shape) == tuple(want.shape), f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    assert bool(torch.isfinite(got).all()), f"{what}: non-finite entries (expected finite, reference is finite)"
    err = max_err(got, want)
    assert err <= rtol * bound + 1e-300, f"{what}: max error {err:.3e} > {rtol:.1e} * {bound:.3e}"


def wide_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``torch.matmul`` in double precision (complex if either operand is)."""
    dtype = C128 if (a.is_complex() or b.is_complex()) else F64
    return torch.matmul(a.to(dtype), b.to(dtype))


def fro(x: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(x.detach().to(C128 if x.is_complex() else F64))) if x.numel() else 0.0


# --- batches ---------------------------------------------------------------------------------------

FULL_BATCHES = ((), (2,), (3, 2))


def sub_batch(draw, full: tuple[int, ...]) -> tuple[int, ...]:
    """A batch shape that broadcasts to ``full``: a suffix of it with some sizes replaced by 1."""
    keep = draw(st.integers(0, len(full)))
    tail = full[len(full) - keep:]
    return tuple(draw(st.sampled_from([n, 1])) for n in tail)


def operand_batch(draw, full: tuple[int, ...]) -> tuple[int, ...]:
    """A dense operand's batch: broadcasts with ``full``, possibly with an extra leading dim."""
    b = sub_batch(draw, full)
    if len(b) == len(full) and draw(st.booleans()):
        b = (draw(st.sampled_from([1, 2])),) + b
    return b


# --- random dense operands --------------------------------------------------------------------------

def tensor(seed: int, shape, dtype=F64, low=-1.0, high=1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if dtype.is_complex:
        z = torch.complex(torch.rand(shape, generator=g, dtype=F64), torch.rand(shape, generator=g, dtype=F64))
        return (low + (high - low) * z).to(dtype)
    return (low + (high - low) * torch.rand(shape, generator=g, dtype=F64)).to(dtype)


def operand_dtype(draw, dtype: torch.dtype) -> torch.dtype:
    """A dtype for a dense operand of a matrix of ``dtype``: mostly the same, sometimes another float/complex."""
    return draw(st.sampled_from([dtype, dtype, F64, F32] + ([C128] if dtype.is_complex else [])))


@contextlib.contextmanager
def maybe_inference(flag: bool):
    if flag:
        with torch.inference_mode():
            yield
    else:
        yield
