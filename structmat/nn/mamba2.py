"""``structmat.nn.Mamba2``: the Mamba-2 block with mamba_ssm's constructor, initialisation and parameter names.

Checkpoints of ``mamba_ssm.modules.mamba2.Mamba2`` and of HuggingFace's ``Mamba2Mixer`` load with
``load_state_dict(strict=True)``. The SSD runs through :func:`structmat.ssd` (the Triton kernels on
CUDA, the torch implementation elsewhere); decoding through :func:`structmat.ssd_step`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from structmat.core.validation import check_sizes, check_tensor, skip_finite_checks
from structmat.nn.conv import causal_conv_silu, conv_step_silu, last_inputs
from structmat.nn.norm import GatedRMSNorm
from structmat.ssd import ssd
from structmat.ssd_arguments import check_cu_seqlens, check_seq_idx, process_dt
from structmat.ssd_step import step_backend, step_unchecked

__all__ = ["Mamba2", "InferenceParams"]


@dataclass
class InferenceParams:
    """The decoding cache of a model, as mamba_ssm's generation utilities pass it: per layer
    ``key_value_memory_dict[layer_idx] = (conv_state, ssm_state)``; ``seqlen_offset > 0`` means the
    prompt has been processed and calls decode one token."""

    max_seqlen: int
    max_batch_size: int
    seqlen_offset: int = 0
    key_value_memory_dict: dict = field(default_factory=dict)


class Mamba2(nn.Module):
    """The Mamba-2 block: ``in_proj -> causal conv -> SSD -> gated RMSNorm -> out_proj``.

    Parameters are those of ``mamba_ssm.modules.mamba2.Mamba2`` (same defaults, same initialisation,
    same ``state_dict`` names and shapes): ``d_model, d_state=128, d_conv=4, conv_init=None, expand=2,
    headdim=64, d_ssm=None, ngroups=1, A_init_range=(1, 16), D_has_hdim=False, rmsnorm=True,
    norm_before_gate=False, dt_min=0.001, dt_max=0.1, dt_init_floor=1e-4, dt_limit=(0.0, inf),
    bias=False, conv_bias=True, chunk_size=256, use_mem_eff_path=True, layer_idx=None, process_group=None,
    sequence_parallel=True, device=None, dtype=None``. ``use_mem_eff_path`` is accepted and has no effect (the SSD kernels
    here need no fused path); ``process_group`` (mamba_ssm's tensor parallelism) must be None here, and
    ``sequence_parallel`` is then unused, as in mamba_ssm.

    Shapes: ``forward(u (B, L, d_model)) -> (B, L, d_model)``; ``step(u (B, 1, d_model), conv_state
    (B, conv_dim, d_conv), ssm_state (B, nheads, headdim, d_state))``. Cost per token ``O(d_model
    d_inner + nheads headdim d_state)``.

    Examples
    --------
    >>> import torch
    >>> from structmat.nn import Mamba2
    >>> block = Mamba2(d_model=16, d_state=8, headdim=8, chunk_size=8)
    >>> u = torch.randn(2, 10, 16)
    >>> block(u).shape
    torch.Size([2, 10, 16])
    """

    def __init__(self, d_model: int, d_state: int = 128, d_conv: int = 4, conv_init: float | None = None, expand: int = 2,
                 headdim: int = 64, d_ssm: int | None = None, ngroups: int = 1, A_init_range=(1, 16),
                 D_has_hdim: bool = False, rmsnorm: bool = True, norm_before_gate: bool = False, dt_min: float = 0.001,
                 dt_max: float = 0.1, dt_init_floor: float = 1e-4, dt_limit=(0.0, float("inf")), bias: bool = False,
                 conv_bias: bool = True, chunk_size: int = 256, use_mem_eff_path: bool = True, layer_idx: int | None = None,
                 process_group=None, sequence_parallel: bool = True, device=None, dtype=None):
        super().__init__()
        if process_group is not None:
            raise NotImplementedError("Mamba2: process_group (tensor parallelism) is not supported; pass None")
        self.process_group, self.sequence_parallel = process_group, sequence_parallel
        kw = {"device": device, "dtype": dtype}
        check_sizes(d_model=d_model, d_state=d_state, d_conv=d_conv, expand=expand, headdim=headdim, ngroups=ngroups,
                    chunk_size=chunk_size)
        self.d_model, self.d_state, self.d_conv, self.expand, self.headdim = d_model, d_state, d_conv, expand, headdim
        self.d_inner = expand * d_model
        self.d_ssm = self.d_inner if d_ssm is None else d_ssm
        if not 0 < self.d_ssm <= self.d_inner:
            raise ValueError(f"d_ssm must be in [1, expand * d_model = {self.d_inner}]; got {self.d_ssm}")
        if self.d_ssm % headdim:
            raise ValueError(f"d_ssm={self.d_ssm} must be a multiple of headdim={headdim}")
        self.nheads, self.ngroups = self.d_ssm // headdim, ngroups
        if self.nheads % ngroups:
            raise ValueError(f"nheads={self.nheads} must be a multiple of ngroups={ngroups}")
        self.D_has_hdim, self.rmsnorm, self.norm_before_gate = D_has_hdim, rmsnorm, norm_before_gate
        self.dt_limit, self.chunk_size, self.layer_idx, self.conv_init = tuple(dt_limit), chunk_size, layer_idx, conv_init
        self.use_mem_eff_path = use_mem_eff_path
        d_in_proj = 2 * self.d_inner + 2 * ngroups * d_state + self.nheads  # [z0, x0, z, xBC, dt]
        self.in_proj = nn.Linear(d_model, d_in_proj, bias=bias, **kw)
        conv_dim = self.d_ssm + 2 * ngroups * d_state
        self.conv1d = nn.Conv1d(conv_dim, conv_dim, d_conv, groups=conv_dim, padding=d_conv - 1, bias=conv_bias, **kw)
        self.act = nn.SiLU()
        self.dt_bias = nn.Parameter(_dt_bias_init(self.nheads, dt_min, dt_max, dt_init_floor, **kw))
        if not (A_init_range[0] > 0 and A_init_range[1] >= A_init_range[0]):
            raise ValueError(f"A_init_range must be (low, high) with 0 < low <= high; got {A_init_range}")
        A = torch.empty(self.nheads, dtype=torch.float32, device=device).uniform_(*A_init_range)
        self.A_log = nn.Parameter(torch.log(A).to(dtype=dtype))
        self.D = nn.Parameter(torch.ones(self.d_ssm if D_has_hdim else self.nheads, device=device))
        for p in (self.dt_bias, self.A_log, self.D):
            p._no_weight_decay = True
        if conv_init is not None:
            nn.init.uniform_(self.conv1d.weight, -conv_init, conv_init)
        if rmsnorm:
            self.norm = GatedRMSNorm(self.d_ssm, eps=1e-5, group_size=self.d_ssm // ngroups, norm_before_gate=norm_before_gate,
                                     **kw)
        self.out_proj = nn.Linear(self.d_inner, d_model, bias=bias, **kw)

    # --- the pieces -------------------------------------------------------------------------------
    def _split(self, zxbcdt: torch.Tensor):
        d_mlp = (zxbcdt.shape[-1] - 2 * self.d_ssm - 2 * self.ngroups * self.d_state - self.nheads) // 2
        sizes = [d_mlp, d_mlp, self.d_ssm, self.d_ssm + 2 * self.ngroups * self.d_state, self.nheads]
        return torch.split(zxbcdt, sizes, dim=-1)

    def _ssm_split(self, xBC: torch.Tensor):
        return torch.split(xBC, [self.d_ssm, self.ngroups * self.d_state, self.ngroups * self.d_state], dim=-1)

    def _A(self) -> torch.Tensor:
        """``A = -exp(A_log)`` in float32 at least (a 16-bit ``A_log`` could give ``-inf``; float64 stays)."""
        return -torch.exp(self.A_log.to(torch.promote_types(self.A_log.dtype, torch.float32)))

    def _D(self):
        return self.D.view(self.nheads, self.headdim) if self.D_has_hdim else self.D

    def _finish(self, y, z, z0, x0):
        """Gated norm (or nothing: ``z`` already gated inside the SSD), the gated-MLP half, ``out_proj``."""
        if self.rmsnorm:
            y = self.norm(y, z)
        if z0.shape[-1] > 0:
            y = torch.cat([F.silu(z0) * x0, y], dim=-1)
        return self.out_proj(y)

    # --- forward ------------------------------------------------------------------------------------
    def forward(self, u: torch.Tensor, seq_idx: torch.Tensor | None = None, cu_seqlens: torch.Tensor | None = None,
                inference_params=None) -> torch.Tensor:
        """``u (B, L, d_model)``; packed sequences (``seq_idx (B, L)`` or ``cu_seqlens`` with ``B = 1``) reset
        both the convolution and the SSD state at their boundaries, so a packed call equals separate calls.
        With ``inference_params`` the cache is filled (a prefill) or, once ``seqlen_offset > 0``, one token
        is decoded through :meth:`step`."""
        check_tensor(u, "u", f"a tensor of shape (batch, seqlen, {self.d_model})")
        if u.dim() != 3 or u.shape[-1] != self.d_model:
            raise ValueError(f"u must have shape (batch, seqlen, {self.d_model}); got {tuple(u.shape)}")
        check_seq_idx(seq_idx, u.shape[:2])  # (here: ssd runs without host syncs below)
        if cu_seqlens is not None:
            check_cu_seqlens(cu_seqlens, u.shape[0], u.shape[1], seq_idx)
        if cu_seqlens is not None and seq_idx is None:
            seq_idx = torch.repeat_interleave(torch.arange(cu_seqlens.numel() - 1, device=u.device), cu_seqlens.diff())[None]
        conv_state = ssm_state = None
        if inference_params is not None:
            batch = cu_seqlens.numel() - 1 if cu_seqlens is not None else u.shape[0]
            conv_state, ssm_state = self._cache(inference_params, batch)
            self._check_cache(conv_state, ssm_state, batch)  # (a cache of another batch: a clear error)
            if inference_params.seqlen_offset > 0:
                return self.step(u, conv_state, ssm_state)[0]
        z0, x0, z, xBC, dt = self._split(self.in_proj(u))
        if conv_state is not None:
            conv_state.copy_(self._last_inputs(xBC, seq_idx, cu_seqlens))
        xBC = causal_conv_silu(xBC, self.conv1d.weight[:, 0], self.conv1d.bias, seq_idx)
        x, B, C = self._ssm_split(xBC)
        heads, groups = (self.nheads, self.headdim), (self.ngroups, self.d_state)
        with skip_finite_checks():  # decays exp(-softplus(.) exp(.)) <= 1 by construction: no host sync
            y = ssd(x.unflatten(-1, heads), dt, self._A(), B.unflatten(-1, groups), C.unflatten(-1, groups),
                    self.chunk_size, D=self._D(), z=None if self.rmsnorm else z.unflatten(-1, heads), dt_bias=self.dt_bias,
                    seq_idx=seq_idx, cu_seqlens=cu_seqlens, dt_softplus=True, dt_limit=self.dt_limit,
                    return_final_states=ssm_state is not None and cu_seqlens is None,
                    return_varlen_states=ssm_state is not None and cu_seqlens is not None)
        if ssm_state is not None:
            y, state = y
            ssm_state.copy_(state)
        return self._finish(y.flatten(-2), z, z0, x0)

    def _last_inputs(self, xBC: torch.Tensor, seq_idx, cu_seqlens) -> torch.Tensor:
        """The convolution cache after a prefill: the last ``d_conv`` inputs of each row's last sequence (of each
        sequence with ``cu_seqlens``), zero before its start, as a prefill of that sequence alone leaves it."""
        if cu_seqlens is not None:
            return last_inputs(xBC, self.d_conv, list(zip(cu_seqlens[:-1].tolist(), cu_seqlens[1:].tolist())))
        window = last_inputs(xBC, self.d_conv)
        if seq_idx is None or xBC.shape[1] == 0:
            return window
        ids = last_inputs(seq_idx[..., None], self.d_conv)  # (B, 1, d_conv); its padding meets zero inputs
        return window * (ids == seq_idx[:, -1, None, None])

    # --- decoding -----------------------------------------------------------------------------------
    def step(self, u: torch.Tensor, conv_state: torch.Tensor, ssm_state: torch.Tensor):
        """One token ``u (B, 1, d_model)``; the states are updated in place. Returns ``(out (B, 1, d_model),
        conv_state, ssm_state)``."""
        check_tensor(u, "u", f"a tensor of shape (batch, 1, {self.d_model})")
        if u.dim() != 3 or u.shape[1] != 1 or u.shape[-1] != self.d_model:
            raise ValueError(f"step decodes one token: u must have shape (batch, 1, {self.d_model}); got {tuple(u.shape)}")
        self._check_cache(conv_state, ssm_state, u.shape[0])
        h, p, n = self.nheads, self.headdim, self.d_state
        z0, x0, z, xBC, dt = self._split(self.in_proj(u[:, 0]))
        xBC = conv_step_silu(xBC, conv_state, self.conv1d.weight[:, 0], self.conv1d.bias).to(u.dtype)
        x, B, C = self._ssm_split(xBC)
        x, B, C = x.unflatten(-1, (h, p)), B.unflatten(-1, (self.ngroups, n)), C.unflatten(-1, (self.ngroups, n))
        A, D, dt_bias = self._step_parameters()
        softplus = True
        if self.dt_limit != (0.0, math.inf):  # clamped as the forward clamps it (the step's kernel has no limit)
            dt, dt_bias, softplus = process_dt(dt, self.dt_bias, True, self.dt_limit), None, False
        # the module's own shapes make ssd_step's checks redundant: one per token would cost more than the kernel
        dt, gate = dt[..., None].expand(-1, h, p), None if self.rmsnorm else z.unflatten(-1, (h, p))
        run = step_backend("auto", ssm_state, x, B, dt, A, C, D, gate, dt_bias)  # (any differentiated: torch)
        y = step_unchecked(ssm_state, x, dt, A, B, C, D, gate, dt_bias, softplus, run)
        return self._finish(y.flatten(-2), z, z0, x0)[:, None], conv_state, ssm_state

    def _check_cache(self, conv_state, ssm_state, batch: int) -> None:
        """Floating tensors (the new states are written into them) of the block's shapes at ``batch``."""
        for name, t in (("conv_state", conv_state), ("ssm_state", ssm_state)):
            check_tensor(t, name, "a floating tensor (updated in place)")
            if not (t.is_floating_point() or t.is_complex()):
                raise TypeError(f"{name} must be a floating tensor (updated in place); got {t.dtype}")
        h, p, n = self.nheads, self.headdim, self.d_state
        if ssm_state.shape != (batch, h, p, n):
            raise ValueError(f"ssm_state must have shape ({batch}, {h}, {p}, {n}); got {tuple(ssm_state.shape)}")
        conv = (batch, self.conv1d.weight.shape[0], self.d_conv)
        if conv_state.shape != conv:
            raise ValueError(f"conv_state must have shape {conv}; got {tuple(conv_state.shape)}")

    def _step_parameters(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``A (h, p, n)``, ``D`` and ``dt_bias (h, p)`` as :func:`~structmat.ssd_step` takes them (broadcast views,
        as mamba_ssm passes them). ``A`` is computed at every step: a cache keyed on the parameter's version served a
        stale ``A`` after a write through ``.data`` (which the version does not see)."""
        h, p, n = self.nheads, self.headdim, self.d_state
        per_channel = lambda v: v[:, None].expand(h, p)  # noqa: E731
        return (self._A()[:, None, None].expand(h, p, n), self._D() if self.D_has_hdim else per_channel(self.D),
                per_channel(self.dt_bias))

    def allocate_inference_cache(self, batch_size: int, max_seqlen: int, dtype=None, **kwargs):
        """Zero states ``(conv_state (B, conv_dim, d_conv), ssm_state (B, nheads, headdim, d_state))``."""
        device = self.out_proj.weight.device
        conv_state = torch.zeros(batch_size, self.d_conv, self.conv1d.weight.shape[0], device=device,
                                 dtype=self.conv1d.weight.dtype if dtype is None else dtype).transpose(1, 2)
        ssm_state = torch.zeros(batch_size, self.nheads, self.headdim, self.d_state, device=device,
                                dtype=self.in_proj.weight.dtype if dtype is None else dtype)
        return conv_state, ssm_state

    def _cache(self, inference_params, batch_size: int):
        if self.layer_idx is None:
            raise ValueError("decoding with inference_params needs the block's layer_idx")
        cache = inference_params.key_value_memory_dict
        if self.layer_idx not in cache:
            cache[self.layer_idx] = self.allocate_inference_cache(batch_size, inference_params.max_seqlen)
        return cache[self.layer_idx]

    def extra_repr(self) -> str:
        return (f"d_model={self.d_model}, d_state={self.d_state}, d_conv={self.d_conv}, expand={self.expand}, "
                f"headdim={self.headdim}, nheads={self.nheads}, ngroups={self.ngroups}, chunk_size={self.chunk_size}")


def _dt_bias_init(nheads: int, dt_min: float, dt_max: float, floor: float, device=None, dtype=None) -> torch.Tensor:
    """``softplus^{-1}(dt)`` for ``dt`` log-uniform in ``[dt_min, dt_max]``, at least ``floor`` (Mamba-2's init)."""
    dt = torch.exp(torch.rand(nheads, device=device, dtype=dtype) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min))
    dt = torch.clamp(dt, min=floor)
    return dt + torch.log(-torch.expm1(-dt))
