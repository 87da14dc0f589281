"""Registers, spills and shared memory of every decay kernel, compiled for sm_90a.

``python benchmarks/kernel_resources.py`` (needs only ``triton``, no torch and no GPU) compiles each kernel
from a hand-written signature and prints one row per kernel and state size N in {64, 128}, with the tile
constants of ``structmat/kernels/decay_triton_config.py`` (bf16 inputs, P = 64, chunk 256).
``report(fn, signature, constexprs, num_warps, num_stages)`` is the helper.

``python benchmarks/kernel_resources.py --launch`` (CUDA) runs a forward+backward instead and reads the
numbers of the kernels the launches compiled (triton's ``n_regs``, ``n_spills`` as local-memory bytes,
``shared``). The two differ: a launch specialises on more than the signature says (session 9 on an H100,
triton 3.6: the forward at N = 128 compiled offline to 144 bytes of spills and 49 KB of shared memory, and
at launch to none and 115 KB), so the launch numbers are the ones to quote.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import os
import re
import subprocess
import sys
import tempfile
import types

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def ptxas_path():
    d = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin")
    blackwell = os.path.join(d, "ptxas-blackwell")
    return blackwell if os.path.exists(blackwell) else os.path.join(d, "ptxas")


def report(fn, signature, constexprs, num_warps=4, num_stages=3, attrs=None):
    """Compile ``fn`` for sm_90a; ``{regs, spill_stores, spill_loads, shared}`` from ptxas."""
    src = ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": num_warps, "num_stages": num_stages})
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(k.asm["ptx"])
    r = subprocess.run([ptxas_path(), "-v", "--gpu-name", "sm_90a", f.name, "-o", os.devnull], capture_output=True,
                       text=True)
    os.unlink(f.name)
    txt = r.stdout + r.stderr
    regs = re.search(r"Used (\d+) registers", txt)
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", txt)
    return dict(regs=int(regs.group(1)) if regs else None, spill_stores=int(spill.group(1)) if spill else None,
                spill_loads=int(spill.group(2)) if spill else None, shared=k.metadata.shared)


def _load_kernels():
    """The kernel modules by path, under stub packages (``structmat/__init__`` needs torch)."""
    for name, path in (("structmat", "structmat"), ("structmat.kernels", "structmat/kernels")):
        if name not in sys.modules:
            pkg = types.ModuleType(name)
            pkg.__path__ = [os.path.join(ROOT, path)]
            sys.modules[name] = pkg
    mods = []
    for leaf in ("decay_triton_fwd", "decay_triton_bwd", "decay_triton_bwd_dx", "decay_triton_bwd_scan"):
        name = f"structmat.kernels.{leaf}"
        if name not in sys.modules:
            spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "structmat/kernels", leaf + ".py"))
            mod = importlib.util.module_from_spec(spec)
            sys.modules[name] = mod
            spec.loader.exec_module(mod)
        mods.append(sys.modules[name])
    return mods


def _constants():
    """Tile constants of decay_triton_config.py, read from its source (it imports torch)."""
    tree = ast.parse(open(os.path.join(ROOT, "structmat/kernels/decay_triton_config.py")).read())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    return out


# pointer dtypes by parameter name (bf16 inputs); other *_ptr parameters are fp32
LO_PTRS = {"x_ptr", "B_ptr", "C_ptr", "z_ptr", "y_ptr", "ypre_ptr", "slo_ptr", "dy_ptr", "glo_ptr", "dx_ptr",
           "dB_ptr", "dC_ptr", "dout_ptr", "dz_ptr", "D_ptr"}
INT_PTRS = {"seq_ptr": "*i32", "sync_ptr": "*i32"}


# What a launch specialises on the bench's shapes (contiguous tensors, T = 16384, H = 32, P = 64):
# strides of 1 become constants, pointers and integers divisible by 16 carry that hint (vector loads).
UNIT_STRIDES = {"sx_p", "sB_n", "sC_n", "sz_p", "sdy_p", "sD_p", "si_n", "sf_n", "so_p"}
NOT_DIVISIBLE = {"G", "NB", "sB_g", "sC_g"}


def signature_of(fn, constexprs):
    """``(signature, constexprs, attrs)`` as a launch on the bench's shapes would give them."""
    sig, cx, attrs = {}, dict(constexprs), {}
    for i, name in enumerate(inspect.signature(fn.fn).parameters):
        if name in UNIT_STRIDES:
            cx[name] = 1
        if name in cx:
            sig[name] = "constexpr"
            continue
        if name.endswith("_ptr"):
            sig[name] = INT_PTRS.get(name, "*bf16" if name in LO_PTRS else "*fp32")
        else:
            sig[name] = "i32"
        if name.endswith("_ptr") or name not in NOT_DIVISIBLE:
            attrs[(i,)] = [["tt.divisibility", 16]]
    return sig, cx, attrs


def rows(N_values=(64, 128), P=64, chunk=256):
    fwd, bwd, bwd_dx, scan = _load_kernels()
    k = _constants()
    bm = min(k["BLOCK_M"], chunk)
    out = []
    for N in N_values:
        common = dict(CHUNK=chunk, BM=bm, BN=N, BP=P, PREC="tf32")
        feats = dict(HAS_SCALE=True, HAS_SEQ=False)
        split = lambda name: dict(BP=P // k[name][N], PS=k[name][N])  # noqa: E731
        st = dict(SPLIT_STATE=k["SPLIT_STATE"])
        order = dict(HEAVY_FIRST=k["HEAVY_FIRST"])
        sums32 = dict(EXACT_DECAYS=False, cl_ptr=None)  # (bf16: float32 sums, the fp64 sums' rests absent)
        cases = [
            ("fwd", fwd.decay_fwd_kernel, k["FWD_WARPS"][N],
             dict(common, **feats, HAS_D=False, HAS_Z=False, HAS_INIT=False, SAVE_LO=True, WRITE_YPRE=False,
                  **split("FWD_SPLIT"), **st, EXACT_DECAYS=False)),
            ("fwd (D, z, init, seq)", fwd.decay_fwd_kernel, k["FWD_WARPS"][N],
             dict(common, HAS_SCALE=True, HAS_SEQ=True, HAS_D=True, HAS_Z=True, HAS_INIT=True, SAVE_LO=True,
                  WRITE_YPRE=True, **split("FWD_SPLIT"), **st, EXACT_DECAYS=False)),
            ("bwd chain", scan.decay_bwd_chain_kernel, k["CHAIN_WARPS"][N],
             dict(common, HAS_SEQ=False, HAS_DFINAL=True, WRITE_DINIT=False, **split("CHAIN_SPLIT"),
                  **sums32)),
            ("bwd dC", bwd.decay_bwd_dc_kernel, k["DC_WARPS"][N], dict(common, **feats, **order, **sums32)),
            ("bwd dC (seq)", bwd.decay_bwd_dc_kernel, k["DC_WARPS"][N], dict(common, HAS_SCALE=True, HAS_SEQ=True,
                                                                             **order, **sums32)),
            ("bwd dB", bwd.decay_bwd_db_kernel, k["DB_WARPS"][N], dict(common, **feats, **order, **sums32)),
            ("bwd dB (seq)", bwd.decay_bwd_db_kernel, k["DB_WARPS"][N], dict(common, HAS_SCALE=True, HAS_SEQ=True,
                                                                             **order, **sums32)),
            ("bwd dx", bwd_dx.decay_bwd_dx_kernel, k["DX_WARPS"][N],
             dict(common, **feats, HAS_D=False, **split("DX_SPLIT"), **st, **sums32)),
            ("bwd dx (D, seq)", bwd_dx.decay_bwd_dx_kernel, k["DX_WARPS"][N],
             dict(common, HAS_SCALE=True, HAS_SEQ=True, HAS_D=True, **split("DX_SPLIT"), **st, **sums32)),
            ("bwd d log_a", scan.decay_bwd_dla_kernel, 1, dict(CHUNK=chunk, BM=bm, PS=k["CHAIN_SPLIT"][N])),
            ("gate bwd", scan.decay_gate_bwd_kernel, 4, dict(ROWS=k["GATE_ROWS"], BP=P)),
        ]
        for name, fn, warps, cx in cases:
            sig, cx, attrs = signature_of(fn, cx)
            r = report(fn, sig, cx, num_warps=warps, attrs=attrs)
            out.append(dict(kernel=name, N=N, warps=warps, **r))
    return out


def launched_rows(N_values=(64, 128), P=64, chunk=256, b=2, T=2048, H=32) -> list[dict]:
    """Forward+backward of ``decay_chunked_triton`` on CUDA (bf16), plain and with ``D, z, initial_state,
    seq_idx``; one row per kernel the launches compiled."""
    import torch

    sys.path.insert(0, ROOT)
    from structmat.kernels import decay_triton_bwd, decay_triton_bwd_dx, decay_triton_bwd_scan, decay_triton_fwd
    from structmat.kernels.decay_triton import decay_chunked_triton

    mods = (decay_triton_fwd, decay_triton_bwd, decay_triton_bwd_dx, decay_triton_bwd_scan)
    seen = {}

    class Recording:  # the kernel object with each launch's compiled kernel kept
        def __init__(self, name, kernel):
            self.name, self.kernel = name, kernel

        def __getitem__(self, grid):
            def launch(*args, **meta):
                ck = self.kernel[grid](*args, **meta)
                seen[self.name] = dict(regs=ck.n_regs, spill_bytes=4 * ck.n_spills, shared=ck.metadata.shared,
                                       warps=meta.get("num_warps"))
                return ck
            return launch

        def warmup(self, *args, **meta):
            return self.kernel.warmup(*args, **meta)

    originals = {(m, n): getattr(m, n) for m in mods for n in dir(m) if n.endswith("_kernel")}
    for (m, n), k in originals.items():
        setattr(m, n, Recording(n, k))
    out = []
    try:
        for N in N_values:
            for feats in ("plain", "D, z, init, seq"):
                g = torch.Generator(device="cuda").manual_seed(0)
                r = lambda *s: torch.randn(*s, device="cuda", generator=g)  # noqa: E731
                x, B, C = (r(b, T, H, P).bfloat16(), r(b, T, 1, N).bfloat16(), r(b, T, 1, N).bfloat16())
                dt = torch.rand(b, T, H, device="cuda", generator=g) * 0.1
                kw = dict(scale=dt)
                if feats != "plain":
                    kw.update(D=r(H), z=r(b, T, H, P).bfloat16(), initial_state=r(b, H, P, N),
                              seq_idx=(torch.arange(T, device="cuda") // 700).int()[None].expand(b, T).contiguous())
                leaves = [x, B, C, *(v for v in kw.values() if v.is_floating_point())]
                for t in leaves:
                    t.requires_grad_(True)
                seen.clear()
                y, _ = decay_chunked_triton(x, -dt, B, C, chunk_size=chunk, **kw)
                y.float().sum().backward()
                torch.cuda.synchronize()
                out += [dict(kernel=name, N=N, features=feats, **v) for name, v in sorted(seen.items())]
    finally:
        for (m, n), k in originals.items():
            setattr(m, n, k)
    return out


def main():
    if "--launch" in sys.argv:
        print(f"triton {triton.__version__}, launched on CUDA, bf16, P = 64, chunk 256")
        print(f"{'kernel':24s} {'N':>4s} {'features':16s} {'warps':>5s} {'regs':>5s} {'spill B':>8s} {'smem':>7s}")
        for r in launched_rows():
            print(f"{r['kernel']:24s} {r['N']:4d} {r['features']:16s} {r['warps']!s:>5s} {r['regs']:5d} "
                  f"{r['spill_bytes']:8d} {r['shared']:7d}")
        return
    print(f"triton {triton.__version__}, sm_90a, bf16, P = 64, chunk 256")
    print(f"{'kernel':24s} {'N':>4s} {'warps':>5s} {'regs':>5s} {'spill st':>8s} {'spill ld':>8s} {'smem':>7s}")
    for r in rows():
        print(f"{r['kernel']:24s} {r['N']:4d} {r['warps']:5d} {r['regs']:5d} {r['spill_stores']:8d} "
              f"{r['spill_loads']:8d} {r['shared']:7d}")


if __name__ == "__main__":
    main()
