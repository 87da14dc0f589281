"""Recurrent decoding of SMA with a semiseparable mask: constant work per token.

For a lower SSS mask ``L`` the attention state ``S_t = sum_{s <= t} (A_t...A_{s+1} B_s) k_s v_s^T``
(shape ``(B, H, n, N, P)``) obeys ``S_t = A_t S_{t-1} + B_t k_t v_t^T`` and
``y_t = q_t . (C_t^T A_t S_{t-1}) + D_t (q_t . k_t) v_t``.
"""

from __future__ import annotations

import torch

from structmat.attention.heads import check_qkv, expand_heads, mask_to_bh
from structmat.core.base import StructuredMatrix
from structmat.matrices.bidiagonal import Bidiagonal
from structmat.matrices.sss import SSS

__all__ = ["SMADecoder"]


class SMADecoder:
    """Token-by-token SMA for a lower ``SSS``/``OneSS``/``Bidiagonal`` mask; ``step`` reproduces ``sma`` exactly.

    Masks without a bounded state (Toeplitz, Fourier, DFT, dense, low-rank, upper or bidirectional
    masks, which look at the future) raise ``TypeError``.

    Examples
    --------
    >>> import torch, structmat as sm
    >>> q, k, v = torch.randn(1, 5, 2, 3), torch.randn(1, 5, 2, 3), torch.randn(1, 5, 2, 4)
    >>> M = sm.OneSS.from_decays(torch.rand(5))
    >>> dec = sm.SMADecoder(M)
    >>> ys = torch.stack([dec.step(q[:, t], k[:, t], v[:, t]) for t in range(5)], 1)
    >>> torch.allclose(ys, sm.sma(q, k, v, M), atol=1e-5)
    True
    """

    def __init__(self, mask: StructuredMatrix, *, scale: float = 1.0):
        if isinstance(mask, Bidiagonal) and mask.lower:  # a two-state shift register
            mask = mask.to_sss()
        if not isinstance(mask, SSS) or not mask.lower:
            raise TypeError(
                f"{type(mask).__name__} has no bounded recurrent state (only lower SSS/OneSS masks decode "
                "token by token; Toeplitz/Fourier masks need the whole history, upper masks the future)"
            )
        self.mask, self.scale, self.t, self.state = mask, scale, 0, None

    def step(self, q_t: torch.Tensor, k_t: torch.Tensor, v_t: torch.Tensor) -> torch.Tensor:
        """One token: ``q_t (B, H|Hk, N)``, ``k_t (B, Hk, N)``, ``v_t (B, H, P)`` -> ``y_t (B, H, P)``."""
        if self.t >= self.mask.shape[-2]:
            raise IndexError(f"the mask has only T={self.mask.shape[-2]} positions")
        check_qkv(q_t[:, None], k_t[:, None], v_t[:, None])
        q, k, v = (x[:, 0] for x in expand_heads(q_t[:, None], k_t[:, None], v_t[:, None]))
        B, H = v.shape[:2]
        bh = mask_to_bh(self.mask, B, H)
        G = self.mask.generators.expand(self.mask.batch_shape)
        G = G.narrow(self.t, 1)
        Bm, Cm = G.B.reshape(*bh, -1).expand(B, H, -1), G.C.reshape(*bh, -1).expand(B, H, -1)
        D = G.diagonal().reshape(*bh).expand(B, H)
        kv = k[..., :, None] * v[..., None, :]  # (B, H, N, P)
        dtype = torch.promote_types(kv.dtype, Bm.dtype)
        if self.state is None:
            past = torch.zeros(B, H, Bm.shape[-1], *kv.shape[-2:], dtype=dtype, device=v.device)
        else:
            A = G.A.reshape_batch(bh).expand((B, H))
            flat = self.state.reshape(B, H, 1, Bm.shape[-1], -1)
            past = A.apply(flat).reshape(self.state.shape).to(dtype)
        y = torch.einsum("bhm,bhmnp,bhn->bhp", Cm.to(dtype), past, q.to(dtype))
        y = y + D[..., None].to(dtype) * (q * k).sum(-1, keepdim=True).to(dtype) * v.to(dtype)
        self.state = past + Bm.to(dtype)[..., None, None] * kv.to(dtype)[:, :, None]
        self.t += 1
        return (y * self.scale).to(v.dtype) if not y.is_complex() else y * self.scale
