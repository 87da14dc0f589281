"""The causal depthwise convolution of Mamba-style blocks, with packed sequences and a decoding state."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from structmat.kernels.availability import eager_triton

__all__ = ["causal_conv1d", "causal_conv_silu", "conv_step", "conv_step_silu", "last_inputs"]


def causal_conv1d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                  seq_idx: torch.Tensor | None = None, initial: torch.Tensor | None = None) -> torch.Tensor:
    """``y_t = bias + sum_w weight[:, w] x_{t - W + 1 + w}`` per channel; inputs before the start (or, with
    ``seq_idx``, from another packed sequence) count as zero, or as ``initial``'s last ``W - 1`` inputs.

    Shapes: ``x (B, T, D)``, ``weight (D, W)``, ``bias (D,)``, ``seq_idx (B, T)``, ``initial (B, D, W)``
    (a decoding cache: the inputs before ``x``; its last ``W - 1`` are used). ``O(B T D W)``.

    Examples
    --------
    >>> causal_conv1d(torch.ones(1, 3, 1), torch.tensor([[1.0, 2.0]]))[0, :, 0]
    tensor([2., 3., 3.])
    """
    B, T, D = x.shape
    W = weight.shape[-1]
    past = x.new_zeros(B, W - 1, D) if initial is None else initial[..., 1:].transpose(1, 2).to(x.dtype)
    padded = torch.cat([past, x], dim=1)  # (B, W - 1 + T, D)
    y = x.new_zeros(B, T, D) if bias is None else bias.to(x.dtype).expand(B, T, D).clone()
    for w in range(W):
        shift = W - 1 - w  # the tap reads x_{t - shift}
        tap = padded[:, w : w + T] * weight[:, w].to(x.dtype)
        if seq_idx is not None and shift:
            same = torch.zeros(B, T, dtype=torch.bool, device=x.device)
            same[:, shift:] = seq_idx[:, shift:] == seq_idx[:, :-shift]
            if initial is not None:  # the cached inputs belong to the first sequence
                same[:, :shift] = seq_idx[:, :shift] == seq_idx[:, :1]
            tap = tap * same[..., None]
        y = y + tap
    return y


def causal_conv_silu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                     seq_idx: torch.Tensor | None = None) -> torch.Tensor:
    """``silu(causal_conv1d(x, weight, bias, seq_idx))``: on CUDA (eager) one Triton kernel each way
    (:mod:`structmat.kernels.causal_conv_triton`, nothing kept for the backward but ``x``), else the torch form.

    Examples
    --------
    >>> causal_conv_silu(torch.zeros(1, 2, 1), torch.ones(1, 2))[0, :, 0]
    tensor([0., 0.])
    """
    if eager_triton(x) and weight.dtype == x.dtype:
        from structmat.kernels.causal_conv_triton import causal_conv_silu_triton

        return causal_conv_silu_triton(x, weight, bias, seq_idx)
    return F.silu(causal_conv1d(x, weight, bias, seq_idx))


def conv_step_silu(x_t: torch.Tensor, state: torch.Tensor, weight: torch.Tensor,
                   bias: torch.Tensor | None = None) -> torch.Tensor:
    """``silu(conv_step(...))`` in ``x_t``'s dtype; one Triton kernel on CUDA (eager, no gradient wanted: it has no
    backward), else the torch form."""
    wanted = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x_t, state, weight, bias))
    if eager_triton(x_t) and state.dtype in (x_t.dtype, torch.float32) and not wanted:
        from structmat.kernels.causal_conv_triton import causal_conv_step_triton

        return causal_conv_step_triton(x_t, state, weight, bias)
    return F.silu(conv_step(x_t, state, weight, bias)).to(x_t.dtype)


def last_inputs(x: torch.Tensor, width: int, ends=None) -> torch.Tensor:
    """The decoding cache ``(B, D, width)``: the last ``width`` inputs of ``x (B, T, D)`` (zero-padded on the
    left), or, with ``ends`` (a list of ``(start, end)`` of packed sequences in batch row 0), those of each
    sequence ``(num_seqs, D, width)``."""
    if ends is None:
        t = x.transpose(1, 2)
        return torch.nn.functional.pad(t, (max(width - t.shape[-1], 0), 0))[..., -width:] if width else t[..., :0]
    return torch.cat([last_inputs(x[:, s:e], width) for s, e in ends]) if ends else x.new_zeros(0, x.shape[2], width)


def conv_step(x_t: torch.Tensor, state: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None):
    """One token: shift ``x_t (B, D)`` into ``state (B, D, W)`` (in place) and return the convolution ``(B, D)``.

    The window is formed out of place and then written into ``state``: the product keeps the window, not ``state``,
    for its backward, so a chain of steps differentiates although each overwrites the state."""
    window = torch.cat([state[..., 1:], x_t[..., None].to(state.dtype)], dim=-1)
    y = (window * weight.to(state.dtype)).sum(-1)
    state.copy_(window)
    return y if bias is None else y + bias.to(y.dtype)
