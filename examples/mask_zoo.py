"""Multi-query associative recall (MQAR, as in the Zoology benchmark) with every mask of ``SMA``.

Run: ``python examples/mask_zoo.py`` (about 8 minutes on two CPU cores; ``--small`` for a one-minute
smoke run). A sequence lists key-value pairs, then asks for keys again; the model must answer each
query with the value that followed the key. One tiny model per mixer is trained on generated data
with the same budget: the six named masks of :class:`structmat.nn.SMA`, ``Mamba2``, and a mask
built with the algebra (selective decays plus a learned sliding window: ``OneSS + Toeplitz``, a
mask no named layer has, in two lines). Recall needs a mask that depends on the input: the fixed
masks (decay, causal, Toeplitz, Fourier) blur all pairs together, the selective ones can keep a pair
and forget the rest. Writes ``examples/results/mask_zoo.{md,json,png}``.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

import structmat as sm
from structmat.nn import MASKS, SMA, Mamba2

RESULTS = Path(__file__).resolve().parent / "results"
FULL = {"vocab": 64, "pairs": 8, "d_model": 64, "layers": 2, "steps": 400, "batch": 64, "eval_every": 25}
SMALL = {"vocab": 16, "pairs": 4, "d_model": 32, "layers": 1, "steps": 12, "batch": 16, "eval_every": 6}


def mqar(n: int, vocab: int, pairs: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` sequences ``k1 v1 ... kP vP q1 ... qQ`` of length ``4 P`` and their labels (``-100`` off the
    queries). Keys come from the lower half of the vocabulary, values from the upper half; every key is
    asked twice, in random order, so the answers never appear in the input (no mask can peek)."""
    half = vocab // 2
    keys = torch.argsort(torch.rand(n, half - 1, generator=generator), dim=1)[:, :pairs] + 1  # distinct, 0 unused
    values = torch.randint(half, vocab, (n, pairs), generator=generator)
    order = torch.argsort(torch.rand(n, 2 * pairs, generator=generator), dim=1) % pairs
    context = torch.stack([keys, values], dim=-1).flatten(1)
    queries = torch.gather(keys, 1, order)
    labels = torch.cat([torch.full_like(context, -100), torch.gather(values, 1, order)], dim=1)
    return torch.cat([context, queries], dim=1), labels


class SelectiveWindow(nn.Module):
    """A custom mask: selective decays (input-dependent, as Mamba-2) plus a learned causal window of
    ``width`` lags per head. ``OneSS + Toeplitz`` is a lazy sum that ``sma`` contracts as it is."""

    def __init__(self, d_model: int, n_heads: int, width: int = 4):
        super().__init__()
        self.dt = nn.Linear(d_model, n_heads)
        dt = torch.exp(torch.empty(n_heads).uniform_(math.log(1e-3), math.log(1e-1)))  # Mamba-2's initialisation
        with torch.no_grad():
            self.dt.bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # softplus^{-1}(dt)
        self.A_log = nn.Parameter(torch.log(torch.empty(n_heads).uniform_(1, 16)))
        self.window = nn.Parameter(torch.zeros(n_heads, width))

    def forward(self, u: torch.Tensor) -> sm.StructuredMatrix:
        log_a = -F.softplus(self.dt(u)) * torch.exp(self.A_log)  # (B, T, H)
        kernel = F.pad(self.window, (0, u.shape[1] - self.window.shape[1]))
        return sm.OneSS(log_a.transpose(1, 2)) + sm.Toeplitz.causal(kernel)


def mixer(kind: str, d: int, T: int) -> nn.Module:
    if kind == "mamba2":
        return Mamba2(d_model=d, d_state=16, headdim=d // 4, expand=1, chunk_size=16)
    mask = SelectiveWindow(d, 4) if kind == "selective+window" else kind
    return SMA(d, 4, mask=mask, d_state=16, max_seqlen=T, chunk_size=16)


class Block(nn.Module):
    """Pre-norm residual block: a short causal convolution (Zoology's models have one: it puts each
    value beside its key), the mixer, an MLP."""

    def __init__(self, kind: str, d: int, T: int):
        super().__init__()
        self.norms = nn.ModuleList(nn.RMSNorm(d) for _ in range(3))
        self.conv = nn.Conv1d(d, d, 3, padding=2, groups=d)
        self.mixer = mixer(kind, d, T)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.conv(self.norms[0](x).transpose(1, 2))[..., : x.shape[1]].transpose(1, 2)
        x = x + self.mixer(self.norms[1](x))
        return x + self.mlp(self.norms[2](x))


class Model(nn.Module):
    def __init__(self, kind: str, vocab: int, d: int, layers: int, T: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.Sequential(*(Block(kind, d, T) for _ in range(layers)))
        self.head = nn.Sequential(nn.RMSNorm(d), nn.Linear(d, vocab))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.embed(tokens)))


def accuracy(model: nn.Module, data: tuple[torch.Tensor, torch.Tensor]) -> float:
    tokens, labels = data
    with torch.inference_mode():
        predicted = model(tokens).argmax(-1)
    asked = labels != -100
    return float((predicted[asked] == labels[asked]).float().mean())


def train(kind: str, cfg: dict, bar: tqdm) -> dict:
    """One model, ``cfg["steps"]`` AdamW steps on fresh batches; accuracy on held-out sequences."""
    torch.manual_seed(0)
    T = 4 * cfg["pairs"]
    model = Model(kind, cfg["vocab"], cfg["d_model"], cfg["layers"], T)
    data_gen, test = torch.Generator().manual_seed(1), mqar(512, cfg["vocab"], cfg["pairs"], torch.Generator().manual_seed(2))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20) * 0.5 * (1 + math.cos(math.pi * s / cfg["steps"])))
    curve, start = [(0, accuracy(model, test))], time.perf_counter()
    for step in range(1, cfg["steps"] + 1):
        tokens, labels = mqar(cfg["batch"], cfg["vocab"], cfg["pairs"], data_gen)
        loss = F.cross_entropy(model(tokens).flatten(0, 1), labels.flatten(), ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % cfg["eval_every"] == 0 or step == cfg["steps"]:
            curve.append((step, accuracy(model, test)))
            bar.set_postfix(mixer=kind, loss=f"{loss.item():.2f}", acc=f"{curve[-1][1]:.2f}")
        bar.update()
    return {"mixer": kind, "params": sum(p.numel() for p in model.parameters()), "seconds": time.perf_counter() - start,
            "final_loss": loss.item(), "final_accuracy": curve[-1][1], "best_accuracy": max(a for _, a in curve),
            "curve": curve}


def table(runs: list[dict], cfg: dict) -> str:
    lines = [f"MQAR: {cfg['pairs']} key-value pairs, vocabulary {cfg['vocab']}, sequences of {4 * cfg['pairs']}, "
             f"{cfg['layers']} layer(s) of width {cfg['d_model']}, {cfg['steps']} steps of {cfg['batch']}; "
             "accuracy on 512 held-out sequences (chance " f"{2 / cfg['vocab']:.3f}).", "",
             "| mixer | parameters | final accuracy | best accuracy | CPU seconds |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {r['mixer']} | {r['params']:,} | {r['final_accuracy']:.3f} | {r['best_accuracy']:.3f} | {r['seconds']:.0f} |"
              for r in sorted(runs, key=lambda r: -r["final_accuracy"])]
    return "\n".join(lines)


def plot(runs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for r in runs:
        steps, acc = zip(*r["curve"])
        ax.plot(steps, acc, label=r["mixer"], lw=2 if r["mixer"] in ("selective", "selective+window", "mamba2") else 1)
    ax.set(xlabel="training step", ylabel="query accuracy (held out)", title="MQAR with every SMA mask", ylim=(0, 1.02))
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a smoke run of every mixer (CI)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the table, JSON and PNG go")
    args = parser.parse_args(argv)
    cfg = SMALL if args.small else FULL
    torch.set_num_threads(1)  # small tensors: a second thread only adds stalls on a shared machine
    kinds = [*MASKS, "selective+window", "mamba2"]
    with tqdm(total=len(kinds) * cfg["steps"], desc="MQAR", disable=args.small) as bar:
        runs = [train(kind, cfg, bar) for kind in kinds]
    report = table(runs, cfg)
    print(report)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "mask_zoo.md").write_text(report + "\n")
    meta = {"date": time.strftime("%Y-%m-%d"), "torch": torch.__version__, "structmat": sm.__version__, "config": cfg}
    (args.out / "mask_zoo.json").write_text(json.dumps({**meta, "runs": runs}, indent=1))
    plot(runs, args.out / "mask_zoo.png")
    return runs


if __name__ == "__main__":
    main()
