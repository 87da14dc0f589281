"""Recurrent decoding of SMA with a semiseparable mask: constant work per token.

For a lower SSS mask ``L`` the attention state ``S_t = sum_{s <= t} (A_t...A_{s+1} B_s) k_s v_s^T``
(shape ``(B, H, n, N, P)``) obeys ``S_t = A_t S_{t-1} + B_t k_t v_t^T`` and
``y_t = q_t . (C_t^T A_t S_{t-1}) + D_t (q_t . k_t) v_t``.

* :func:`sma_step` is one token with the step's mask parameters given (a model that computes its
  decays from the current token while generating);
* :func:`sma_state` is the state after a prefill (``sma`` over a prompt), to continue from;
* :class:`SMADecoder` steps through a mask known up front.
"""

from __future__ import annotations

import cmath
import numbers

import torch

from structmat.attention.heads import check_activations, check_kv, check_mask, check_qkv, expand_heads, mask_as_bh, result_dtype
from structmat.core.base import StructuredMatrix
from structmat.core.transitions import Transitions
from structmat.core.validation import (
    as_tensor,
    check_count,
    check_finite,
    check_scalar,
    check_tensor,
    finite_checks_enabled,
    skip_finite_checks,
)
from structmat.linalg.scan import linear_scan
from structmat.matrices.bidiagonal import Bidiagonal
from structmat.matrices.diagonal import Diagonal
from structmat.matrices.sss import SSS

__all__ = ["SMADecoder", "sma_step", "sma_state"]


def _lower_sss(mask: StructuredMatrix) -> SSS:
    if isinstance(mask, Bidiagonal) and mask.lower:  # a two-state shift register
        mask = mask.to_sss()
    if isinstance(mask, Diagonal):  # no state at all: an SSS of order 0
        none = mask.d.new_zeros(*mask.d.shape, 0)
        mask = SSS(none, none, none, D=mask.d)
    if not isinstance(mask, SSS) or not mask.lower:
        raise TypeError(
            f"{type(mask).__name__} has no bounded recurrent state (only lower SSS/OneSS/Bidiagonal masks decode "
            "token by token; Toeplitz/Fourier masks need the whole history, upper masks the future)"
        )
    return mask


_A_SHAPES = "(B|1, H|1) (scalar), (B|1, H|1, n) (diagonal) or (B|1, H|1, n, n) (dense)"


def _one_step(A, B_t: torch.Tensor, batch: tuple[int, int]) -> Transitions:
    """The step's transition (checked) with a time axis of length 1: ``Transitions`` of one step as given, a number
    (one scalar for all), or a scalar ``(B|1, H|1)``, diagonal ``(B|1, H|1, n)`` or dense ``(B|1, H|1, n, n)``
    tensor told apart by its rank against ``B_t (B|1, H|1, n)``."""
    n = B_t.shape[-1]
    if isinstance(A, Transitions):
        values, tail = A.values, A._tail  # (the time axis and the state's)
        shape = values.shape[:values.dim() - tail]
        if len(shape) < 2:  # a batch that broadcasts: (H, 1) or (1,) as (1, H, 1), (1, 1, 1)
            pad = (1,) * (2 - len(shape))
            A = Transitions(values.reshape(*pad, *values.shape), A.kind,
                            None if A.decays is None else A.decays.reshape(*pad, *A.decays.shape))
            values, shape = A.values, (*pad, *shape)
        if len(shape) != 2 or values.shape[len(shape)] != 1 or (tail > 1 and values.shape[-1] != n):
            raise ValueError(f"A as Transitions must be of one step, batch (B|1, H|1) and size n={n}: values "
                             f"(B|1, H|1, 1{', n' * (tail - 1)}); got {tuple(values.shape)} ({A.kind})")
        step = A
    else:
        if isinstance(A, (bool, str)) or A is None:
            raise TypeError(f"A must be a number, a tensor {_A_SHAPES} or a one-step Transitions; got {type(A).__name__}")
        A = as_tensor(float(A) if isinstance(A, numbers.Integral) else A, "A", device=B_t.device)
        A = A.reshape(1, 1) if A.dim() == 0 else A
        extra = A.dim() - 3
        if extra not in (-1, 0, 1) or (extra >= 0 and A.shape[2:] != (n,) * (extra + 1)):
            raise ValueError(f"A must have shape {_A_SHAPES} with n={n} (from B_t); got {tuple(A.shape)}")
        if not (A.is_floating_point() or A.is_complex()):
            raise TypeError(f"A must be a floating-point or complex tensor; got {A.dtype}")
        step, shape = Transitions.from_shape(A.unsqueeze(2), B_t[..., None, :]), A.shape[:2]
    if any(s not in (1, f) for s, f in zip(shape, batch)):
        raise ValueError(f"A's batch must broadcast to (B, H) = {batch}; got {tuple(shape)}")
    return step


def _check_finite_parts(parts: dict) -> None:
    """The step's mask parts ``{name: tensor}`` finite (log decays may be ``-inf``) where finite checks are on: one
    reduction each and one host read for all of them (a finite sum means finite entries: log decays clamped from
    below first), the named check where the sum is not."""
    if not finite_checks_enabled():
        return
    total = sum(t.clamp(min=torch.finfo(t.dtype).min).sum() if name == "log A" else t.sum() for name, t in parts.items())
    if not cmath.isfinite(total.item()):
        for name, t in parts.items():
            check_finite(t, name.replace("log ", ""), allow_neg_inf=name == "log A")


def _check_3d(**tensors: tuple) -> None:
    for name, (t, what) in tensors.items():
        check_tensor(t, name, f"a 3-D tensor {what}")
        if t.dim() != 3:
            raise ValueError(f"{name} must be a 3-D tensor {what}; got shape {tuple(t.shape)}")


def _check_token(q_t, k_t, v_t) -> None:
    """One token's ``q_t (B, H|H_k, N)``, ``k_t (B, H_k, N)``, ``v_t (B, H, P)``."""
    _check_3d(q_t=(q_t, "(B, H|H_k, N)"), k_t=(k_t, "(B, H_k, N)"), v_t=(v_t, "(B, H, P)"))
    check_qkv(q_t[:, None], k_t[:, None], v_t[:, None])
    check_activations(q_t=q_t, k_t=k_t, v_t=v_t)


def _check_step(state, q_t, k_t, v_t, A, B_t, C_t, D_t, scale) -> tuple[Transitions | None, float]:
    """The arguments of :func:`sma_step` against the sizes ``q_t``, ``v_t`` and ``B_t`` set (a state of another
    order, batch or width was broadcast without a word); the mask's parts finite where finite checks are on, as a
    mask's parameters are; returns the step's transition (None without ``A``) and the checked ``scale``."""
    _check_token(q_t, k_t, v_t)
    _check_3d(B_t=(B_t, "(B|1, H|1, n)"), C_t=(C_t, "(B|1, H|1, n)"))
    (Bsz, H, P), N, n = v_t.shape, q_t.shape[-1], B_t.shape[-1]
    for name, t in (("B_t", B_t), ("C_t", C_t)):
        if t.shape[0] not in (1, Bsz) or t.shape[1] not in (1, H) or t.shape[2] != n:
            raise ValueError(f"{name} must have shape (B|1, H|1, n) = ({Bsz}|1, {H}|1, {n}); got {tuple(t.shape)}")
    if D_t is not None and not isinstance(D_t, numbers.Number):
        check_tensor(D_t, "D_t", "a number or a tensor (B|1, H|1)")
        if D_t.dim() > 2 or any(s not in (1, f) for s, f in zip(D_t.shape[::-1], (H, Bsz))):
            raise ValueError(f"D_t must broadcast to (B, H) = ({Bsz}, {H}); got {tuple(D_t.shape)}")
    if state is not None:
        check_tensor(state, "state", "a tensor (B, H, n, N, P)")
        if tuple(state.shape) != (Bsz, H, n, N, P):
            raise ValueError(f"state must have shape (B, H, n, N, P) = {(Bsz, H, n, N, P)} (n from B_t); got "
                             f"{tuple(state.shape)}")
        if A is None:
            raise ValueError("A is required when state is given (the transition from the state to this step)")
    step = None if A is None else _one_step(A, B_t, (Bsz, H))
    parts = {"B_t": B_t, "C_t": C_t}
    if D_t is not None:
        parts["D_t"] = torch.as_tensor(D_t, device=B_t.device)
    if step is not None:
        parts["log A" if step.kind == "log" else "A"] = step.values
    _check_finite_parts(parts)
    return step, check_scalar(scale, "scale", real=True)


def sma_step(state, q_t, k_t, v_t, A, B_t, C_t, D_t=None, *, scale: float = 1.0):
    """One token of SMA with a lower SSS mask whose step parameters are given; returns ``(y_t, state)``.

    Parameters
    ----------
    state : Tensor ``(B, H, n, N, P)`` or None
        The state after the previous token (None: the first token, no past).
    q_t : Tensor ``(B, H|H_k, N)``
    k_t : Tensor ``(B, H_k, N)``
    v_t : Tensor ``(B, H, P)``
    A : the step's transition: a number (one scalar for all), a scalar ``(B|1, H|1)``, diagonal
        ``(B|1, H|1, n)`` or dense ``(B|1, H|1, n, n)`` tensor, or a one-step ``Transitions`` (log decays:
        ``Transitions.from_log(log_a[..., None])`` with ``log_a (B|1, H|1)``). Required with a ``state``; its
        dtype counts in the result's when given.
    B_t, C_t : Tensor ``(B|1, H|1, n)``
    D_t : Tensor ``(B|1, H|1)`` or number, optional
        The step's diagonal entry (default ``C_t . B_t``).

    Notes
    -----
    ``y_t = q_t . (C_t^T A S) + D_t (q_t . k_t) v_t`` and ``S <- A S + B_t k_t v_t^T``; ``O(H n N P)``.
    ``A``, ``B_t``, ``C_t`` and ``D_t`` must be finite, as a mask's parameters (a host read per step on a GPU:
    :func:`~structmat.skip_finite_checks` skips it). Everything is computed in the dtype the step's tensors promote
    to (at least float32); ``y_t`` comes back as :func:`~structmat.sma` would give it for the same mask.

    Examples
    --------
    >>> import torch, structmat as sm
    >>> q = k = torch.ones(1, 1, 2); v = torch.ones(1, 1, 3); one = torch.ones(1, 1, 1)
    >>> y, S = sm.sma_step(None, q, k, v, None, one, one)
    >>> y, S = sm.sma_step(S, q, k, v, torch.full((1, 1), 0.5), one, one)
    >>> y  # (0.5 + 1) * (q . k)
    tensor([[[3., 3., 3.]]])
    """
    step, scale = _check_step(state, q_t, k_t, v_t, A, B_t, C_t, D_t, scale)
    q, k, v = (x[:, 0] for x in expand_heads(q_t[:, None], k_t[:, None], v_t[:, None]))
    batch = v.shape[:2]
    D = (C_t * B_t).sum(-1) if D_t is None else torch.as_tensor(D_t, device=v.device)
    mask_dtype = torch.promote_types(torch.promote_types(B_t.dtype, C_t.dtype), D.dtype)
    mask_dtype = mask_dtype if step is None else step.promote(mask_dtype)
    activations = torch.promote_types(torch.promote_types(q_t.dtype, k_t.dtype), v_t.dtype)
    dtype = _state_dtype(torch.promote_types(activations, mask_dtype), state)  # (every product in it: D36's rule)
    q, k, v = (t.to(dtype) for t in (q, k, v))
    kv = k[..., :, None] * v[..., None, :]  # (B, H, N, P)
    if state is None:
        past = torch.zeros(*batch, B_t.shape[-1], *kv.shape[-2:], dtype=dtype, device=v.device)
    else:
        flat = state.to(dtype).reshape(*batch, 1, state.shape[-3], state.shape[-2] * state.shape[-1])  # (no -1: order 0)
        past = step.cast(dtype).apply(flat).reshape(state.shape)
    y = torch.einsum("bhm,bhmnp,bhn->bhp", C_t.expand(*batch, -1).to(dtype), past, q)
    y = y + D.expand(batch)[..., None].to(dtype) * (q * k).sum(-1, keepdim=True) * v
    state = past + B_t.expand(*batch, -1).to(dtype)[..., None, None] * kv[:, :, None]
    return (y * scale).to(result_dtype(activations, mask_dtype)), state


def sma_state(k, v, mask: StructuredMatrix) -> torch.Tensor:
    """The decoding state after the last position of ``sma(q, k, v, mask)`` (a prefill), ``(B, H, n, N, P)``.

    ``S_T = sum_s (A_{T-1} ... A_{s+1} B_s) k_s v_s^T`` for a lower SSS/OneSS/Bidiagonal mask:
    one recurrence over the prompt with the ``(n, N P)`` state, ``O(B H T n N P)``.

    Examples
    --------
    >>> import torch, structmat as sm
    >>> k, v = torch.ones(1, 3, 1, 1), torch.ones(1, 3, 1, 1)
    >>> sm.sma_state(k, v, sm.OneSS.decay(0.5, 3))[0, 0, :, 0, 0]  # 0.25 + 0.5 + 1
    tensor([1.7500])
    """
    check_kv(k, v)
    check_activations(k=k, v=v)
    check_mask(mask, k.shape[1], k.shape[1], k.shape[0], v.shape[2], k.device)
    M = mask_as_bh(_lower_sss(mask), k.shape[0], v.shape[2])
    _, k, v = expand_heads(k, k, v)
    Bsz, T, H, N = k.shape
    G = M.generators.expand((Bsz, H))
    dtype = _state_dtype(G.A.promote(torch.promote_types(torch.promote_types(k.dtype, v.dtype), G.B.dtype)))
    if T == 0:  # no prompt: the zero state
        return torch.zeros(Bsz, H, G.order, N, v.shape[-1], dtype=dtype, device=v.device)
    k, v = k.to(dtype), v.to(dtype)
    Z = (k[..., :, None] * v[..., None, :]).permute(0, 2, 1, 3, 4).reshape(Bsz, H, T, N * v.shape[-1])  # (B, H, T, N P)
    u = G.B[..., :, :, None].to(dtype) * Z[..., :, None, :]  # (B, H, T, n, N P)
    h = linear_scan(G.A.with_identity_first().cast(dtype), u)
    return h[..., -1, :, :].reshape(Bsz, H, G.order, N, v.shape[-1])


def _state_dtype(dtype: torch.dtype, state: torch.Tensor | None = None) -> torch.dtype:
    """The dtype a decoding state accumulates in: ``dtype`` (that of the step's data), at least float32 (16-bit
    activations accumulate in float32, DESIGN section 5) and at least the given ``state``'s."""
    if dtype in (torch.float16, torch.bfloat16):
        dtype = torch.float32
    elif dtype == torch.complex32:
        dtype = torch.complex64
    return dtype if state is None else torch.promote_types(dtype, state.dtype)


class SMADecoder:
    """Token-by-token SMA for a lower ``SSS``/``OneSS``/``Bidiagonal`` (or ``Diagonal``) mask; ``step`` reproduces
    ``sma``.

    ``state`` and ``start`` continue after a prefill: ``SMADecoder(mask, state=sma_state(k[:, :t],
    v[:, :t], prefix_mask), start=t)`` with ``prefix_mask`` the mask's first ``t`` positions. Masks
    without a bounded state (Toeplitz, Fourier, DFT, dense, low-rank, upper or bidirectional masks,
    which look at the future) raise ``TypeError``. For masks computed token by token, see :func:`sma_step`.

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

    def __init__(self, mask: StructuredMatrix, *, scale: float = 1.0, state: torch.Tensor | None = None,
                 start: int = 0):
        self.mask, self.t, self.state = _lower_sss(mask), check_count(start, "start"), state
        self.scale = check_scalar(scale, "scale", real=True)
        if not 0 <= self.t <= self.mask.shape[-2]:
            raise ValueError(f"start must be in [0, T={self.mask.shape[-2]}]; got {start}")
        if state is not None:
            check_tensor(state, "state", "a tensor (B, H, n, N, P)")
            if state.dim() != 5 or state.shape[2] != self.mask.order:
                raise ValueError(f"state must have shape (B, H, n={self.mask.order}, N, P), as sma_state gives; got "
                                 f"{tuple(state.shape)}")

    def step(self, q_t: torch.Tensor, k_t: torch.Tensor, v_t: torch.Tensor) -> torch.Tensor:
        """One token: ``q_t (B, H|Hk, N)``, ``k_t (B, Hk, N)``, ``v_t (B, H, P)`` -> ``y_t (B, H, P)``."""
        if self.t >= self.mask.shape[-2]:
            raise IndexError(f"the mask has only T={self.mask.shape[-2]} positions")
        _check_token(q_t, k_t, v_t)  # (before their sizes are read; sma_step checks the rest)
        M = mask_as_bh(self.mask, v_t.shape[0], v_t.shape[1])
        G = M.generators.expand(M.batch_shape).narrow(self.t, 1)
        with skip_finite_checks():  # (the mask's parameters were checked when it was made)
            y, self.state = sma_step(self.state, q_t, k_t, v_t, G.A, G.B[..., 0, :], G.C[..., 0, :],
                                     G.diagonal()[..., 0], scale=self.scale)
        self.t += 1
        return y
