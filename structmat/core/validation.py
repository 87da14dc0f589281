"""Checking arguments: tensors from array-likes, finiteness, and the errors users see.

Every check names the argument and the expected shape. Finiteness checks read the data and so
synchronise with the device; a training loop that builds masks from trusted tensors can skip them
with :func:`skip_finite_checks`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import torch

__all__ = ["SingularMatrixError", "as_tensor", "check_finite", "check_overflow", "skip_finite_checks",
           "finite_checks_enabled", "trusted_parameters", "broadcast_batch"]


class SingularMatrixError(ValueError):
    """Raised when a structured inverse or solve meets a singular matrix."""


_STATE = threading.local()


def finite_checks_enabled() -> bool:
    """Whether constructors check their parameters for NaN and infinities (on by default).

    Off while ``torch.compile`` traces: a check reads data back to the host, which would split the
    graph. Compiled code runs as under :func:`skip_finite_checks`; shape checks stay.
    """
    if torch.compiler.is_compiling():
        return False
    return getattr(_STATE, "finite_checks", True) and not getattr(_STATE, "trusted", False)


@contextlib.contextmanager
def trusted_parameters() -> Iterator[None]:
    """Within the block, constructors trust their parameters: the closure rules build results from
    operands that were checked when they were made (overflow is checked where it can arise, by
    :func:`check_overflow`)."""
    previous = getattr(_STATE, "trusted", False)
    _STATE.trusted = True
    try:
        yield
    finally:
        _STATE.trusted = previous


@contextlib.contextmanager
def skip_finite_checks() -> Iterator[None]:
    """Within the block, constructors skip the finiteness checks that need a host sync.

    For training loops that build masks every step from tensors known to be finite (the checks
    read the data back to the host, which stalls a GPU pipeline). Shape checks stay on.

    Examples
    --------
    >>> import torch, structmat as sm
    >>> with sm.skip_finite_checks():
    ...     M = sm.OneSS(torch.zeros(4))
    """
    previous = getattr(_STATE, "finite_checks", True)  # the setting, not its state while tracing
    _STATE.finite_checks = False
    try:
        yield
    finally:
        _STATE.finite_checks = previous


def as_tensor(x: Any, name: str, *, dtype: torch.dtype | None = None, device=None) -> torch.Tensor:
    """``torch.as_tensor`` that keeps float64 and promotes integers and booleans to the default float dtype."""
    if getattr(x, "__structured_matrix__", False):  # never densify one silently through __array__
        raise TypeError(f"{name} must be array-like, got a structured matrix {type(x).__name__}")
    try:
        t = torch.as_tensor(x, dtype=dtype, device=device)
    except (TypeError, ValueError, RuntimeError) as err:
        raise TypeError(f"{name} must be array-like numbers, got {type(x).__name__}") from err
    if not (t.is_floating_point() or t.is_complex()):
        t = t.to(torch.get_default_dtype())
    return t


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


def check_overflow(x: torch.Tensor, what: str) -> torch.Tensor:
    """``x`` if finite, else a ``SingularMatrixError``: a computed result (an inverse's entries) overflowed its dtype."""
    checking = getattr(_STATE, "finite_checks", True) and not torch.compiler.is_compiling()
    if checking and x.numel() and x.device.type != "meta" and not bool(torch.isfinite(x).all()):
        raise SingularMatrixError(f"{what} overflows {str(x.dtype).replace('torch.', '')}: the matrix is singular or too "
                                  "close to singular in this dtype (try float64)")
    return x


def broadcast_batch(*named: tuple[str, torch.Size | tuple[int, ...]]) -> torch.Size:
    """``torch.broadcast_shapes`` of named batch shapes, with an error that names them."""
    try:
        return torch.broadcast_shapes(*(shape for _, shape in named))
    except RuntimeError as err:
        listing = ", ".join(f"{name} {tuple(shape)}" for name, shape in named)
        raise ValueError(f"batch shapes do not broadcast: {listing}") from err
