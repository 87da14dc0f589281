"""Recurrent decoding of SMA with a semiseparable mask: constant work per token.

For a lower SSS mask ``L`` the attention state ``S_t = sum_{s <= t} (A_t...A_{s+1} B_s) k_s v_s^T``
(shape ``(B, H, N_mask, N, P)``) obeys ``S_t = A_t S_{t-1} + B_t k_t v_t^T`` and
``y_t = q_t . (C_t^T A_t S_{t-1}) + D_t (q_t . k_t) v_t``.
"""

from __future__ import annotations

import torch

from structmat.base import StructuredMatrix
from structmat.sma.engine import expand_heads
from structmat.sma.orders import mask_to_bh
from structmat.sss import SSS

__all__ = ["Decoder"]


class Decoder:
    """Token-by-token SMA for a lower ``SSS``/``OneSS`` mask; ``step`` reproduces ``sma`` exactly.

    Masks without a bounded state (Toeplitz, Fourier, DFT, dense, low-rank, upper or bidirectional
    masks, which look at the future) raise ``TypeError``.

    Examples
    --------
    >>> import torch, structmat as sm
    >>> q, k, v = torch.randn(1, 5, 2, 3), torch.randn(1, 5, 2, 3), torch.randn(1, 5, 2, 4)
    >>> M = sm.OneSS.from_decays(torch.rand(5))
    >>> dec = sm.sma.Decoder(M)
    >>> ys = torch.stack([dec.step(q[:, t], k[:, t], v[:, t]) for t in range(5)], 1)
    >>> torch.allclose(ys, sm.sma(q, k, v, M), atol=1e-5)
    True
    """

    def __init__(self, mask: StructuredMatrix, *, scale: float = 1.0):
        if not isinstance(mask, SSS) or not mask.lower:
            raise TypeError(
                f"{type(mask).__name__} has no bounded recurrent state (only lower SSS/OneSS masks decode "
                "token by token; Toeplitz/Fourier masks need the whole history, upper masks the future)"
            )
        self.mask, self.scale, self.t, self.state = mask, scale, 0, None

    def _at(self, t: int, B: int, H: int):
        M = self.mask
        bh = mask_to_bh(M, B, H)
        pick = lambda x, tail: x.reshape(*bh, *x.shape[x.dim() - tail :]).select(2, t)  # noqa: E731
        tail = {"log": 1, "scalar": 1, "diag": 2, "dense": 3}[M.kind]
        return pick(M._A, tail), pick(M.B, 2), pick(M.C, 2), pick(M.diag_values(), 1)

    def step(self, q_t: torch.Tensor, k_t: torch.Tensor, v_t: torch.Tensor) -> torch.Tensor:
        """One token: ``q_t (B, H|Hk, N)``, ``k_t (B, Hk, N)``, ``v_t (B, H, P)`` -> ``y_t (B, H, P)``."""
        if self.t >= self.mask.shape[-2]:
            raise IndexError(f"the mask has only T={self.mask.shape[-2]} positions")
        q, k, v = (x[:, 0] for x in expand_heads(q_t[:, None], k_t[:, None], v_t[:, None]))
        B, H = v.shape[:2]
        A, Bm, Cm, D = self._at(self.t, B, H)
        kv = k[..., :, None] * v[..., None, :]  # (B, H, N, P)
        dtype = torch.promote_types(kv.dtype, Bm.dtype)
        if self.state is None:
            self.state = torch.zeros(B, H, Bm.shape[-1], *kv.shape[-2:], dtype=dtype, device=v.device)
            past = self.state
        else:
            past = self._transition(A, self.state)
        y = torch.einsum("bhm,bhmnp,bhn->bhp", Cm.expand(B, H, -1).to(dtype), past, q.to(dtype))
        y = y + D.expand(B, H)[..., None].to(dtype) * (q * k).sum(-1, keepdim=True).to(dtype) * v.to(dtype)
        self.state = past + Bm.expand(B, H, -1).to(dtype)[..., None, None] * kv.to(dtype)[:, :, None]
        self.t += 1
        return (y * self.scale).to(v.dtype) if not y.is_complex() else y * self.scale

    def _transition(self, A, state):
        kind = self.mask.kind
        if kind == "log":
            return torch.exp(A)[..., None, None, None].to(state.dtype) * state
        if kind == "scalar":
            return A[..., None, None, None].to(state.dtype) * state
        if kind == "diag":
            return A[..., None, None].to(state.dtype) * state
        return torch.einsum("bhij,bhjnp->bhinp", A.to(state.dtype).expand(*state.shape[:2], *A.shape[-2:]), state)
