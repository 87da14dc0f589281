"""``structmat.nn.Hydra``: the quasiseparable (bidirectional) mixer of Hwang et al. (2024), Hydra's constructor.

Per head, with ``SS`` the 1-SS (SSD) matrix of each direction and ``shift`` moving every output one
position later (a strictly lower matrix),

    y = shift(SS_f) x + J shift(SS_b) J x + diag(fc_D(x) + D) x,

a quasiseparable matrix (strictly lower part from the forward pass, strictly upper from the
backward one, a data-dependent diagonal) applied by two SSD passes.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from structmat.core.validation import check_sizes, check_tensor, skip_finite_checks
from structmat.nn.norm import GatedRMSNorm
from structmat.ssd import ssd
from structmat.ssd_arguments import check_seq_idx

__all__ = ["Hydra", "centered_conv1d"]


def centered_conv1d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                    seq_idx: torch.Tensor | None = None) -> torch.Tensor:
    """``y_t = bias + sum_w weight[:, w] x_{t + w - W // 2}`` (a 'same' depthwise convolution); inputs outside
    the sequence, or of another packed sequence, count as zero. ``x (B, T, D)``, ``weight (D, W)``."""
    B, T, D = x.shape
    W, half = weight.shape[-1], weight.shape[-1] // 2
    padded = F.pad(x, (0, 0, half, W - 1 - half))
    y = x.new_zeros(B, T, D) if bias is None else bias.to(x.dtype).expand(B, T, D).clone()
    ids = None if seq_idx is None else F.pad(seq_idx, (half, W - 1 - half), value=-1)
    for w in range(W):
        tap = padded[:, w : w + T] * weight[:, w].to(x.dtype)
        if ids is not None:
            tap = tap * (ids[:, w : w + T] == seq_idx)[..., None]
        y = y + tap
    return y


def _shift(y: torch.Tensor, seq_idx: torch.Tensor | None) -> torch.Tensor:
    """``y_t <- y_{t-1}`` (zero at the first position of every sequence)."""
    out = F.pad(y[:, :-1], (0, 0, 0, 0, 1, 0))
    if seq_idx is not None:
        starts = torch.ones_like(seq_idx, dtype=torch.bool)
        starts[:, 1:] = seq_idx[:, 1:] != seq_idx[:, :-1]
        out = out.masked_fill(starts[..., None, None], 0)
    return out


class Hydra(nn.Module):
    """Hydra's quasiseparable matrix mixer with its constructor and parameter names: ``d_model, d_state=64,
    d_conv=7, conv_init=None, expand=2, headdim=64, ngroups=1, dt_min=0.001, dt_max=0.1, dt_init_floor=1e-4,
    dt_limit=(0.0, inf), learnable_init_states=False, activation="swish", bias=False, conv_bias=True,
    chunk_size=256, use_mem_eff_path=False, layer_idx=None, device=None, dtype=None``.

    ``forward(u (B, L, d_model), seq_idx=None) -> (B, L, d_model)``: a centered convolution, two SSD passes
    (forwards and over the reversed sequence, each shifted one step), a data-dependent diagonal, a gated
    RMSNorm (``norm(y) * silu(z)``) and ``out_proj``. Bidirectional: no recurrent decoding.

    Examples
    --------
    >>> import torch
    >>> from structmat.nn import Hydra
    >>> mixer = Hydra(d_model=16, d_state=8, headdim=8, chunk_size=8)
    >>> mixer(torch.randn(2, 10, 16)).shape
    torch.Size([2, 10, 16])
    """

    def __init__(self, d_model: int, d_state: int = 64, d_conv: int = 7, conv_init: float | None = None, expand: int = 2,
                 headdim: int = 64, ngroups: int = 1, dt_min: float = 0.001, dt_max: float = 0.1,
                 dt_init_floor: float = 1e-4, dt_limit=(0.0, float("inf")), learnable_init_states: bool = False,
                 activation: str = "swish", bias: bool = False, conv_bias: bool = True, chunk_size: int = 256,
                 use_mem_eff_path: bool = False, layer_idx: int | None = None, device=None, dtype=None):
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        if activation not in ("silu", "swish"):
            raise ValueError(f"activation must be 'silu' or 'swish'; got {activation!r}")
        check_sizes(d_model=d_model, d_state=d_state, d_conv=d_conv, expand=expand, headdim=headdim, ngroups=ngroups,
                    chunk_size=chunk_size)
        self.d_model, self.d_state, self.d_conv, self.expand, self.headdim = d_model, d_state, d_conv, expand, headdim
        self.d_inner = expand * d_model
        if self.d_inner % headdim:
            raise ValueError(f"expand * d_model = {self.d_inner} must be a multiple of headdim={headdim}")
        self.nheads, self.ngroups, self.dt_limit, self.chunk_size = self.d_inner // headdim, ngroups, tuple(dt_limit), chunk_size
        if self.nheads % ngroups:
            raise ValueError(f"nheads={self.nheads} must be a multiple of ngroups={ngroups}")
        self.learnable_init_states, self.layer_idx, self.use_mem_eff_path = learnable_init_states, layer_idx, use_mem_eff_path
        gn = ngroups * d_state
        self.in_proj = nn.Linear(d_model, 2 * self.d_inner + 4 * gn + 2 * self.nheads, bias=bias, **kw)  # [z, xBC, dt]
        conv_dim = self.d_inner + 4 * gn
        self.conv1d = nn.Conv1d(conv_dim, conv_dim, d_conv, groups=conv_dim, padding=d_conv // 2, bias=conv_bias, **kw)
        if conv_init is not None:
            nn.init.uniform_(self.conv1d.weight, -conv_init, conv_init)
        if learnable_init_states:
            self.init_states = nn.Parameter(torch.zeros(self.nheads, headdim, d_state, **kw))
        dt = torch.exp(torch.rand(self.nheads, **kw) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min))
        dt = torch.clamp(dt, min=dt_init_floor)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
        self.A_log = nn.Parameter(torch.zeros(self.nheads, device=device, dtype=dtype))  # A = -1 (Hydra's init)
        self.D = nn.Parameter(torch.ones(self.nheads, device=device))
        self.fc_D = nn.Linear(self.d_inner, self.nheads, bias=False, **kw)
        for p in (self.dt_bias, self.A_log, self.D):
            p._no_weight_decay = True
        self.norm = GatedRMSNorm(self.d_inner, eps=1e-5, norm_before_gate=True, **kw)
        self.out_proj = nn.Linear(self.d_inner, d_model, bias=bias, **kw)

    def _pass(self, x, dt, B, C, seq_idx):
        """One direction: the SSD of ``(x, dt, B, C)``, each output moved one step later; every sequence (each row, or
        each packed sequence of ``seq_idx``) starts from the learned initial state where there is one."""
        A = -torch.exp(self.A_log.to(torch.promote_types(self.A_log.dtype, torch.float32)))
        init = self.init_states if self.learnable_init_states else None
        common = dict(dt_bias=self.dt_bias, dt_softplus=True, dt_limit=self.dt_limit)
        with skip_finite_checks():  # decays exp(-softplus(.) exp(.)) <= 1 by construction: no host sync
            if init is not None and seq_idx is not None and seq_idx.numel():
                y = self._packed(x, dt, A, B, C, seq_idx, init, common)
            else:
                init = None if init is None else init.expand(x.shape[0], *init.shape)
                y = ssd(x, dt, A, B, C, self.chunk_size, initial_states=init, seq_idx=seq_idx, **common)
        return _shift(y, seq_idx)

    def _packed(self, x, dt, A, B, C, seq_idx, init, common):
        """The SSD of packed sequences that each start from ``init``: the rows joined into one sequence and cut by
        ``cu_seqlens`` at every sequence's start, each with its own copy of the initial state (``ssd``'s
        ``initial_states`` of one row applies to its first sequence only). One host sync: the starts."""
        b, L = seq_idx.shape
        starts = torch.ones_like(seq_idx, dtype=torch.bool)
        starts[:, 1:] = seq_idx[:, 1:] != seq_idx[:, :-1]
        starts = starts.flatten()
        cu_seqlens = torch.cat([starts.nonzero()[:, 0], starts.new_tensor([b * L], dtype=torch.long)])
        ids = (starts.cumsum(0) - 1)[None]
        x, dt, B, C = (t.flatten(0, 1)[None] for t in (x, dt, B, C))
        y = ssd(x, dt, A, B, C, self.chunk_size, initial_states=init.expand(cu_seqlens.numel() - 1, *init.shape),
                seq_idx=ids, cu_seqlens=cu_seqlens, **common)
        return y[0].unflatten(0, (b, L))

    def forward(self, u: torch.Tensor, seq_idx: torch.Tensor | None = None) -> torch.Tensor:
        """``u (B, L, d_model)``; ``seq_idx (B, L)`` keeps packed sequences apart (convolution and both passes; with
        ``learnable_init_states`` each sequence starts from the learned state in both directions, after one host sync
        that finds the sequences' starts)."""
        check_tensor(u, "u", f"a tensor of shape (batch, seqlen, {self.d_model})")
        if u.dim() != 3 or u.shape[-1] != self.d_model:
            raise ValueError(f"u must have shape (batch, seqlen, {self.d_model}); got {tuple(u.shape)}")
        check_seq_idx(seq_idx, u.shape[:2])  # (here: ssd runs without host syncs below)
        gn, H = self.ngroups * self.d_state, self.nheads
        z, xBC, dt = torch.split(self.in_proj(u), [self.d_inner, self.d_inner + 4 * gn, 2 * H], dim=-1)
        xBC = F.silu(centered_conv1d(xBC, self.conv1d.weight[:, 0], self.conv1d.bias, seq_idx))
        x, Bf, Cf, Bb, Cb = torch.split(xBC, [self.d_inner, gn, gn, gn, gn], dim=-1)
        heads, groups = (H, self.headdim), (self.ngroups, self.d_state)
        flip = lambda t: torch.flip(t, (1,))  # noqa: E731
        rev_idx = None if seq_idx is None or not seq_idx.numel() else flip(seq_idx.max() - seq_idx)  # non-decreasing again
        y = self._pass(x.unflatten(-1, heads), dt[..., :H], Bf.unflatten(-1, groups), Cf.unflatten(-1, groups), seq_idx)
        y = y + flip(self._pass(flip(x).unflatten(-1, heads), flip(dt[..., H:]), flip(Bb).unflatten(-1, groups),
                                flip(Cb).unflatten(-1, groups), rev_idx))
        diag = self.fc_D(x) + self.D.to(x.dtype)  # (B, L, H): the data-dependent diagonal
        y = y + x.unflatten(-1, heads) * diag[..., None]
        return self.out_proj(self.norm(y.flatten(-2).to(u.dtype), z))

    def extra_repr(self) -> str:
        return (f"d_model={self.d_model}, d_state={self.d_state}, d_conv={self.d_conv}, expand={self.expand}, "
                f"headdim={self.headdim}, nheads={self.nheads}, ngroups={self.ngroups}")
