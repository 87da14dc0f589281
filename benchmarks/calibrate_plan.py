"""Fit the SMA planner's coefficients for one device kind to measured order times, and write them.

Run by hand: ``python benchmarks/calibrate_plan.py RESULTS.json [--write]``. ``RESULTS.json`` is a
``bench_sma`` run (rows ``mask, N=P, T`` with a time per order, B = 1, H = 2) or the ``planner`` section of
``benchmarks/sizes_ops.py`` (rows ``class, B, H, N, P, T`` with ``times``, us per order). For each order it fits
``ms = flops * s_flop + bytes * s_byte + passes * ms_pass`` (non-negative, least squares on relative error) over
the measured rows, refines them where that improves the choices on the same rows (:func:`refine`), prints the
coefficients and the regret that model would have on those rows; ``--write``
stores them in ``structmat/attention/tuning.json``, where ``structmat.attention.tuning_for`` reads them.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).parent))

from sizes_ops import _mask  # noqa: E402

from structmat.attention import ORDERS, admissible, tuning_for  # noqa: E402
from structmat.attention.orders import Problem  # noqa: E402
from structmat.attention.tuning import TUNING_FILE  # noqa: E402


def measured(data: dict) -> list[dict]:
    """Rows ``{mask, B, H, N, P, T, times: {order: ms}}`` of either kind of results file."""
    rows = []
    for r in data["rows"]:
        if "times" in r:  # sizes_ops planner rows (us)
            rows.append({"mask": r["class"], "B": r["B"], "H": r["H"], "N": r["N"], "P": r["P"], "T": r["T"],
                         "times": {o: t / 1e3 for o, t in r["times"].items()}})
        else:  # bench_sma rows (ms), B = 1, H = 2
            times = {o: r[o] for o in ORDERS if o in r}
            rows.append({"mask": r["mask"], "B": 1, "H": 2, "N": r["N=P"], "P": r["N=P"], "T": r["T"], "times": times})
    return rows


def features(rows, kind: str) -> list[dict]:
    """Per row, ``order -> (coefficient key, (flops, bytes, passes))``; the key is ``order/path`` where the order
    names its code path (:class:`~structmat.attention.orders.Cost`)."""
    tuning = tuning_for(kind)
    out = []
    for r in rows:
        mask = _mask(r["mask"], r["T"], r["H"])
        problem = Problem(r["B"], r["T"], r["T"], r["H"], r["N"], r["P"], 4, tuning.chunk)
        costs = {o: ORDERS[o].cost(problem, mask, tuning) for o in admissible(mask) if o in r["times"]}
        out.append({o: (f"{o}/{c.path}" if c.path else o, (c.flops, c.bytes, c.passes)) for o, c in costs.items()})
    return out


def _nnls(X: np.ndarray, y: np.ndarray) -> list[float]:
    """Non-negative ``c`` minimising the relative error of ``X c`` against ``y``."""
    scale = X.max(axis=0)
    scale[scale == 0] = 1.0
    coef, _ = scipy.optimize.nnls((X / scale) / y[:, None], np.ones(len(y)))
    return [float(c) for c in coef / scale]


def fit(rows, feats) -> dict:
    """Coefficients per order (all its rows) and per ``order/path`` (the rows of that path)."""
    coefficients = {}
    keys = sorted({key for f in feats for key, _ in f.values()} | {o for f in feats for o in f})
    for key in keys:
        order = key.split("/")[0]
        pairs = [(f[order][1], r["times"][order]) for r, f in zip(rows, feats)
                 if order in f and (key == order or f[order][0] == key)]
        X, y = np.array([x for x, _ in pairs], dtype=float), np.array([t for _, t in pairs])
        coefficients[key] = _nnls(X, y)
        print(f'"{key}": [{coefficients[key][0]:.3g}, {coefficients[key][1]:.3g}, {coefficients[key][2]:.3g}]  ({len(y)} rows)')
    return coefficients


#: Factors :func:`refine` tries on one coefficient at a time, and its most sweeps over all of them.
REFINE_FACTORS = (0.6, 0.75, 0.85, 0.93, 1.07, 1.15, 1.3, 1.6)
REFINE_SWEEPS = 4


def regrets(coefficients: dict, rows, feats) -> list[float]:
    """Per row, the measured time of the order the estimates pick over the fastest order's."""
    out = []
    for r, f in zip(rows, feats):
        est = {o: float(np.dot(coefficients[key], x)) for o, (key, x) in f.items()}
        choice = min(est, key=est.get)
        out.append(r["times"][choice] / min(r["times"][o] for o in f))
    return out


def refine(coefficients: dict, rows, feats) -> dict:
    """The per-order fits minimise each order's relative error, not the planner's choices: where two orders' estimates
    are close, errors of a few percent pick the slower one. Greedy sweeps scale one coefficient at a time by
    :data:`REFINE_FACTORS` where that lowers the worst regret, then the mean log regret, over the rows."""
    def score(c: dict) -> tuple[float, float]:
        g = regrets(c, rows, feats)
        return max(g), float(np.mean(np.log(g)))

    best, current = dict(coefficients), score(coefficients)
    for _ in range(REFINE_SWEEPS):
        improved = False
        for key in sorted(best):
            for i in range(3):
                for factor in REFINE_FACTORS:
                    trial = dict(best)
                    trial[key] = [v * factor if j == i else v for j, v in enumerate(best[key])]
                    s = score(trial)
                    if s < current:
                        best, current, improved = trial, s, True
        if not improved:
            break
    for key in sorted(best):
        if best[key] != coefficients[key]:
            print(f'refined "{key}": [{best[key][0]:.3g}, {best[key][1]:.3g}, {best[key][2]:.3g}]')
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--write", action="store_true", help="store the coefficients in structmat/attention/tuning.json")
    args = parser.parse_args()
    kind = "cuda" if "cuda" in Path(args.paths[0]).name else "cpu"
    rows = [r for path in args.paths for r in measured(json.loads(Path(path).read_text()))]
    feats = features(rows, kind)
    coefficients = fit(rows, feats)
    print(f"in-sample regret of the fits: worst {max(regrets(coefficients, rows, feats)):.3f}")
    coefficients = refine(coefficients, rows, feats)
    regret = regrets(coefficients, rows, feats)
    for r, g in zip(rows, regret):
        if g > 1.2:
            print(f"  {r['mask']} B={r['B']} H={r['H']} N={r['N']} P={r['P']} T={r['T']}: regret {g:.2f}, "
                  f"measured {({o: round(t, 2) for o, t in r['times'].items()})}")
    print(f"in-sample regret: median {statistics.median(regret):.3f}, worst {max(regret):.3f}")
    if args.write:
        tuning = json.loads(TUNING_FILE.read_text())
        tuning[kind]["coefficients"].update(coefficients)
        names = ", ".join(Path(p).name for p in args.paths)
        tuning[kind]["calibrated"] = f"benchmarks/calibrate_plan.py on {names} ({datetime.date.today()})"
        TUNING_FILE.write_text(json.dumps(tuning, indent=2) + "\n")
        print("wrote", TUNING_FILE)


if __name__ == "__main__":
    main()
