"""Host time of one ``sm.ssd`` call: how long Python takes to enqueue it, against the wall time per call.

Run by hand on a CUDA machine: ``python benchmarks/ssd_host_time.py``. For the default call (checks on)
and the same call under ``skip_finite_checks()``, forward and forward+backward, at the two grid
points of ``bench_ssd.py --quick``: 30 calls with no sync in between. Where the host time per call
reaches the wall time per call, the call is bound by Python, not by its kernels; a host sync inside
the call shows as host time equal to wall time. Prints one line per case (no files: the numbers are
quoted in ``NOTES_ssd.md`` with the log in ``results/logs/``).
"""

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import structmat as sm  # noqa: E402
from structmat.core.validation import skip_finite_checks  # noqa: E402


def per_call_ms(fn, checked: bool, n: int = 30) -> tuple[float, float]:
    """(host ms to enqueue, wall ms) per call over ``n`` calls with no sync in between."""
    def call():
        if checked:
            return fn()
        with skip_finite_checks():
            return fn()

    for _ in range(3):
        call()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        call()
    host = (time.perf_counter() - t0) / n * 1e3
    torch.cuda.synchronize()
    return host, (time.perf_counter() - t0) / n * 1e3


def main() -> None:
    torch.manual_seed(0)
    dev, P = "cuda", 64
    for b, T, H, N in ((16, 2048, 32, 64), (2, 16384, 32, 128)):
        x = torch.randn(b, T, H, P, device=dev, dtype=torch.bfloat16, requires_grad=True)
        dt = torch.randn(b, T, H, device=dev, requires_grad=True)
        A = -torch.rand(H, device=dev).add(0.5).requires_grad_()
        B = torch.randn(b, T, 1, N, device=dev, dtype=torch.bfloat16, requires_grad=True)
        C = torch.randn(b, T, 1, N, device=dev, dtype=torch.bfloat16, requires_grad=True)
        bias = torch.randn(H, device=dev, requires_grad=True)
        gy = torch.randn_like(x)

        def fwd():
            return sm.ssd(x, dt, A, B, C, 256, dt_bias=bias, dt_softplus=True)

        def fwd_bwd():
            fwd().backward(gy)

        for checked in (True, False):
            for name, fn in (("fwd", fwd), ("fwd+bwd", fwd_bwd)):
                host, wall = per_call_ms(fn, checked)
                label = "checked" if checked else "unchecked"
                print(f"T={T} N={N} {label:9s} {name:8s} host enqueue {host:.3f} ms, wall per call {wall:.3f} ms", flush=True)


if __name__ == "__main__":
    main()
