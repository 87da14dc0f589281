"""Draw the mask gallery: every mask class and the results of its closure operations, as heatmaps.

Run from the repository root: ``python docs/gallery/make_gallery.py``. Every panel is computed by
``structmat`` itself (structured ``+``, ``@``, ``inv()``, ``.T``, ``hadamard``), checked against the
dense float64 computation, and only then densified with ``to_dense()`` for drawing. Each title is
``expression -> class(order)`` as the library returned it. Deterministic (fixed seeds); writes the
PNGs next to this file.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

import structmat as sm  # noqa: E402

OUT = Path(__file__).resolve().parent
T = 32
F64 = torch.float64


def _gen(seed: int) -> tuple:
    g = torch.Generator().manual_seed(seed)
    rand = lambda *s: torch.rand(*s, generator=g, dtype=F64)  # noqa: E731
    randn = lambda *s: torch.randn(*s, generator=g, dtype=F64)  # noqa: E731
    return rand, randn


def describe(M) -> str:
    """``Class(order N)`` as the library reports it (a causal Toeplitz is marked as such)."""
    if not isinstance(M, sm.StructuredMatrix):
        return type(M).__name__
    name = type(M).__name__
    if isinstance(M, sm.Toeplitz) and M.is_causal:
        name = "Toeplitz (causal)"
    if isinstance(M, sm.DFT) and M.part != "full":
        name = f"DFT.{M.part}"
    order = getattr(M, "order", None)
    if isinstance(order, tuple):
        return f"{name}(orders {order[0]}, {order[1]})"
    if order is None or isinstance(M, (sm.Diagonal, sm.Bidiagonal)):
        return name
    return f"{name}({'rank' if isinstance(M, sm.LowRank) else 'order'} {order})"


def panel(expr: str, result, want: torch.Tensor | None = None, part: str = "real") -> dict:
    """One heatmap: the structured ``result``, checked against the dense ``want``."""
    dense = result.to_dense()
    if want is not None:
        err = (dense - want).abs().max() / want.abs().max().clamp_min(1.0)
        assert err < 1e-9, (expr, float(err))
    data = {"real": dense.real, "imag": dense.imag, "abs": dense.abs()}[part] if dense.is_complex() else dense
    title = f"{expr}\n-> {describe(result)}" if want is not None else f"{expr}\n{describe(result)}"
    return {"title": title, "data": data.detach().to(F64)}


def draw(panels: list[dict], name: str, cols: int = 4) -> None:
    """A grid of heatmaps, each with its own symmetric colour scale (red > 0, blue < 0, white 0)."""
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(2.5 * cols, 2.8 * rows), squeeze=False, layout="constrained")
    for ax in axes.flat:
        ax.axis("off")
    for ax, p in zip(axes.flat, panels):
        v = float(p["data"].abs().max()) or 1.0
        ax.imshow(p["data"].numpy(), cmap="RdBu_r", vmin=-v, vmax=v, interpolation="nearest")
        ax.set_title(p["title"], fontsize=8)
    fig.savefig(OUT / f"{name}.png", dpi=80, metadata={"Software": None})
    plt.close(fig)


def masks() -> list[dict]:
    """One panel per mask class (and the named constructors)."""
    rand, randn = _gen(0)
    eye = torch.eye(T, dtype=F64)
    k = torch.arange(T, dtype=F64)
    return [
        panel("OneSS.from_decays(a)", sm.OneSS.from_decays(0.6 + 0.4 * rand(T))),
        panel("OneSS.decay(0.85, T)", sm.OneSS.decay(0.85, T, dtype=F64)),
        panel("SSS(A, B, C), diagonal A", sm.SSS(0.7 + 0.3 * rand(T, 3), randn(T, 3), randn(T, 3))),
        panel("SSS(..., lower=False)", sm.SSS(0.7 + 0.3 * rand(T, 2), randn(T, 2), randn(T, 2), lower=False)),
        panel("Bidiagonal(diag, sub)", sm.Bidiagonal(1 + rand(T), randn(T - 1))),
        panel("Diagonal(d)", sm.Diagonal(randn(T))),
        panel("LowRank(U, V)", sm.LowRank(randn(T, 2), randn(T, 2))),
        panel("Dense(M)", sm.Dense(randn(T, T) / 4 + eye)),
        panel("Toeplitz(c, r)", sm.Toeplitz(0.8 ** k, torch.cos(0.5 * k))),
        panel("Toeplitz.causal(c)", sm.Toeplitz.causal(torch.cos(0.4 * k) * 0.9 ** k)),
        panel("Fourier.from_kernel(c)", sm.Fourier.from_kernel(0.8 ** torch.minimum(k, T - k))),
        panel("DFT(T).real (cosine mask)", sm.DFT(T, dtype=F64).real),
        panel("DFT(T).imag (sine mask)", sm.DFT(T, dtype=F64).imag),
        panel("Quasiseparable.bidirectional(F, B)",
              sm.Quasiseparable.bidirectional(sm.OneSS.from_decays(0.8 + 0.2 * rand(T)), sm.OneSS.decay(0.6, T, dtype=F64))),
        panel("Quasiseparable.lion(a)", sm.Quasiseparable.lion(0.7 + 0.3 * rand(T))),
        panel("Quasiseparable.lion_decay(0.8, T)", sm.Quasiseparable.lion_decay(0.8, T, dtype=F64)),
    ]


def one_ss() -> list[dict]:
    rand, _ = _gen(1)
    a, b = sm.OneSS.from_decays(0.75 + 0.25 * rand(T)), sm.OneSS.from_decays(0.9 * rand(T))
    A, B = a.to_dense(), b.to_dense()
    cut = torch.ones(T, dtype=F64)
    cut[T // 2] = 0.0
    return [
        panel("a = OneSS.from_decays(a_t)", a),
        panel("OneSS with a_{T/2} = 0", sm.OneSS.from_decays(0.9 * cut)),
        panel("a + b", a + b, A + B),
        panel("a @ b", a @ b, A @ B),
        panel("a.inv()", a.inv(), torch.linalg.inv(A)),
        panel("a.hadamard(b)", a.hadamard(b), A * B),
        panel("a.T", a.T, A.T),
        panel("(a + a).compress()", (a + a).compress(), 2 * A),
    ]


def sss() -> list[dict]:
    rand, randn = _gen(2)
    M = sm.SSS(0.8 + 0.2 * rand(T, 2), randn(T, 2), randn(T, 2), D=2 + rand(T))
    N = sm.SSS(0.5 * rand(T, 3, 3), randn(T, 3), randn(T, 3), D=2 + rand(T))
    d = sm.Diagonal(1 + rand(T))
    A, B, Dd = M.to_dense(), N.to_dense(), d.to_dense()
    return [
        panel("M = SSS(N=2, diagonal A)", M),
        panel("N = SSS(N=3, dense A)", N),
        panel("M + N", M + N, A + B),
        panel("M @ N", M @ N, A @ B),
        panel("M.inv()", M.inv(), torch.linalg.inv(A)),
        panel("M.hadamard(N)", M.hadamard(N), A * B),
        panel("Diagonal @ M", d @ M, Dd @ A),
        panel("M + N.T (lower + upper)", M + N.T, A + B.T),
    ]


def elementary() -> list[dict]:
    rand, randn = _gen(3)
    bd = sm.Bidiagonal(1 + rand(T), -(0.5 + 0.5 * rand(T - 1)))
    d = sm.Diagonal(1 + rand(T))
    U = sm.LowRank(randn(T, 2), randn(T, 2))
    V = sm.LowRank(randn(T, 1), randn(T, 1))
    D = sm.Dense(randn(T, T) / 4 + torch.eye(T, dtype=F64))
    a = sm.OneSS.from_decays(0.9 * torch.ones(T, dtype=F64))
    BD, DD, UD, VD, MD, AD = bd.to_dense(), d.to_dense(), U.to_dense(), V.to_dense(), D.to_dense(), a.to_dense()
    return [
        panel("Bidiagonal.inv()", bd.inv(), torch.linalg.inv(BD)),
        panel("Bidiagonal + Diagonal", bd + d, BD + DD),
        panel("Bidiagonal @ OneSS", bd @ a, BD @ AD),
        panel("Bidiagonal @ Bidiagonal", bd @ bd, BD @ BD),
        panel("LowRank + LowRank", U + V, UD + VD),
        panel("LowRank(U, V).tril()", U.tril(), UD.tril()),
        panel("LowRank @ OneSS", U @ a, UD @ AD),
        panel("Dense.hadamard(OneSS)", D.hadamard(a), MD * AD),
    ]


def toeplitz() -> list[dict]:
    rand, randn = _gen(4)
    k = torch.arange(T, dtype=F64)
    t1 = sm.Toeplitz(torch.cat([torch.tensor([2.0], dtype=F64), 0.8 ** k[1:]]), 0.8 ** k * torch.cos(k))
    t2 = sm.Toeplitz(torch.cat([torch.tensor([1.0], dtype=F64), randn(T - 1) / 2]), randn(T) / 2)
    c1 = sm.Toeplitz.causal(torch.cat([torch.tensor([1.0], dtype=F64), -0.5 * 0.3 ** k[:-1]]))
    c2 = sm.Toeplitz.causal(0.9 ** k * torch.cos(0.6 * k))
    A, B, C1, C2 = t1.to_dense(), t2.to_dense(), c1.to_dense(), c2.to_dense()
    return [
        panel("t1 + t2", t1 + t2, A + B),
        panel("t1 @ t2 (not Toeplitz)", t1 @ t2, A @ B),
        panel("t1.inv()", t1.inv(), torch.linalg.inv(A)),
        panel("t1.hadamard(t2)", t1.hadamard(t2), A * B),
        panel("causal @ causal", c1 @ c2, C1 @ C2),
        panel("causal.inv()", c1.inv(), torch.linalg.inv(C1)),
        panel("t1.tril()", t1.tril(), A.tril()),
        panel("t1.T", t1.T, A.T),
    ]


def fourier() -> list[dict]:
    rand, randn = _gen(5)
    k = torch.arange(T, dtype=F64)
    f1 = sm.Fourier.from_kernel(torch.cat([torch.tensor([2.0], dtype=F64), 0.7 ** k[1:]]))
    f2 = sm.Fourier.from_kernel(torch.cos(0.8 * k) * 0.8 ** k)
    A, B = f1.to_dense(), f2.to_dense()
    dft = sm.DFT(T, dtype=torch.complex128)
    W = dft.to_dense()
    return [
        panel("f1 + f2", f1 + f2, A + B),
        panel("f1 @ f2", f1 @ f2, A @ B),
        panel("f1.inv()", f1.inv(), torch.linalg.inv(A)),
        panel("f1.hadamard(f2)", f1.hadamard(f2), A * B),
        panel("W = DFT(T), real part", dft, part="real"),
        panel("W = DFT(T), imaginary part", dft, part="imag"),
        panel("W.inv(), real part", dft.inv(), torch.linalg.inv(W), part="real"),
        panel("W @ W = T x (t -> -t mod T)", dft @ dft, W @ W, part="real"),
    ]


def quasiseparable() -> list[dict]:
    rand, randn = _gen(6)
    lion = sm.Quasiseparable.lion(0.75 + 0.25 * rand(T))
    bi = sm.Quasiseparable.bidirectional(sm.OneSS.from_decays(0.85 + 0.15 * rand(T)), sm.OneSS.decay(0.7, T, dtype=F64),
                                         diag=2 + rand(T))
    s = sm.SSS(0.8 + 0.2 * rand(T, 2), randn(T, 2), randn(T, 2))
    L, Bd, S = lion.to_dense(), bi.to_dense(), s.to_dense()
    return [
        panel("q = Quasiseparable.lion(a)", lion),
        panel("p = bidirectional(F, B, diag)", bi),
        panel("q + p", lion + bi, L + Bd),
        panel("q @ p", lion @ bi, L @ Bd),
        panel("q.inv() (tridiagonal)", lion.inv(), torch.linalg.inv(L)),
        panel("p.inv()", bi.inv(), torch.linalg.inv(Bd)),
        panel("q.hadamard(p)", lion.hadamard(bi), L * Bd),
        panel("q.hadamard(SSS(N=2))", lion.hadamard(s), L * S),
    ]


FIGURES = {
    "masks": masks,
    "one_ss": one_ss,
    "sss": sss,
    "elementary": elementary,
    "toeplitz": toeplitz,
    "fourier": fourier,
    "quasiseparable": quasiseparable,
}


def main() -> None:
    torch.set_num_threads(1)  # the same pictures on any machine
    for name, build in FIGURES.items():
        draw(build(), name)
    total = sum(p.stat().st_size for p in OUT.glob("*.png"))
    print(f"wrote {len(FIGURES)} figures to {OUT} ({total / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
