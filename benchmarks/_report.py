"""Shared reporting for the benchmark scripts: timing, machine facts, JSON output."""

from __future__ import annotations

import datetime
import gc
import json
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np
import scipy
import torch

RESULTS = Path(__file__).parent / "results"


def median_ms(fn, *, repeat: int = 7, warmup: int = 1, min_time: float = 0.2) -> float:
    """Median wall time of ``fn()`` in ms over ``repeat`` runs (more runs for fast functions).

    Like ``timeit``, the garbage collector is paused while timing (and run once before).
    """
    for _ in range(warmup):
        fn()
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        times = []
        start = time.perf_counter()
        while len(times) < repeat or (time.perf_counter() - start < min_time and len(times) < 200):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    finally:
        if was_enabled:
            gc.enable()
    return 1e3 * statistics.median(times)


def cuda_peak_mib(fn) -> float:
    """Peak CUDA memory allocated by ``fn()`` above what was allocated before, in MiB."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def machine() -> dict:
    info = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "scipy": scipy.__version__,
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
        try:
            import triton

            info["triton"] = triton.__version__
        except ImportError:
            pass
    return info


def write(name: str, payload: dict) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps({"machine": machine(), **payload}, indent=2) + "\n")
    return path


def table(rows: list[dict], columns: list[str]) -> str:
    cells = [[str(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)
