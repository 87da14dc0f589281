"""``structmat.nn.Mamba2`` against mamba_ssm's ``Mamba2`` block: training throughput, memory, decode latency.

Run by hand on a CUDA machine: ``python benchmarks/bench_layers.py``. The peer is imported from the
git-ignored ``peers/mamba_ssm`` (Python sources of state-spaces/mamba; ANCHORS.md says how) with
``use_mem_eff_path=False``: no ``causal_conv1d`` extension is available, so both blocks run the
convolution in torch and the SSD through their own Triton kernels. Both blocks hold the same weights
(the peer's ``state_dict`` loads into ours with ``strict=True``); the outputs are compared first.

Measures, per ``d_model`` in {1024, 2048} and tokens per call in {16K, 64K} (bf16 weights and
activations): forward and forward+backward tokens/s, peak forward+backward memory; then the latency
of one decoding ``step`` at batch 1, 16 and 128. Writes ``benchmarks/results/bench_layers.{json,png}``.
``--smoke`` runs tiny shapes on the CPU (ours only) to check the script itself.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(ROOT))
from _report import cuda_peak_mib, table, write  # noqa: E402

from structmat.nn import Mamba2  # noqa: E402

SEQLEN = 2048  # tokens per sequence; the batch sets the tokens per call
TOKENS = (16384, 65536)
D_MODELS = (1024, 2048)
DECODE_BATCHES = (1, 16, 128)
DECODE_ROUNDS = 5  # alternating rounds per decode point: both blocks are host-bound, so single timings are noisy


def load_peer():
    """mamba_ssm's ``Mamba2`` class from ``peers/mamba_ssm``, or None (the reason is printed)."""
    src = ROOT / "peers" / "mamba_ssm"
    if not src.is_dir():
        print("peer unavailable: no peers/mamba_ssm")
        return None
    pkg = types.ModuleType("mamba_ssm")
    pkg.__path__ = [str(src)]
    sys.modules["mamba_ssm"] = pkg
    if importlib.util.find_spec("huggingface_hub") is None:  # only its Hub mixin is imported, as a base class
        hub = types.ModuleType("huggingface_hub")
        hub.PyTorchModelHubMixin = type("PyTorchModelHubMixin", (), {})
        sys.modules["huggingface_hub"] = hub
    try:
        return importlib.import_module("mamba_ssm.modules.mamba2").Mamba2
    except Exception as err:  # a peer that does not import is reported, not fatal
        print(f"peer unavailable: {err!r}")
        return None


def blocks(peer_cls, d_model: int, device, dtype) -> dict:
    """Our block and (if available) the peer's, with the same weights."""
    torch.manual_seed(0)
    ours = Mamba2(d_model, layer_idx=0, device=device, dtype=dtype)
    out = {"structmat": ours}
    if peer_cls is not None:
        peer = peer_cls(d_model, layer_idx=0, use_mem_eff_path=False, device=device, dtype=dtype)
        ours.load_state_dict(peer.state_dict(), strict=True)
        out["mamba_ssm"] = peer
    return out


def timer(device):
    """Median ms of ``fn()``: triton's ``do_bench`` on CUDA, a plain loop on the CPU."""
    if device.type == "cuda":
        import triton.testing

        return lambda fn: triton.testing.do_bench(fn, warmup=10, rep=100, return_mode="median")

    def cpu(fn):
        fn()
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return 1e3 * statistics.median(times)

    return cpu


def peak_mib(fn, device) -> float | None:
    return cuda_peak_mib(fn) if device.type == "cuda" else None


def training_row(mods: dict, d_model: int, tokens: int, seqlen: int, device, dtype, bench) -> dict:
    row = {"d_model": d_model, "tokens": tokens, "batch": tokens // seqlen, "seqlen": seqlen}
    u = torch.randn(tokens // seqlen, seqlen, d_model, device=device, dtype=dtype)
    gy = torch.randn_like(u)
    with torch.no_grad():
        outs = {name: m(u).float() for name, m in mods.items()}
    if "mamba_ssm" in outs:
        ref = outs["mamba_ssm"]
        row["rel_diff_vs_mamba_ssm"] = float((outs["structmat"] - ref).norm() / ref.norm())
    for name, m in mods.items():
        def fwd(m=m):
            with torch.no_grad():
                m(u)

        def fwd_bwd(m=m):
            m.zero_grad(set_to_none=True)
            m(u).backward(gy)

        row[f"{name}_fwd_ms"] = bench(fwd)
        row[f"{name}_fwdbwd_ms"] = bench(fwd_bwd)
        row[f"{name}_fwd_Mtok_s"] = tokens / row[f"{name}_fwd_ms"] / 1e3
        row[f"{name}_fwdbwd_Mtok_s"] = tokens / row[f"{name}_fwdbwd_ms"] / 1e3
        row[f"{name}_peak_mib"] = peak_mib(fwd_bwd, device)
    if "mamba_ssm" in mods:
        row["fwd_speedup"] = row["mamba_ssm_fwd_ms"] / row["structmat_fwd_ms"]
        row["fwdbwd_speedup"] = row["mamba_ssm_fwdbwd_ms"] / row["structmat_fwdbwd_ms"]
    return row


def decode_row(mods: dict, d_model: int, batch: int, device, dtype, bench, rounds: int = DECODE_ROUNDS) -> dict:
    """Latency of one ``step`` under ``inference_mode`` (states updated in place, as in generation), the blocks
    timed in alternation for ``rounds`` rounds (best of each kept; the ratio's range over the rounds reported);
    outputs compared after 4 steps."""
    row = {"d_model": d_model, "decode_batch": batch}
    u = torch.randn(batch, 1, d_model, device=device, dtype=dtype)
    outs, steps = {}, {}
    for name, m in mods.items():
        conv_state, ssm_state = m.allocate_inference_cache(batch, 1)
        with torch.inference_mode():
            for _ in range(4):
                y, conv_state, ssm_state = m.step(u, conv_state, ssm_state)
            outs[name] = y.float()

        def step(m=m, conv_state=conv_state, ssm_state=ssm_state):
            with torch.inference_mode():
                m.step(u, conv_state, ssm_state)

        steps[name] = step
    times = {name: [] for name in mods}
    for _ in range(rounds):
        for name in mods:
            times[name].append(1e3 * bench(steps[name]))
    for name in mods:
        row[f"{name}_step_us"] = min(times[name])
        row[f"{name}_step_us_rounds"] = times[name]
    if "mamba_ssm" in outs:
        ref = outs["mamba_ssm"]
        row["rel_diff_vs_mamba_ssm"] = float((outs["structmat"] - ref).norm() / ref.norm())
        row["step_speedup"] = row["mamba_ssm_step_us"] / row["structmat_step_us"]
        ratios = [a / b for a, b in zip(times["mamba_ssm"], times["structmat"])]
        row["step_speedup_range"] = [min(ratios), max(ratios)]
    return row


def plot(train: list[dict], decode: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    labels = [f"d={r['d_model']}\n{r['tokens'] // 1024}K tok" for r in train]
    width = 0.2
    for i, (key, name) in enumerate((("structmat_fwdbwd_Mtok_s", "structmat fwd+bwd"), ("mamba_ssm_fwdbwd_Mtok_s", "mamba_ssm fwd+bwd"),
                                     ("structmat_fwd_Mtok_s", "structmat fwd"), ("mamba_ssm_fwd_Mtok_s", "mamba_ssm fwd"))):
        if all(key in r for r in train):
            a.bar([j + (i - 1.5) * width for j in range(len(train))], [r[key] for r in train], width, label=name)
    a.set_xticks(range(len(train)), labels, fontsize=7)
    a.set_ylabel("million tokens / s")
    a.set_title("Mamba2 block, training")
    a.legend(fontsize=7)
    for name in ("structmat", "mamba_ssm"):
        for d in sorted({r["d_model"] for r in decode}):
            pts = [r for r in decode if r["d_model"] == d and f"{name}_step_us" in r]
            if pts:
                b.plot([r["decode_batch"] for r in pts], [r[f"{name}_step_us"] for r in pts], marker="o", label=f"{name} d={d}")
    b.set_xscale("log")
    b.set_xlabel("batch")
    b.set_ylabel("µs per decoded token")
    b.set_title("Mamba2 block, decoding (step)")
    b.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _table(rows: list[dict]) -> str:
    fmt = lambda v: f"{v:.3g}" if isinstance(v, float) else "-".join(f"{u:.3g}" for u in v) if isinstance(v, list) else v  # noqa: E731
    return table([{k: fmt(v) for k, v in r.items() if not k.endswith("_rounds")} for r in rows],
                 [k for k in rows[-1] if not k.endswith("_rounds")])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU, structmat only (checks the script)")
    parser.add_argument("--out", default=None, help="also copy the results to this folder")
    parser.add_argument("--decode-only", action="store_true", help="the decode rows only (results named *_decode)")
    args = parser.parse_args()
    device = torch.device("cpu" if args.smoke else "cuda")
    dtype = torch.float32 if args.smoke else torch.bfloat16
    peer_cls = None if args.smoke else load_peer()
    d_models, tokens, seqlen, batches = ((64,), (256,), 64, (1, 4)) if args.smoke else (D_MODELS, TOKENS, SEQLEN, DECODE_BATCHES)
    bench = timer(device)
    train, decode = [], []
    for d in d_models:
        mods = blocks(peer_cls, d, device, dtype)
        if not args.decode_only:
            train += [training_row(mods, d, n, seqlen, device, dtype, bench) for n in tokens]
            print(_table(train[-len(tokens):]), flush=True)
        decode += [decode_row(mods, d, b, device, dtype, bench) for b in batches]
        print(_table(decode[-len(batches):]), flush=True)
    name = ("bench_layers_smoke" if args.smoke else "bench_layers") + ("_decode" if args.decode_only else "")
    path = write(name, {"training": train, "decode": decode, "peer": peer_cls is not None,
                        "note": "bf16 weights/activations; peer with use_mem_eff_path=False (no causal_conv1d)"})
    plot(train, decode, path.with_suffix(".png"))
    if args.out:
        import shutil

        for p in (path, path.with_suffix(".png")):
            shutil.copy(p, args.out)
    print("wrote", path)


if __name__ == "__main__":
    main()
