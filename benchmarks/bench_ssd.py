"""SSD on the GPU: structmat's Triton kernels against mamba_ssm, fla and SDPA, in one run.

Run by hand on a CUDA machine: ``python benchmarks/bench_ssd.py [--quick]``. Peers are imported
from ``peers/`` (git-ignored, never committed): ``peers/mamba_ssm`` (the Python sources of
state-spaces/mamba, loaded under a stub package so no CUDA extension is needed) and
``peers/fla_pkg`` (the unpacked pure-Python ``fla-core`` wheel). Writes
``benchmarks/results/bench_ssd.json`` and ``bench_ssd.png``.

Problem (ANCHORS.md): 32768 tokens per call (batch = 32768 / T), H = 32, P = 64, one group,
chunk 256, bf16 inputs, fp32 dt and A; plus B = 2, T = 8192, H = 80, N = 128.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))

from _report import cuda_peak_mib, table, write  # noqa: E402

import structmat as sm  # noqa: E402


def load_peers() -> dict:
    peers = {}
    src = ROOT / "peers"
    if (src / "mamba_ssm").is_dir():
        pkg = types.ModuleType("mamba_ssm")
        pkg.__path__ = [str(src / "mamba_ssm")]
        sys.modules["mamba_ssm"] = pkg
        try:
            mod = importlib.import_module("mamba_ssm.ops.triton.ssd_combined")
            peers["mamba_ssm"] = mod.mamba_chunk_scan_combined
        except Exception as err:  # a peer that does not import is reported, not fatal
            print(f"mamba_ssm unavailable: {err!r}")
    if (src / "fla_pkg").is_dir():
        sys.path.insert(0, str(src / "fla_pkg"))
        try:
            peers["fla"] = importlib.import_module("fla.ops.simple_gla").chunk_simple_gla
        except Exception as err:
            print(f"fla unavailable: {err!r}")
    return peers


def make_inputs(batch, T, H, P, N, *, dtype=torch.bfloat16, seed=0, grad=False):
    g = torch.Generator(device="cuda").manual_seed(seed)
    dev = "cuda"
    x = torch.randn(batch, T, H, P, device=dev, dtype=dtype, generator=g)
    dt = torch.nn.functional.softplus(torch.randn(batch, T, H, device=dev, generator=g) - 3.0)
    A = -torch.exp(torch.rand(H, device=dev, generator=g) * 2.0)
    B = torch.randn(batch, T, 1, N, device=dev, dtype=dtype, generator=g) / N**0.5
    C = torch.randn(batch, T, 1, N, device=dev, dtype=dtype, generator=g) / N**0.5
    tensors = [x, dt, A, B, C]
    if grad:
        for t in tensors:
            t.requires_grad_(True)
    return tensors


def calls(peers, x, dt, A, B, C):
    H = x.shape[2]
    out = {"structmat": lambda: sm.ssd(x, dt, A, B, C, chunk_size=256)}

    def unchecked():  # a training loop's call (structmat.nn's layers do this): no host sync for the checks
        with sm.skip_finite_checks():
            return sm.ssd(x, dt, A, B, C, chunk_size=256)

    def kernel():  # the Triton primitive alone, without ssd's argument handling
        from structmat.kernels.decay_triton import decay_chunked_triton

        return decay_chunked_triton(x, dt * A, B, C, scale=dt)[0]

    out["structmat_unchecked"], out["structmat_kernel"] = unchecked, kernel
    if "mamba_ssm" in peers:
        out["mamba_ssm"] = lambda: peers["mamba_ssm"](x, dt, A, B, C, chunk_size=256)
    if "fla" in peers:
        q = C.expand(-1, -1, H, -1)
        k = B.expand(-1, -1, H, -1)
        v = (x * dt[..., None]).to(x.dtype)
        gate = dt * A
        out["fla"] = lambda: peers["fla"](q, k, v, g=gate, scale=1.0)[0]
    return out


def sdpa_call(x, B, grad=False):
    b, T, H, P = x.shape
    q = torch.randn(b, H, T, P, device="cuda", dtype=x.dtype, requires_grad=grad)
    k = torch.randn_like(q, requires_grad=grad)
    v = torch.randn_like(q, requires_grad=grad)
    return lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True), (q, k, v)


def rel_err(a, ref):
    return ((a.double() - ref).norm() / ref.norm()).item()


def correctness(peers, batch=2, T=2048, H=8, P=64, N=128) -> dict:
    x, dt, A, B, C = make_inputs(batch, T, H, P, N, seed=7)
    ref = sm.ssd(x.double(), dt.double(), A.double(), B.double(), C.double(), 64, backend="torch")
    errs = {}
    for name, fn in calls(peers, x, dt, A, B, C).items():
        out = fn()
        out = out[0] if isinstance(out, tuple) else out
        errs[name] = rel_err(out, ref)
    xg, dtg, Ag, Bg, Cg = make_inputs(batch, T, H, P, N, seed=8, grad=True)
    # seeded: dA sums dt * d log_a over (batch, T) with much cancellation, so its error moves with gy
    gy = torch.randn(xg.shape, device="cuda", generator=torch.Generator(device="cuda").manual_seed(9)).to(xg.dtype)
    sm.ssd(xg, dtg, Ag, Bg, Cg, chunk_size=256).backward(gy)
    ours = [t.grad.clone() for t in (xg, dtg, Ag, Bg, Cg)]
    refs = [t.detach().double().requires_grad_() for t in (xg, dtg, Ag, Bg, Cg)]
    sm.ssd(*refs, 64, backend="torch").backward(gy.double())
    grad_errs = {n: rel_err(o, r.grad) for n, o, r in zip(["dx", "ddt", "dA", "dB", "dC"], ours, refs)}
    if "mamba_ssm" in peers:
        for t in (xg, dtg, Ag, Bg, Cg):
            t.grad = None
        peers["mamba_ssm"](xg, dtg, Ag, Bg, Cg, chunk_size=256).backward(gy)
        names = ["dx", "ddt", "dA", "dB", "dC"]
        grad_errs.update({f"mamba_{n}": rel_err(t.grad, r.grad) for n, t, r in zip(names, (xg, dtg, Ag, Bg, Cg), refs)})
    return {"shape": dict(batch=batch, T=T, H=H, P=P, N=N), "fwd_rel_l2_vs_float64": errs, "grad_rel_l2_vs_float64": grad_errs}


def bench(fn, grad_to_none=None):
    import triton.testing

    return triton.testing.do_bench(fn, warmup=25, rep=100, grad_to_none=grad_to_none, return_mode="median")


def fwd_bwd(fn, tensors):
    def run():
        out = fn()
        out = out[0] if isinstance(out, tuple) else out
        out.backward(gy_holder[0])

    gy_holder = [None]
    out = fn()
    out = out[0] if isinstance(out, tuple) else out
    gy_holder[0] = torch.randn_like(out)
    return run


def grid_point(peers, batch, T, H, P, N, sdpa=True) -> dict:
    row = {"T": T, "N": N, "batch": batch, "H": H}
    x, dt, A, B, C = make_inputs(batch, T, H, P, N)
    for name, fn in calls(peers, x, dt, A, B, C).items():
        try:
            row[f"{name}_fwd"] = bench(fn)
        except Exception as err:
            row[f"{name}_fwd"] = None
            print(f"{name} fwd failed at T={T} N={N}: {err!r}"[:300])
    if sdpa:
        fn, _ = sdpa_call(x, B)
        row["sdpa_fwd"] = bench(fn)
    xg, dtg, Ag, Bg, Cg = make_inputs(batch, T, H, P, N, grad=True)
    for name, fn in calls(peers, xg, dtg, Ag, Bg, Cg).items():
        try:
            run = fwd_bwd(fn, (xg, dtg, Ag, Bg, Cg))
            row[f"{name}_fwdbwd"] = bench(run, grad_to_none=[xg, dtg, Ag, Bg, Cg])
            row[f"{name}_peak_mib"] = cuda_peak_mib(run)
        except Exception as err:
            row[f"{name}_fwdbwd"] = None
            print(f"{name} fwd+bwd failed at T={T} N={N}: {err!r}"[:300])
    if sdpa:
        fn, qkv = sdpa_call(xg, Bg, grad=True)
        row["sdpa_fwdbwd"] = bench(fwd_bwd(fn, qkv), grad_to_none=list(qkv))
    fast = [row.get(k) for k in ("mamba_ssm_fwd", "fla_fwd") if row.get(k)]
    for ours, tag in (("structmat", ""), ("structmat_unchecked", "_unchecked"), ("structmat_kernel", "_kernel")):
        if fast and row.get(f"{ours}_fwd"):
            row[f"fwd_speedup_vs_best_peer{tag}"] = min(fast) / row[f"{ours}_fwd"]
        if row.get("mamba_ssm_fwdbwd") and row.get(f"{ours}_fwdbwd"):
            row[f"fwdbwd_speedup_vs_mamba{tag}"] = row["mamba_ssm_fwdbwd"] / row[f"{ours}_fwdbwd"]
    return row


def first_call_seconds(batch=1, T=3000, H=24, P=48, N=96) -> float:
    x, dt, A, B, C = make_inputs(batch, T, H, P, N, grad=True)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    sm.ssd(x, dt, A, B, C).backward(torch.ones_like(x))
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def plot(rows, path, device=None):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    Ns = sorted({r["N"] for r in rows})
    fig, axes = plt.subplots(1, len(Ns), figsize=(5.5 * len(Ns), 4), squeeze=False)
    for ax, N in zip(axes[0], Ns):
        pts = [r for r in rows if r["N"] == N and r["H"] == 32]
        Ts = [r["T"] for r in pts]
        for key, label in (("structmat_fwd", "structmat fwd"), ("mamba_ssm_fwd", "mamba_ssm fwd"), ("fla_fwd", "fla fwd"),
                           ("structmat_fwdbwd", "structmat fwd+bwd"), ("mamba_ssm_fwdbwd", "mamba_ssm fwd+bwd")):
            ys = [r.get(key) for r in pts]
            if all(y is not None for y in ys):
                ax.plot(Ts, ys, marker="o", label=label, linestyle="-" if "bwd" not in key else "--")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("T (32768 tokens per call)")
        ax.set_ylabel("median ms")
        ax.set_title(f"SSD, H=32, P=64, N={N}, bf16, {device or torch.cuda.get_device_name()}")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def merge(paths, name):
    """One grid (JSON + PNG) from the result files of several calls on one machine (the full grid with peers
    takes longer than one device call may run)."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    rows = [r for run in runs for r in run["grid"]]
    path = write(name, {"first_call_seconds": runs[0].get("first_call_seconds"), "correctness": runs[0].get("correctness"),
                        "grid": rows, "merged_from": [Path(p).name for p in paths],
                        "device_machine": runs[0]["machine"]})
    plot(rows, path.with_suffix(".png"), device=runs[0]["machine"].get("gpu"))
    print("wrote", path)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="two grid points only")
    parser.add_argument("--out", default=None, help="also copy results to this folder")
    parser.add_argument("--no-peers", action="store_true", help="time structmat alone (kernel iteration)")
    parser.add_argument("--Ns", default="64,128", help="state sizes of the grid (to split long runs)")
    parser.add_argument("--correctness-only", action="store_true", help="accuracy against float64 and peers only")
    parser.add_argument("--points", default=None,
                        help="grid points T:N[:batch:H], comma separated (default: the full grid)")
    parser.add_argument("--no-sdpa", action="store_true", help="skip the SDPA baseline")
    parser.add_argument("--grid-only", action="store_true", help="skip the first-call and correctness runs")
    parser.add_argument("--name", default=None, help="results file name (default from --Ns / --quick)")
    parser.add_argument("--merge", default=None, help="comma-separated result files of one machine's runs (no GPU "
                        "needed): write their rows as one grid (first call and accuracy from the first) and its plot")
    args = parser.parse_args()
    if args.merge:
        merge(args.merge.split(","), args.name or "bench_ssd_merged")
        return
    peers = {} if args.no_peers else load_peers()
    print("peers:", sorted(peers))
    t_first, corr = None, None
    if not args.grid_only:
        t_first = first_call_seconds()
        print(f"first call (compile fwd+bwd kernels, new shape): {t_first:.2f} s")
        corr = correctness(peers)
        print("correctness:", corr)
    if args.correctness_only:
        if args.out:
            Path(args.out, "correctness.json").write_text(json.dumps({"first_call_seconds": t_first, **corr}, indent=1))
        return
    points = [(T, N) for N in map(int, args.Ns.split(",")) for T in (1024, 2048, 4096, 8192, 16384)]
    if args.quick:
        points = [(2048, 64), (16384, 128)]
    if args.points:
        specs = [[int(v) for v in p.split(":")] for p in args.points.split(",")]
        specs = [(sp[2] if len(sp) > 2 else 32768 // sp[0], sp[0], sp[3] if len(sp) > 3 else 32, sp[1]) for sp in specs]
    else:
        specs = [(32768 // T, T, 32, N) for T, N in points]
        if not args.quick and "128" in args.Ns.split(","):
            specs.append((2, 8192, 80, 128))
    rows = []
    for batch, T, H, N in specs:  # each row printed as it completes: a run cut short keeps what it measured
        rows.append(grid_point(peers, batch, T, H, 64, N, sdpa=not args.no_sdpa))
        print("row:", json.dumps(rows[-1]), flush=True)
        if args.out:
            Path(args.out, "rows_partial.json").write_text(json.dumps(rows, indent=1))
    cols = ["T", "N", "batch", "H", "structmat_fwd", "structmat_unchecked_fwd", "mamba_ssm_fwd", "fla_fwd", "sdpa_fwd",
            "fwd_speedup_vs_best_peer", "fwd_speedup_vs_best_peer_unchecked", "structmat_fwdbwd", "structmat_unchecked_fwdbwd",
            "mamba_ssm_fwdbwd", "sdpa_fwdbwd", "fwdbwd_speedup_vs_mamba", "fwdbwd_speedup_vs_mamba_unchecked",
            "structmat_kernel_fwd", "structmat_kernel_fwdbwd", "structmat_peak_mib", "structmat_unchecked_peak_mib",
            "mamba_ssm_peak_mib"]
    fmt = [{k: (f"{v:.3f}" if isinstance(v, float) else v) for k, v in r.items()} for r in rows]
    print(table(fmt, cols))
    name = args.name or ("bench_ssd_quick" if args.quick else f"bench_ssd_N{args.Ns.replace(',', '_')}")
    path = write(name, {"first_call_seconds": t_first, "correctness": corr, "grid": rows})
    png = path.with_suffix(".png")
    if args.out:
        import shutil

        shutil.copy(path, args.out)
    if not args.quick and not args.no_peers and not args.points:
        plot(rows, png)
        if args.out:
            shutil.copy(png, args.out)
    print("wrote", path)


if __name__ == "__main__":
    main()
