"""``structmat.nn.SMA``: structured masked attention as a torch layer, the mask chosen by name or given.

``y = out_proj(norm(sma(q, k, v, L(u)), gate))`` with ``q, k, v`` and the gate projected from the
input ``u`` and the mask ``L`` one of the structured families (or a user's function of ``u``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from structmat.attention import sma, sma_state, sma_step
from structmat.core.base import StructuredMatrix
from structmat.core.transitions import Transitions
from structmat.core.validation import check_flag, check_positive_int, check_tensor, skip_finite_checks
from structmat.matrices.fourier import Fourier
from structmat.matrices.one_ss import OneSS
from structmat.matrices.quasiseparable import Quasiseparable
from structmat.matrices.toeplitz import Toeplitz
from structmat.nn.norm import GatedRMSNorm

__all__ = ["SMA", "MASKS"]

#: The named masks: ``selective`` (1-SS, input-dependent decays: Mamba-2), ``decay`` (a learned decay per
#: head: RetNet), ``causal`` (linear attention, normalised), ``toeplitz`` (a learned causal kernel over
#: relative positions), ``fourier`` (a learned circulant kernel, non-causal), ``bidirectional`` (LION-S:
#: forward and backward selective decays, normalised).
MASKS = ("selective", "decay", "causal", "toeplitz", "fourier", "bidirectional")
_NORMALISED = ("causal", "bidirectional")  # positive feature maps, outputs divided by the masked score sums
_DECODES = ("selective", "decay", "causal")  # causal with a bounded state


def _no_decoding(kind: str) -> str:
    """Why a layer with the mask ``kind`` keeps no recurrent state (``return_state``, ``step``)."""
    if kind == "custom":
        return (f"return_state and step need one of the masks {_DECODES}, whose recurrence the layer steps; a custom "
                "mask is a function of the input the layer cannot step one token at a time (for a lower semiseparable "
                "mask, structmat.sma_state and sma_step decode it from the mask itself)")
    return f"mask {kind!r} has no bounded recurrent state; decode with masks {_DECODES}"


class SMA(nn.Module):
    """A structured masked attention layer.

    Parameters
    ----------
    d_model, n_heads : int
    mask : str or callable
        One of :data:`MASKS`, or a function / ``nn.Module`` mapping the input ``u (B, T, d_model)`` to a
        :class:`~structmat.StructuredMatrix` of shape ``(B|1, H|1, T, T)`` (a custom mask built with the
        algebra, e.g. ``OneSS.decay(0.9, T) + Toeplitz.causal(k)``).
    d_state : int
        Key/query features ``N`` (per group).
    head_dim : int, optional
        Value features ``P`` per head (default ``d_model // n_heads``).
    n_groups : int
        Key/query groups shared by the heads (``n_heads % n_groups == 0``).
    max_seqlen : int
        Longest sequence for the learned kernels of ``toeplitz`` and ``fourier``.
    chunk_size : int, optional
        Block length of the chunked order (the device's by default).
    norm, gate, bias : the output gated RMSNorm, the gate ``silu(z)``, biases of the projections.

    Notes
    -----
    Shapes: ``forward(u (B, T, d_model)) -> (B, T, d_model)`` (``forward(u, return_state=True) -> (y, state)``: a
    prefill); ``step(u_t (B, 1, d_model), state) -> (y_t (B, 1, d_model), state)``. The contraction order is
    ``sma``'s planner's.

    Examples
    --------
    >>> import torch
    >>> from structmat.nn import SMA
    >>> layer = SMA(16, 4, mask="decay", d_state=8)
    >>> u = torch.randn(2, 10, 16)
    >>> y, state = layer.step(u[:, :1], None)
    >>> torch.allclose(y, layer(u)[:, :1], atol=1e-5)
    True
    """

    def __init__(self, d_model: int, n_heads: int, *, mask: str | Callable = "selective", d_state: int = 64,
                 head_dim: int | None = None, n_groups: int = 1, max_seqlen: int = 2048, chunk_size: int | None = None,
                 norm: bool = True, gate: bool = True, bias: bool = False, dt_min: float = 0.001, dt_max: float = 0.1,
                 device=None, dtype=None):
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        if (isinstance(mask, str) and mask not in MASKS) or not (isinstance(mask, str) or callable(mask)):
            raise ValueError(f"mask must be one of {MASKS} or a callable returning a StructuredMatrix; got {mask!r}")
        for name, n in (("d_model", d_model), ("n_heads", n_heads), ("n_groups", n_groups), ("d_state", d_state),
                        ("max_seqlen", max_seqlen), *((("head_dim", head_dim),) if head_dim is not None else ()),
                        *((("chunk_size", chunk_size),) if chunk_size is not None else ())):
            check_positive_int(n, name)
        if n_heads % n_groups:
            raise ValueError(f"n_heads={n_heads} must be a multiple of n_groups={n_groups}")
        if head_dim is None and d_model < n_heads:
            raise ValueError(f"head_dim defaults to d_model // n_heads, 0 for d_model={d_model} and n_heads={n_heads}; "
                             "pass head_dim")
        self.d_model, self.n_heads, self.n_groups, self.d_state = d_model, n_heads, n_groups, d_state
        self.head_dim = head_dim if head_dim is not None else d_model // n_heads
        self.mask_kind = mask if isinstance(mask, str) else "custom"
        self.mask_fn = None if isinstance(mask, str) else mask
        self.chunk_size, self.max_seqlen = chunk_size, max_seqlen
        H, P, GN = n_heads, self.head_dim, n_groups * d_state
        n_dt = {"selective": H, "bidirectional": 2 * H}.get(self.mask_kind, 0)
        self.sizes = [H * P, GN, GN, H * P if gate else 0, n_dt]  # v, k, q, z, dt
        self.in_proj = nn.Linear(d_model, sum(self.sizes), bias=bias, **kw)
        self._mask_parameters(dt_min, dt_max, kw)
        self.norm = GatedRMSNorm(H * P, eps=1e-5, group_size=P, **kw) if norm else None
        self.out_proj = nn.Linear(H * P, d_model, bias=bias, **kw)

    def _mask_parameters(self, dt_min: float, dt_max: float, kw: dict) -> None:
        H = self.n_heads
        if self.mask_kind in ("selective", "bidirectional"):
            n = H * (2 if self.mask_kind == "bidirectional" else 1)
            dt = torch.exp(torch.rand(n, **kw) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min))
            self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus^{-1}, as Mamba-2
            self.A_log = nn.Parameter(torch.log(torch.empty(H, **kw).uniform_(1, 16)))
        elif self.mask_kind == "decay":  # RetNet's per-head decays 1 - 2^(-5 - h)
            gamma = 1 - 2.0 ** (-5 - torch.arange(H, **{**kw, "dtype": kw["dtype"] or torch.float32}) * 4 / max(H - 1, 1))
            self.decay_logit = nn.Parameter(torch.log(gamma / (1 - gamma)))
        elif self.mask_kind in ("toeplitz", "fourier"):  # a kernel decaying over relative positions
            lags = torch.arange(self.max_seqlen, **{**kw, "dtype": kw["dtype"] or torch.float32})
            self.kernel = nn.Parameter(torch.exp(-lags[None] / torch.logspace(0, 3, H, **kw)[:, None])
                                       * (1 + 0.1 * torch.randn(H, self.max_seqlen, **kw)))

    # --- the mask ----------------------------------------------------------------------------------
    def _dt(self, dt: torch.Tensor) -> torch.Tensor:
        return F.softplus(dt + self.dt_bias.to(dt.dtype))

    def mask(self, u: torch.Tensor, dt: torch.Tensor | None = None) -> StructuredMatrix:
        """The mask of input ``u (B, T, d_model)``: a ``StructuredMatrix`` with batch ``(B|1, H|1)``."""
        T, H = u.shape[1], self.n_heads
        kind = self.mask_kind
        if kind == "custom":
            return self.mask_fn(u)
        if kind == "selective":
            return OneSS((self._dt(dt) * self._A()).transpose(1, 2))
        if kind == "decay":
            return OneSS.decay(self._decays(), T)
        if kind == "causal":
            return OneSS.causal(T, dtype=u.dtype, device=u.device)
        if kind == "toeplitz":
            return Toeplitz.causal(self._kernel(T))
        if kind == "fourier":
            return Fourier.from_kernel(self._kernel(T))
        d = self._dt(dt)  # bidirectional: forward decays and backward decays, LION-S
        fwd, bwd = OneSS((d[..., :H] * self._A()).transpose(1, 2)), OneSS(torch.flip(d[..., H:] * self._A(), (1,)).transpose(1, 2))
        return Quasiseparable.bidirectional(fwd, bwd)

    def _A(self) -> torch.Tensor:
        return -torch.exp(self.A_log.to(torch.promote_types(self.A_log.dtype, torch.float32)))

    def _decays(self) -> torch.Tensor:
        """The ``decay`` mask's per-head decays in float32 at least (in bfloat16 ``sigmoid`` rounds 0.998 to 1: a head
        that never forgets)."""
        return torch.sigmoid(self.decay_logit.to(torch.promote_types(self.decay_logit.dtype, torch.float32)))

    def _kernel(self, T: int) -> torch.Tensor:
        if T > self.max_seqlen:
            raise ValueError(f"the learned {self.mask_kind} kernel covers max_seqlen={self.max_seqlen} positions; got T={T}")
        return self.kernel[:, :T]

    # --- forward -------------------------------------------------------------------------------------
    def _project(self, u: torch.Tensor):
        B, T, _ = u.shape
        v, k, q, z, dt = torch.split(self.in_proj(u), self.sizes, dim=-1)
        v = v.unflatten(-1, (self.n_heads, self.head_dim))
        k, q = k.unflatten(-1, (self.n_groups, self.d_state)), q.unflatten(-1, (self.n_groups, self.d_state))
        if self.mask_kind in _NORMALISED:  # positive features (elu + 1), so the masked score sums are positive
            q, k = F.elu(q) + 1, F.elu(k) + 1
        else:
            q = q / math.sqrt(self.d_state)
        if self.mask_kind == "selective":
            v = v * self._dt(dt)[..., None].to(v.dtype)
        return q, k, v, z, dt

    def _output(self, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """Normalised heads (for the normalised masks: values over score sums), the gated norm, out_proj."""
        if self.mask_kind in _NORMALISED:
            y = y[..., :-1] / y[..., -1:].clamp_min(1e-6)
        y = y.flatten(-2)
        if self.norm is not None:
            y = self.norm(y, z if z.shape[-1] else None)
        elif z.shape[-1]:
            y = y * F.silu(z)
        return self.out_proj(y)

    @staticmethod
    def _with_ones(v: torch.Tensor) -> torch.Tensor:
        """Values with a column of ones: its output is the row sum of the masked scores."""
        return torch.cat([v, torch.ones_like(v[..., :1])], dim=-1)

    def forward(self, u: torch.Tensor, return_state: bool = False):
        """``u (B, T, d_model) -> (B, T, d_model)``; with ``return_state`` (a prefill) also the decoding state after
        the last position, which :meth:`step` continues from (the masks that decode only)."""
        check_tensor(u, "u", f"a tensor of shape (batch, seqlen, {self.d_model})")
        if u.dim() != 3 or u.shape[-1] != self.d_model:
            raise ValueError(f"u must have shape (batch, seqlen, {self.d_model}); got {tuple(u.shape)}")
        if check_flag(return_state, "return_state") and self.mask_kind not in _DECODES:
            raise TypeError(_no_decoding(self.mask_kind))
        q, k, v, z, dt = self._project(u)
        if self.mask_kind in _NORMALISED:
            v = self._with_ones(v)
        with skip_finite_checks():  # the named masks' decays are <= 1 by construction: no host sync
            mask = self.mask(u, dt)
            y = sma(q, k, v, mask, chunk=self.chunk_size)
            out = self._output(y, z)
            return (out, sma_state(k, v, mask)) if return_state else out

    # --- decoding -----------------------------------------------------------------------------------
    def step(self, u_t: torch.Tensor, state=None):
        """One token ``u_t (B, 1, d_model)`` for the causal masks with a bounded state (``selective``,
        ``decay``, ``causal``); ``state=None`` is the zero state. Returns ``(y_t (B, 1, d_model), state)``.
        The other masks have no bounded state (``toeplitz`` needs the whole history, ``fourier`` and
        ``bidirectional`` the future): ``TypeError``."""
        if self.mask_kind not in _DECODES:
            raise TypeError(_no_decoding(self.mask_kind))
        if u_t.dim() != 3 or u_t.shape[1] != 1 or u_t.shape[-1] != self.d_model:
            raise ValueError(f"step decodes one token: u_t must have shape (batch, 1, {self.d_model}); got {tuple(u_t.shape)}")
        q, k, v, z, dt = self._project(u_t)
        if self.mask_kind in _NORMALISED:
            v = self._with_ones(v)
        B, H = u_t.shape[0], self.n_heads
        one = torch.ones(1, 1, 1, dtype=v.dtype, device=v.device)
        if self.mask_kind == "selective":
            A = Transitions.from_log((self._dt(dt)[:, 0] * self._A())[..., None])
        elif self.mask_kind == "decay":
            A = self._decays().expand(B, H)
        else:
            A = one[..., 0].expand(B, H)
        y, state = sma_step(state, q[:, 0], k[:, 0], v[:, 0], A, one, one)
        return self._output(y[:, None], z), state

    def extra_repr(self) -> str:
        return (f"d_model={self.d_model}, n_heads={self.n_heads}, mask={self.mask_kind!r}, d_state={self.d_state}, "
                f"head_dim={self.head_dim}, n_groups={self.n_groups}")
