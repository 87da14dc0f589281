"""Fit the SMA planner's coefficients for one device kind to a ``bench_sma`` run.

Run by hand: ``python benchmarks/calibrate_plan.py benchmarks/results/bench_sma_cpu.json``. For
each order it fits ``ms = flops * s_flop + bytes * s_byte + passes * ms_pass`` (non-negative, least
squares on relative error) over the measured rows, prints the coefficients to paste into
``structmat.sma.plan.COEFFICIENTS`` and the regret that model would have on the same rows.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import numpy as np
import scipy.optimize
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).parent))

from bench_sma import make_mask  # noqa: E402

from structmat.sma.plan import admissible, order_features  # noqa: E402


def main(path: str) -> None:
    data = json.loads(Path(path).read_text())
    kind = "cuda" if "cuda" in Path(path).name else "cpu"
    rows, H = data["rows"], 2
    features = []
    for r in rows:
        T, N = r["T"], r["N=P"]
        mask = make_mask(r["mask"], T, H, torch.device("cpu"))
        chunk = 64 if kind == "cpu" else 256
        features.append({o: order_features(o, mask, 1, T, T, H, N, N, 4, kind, chunk) for o in admissible(mask) if o in r})
    coefficients = {}
    for order in ("quadratic", "linear", "chunked"):
        X = np.array([f[order] for f in features if order in f], dtype=float)
        y = np.array([r[order] for r, f in zip(rows, features) if order in f])
        scale = X.max(axis=0)
        coef, _ = scipy.optimize.nnls((X / scale) / y[:, None], np.ones(len(y)))
        coefficients[order] = tuple(float(c) for c in coef / scale)
        print(f'"{order}": ({coefficients[order][0]:.3g}, {coefficients[order][1]:.3g}, {coefficients[order][2]:.3g}),')
    regrets = []
    for r, f in zip(rows, features):
        est = {o: float(np.dot(coefficients[o], f[o])) for o in f if o in coefficients}
        choice = min(est, key=est.get)
        regrets.append(r[choice] / min(r[o] for o in f))
        if regrets[-1] > 1.2:
            print(f"  {r['mask']} N={r['N=P']} T={r['T']}: picks {choice}, measured {({o: round(r[o], 2) for o in f})}")
    print(f"in-sample regret: median {statistics.median(regrets):.3f}, worst {max(regrets):.3f}")


if __name__ == "__main__":
    main(sys.argv[1])
