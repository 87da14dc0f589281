"""Fit the SMA planner's coefficients for one device kind to a ``bench_sma`` run, and write them.

Run by hand: ``python benchmarks/calibrate_plan.py benchmarks/results/bench_sma_cpu.json [--write]``.
For each order it fits ``ms = flops * s_flop + bytes * s_byte + passes * ms_pass`` (non-negative,
least squares on relative error) over the measured rows, prints the coefficients and the regret
that model would have on the same rows; ``--write`` stores them in
``structmat/attention/tuning.json``, where ``structmat.attention.tuning_for`` reads them.
"""

from __future__ import annotations

import argparse
import datetime
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

from structmat.attention import ORDERS, admissible, tuning_for  # noqa: E402
from structmat.attention.orders import Problem  # noqa: E402
from structmat.attention.tuning import TUNING_FILE  # noqa: E402


def features(rows, kind: str) -> list[dict]:
    tuning, H = tuning_for(kind), 2
    out = []
    for r in rows:
        T, N = r["T"], r["N=P"]
        mask = make_mask(r["mask"], T, H, torch.device("cpu"))
        problem = Problem(1, T, T, H, N, N, 4, tuning.chunk)
        costs = {o: ORDERS[o].cost(problem, mask, tuning) for o in admissible(mask) if o in r}
        out.append({o: (c.flops, c.bytes, c.passes) for o, c in costs.items()})
    return out


def fit(rows, feats) -> dict:
    coefficients = {}
    for order in ("quadratic", "linear", "chunked"):
        X = np.array([f[order] for f in feats if order in f], dtype=float)
        y = np.array([r[order] for r, f in zip(rows, feats) if order in f])
        scale = X.max(axis=0)
        coef, _ = scipy.optimize.nnls((X / scale) / y[:, None], np.ones(len(y)))
        coefficients[order] = [float(c) for c in coef / scale]
        print(f'"{order}": [{coefficients[order][0]:.3g}, {coefficients[order][1]:.3g}, {coefficients[order][2]:.3g}]')
    return coefficients


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("path")
    parser.add_argument("--write", action="store_true", help="store the coefficients in structmat/attention/tuning.json")
    args = parser.parse_args()
    data = json.loads(Path(args.path).read_text())
    kind = "cuda" if "cuda" in Path(args.path).name else "cpu"
    rows = data["rows"]
    feats = features(rows, kind)
    coefficients = fit(rows, feats)
    regrets = []
    for r, f in zip(rows, feats):
        est = {o: float(np.dot(coefficients[o], f[o])) for o in f if o in coefficients}
        choice = min(est, key=est.get)
        regrets.append(r[choice] / min(r[o] for o in f))
        if regrets[-1] > 1.2:
            print(f"  {r['mask']} N={r['N=P']} T={r['T']}: picks {choice}, measured {({o: round(r[o], 2) for o in f})}")
    print(f"in-sample regret: median {statistics.median(regrets):.3f}, worst {max(regrets):.3f}")
    if args.write:
        tuning = json.loads(TUNING_FILE.read_text())
        tuning[kind]["coefficients"].update(coefficients)
        tuning[kind]["calibrated"] = f"benchmarks/calibrate_plan.py on {Path(args.path).name} ({datetime.date.today()})"
        TUNING_FILE.write_text(json.dumps(tuning, indent=2) + "\n")
        print("wrote", TUNING_FILE)


if __name__ == "__main__":
    main()
