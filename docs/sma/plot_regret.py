"""Draw the SMA planner's measured regret from the committed benchmark JSON.

``python docs/sma/plot_regret.py`` reads ``benchmarks/results/bench_sma_cpu.json`` and
``bench_sma_cuda.json`` (written by ``benchmarks/bench_sma.py``) and writes
``docs/images/sma_regret.png``: for every case, the time of the order ``auto`` picked over the time
of the fastest order measured (1 means the plan chose the best order).
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
OUT = ROOT / "docs" / "images" / "sma_regret.png"


def main(out: Path = OUT) -> Path:
    runs = [(f"bench_sma_{d}.json", label) for d, label in (("cpu", "CPU (2 cores)"), ("cuda", "H100"))]
    fig, axes = plt.subplots(1, len(runs), figsize=(11, 3.6), sharey=True)
    for ax, (name, label) in zip(axes, runs):
        data = json.loads((RESULTS / name).read_text())
        rows = [r for r in data["rows"] if "regret" in r]
        masks = sorted({r["mask"] for r in rows})
        for i, mask in enumerate(masks):
            for n, marker in ((16, "o"), (64, "s")):
                pts = [(r["T"], r["regret"]) for r in rows if r["mask"] == mask and r["N=P"] == n]
                if pts:
                    ax.plot([t * (1 + 0.06 * (i - 2)) for t, _ in pts], [g for _, g in pts], marker=marker, ls="none",
                            color=f"C{i}", label=f"{mask}, N=P={n}")
        s = data["summary"]
        ax.axhline(1.1, color="0.5", ls="--", lw=0.8)
        ax.axhline(1.5, color="0.5", ls=":", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("T")
        ax.set_title(f"{label}: median {s['regret_median']:.2f}, worst {s['regret_worst']:.2f}", fontsize=10)
    axes[0].set_ylabel("time(auto) / time(best order)")
    axes[-1].legend(fontsize=7, loc="upper right", ncol=2)
    fig.suptitle("SMA planner regret (benchmarks/results/bench_sma_*.json; dashed 1.1, dotted 1.5)", fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


if __name__ == "__main__":
    print("wrote", main())
