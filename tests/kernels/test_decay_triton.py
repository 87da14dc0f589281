"""decay_chunked_triton against the step-by-step reference decay_naive (float64), forward and backward.

On a CPU the kernels run under ``TRITON_INTERPRET=1`` (set by the root conftest) on small float32
shapes; on a GPU the same tests run the compiled kernels, plus bf16 accuracy, a many-chunk look-back
stress test and ``torch.compile``. Every call runs with ``DecayTritonConfig(debug=True)``: all
buffers start as NaN, so an output element (or an intermediate one) the kernels fail to write shows
up as a non-finite value. The long profile (``STRUCTMAT_TEST_PROFILE=long``) adds a longer sweep.

Float64 gradchecks do not apply: the kernels accumulate in float32 whatever the input dtype (the
interpreter runs the same kernels), so gradients are compared with float64 autograd through
``decay_naive`` instead, at float32 accuracy.
"""

import math

import pytest
import torch
from conftest import DEV, F64, LONG

from structmat.kernels import decay_triton_config as tile_config
from structmat.kernels import decay_triton_launch as launch
from structmat.kernels.decay_naive import decay_naive
from structmat.kernels.decay_triton import DecayTritonConfig, decay_chunked_triton

OPTIONAL = ("scale", "D", "z", "initial_state")


def make(b, T, H, P, G, N, *, seed=0, decay=(-1.0, 0.0), D_shape="hp", device=DEV, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=gen, dtype=F64)  # noqa: E731
    lo, hi = decay
    t = dict(x=r(b, T, H, P), log_a=lo + (hi - lo) * torch.rand(b, T, H, generator=gen, dtype=F64),
             B=r(b, T, G, N), C=r(b, T, G, N), scale=torch.rand(b, T, H, generator=gen, dtype=F64) + 0.1,
             D=r(H, P) if D_shape == "hp" else r(H), z=r(b, T, H, P), initial_state=r(b, H, P, N))
    keep32 = ("log_a", "scale", "initial_state")
    return {k: v.to(device=device, dtype=torch.float32 if k in keep32 else dtype) for k, v in t.items()}


def rel(a, b):
    a, b = a.detach().cpu().to(F64), b.detach().cpu().to(F64)
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


#: The kernels' two decay sums: fp64 sums split into a float and a rest (float32 inputs), float32 sums (16-bit inputs;
#: on the CPU, where the interpreter runs float32 inputs, taken by emptying EXACT_DECAY_DTYPES).
SUMS = {"fp64 sums": (torch.float32,), "fp32 sums": ()}


def run_both(t, names, *, seq_idx=None, chunk=32, block_m=None, grads=True, seed=1, splits=None):
    """Kernel and float64 reference on the same inputs; returns (outs, refs, grads, ref_grads)."""
    leaves = {k: t[k].clone().requires_grad_(grads) for k in ("x", "log_a", "B", "C", *names)}
    refs = {k: v.detach().cpu().to(F64).requires_grad_(grads) for k, v in leaves.items()}
    opt = {k: leaves[k] for k in names}
    cfg = DecayTritonConfig(block_m=block_m, splits=splits, debug=True)
    out, fin, cst = decay_chunked_triton(leaves["x"], leaves["log_a"], leaves["B"], leaves["C"], seq_idx=seq_idx,
                                         chunk_size=chunk, return_chunk_states=True, config=cfg, **opt)
    seq_ref = None if seq_idx is None else seq_idx.cpu()
    want, want_fin = decay_naive(refs["x"], refs["log_a"], refs["B"], refs["C"], seq_idx=seq_ref,
                                 **{k: refs[k] for k in names})
    assert out.dtype == t["x"].dtype and out.shape == t["x"].shape and fin.dtype == torch.float32
    assert torch.isfinite(out).all() and torch.isfinite(fin).all() and torch.isfinite(cst).all()
    g, gr = {}, {}
    if grads:
        gen = torch.Generator().manual_seed(seed)
        gy = torch.randn(out.shape, generator=gen, dtype=F64)
        gf = torch.randn(fin.shape, generator=gen, dtype=F64)
        torch.autograd.backward([out, fin], [gy.to(out), gf.to(fin)])
        torch.autograd.backward([want, want_fin], [gy, gf])
        g = {k: v.grad for k, v in leaves.items()}
        gr = {k: v.grad for k, v in refs.items()}
    return (out, fin, cst), (want, want_fin), g, gr


FEATURES = {
    "plain": ((), None),
    "all": (OPTIONAL, None),
    "seq": (("scale", "D", "initial_state"), "seq"),
}


@pytest.mark.parametrize("features", list(FEATURES))
@pytest.mark.parametrize("block_m, sums", [(16, "fp64 sums"), (None, "fp64 sums"), (16, "fp32 sums")])
def test_matches_reference(features, block_m, sums, monkeypatch):
    """T not a multiple of the chunk, G = 2 groups, one or several blocks per chunk; both decay sums."""
    monkeypatch.setattr(launch, "EXACT_DECAY_DTYPES", SUMS[sums])
    names, seq = FEATURES[features]
    t = make(2, 45, 4, 8, 2, 16, seed=3, D_shape="h" if seq else "hp")
    seq_idx = torch.tensor([[0] * 10 + [1] * 20 + [2] * 15, [5] * 45], device=DEV) if seq else None
    (out, fin, _), (want, want_fin), g, gr = run_both(t, names, seq_idx=seq_idx, block_m=block_m)
    assert rel(out, want) < 1e-5 and rel(fin, want_fin) < 1e-5
    for k in g:
        assert torch.isfinite(g[k]).all(), k
        assert rel(g[k], gr[k]) < 2e-5, k


@pytest.mark.parametrize("sums", list(SUMS))
def test_column_splits(sums, monkeypatch):
    """The state's columns over two programs (forward, chain, dx), as the defaults do at N = 128."""
    monkeypatch.setattr(launch, "EXACT_DECAY_DTYPES", SUMS[sums])
    t = make(2, 40, 4, 32, 2, 16, seed=14)
    seq_idx = torch.tensor([[0] * 17 + [1] * 23, [0] * 40], device=DEV)
    (out, fin, _), (want, want_fin), g, gr = run_both(t, OPTIONAL, seq_idx=seq_idx, block_m=16, splits=(2, 2, 2))
    assert rel(out, want) < 1e-5 and rel(fin, want_fin) < 1e-5
    for k in g:
        assert rel(g[k], gr[k]) < 2e-5, k


@pytest.mark.parametrize("heavy_first", [True, False])
def test_block_orders_of_the_dc_db_programs(monkeypatch, heavy_first):
    """dC / dB programs launched heaviest block first or chunk by chunk: the same gradients (several blocks
    per chunk, a last chunk cut short)."""
    monkeypatch.setattr(launch, "HEAVY_FIRST", heavy_first)
    t = make(1, 45, 2, 8, 1, 16, seed=15)
    _, _, g, gr = run_both(t, ("scale",), block_m=16)
    for k in g:
        assert rel(g[k], gr[k]) < 2e-5, k


def test_chunk_states_are_the_states_entering_each_chunk():
    t = make(1, 70, 2, 4, 1, 16, seed=4)
    chunk = 16
    _, fin, cst = decay_chunked_triton(t["x"], t["log_a"], t["B"], t["C"], scale=t["scale"],
                                       initial_state=t["initial_state"], chunk_size=chunk, return_chunk_states=True,
                                       config=DecayTritonConfig(debug=True))
    assert cst.shape == (1, 5, 2, 4, 16) and cst.dtype == torch.float32
    ref = {k: v.cpu().to(F64) for k, v in t.items()}
    for c in range(5):
        if c == 0:
            want = ref["initial_state"]
        else:
            sl = slice(0, c * chunk)
            _, want = decay_naive(ref["x"][:, sl], ref["log_a"][:, sl], ref["B"][:, sl], ref["C"][:, sl],
                                  scale=ref["scale"][:, sl], initial_state=ref["initial_state"])
        assert rel(cst[:, c], want) < 1e-5, c


@pytest.mark.parametrize("chunk", [64, 128, 256] if (LONG or DEV == "cuda") else [64])
@pytest.mark.parametrize("decay", [(-1e-7, 0.0), (-200.0, -50.0), (-60.0, 0.0)])
@pytest.mark.parametrize("sums", list(SUMS))
def test_extreme_decays(chunk, decay, sums, monkeypatch):
    """``dt A`` near 0 (no decay), below -50 (exp underflows to 0), and mixed: finite and accurate, with the fp64
    sums as accurate as float32 allows, with the float32 sums within their documented bound."""
    monkeypatch.setattr(launch, "EXACT_DECAY_DTYPES", SUMS[sums])
    T = 2 * chunk + 5 if DEV == "cuda" else chunk + 5
    t = make(1, T, 2, 4, 1, 16, seed=5, decay=decay)
    if decay[1] == 0.0:
        t["log_a"][0, : T // 3] = 0.0  # exact zeros too
    (out, fin, _), (want, want_fin), g, gr = run_both(t, ("scale", "initial_state"), chunk=chunk, block_m=32)
    assert rel(out, want) < 1e-5 and rel(fin, want_fin) < 1e-5
    if sums == "fp64 sums":
        # every decay exact to float32; below -50 the GPU flushes float32 subnormals, and d log_a (~1e-32 here) and
        # d initial_state (~1e-29) are sums of such products: 1.2-2.3e-6 on the H100 (NOTES_ssd.md, session 17)
        tol = 5e-6 if DEV == "cuda" and decay[1] <= -50 else 2e-6
        tol_log_a = tol
    else:
        # d log_a at strong decays is a sum of pair weights exp(cs_i - cs_j) read from chunk-local cumulative sums of
        # |cs| up to chunk * max|log_a|, whose exponent error is |cs| * 2^-24: on average half of the largest
        # (docs/numerics.md; mamba_ssm's error on such inputs is 4-10x larger, benchmarks/NOTES_ssd.md, session 9)
        tol, tol_log_a = 2e-5, max(1e-4, 0.5 * chunk * abs(decay[0]) * 2.0**-24)
    for k in g:
        assert torch.isfinite(g[k]).all(), k
        assert rel(g[k], gr[k]) < (tol_log_a if k == "log_a" else tol), k


def test_packed_sequences_and_restarts():
    """Sequences starting on a chunk boundary, mid-chunk, length 1, and one spanning several chunks."""
    chunk = 16
    lengths = [16, 5, 1, 40, 3]
    T = sum(lengths)
    seq_idx = torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)])[None].to(DEV)
    t = make(1, T, 2, 4, 1, 16, seed=6)
    (out, fin, _), (want, want_fin), g, gr = run_both(t, ("scale", "initial_state", "z"), seq_idx=seq_idx, chunk=chunk)
    assert rel(out, want) < 1e-5 and rel(fin, want_fin) < 1e-5
    for k in g:
        assert rel(g[k], gr[k]) < 2e-5, k


def test_noncontiguous_inputs_and_no_mutation():
    gen = torch.Generator().manual_seed(7)
    b, T, H, P, G, N = 2, 33, 4, 8, 2, 16
    x = torch.randn(b, H, T, P, generator=gen).to(DEV).transpose(1, 2)  # (b, T, H, P), strided
    log_a = -torch.rand(b, H, T, generator=gen).to(DEV).transpose(1, 2)
    BC = torch.randn(b, T, G, 2 * N, generator=gen).to(DEV)
    B, C = BC[..., :N], BC[..., N:]
    z = torch.randn(b, T, H, 2 * P, generator=gen).to(DEV)[..., ::2]
    D = torch.randn(P, H, generator=gen).to(DEV).t()
    init = torch.randn(b, H, N, P, generator=gen).to(DEV).transpose(-1, -2)
    before = [v.clone() for v in (x, log_a, B, C, z, D, init)]
    out, fin = decay_chunked_triton(x, log_a, B, C, D=D, z=z, initial_state=init, chunk_size=16,
                                    config=DecayTritonConfig(debug=True))
    want, want_fin = decay_naive(*(v.cpu().double() for v in (x, log_a, B, C)), D=D.cpu().double(),
                                 z=z.cpu().double(), initial_state=init.cpu().double())
    assert rel(out, want) < 1e-5 and rel(fin, want_fin) < 1e-5
    for v, w in zip((x, log_a, B, C, z, D, init), before):
        assert torch.equal(v, w)


def test_gradients_reach_only_given_inputs_and_states_have_no_gradient():
    t = make(1, 20, 2, 4, 1, 16, seed=8)
    x = t["x"].requires_grad_()
    out, fin, cst = decay_chunked_triton(x, t["log_a"], t["B"], t["C"], chunk_size=16, return_chunk_states=True)
    assert not cst.requires_grad
    (out.sum() + fin.sum()).backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()


def test_sixteen_bit_inputs():
    """bf16 in, bf16 out (computed in float32 under the interpreter)."""
    t = make(1, 40, 2, 8, 1, 16, seed=9, dtype=torch.bfloat16)
    out, fin = decay_chunked_triton(t["x"], t["log_a"], t["B"], t["C"], scale=t["scale"], chunk_size=16)
    want, _ = decay_naive(*(t[k].cpu().double() for k in ("x", "log_a", "B", "C")), scale=t["scale"].cpu().double())
    assert out.dtype == torch.bfloat16 and rel(out, want) < 1e-2


def test_errors():
    t = make(1, 8, 2, 4, 1, 16, device="cpu")
    x, la, B, C = t["x"], t["log_a"], t["B"], t["C"]
    with pytest.raises(ValueError, match="log_a must have shape"):
        decay_chunked_triton(x, la[:, :4], B, C)
    with pytest.raises(ValueError, match="multiple of ngroups"):
        decay_chunked_triton(x, la, torch.zeros(1, 8, 3, 16), torch.zeros(1, 8, 3, 16))
    with pytest.raises(ValueError, match="chunk_size"):
        decay_chunked_triton(x, la, B, C, chunk_size=48)
    with pytest.raises(ValueError, match="block_m"):
        decay_chunked_triton(x, la, B, C, chunk_size=16, config=DecayTritonConfig(block_m=32))
    with pytest.raises(ValueError, match="initial_state must have shape"):
        decay_chunked_triton(x, la, B, C, initial_state=torch.zeros(1, 2, 16, 4))
    with pytest.raises(TypeError, match="x must be"):
        decay_chunked_triton(x.double(), la, B, C)


def test_custom_op_registration():
    """Schema, fake (meta) implementation and autograd registration of the forward op."""
    t = make(1, 20, 2, 4, 1, 16, seed=10)
    args = (t["x"].requires_grad_(), t["log_a"], t["B"], t["C"], t["scale"], None, None, None, None, 16, 16,
            [4, 4, 4, 4, 4, 1, 1, 1], True, False)
    torch.library.opcheck(torch.ops.structmat.decay_chunked_fwd.default, args,
                          test_utils=("test_schema", "test_autograd_registration", "test_faketensor"))


@pytest.mark.skipif(not LONG, reason="long sweep: STRUCTMAT_LONG_TESTS=1")
@pytest.mark.parametrize("seed", range(6))
def test_random_shapes_long(seed):
    gen = torch.Generator().manual_seed(100 + seed)
    pick = lambda xs: xs[torch.randint(len(xs), (1,), generator=gen).item()]  # noqa: E731
    chunk = pick([16, 32, 64])
    H, G = pick([(2, 1), (4, 2), (3, 3)])
    T = int(torch.randint(1, 3 * chunk, (1,), generator=gen))
    t = make(2, T, H, pick([5, 16]), G, pick([7, 16, 33]), seed=seed)
    seq_idx = torch.sort(torch.randint(0, 3, (2, T), generator=gen), dim=1).values.to(DEV)
    (out, fin, _), (want, want_fin), g, gr = run_both(t, OPTIONAL, seq_idx=seq_idx, chunk=chunk, block_m=16)
    assert rel(out, want) < 1e-5 and rel(fin, want_fin) < 1e-5
    for k in g:
        assert rel(g[k], gr[k]) < 5e-5, k


# ---- GPU only -----------------------------------------------------------------------------------

gpu = pytest.mark.skipif(DEV != "cuda", reason="needs a GPU")


@gpu
def test_gpu_bf16_accuracy():
    t = make(2, 1024, 8, 64, 1, 128, seed=11, decay=(-0.3, 0.0), dtype=torch.bfloat16)
    (out, fin, _), (want, want_fin), g, gr = run_both(t, ("scale", "D"), chunk=256)
    assert rel(out, want) < 1e-2 and rel(fin, want_fin) < 1e-2
    for k in g:
        assert rel(g[k], gr[k]) < 2e-2, k


@gpu
@pytest.mark.parametrize("N", [16, 128, 256])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_gpu_default_tiles_every_state_size(N, dtype):
    """The default tiles launch and are accurate for each dtype's table (float32 at N = 256 with 64-row blocks
    needed 311 KB of shared memory, more than the H100 has, until session 18)."""
    t = make(1, 300, 4, 64, 1, N, seed=16, dtype=dtype)
    (out, fin, _), (want, want_fin), g, gr = run_both(t, ("scale",), chunk=256)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    assert rel(out, want) < tol and rel(fin, want_fin) < tol
    for k in g:
        assert rel(g[k], gr[k]) < 2 * tol, k


def test_forward_pipelined_exactly_at_the_default_tiles():
    """Every default tile keeps triton's pipelining (and its machine code); any other rows per block run the forward
    unpipelined (triton 3.6 pipelined two such tiles wrong on the H100)."""
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for N in (16, 32, 64, 128, 256):
            for chunk in (16, 32, 64, 128, 256):
                bm, _, _ = tile_config.resolve(None, chunk, N, dtype)
                assert tile_config.forward_stages(dtype, N, bm, chunk) == {}, (dtype, N, chunk)
                for other in (16, 32, 64, 128, 256):
                    if other <= chunk and other != bm:
                        assert tile_config.forward_stages(dtype, N, other, chunk) == {"num_stages": 1}, (dtype, N, other)


@gpu
@pytest.mark.parametrize("dtype, N, block_m, chunk", [(torch.bfloat16, 64, 32, 256), (torch.bfloat16, 64, 16, 256),
                                                      (torch.bfloat16, 64, 32, 128), (torch.float32, 256, 32, 256)],
                         ids=["bf16-32-256", "bf16-16-256", "bf16-32-128", "fp32-N256-32-256"])
def test_gpu_tiles_off_the_defaults(dtype, N, block_m, chunk):
    """Tiles whose forward triton 3.6 pipelined wrong on the H100 (bf16 below 64 rows: outputs 0.16-0.31 off; float32
    at N = 256 with 32 rows, two column programs and states saved: every output off), right unpipelined."""
    t = make(1, 300, 4, 64, 1, N, seed=16, dtype=dtype)
    (out, fin, _), (want, want_fin), g, gr = run_both(t, ("scale",), chunk=chunk, block_m=block_m)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    assert rel(out, want) < tol and rel(fin, want_fin) < tol
    for k in g:
        assert rel(g[k], gr[k]) < 2 * tol, k


@gpu
def test_gpu_float32_tiles_beyond_shared_memory_take_torch():
    """float32 at N = 256 with P = 128 does not fit (FP32_TILE_LIMITS): ``auto`` runs the torch backend."""
    from structmat.kernels.chunked_decay import chunked_decay, triton_supports

    t = make(1, 100, 2, 128, 1, 256, seed=17)
    assert not triton_supports(t["x"], t["B"], t["C"])
    out, fin = chunked_decay(t["x"], t["log_a"], t["B"], t["C"], scale=t["scale"], chunk_size=64)
    want, want_fin = decay_naive(*(t[k].cpu().to(F64) for k in ("x", "log_a", "B", "C")), scale=t["scale"].cpu().to(F64))
    assert rel(out, want) < 1e-5 and rel(fin, want_fin) < 1e-5


@gpu
@pytest.mark.parametrize("chunk", [16, 64])
def test_gpu_lookback_many_chunks(chunk):
    """Hundreds of chunks per sequence across thousands of programs: the look-back under real concurrency."""
    t = make(4, 1024, 16, 32, 2, 32, seed=12, decay=(-0.02, 0.0))
    (out, fin, _), (want, want_fin), g, gr = run_both(t, ("scale", "initial_state"), chunk=chunk, grads=True)
    assert rel(out, want) < 1e-5 and rel(fin, want_fin) < 1e-5
    for k in g:
        assert rel(g[k], gr[k]) < 1e-4, k


@gpu
def test_gpu_torch_compile_fullgraph():
    t = make(2, 300, 4, 32, 2, 64, seed=13, dtype=torch.bfloat16)

    def f(x, log_a, B, C, scale, D):
        out, fin = decay_chunked_triton(x, log_a, B, C, scale=scale, D=D, chunk_size=64)
        return out.float().square().sum() + fin.sum()

    leaves = [t[k].clone().requires_grad_() for k in ("x", "log_a", "B", "C", "scale", "D")]
    loss = torch.compile(f, fullgraph=True)(*leaves)
    loss.backward()
    got = [v.grad.clone() for v in leaves]
    for v in leaves:
        v.grad = None
    f(*leaves).backward()
    for a, b in zip(got, (v.grad for v in leaves)):
        assert rel(a, b) < 1e-2 and math.isfinite(a.float().norm().item())


@gpu
def test_gpu_backward_kernels_compile_beside_the_first_forward():
    """The first forward that saves for a backward starts the backward's compile on threads (once per
    specialisation); the backward waits for it and its gradients are the reference's."""
    t = make(1, 77, 2, 16, 1, 32, seed=14)
    cfg = DecayTritonConfig(block_m=16, warps=(2, 2, 2, 2, 2), splits=(1, 1, 1))  # a key no other test uses
    leaves = {k: t[k].clone().requires_grad_() for k in ("x", "log_a", "B", "C", "scale", "D", "z")}
    x = leaves["x"]
    out, fin = decay_chunked_triton(x, leaves["log_a"], leaves["B"], leaves["C"], scale=leaves["scale"], D=leaves["D"],
                                    z=leaves["z"], chunk_size=32, config=cfg)
    assert launch._PENDING.get(x.device), "no compile started beside the first forward"
    out.backward(torch.ones_like(out))
    assert not launch._PENDING.get(x.device)
    refs = {k: v.detach().cpu().to(F64).requires_grad_() for k, v in leaves.items()}
    want, _ = decay_naive(refs["x"], refs["log_a"], refs["B"], refs["C"], scale=refs["scale"], D=refs["D"],
                          z=refs["z"])
    want.backward(torch.ones_like(want))
    assert rel(out, want) < 1e-5
    for k in leaves:
        assert rel(leaves[k].grad, refs[k].grad) < 2e-5, k
    # a second forward on the same specialisation starts nothing
    decay_chunked_triton(x, leaves["log_a"], leaves["B"], leaves["C"], scale=leaves["scale"], D=leaves["D"],
                         z=leaves["z"], chunk_size=32, config=cfg)
    assert not launch._PENDING.get(x.device)
