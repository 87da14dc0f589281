"""Tuning numbers of the SMA orders, per kind of device, with their reasons.

The numbers live in ``tuning.json`` beside this module (the plan coefficients there are written by
``benchmarks/calibrate_plan.py``); :func:`tuning_for` loads them once per device kind. Tests and
benchmarks pass their own :class:`Tuning` (``dataclasses.replace(tuning_for("cpu"), ...)``) instead
of changing module globals.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

from structmat.core.validation import check_flag, check_positive_int

__all__ = ["Tuning", "tuning_for", "TUNING_FILE"]

TUNING_FILE = Path(__file__).with_name("tuning.json")


@dataclass(frozen=True)
class Tuning:
    """How the SMA orders cut their work on one kind of device (``"cpu"`` or ``"cuda"``).

    Attributes
    ----------
    tile_elements : int
        Largest tensor of one time block of the linear and chunked orders on the CPU. Blocks that
        stay in cache are served again from the heap; a fresh multi-megabyte tensor costs a page
        fault per 4 KiB and made the time grow faster than ``T`` (2^19 elements measured best).
    linear_budget : int
        Elements of the columns one pass of the linear order takes: cache-sized on the CPU, large
        on a GPU whose launches cost more than its passes over memory.
    min_columns : int
        Fewest columns one mask product of the linear order takes: a CPU FFT call on fewer loses up
        to 2x per element to its fixed costs (``benchmarks/NOTES_sma.md``).
    chunk : int
        Default block length of the chunked order (the SSD kernels' 256 on a GPU; 64 on the CPU,
        where the ``L x L`` products dominate).
    time_blocks : bool
        Whether long sequences run in time blocks with carried states (the CPU) or as one block.
    coefficients : dict
        ``order -> (ms per flop, ms per byte, ms per pass)`` of the plan's time estimate, and ``"order/path"``
        for the code paths an order names in its :class:`~structmat.attention.orders.Cost`.

    Examples
    --------
    >>> import dataclasses
    >>> from structmat.attention import tuning_for
    >>> cpu = tuning_for("cpu")
    >>> cpu.device, cpu.chunk, tuning_for("cuda:0").chunk
    ('cpu', 64, 256)
    >>> smaller = dataclasses.replace(cpu, chunk=32)  # a variant, passed as sma(..., tuning=smaller)
    >>> smaller.chunk
    32
    """

    device: str
    tile_elements: int
    linear_budget: int
    min_columns: int
    chunk: int
    time_blocks: bool
    coefficients: dict = field(default_factory=dict)

    def __post_init__(self):  # (a variant by dataclasses.replace is checked too: chunk=0 divided by zero in a run)
        if not isinstance(self.device, str):
            raise TypeError(f"device must be a str ('cpu', 'cuda'); got {self.device!r}")
        for name in ("tile_elements", "linear_budget", "min_columns", "chunk"):
            check_positive_int(getattr(self, name), name)
        check_flag(self.time_blocks, "time_blocks")
        if not isinstance(self.coefficients, dict):
            raise TypeError(f"coefficients must be a dict order -> (ms per flop, ms per byte, ms per pass); got "
                            f"{type(self.coefficients).__name__}")

    def estimate_ms(self, order: str, flops: float, bytes_: float, passes: float, path: str = "") -> float | None:
        """``flops * s_flop + bytes * s_byte + passes * ms_pass`` with the coefficients of ``"order/path"`` where the
        tuning has them, else of ``order``; None where it has neither (a user's order without coefficients:
        ``order="auto"`` leaves it out)."""
        key = f"{order}/{path}"
        coefficients = self.coefficients.get(key if path and key in self.coefficients else order)
        if coefficients is None:
            return None
        s_flop, s_byte, ms_pass = coefficients
        return flops * s_flop + bytes_ * s_byte + passes * ms_pass


# Read once at import: torch.compile cannot trace file reads inside a forward pass.
_TUNINGS: dict = json.loads(TUNING_FILE.read_text())


def tuning_for(device) -> Tuning:
    """The tuning of a device (``torch.device``, ``"cpu"``, ``"cuda:0"``, ...); unknown kinds use the CPU's.
    One object per kind of device (the planner keeps its plans for these)."""
    kind = device.type if isinstance(device, torch.device) else torch.device(device).type
    tuning = _BY_KIND.get(kind)
    if tuning is None:
        data = _TUNINGS
        entry = dict(data.get(kind, data["cpu"]))
        entry.pop("calibrated", None)
        entry["coefficients"] = {k: tuple(v) for k, v in entry["coefficients"].items()}
        tuning = _BY_KIND[kind] = Tuning(device=kind if kind in data else "cpu", **entry)
    return tuning


_BY_KIND: dict[str, Tuning] = {}
