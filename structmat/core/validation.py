"""Checking arguments: tensors from array-likes, devices, dtypes, counts, scalars, finiteness, and the
errors users see.

Every check names the argument and says what was expected (a shape, a type, a device). Checks of the
data (finiteness, signs, a zero divisor) read it back to the host and so synchronise with the device:
they run only while :func:`finite_checks_enabled` (a training loop that builds masks from trusted
tensors skips them with :func:`skip_finite_checks`; ``torch.compile`` traces without them). Type,
shape and device checks always run.
"""

from __future__ import annotations

import cmath
import math
import numbers
import threading
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

__all__ = ["SingularMatrixError", "as_tensor", "check_finite", "checked_once", "check_overflow", "check_solution",
           "overflow_checks_enabled",
           "skip_finite_checks",
           "finite_checks_enabled", "trusted_parameters", "trusted_call", "thread_flag", "broadcast_batch", "check_dtype", "check_device",
           "check_same_device", "check_count", "check_positive_int", "check_sizes", "check_flag", "check_scalar", "check_tolerance",
           "check_nonnegative", "broadcast_shapes", "check_matrix", "check_tensor", "to_target"]


class SingularMatrixError(ValueError):
    """Raised when a structured inverse or solve meets a singular matrix (a ``ValueError``).

    Examples
    --------
    >>> import torch, structmat as sm
    >>> try:
    ...     sm.Diagonal(torch.tensor([1.0, 0.0])).inv()
    ... except sm.SingularMatrixError as err:
    ...     print(type(err).__name__)
    SingularMatrixError
    """


class _State(threading.local):
    """The per-thread check settings. Defaults as class attributes: a ``getattr`` with a default that misses
    raises and catches an ``AttributeError`` (1-2 us, paid by every small solve's overflow check)."""

    finite_checks = True
    trusted = False


_STATE = _State()


class thread_flag:  # noqa: N801  (used as a function: ``with thread_flag(...)``)
    """Within the block, ``state.name`` is ``value`` for this thread; the previous setting (``default`` if
    none) comes back after. No ``delattr``: dynamo traces these blocks inside compiled layers and cannot.
    A class rather than a ``contextlib`` generator: entering and leaving cost a fifth as much, and closure
    operations on small matrices enter one per call."""

    __slots__ = ("state", "name", "value", "default", "previous")

    def __init__(self, state: threading.local, name: str, value: bool, default: bool):
        self.state, self.name, self.value, self.default = state, name, value, default

    def __enter__(self) -> None:
        self.previous = getattr(self.state, self.name, self.default)
        setattr(self.state, self.name, self.value)

    def __exit__(self, *exc) -> None:
        setattr(self.state, self.name, self.previous)


def finite_checks_enabled() -> bool:
    """Whether constructors check their parameters for NaN and infinities (on by default).

    Off while ``torch.compile`` traces: a check reads data back to the host, which would split the
    graph. Compiled code runs as under :func:`skip_finite_checks`; shape checks stay.
    """
    if torch.compiler.is_compiling():
        return False
    return getattr(_STATE, "finite_checks", True) and not getattr(_STATE, "trusted", False)


def overflow_checks_enabled() -> bool:
    """Whether computed results are checked for overflow: as :func:`finite_checks_enabled`, but also among
    trusted parameters (a closure result from finite operands can still overflow)."""
    return getattr(_STATE, "finite_checks", True) and not torch.compiler.is_compiling()


def trusted_call(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` inside :func:`trusted_parameters` (without a context manager's own cost: every closure
    operation runs its rule so)."""
    previous = _STATE.trusted
    _STATE.trusted = True
    try:
        return fn(*args)
    finally:
        _STATE.trusted = previous


def trusted_parameters() -> thread_flag:
    """Within the block, constructors trust their parameters: the closure rules build results from
    operands that were checked when they were made (overflow is checked where it can arise, by
    :func:`check_overflow`)."""
    return thread_flag(_STATE, "trusted", True, default=False)


def skip_finite_checks() -> thread_flag:
    """Within the block, constructors skip the finiteness checks that need a host sync.

    For training loops that build masks every step from tensors known to be finite (the checks
    read the data back to the host, which stalls a GPU pipeline). Shape checks stay on.

    Examples
    --------
    >>> import torch, structmat as sm
    >>> with sm.skip_finite_checks():
    ...     M = sm.OneSS(torch.zeros(4))
    """
    return thread_flag(_STATE, "finite_checks", False, default=True)  # the setting, not its state while tracing


def as_tensor(x: Any, name: str, *, dtype: torch.dtype | None = None, device=None,
              like: tuple[str, torch.Tensor] | None = None) -> torch.Tensor:
    """``torch.as_tensor`` that keeps float64 and promotes integers and booleans to the default float dtype.

    ``device`` moves ``x`` there (the caller asked for it). Without it, ``like=(other_name, other)``
    puts an array-like where ``other`` is and requires a tensor to be there already: a parameter on
    another device is an error naming both, never moved silently.
    """
    if isinstance(x, torch.Tensor) and dtype is None and device is None and (x.is_floating_point() or x.is_complex()):
        if like is not None:  # a tensor stays where it is: what torch.as_tensor would return, without its cost
            check_same_device(x, name, like[1], like[0])
        return x
    dtype, device = check_dtype(dtype), check_device(device)
    if getattr(x, "__structured_matrix__", False):  # never densify one silently through __array__
        raise TypeError(f"{name} must be array-like, got a structured matrix {type(x).__name__}")
    if device is None and like is not None:
        if isinstance(x, torch.Tensor):
            check_same_device(x, name, like[1], like[0])
        device = like[1].device
    if isinstance(x, np.ndarray) and (not x.flags.writeable or any(stride < 0 for stride in x.strides)):
        x = np.array(x)  # torch shares no reversed or read-only memory (it raised, or warned at each call)
    try:
        t = torch.as_tensor(x, dtype=dtype, device=device)
    except (TypeError, ValueError, RuntimeError) as err:
        raise TypeError(f"{name} must be array-like numbers, got {type(x).__name__}") from err
    if not (t.is_floating_point() or t.is_complex()):
        t = t.to(torch.get_default_dtype())
    return t


def check_tensor(x: Any, name: str, what: str = "a tensor", *, optional: bool = False) -> None:
    """``x`` is a ``torch.Tensor`` (or None where ``optional``); ``what`` describes the expected shape."""
    if not (isinstance(x, torch.Tensor) or (optional and x is None)):
        raise TypeError(f"{name} must be {what}; got {type(x).__name__}")


def check_matrix(x: Any, name: str, what: str = "a StructuredMatrix") -> None:
    """``x`` is a structured matrix (told by the base class's marker: this floor cannot import the class)."""
    if isinstance(x, type) or not getattr(x, "__structured_matrix__", False):
        raise TypeError(f"{name} must be {what}; got {type(x).__name__}")


def check_dtype(dtype: Any, name: str = "dtype") -> torch.dtype | None:
    """None, or a floating or complex ``torch.dtype``: an integer or boolean matrix would truncate its parameters."""
    if dtype is None:
        return None
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"{name} must be a floating or complex torch.dtype such as torch.float64; got {dtype!r}")
    if not (dtype.is_floating_point or dtype.is_complex):
        raise TypeError(f"{name} must be a floating or complex torch.dtype (structured matrices hold real or complex "
                        f"parameters, which {dtype} would truncate); got {dtype}")
    return dtype


def check_device(device: Any, name: str = "device") -> torch.device | None:
    """None, or what ``torch.device`` takes (``"cpu"``, ``"cuda:0"``, a ``torch.device``, a CUDA index)."""
    if device is None:
        return None
    try:
        return torch.device(device)
    except (RuntimeError, TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a torch.device or a device string such as 'cpu' or 'cuda:0'; "
                         f"got {device!r}") from err


def check_same_device(x: torch.Tensor, name: str, other: torch.Tensor, other_name: str) -> None:
    if x.device != other.device:
        raise ValueError(f"{name} is on {x.device} but {other_name} is on {other.device}")


def to_target(args: tuple, kwargs: dict) -> tuple[torch.dtype | None, torch.device | None]:
    """The dtype and device a ``Tensor.to``-style call asks for (``to(dtype)``, ``to(device, dtype)``,
    ``to(tensor)``, keywords), checked: floating or complex dtypes only, valid devices."""
    dtype, device = kwargs.get("dtype"), kwargs.get("device")
    for a in (*args, kwargs.get("other")):
        if isinstance(a, torch.Tensor):
            dtype, device = a.dtype, a.device
        elif isinstance(a, torch.dtype):
            dtype = a
        elif isinstance(a, (str, torch.device)) or (isinstance(a, int) and not isinstance(a, bool)):
            device = a
        elif a is not None and not isinstance(a, bool):  # bools are non_blocking / copy
            raise TypeError(f"to() takes a dtype, a device or a tensor; got {a!r}")
    return check_dtype(dtype), check_device(device)


def check_flag(flag: Any, name: str) -> bool:
    """A Python or numpy bool (``lower="no"`` was taken as true)."""
    if not isinstance(flag, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool; got {flag!r}")
    return bool(flag)


def check_sizes(**sizes: Any) -> None:
    """Every keyword a positive integer (a layer's sizes: ``headdim=0`` gave a ``ZeroDivisionError``)."""
    for name, n in sizes.items():
        check_positive_int(n, name)


def check_count(n: Any, name: str) -> int:
    """A non-negative integer (a length); integral floats such as ``4.0`` are accepted."""
    if isinstance(n, bool) or not isinstance(n, numbers.Real):
        raise TypeError(f"{name} must be a non-negative integer; got {type(n).__name__}")
    if not (float(n).is_integer() and n >= 0):
        raise ValueError(f"{name} must be a non-negative integer; got {n!r}")
    return int(n)


def check_positive_int(n: Any, name: str) -> int:
    """A positive integer (a block length)."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
        raise ValueError(f"{name} must be a positive int; got {n!r}")
    return int(n)


def check_scalar(s: Any, name: str, *, real: bool = False) -> numbers.Number | torch.Tensor:
    """A finite Python, numpy or 0-d torch number; numpy numbers come back as Python ones, 0-d tensors as
    they are (a learnable scale keeps its graph; its finiteness is a data check)."""
    if type(s) is float and abs(s) < math.inf:  # the usual call: a finite Python float
        return s
    if isinstance(s, (np.ndarray, np.generic)) and np.ndim(s) == 0:
        s = s.item()
    if isinstance(s, torch.Tensor):
        if s.dim() != 0:
            raise TypeError(f"{name} must be a number or a 0-d tensor; got a tensor of shape {tuple(s.shape)}")
        if real and s.is_complex():
            raise TypeError(f"{name} must be a real number; got a complex tensor")
        if finite_checks_enabled() and s.device.type != "meta" and not bool(torch.isfinite(s)):
            raise ValueError(f"{name} must be a finite number; got {s.item()}")
        return s
    kind = numbers.Real if real else numbers.Number
    if not isinstance(s, kind):
        raise TypeError(f"{name} must be a {'real ' if real else ''}number; got {type(s).__name__}")
    if not abs(s) < math.inf:  # not cmath.isfinite: dynamo cannot trace it (a graph break under torch.compile)
        raise ValueError(f"{name} must be a finite number; got {s!r}")
    return s


def check_tolerance(tol: Any, name: str = "tol", *, below: float | None = None) -> float | None:
    """None, or a finite relative cutoff ``>= 0`` (and ``< below`` where given)."""
    if tol is None:
        return None
    bound = "" if below is None else f" and < {below}"
    if isinstance(tol, bool) or not isinstance(tol, numbers.Real):
        raise TypeError(f"{name} must be a finite relative cutoff >= 0{bound}; got {type(tol).__name__}")
    if not (math.isfinite(tol) and tol >= 0 and (below is None or tol < below)):
        raise ValueError(f"{name} must be a finite relative cutoff >= 0{bound}; got {tol!r}")
    return float(tol)


def check_nonnegative(x: torch.Tensor, name: str, requirement: str = "must be >= 0") -> None:
    """Reject negative entries (a data check: only while :func:`finite_checks_enabled`)."""
    if finite_checks_enabled() and x.numel() and x.device.type != "meta" and bool((x < 0).any()):
        raise ValueError(f"{name} {requirement}")


def check_finite(x: torch.Tensor, name: str, *, allow_neg_inf: bool = False) -> None:
    """Reject NaN and infinities (``-inf`` allowed where it means an exact zero decay)."""
    if not finite_checks_enabled() or x.numel() == 0 or x.device.type == "meta":
        return
    if allow_neg_inf and not x.is_complex():
        ok = ~(torch.isnan(x) | (x == float("inf"))).any()
    else:
        ok = torch.isfinite(x).all()
    if not bool(ok):
        allowed = " (-inf allowed)" if allow_neg_inf else ""
        raise ValueError(f"{name} must be finite{allowed}; found NaN or inf")


# Entries of checked_once: a few per model layer (its A, one seq_idx shared by all layers); past this many,
# entries whose tensor is gone are dropped, then all of them (a fresh start costs one sync per tensor).
_CHECKED_MAX = 512
_CHECKED: dict = {}


def checked_once(t: torch.Tensor, what: str, check: Callable[[torch.Tensor], Any]) -> Any:
    """``check(t)``, remembered per tensor object and version.

    A check that reads data on the host (a sync that drains the CUDA queue) then runs once for a tensor
    passed unchanged to many calls (the same ``A`` at every step of a loop, one ``seq_idx`` for every
    layer of a model). An in-place change bumps the tensor's version and the check runs again; inference
    tensors have no version and are checked every time.

    Examples
    --------
    >>> t = torch.ones(3)
    >>> checked_once(t, "positive", lambda u: bool((u > 0).all()))
    True
    >>> _ = t.sub_(2)  # in place: a new version, checked again
    >>> checked_once(t, "positive", lambda u: bool((u > 0).all()))
    False
    """
    if t.is_inference():
        return check(t)
    key = (id(t), what)
    entry = _CHECKED.get(key)
    if entry is not None and entry[0]() is t and entry[1] == t._version:
        return entry[2]
    result = check(t)
    if len(_CHECKED) >= _CHECKED_MAX:
        for k in [k for k, e in _CHECKED.items() if e[0]() is None]:
            del _CHECKED[k]
        if len(_CHECKED) >= _CHECKED_MAX:
            _CHECKED.clear()
    _CHECKED[key] = (weakref.ref(t), t._version, result)
    return result


def check_overflow(x: torch.Tensor, what: str) -> torch.Tensor:
    """``x`` if finite, else a ``SingularMatrixError``: a computed result (an inverse's entries) overflowed its dtype."""
    # one reduction sees any inf or NaN (isfinite is four kernels); a sum that merely overflows gets the exact check
    if overflow_checks_enabled() and x.numel() and x.device.type != "meta" and not math.isfinite(abs(x.sum().item())) \
            and not bool(torch.isfinite(x).all()):
        narrow = torch.finfo(x.dtype.to_real() if x.is_complex() else x.dtype).bits < 64
        raise SingularMatrixError(f"{what} overflows {str(x.dtype).replace('torch.', '')}: the matrix is singular or too "
                                  "close to singular in this dtype" + (" (try float64)" if narrow else ""))
    return x


def check_solution(X: torch.Tensor, Y: torch.Tensor, what: str) -> torch.Tensor:
    """``X``, a solution of ``M X = Y``, if finite or if ``Y`` is not (NaN in, NaN out, as ``torch.linalg.solve``);
    else a ``SingularMatrixError``: the solution overflowed from a finite right-hand side (a subnormal pivot)."""
    # one reduction sees any inf or NaN; a sum that merely overflows gets the exact check
    if overflow_checks_enabled() and X.numel() and X.device.type != "meta" and not cmath.isfinite(X.sum().item()) \
            and not bool(torch.isfinite(X).all()) and bool(torch.isfinite(Y).all()):
        raise SingularMatrixError(f"{what}: the solution overflows {str(X.dtype).replace('torch.', '')} (the matrix is "
                                  "singular or too close to singular in this dtype, or Y too large for it)")
    return X


def broadcast_shapes(*shapes) -> torch.Size:
    """``torch.broadcast_shapes``, with the common cases (equal or empty shapes) first: torch's helper costs
    more than a small matrix product."""
    longest = max(shapes, key=len, default=())
    if all(shape == longest or not shape for shape in shapes):
        return torch.Size(longest)
    return torch.broadcast_shapes(*shapes)


def broadcast_batch(*named: tuple[str, torch.Size | tuple[int, ...]]) -> torch.Size:
    """:func:`broadcast_shapes` of named batch shapes, with an error that names them."""
    try:
        return broadcast_shapes(*(tuple(shape) for _, shape in named))
    except RuntimeError as err:
        listing = ", ".join(f"{name} {tuple(shape)}" for name, shape in named)
        raise ValueError(f"batch shapes do not broadcast: {listing}") from err
