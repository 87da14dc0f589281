"""The chunked-decay primitive: one entry point, a torch and a Triton implementation, one state layout.

Per batch ``b`` and head ``h`` (group ``g = h // (H / G)``), with the state ``S_t`` of shape ``(P, N)``::

    S_t = exp(log_a[b, t, h]) S_{t-1} + (scale[b, t, h] x[b, t, h]) B[b, t, g]^T,   S_{-1} = initial_state or 0
    y[b, t, h] = S_t C[b, t, g] + D[h] x[b, t, h],     out = y * silu(z)

Everything is ``[B, T, H, *]``; log decays are ``[B, T, H]``; states are ``(B, H, P, N)`` (chunk
states ``(B, n_chunks, H, P, N)``) in every backend. ``structmat.ssd`` maps Mamba-2's
``(x, dt, A, B, C)`` onto it as ``(x, dt A, B, C, scale=dt)``; ``structmat.sma`` with a 1-SS mask
as ``(v, log_a, k b, q c)``. The Triton kernels run on CUDA when the log decays are finite and
``<= 0`` (:func:`triton_applies`); the torch implementation runs everything else.
"""

from __future__ import annotations

import torch

from structmat.core.validation import finite_checks_enabled
from structmat.kernels.availability import triton_installed
from structmat.kernels.decay_torch import decay_chunked_torch

__all__ = ["chunked_decay", "triton_applies", "triton_supports", "decays_at_most_one", "states_after", "torch_chunk",
           "BACKENDS", "TORCH_CHUNK", "FP32_TILE_LIMITS"]

BACKENDS = ("auto", "torch", "triton")

#: Longest chunk of the torch implementation per device (the default, and the cap of a longer ``chunk_size``:
#: the result does not depend on it). On the CPU the ``L x L`` intra-chunk products dominate: measured (one
#: thread, ``ssd(..., backend="torch")``, ms for chunks 16 / 32 / 64 / 128 / 256): b, l, h, p, n = 2, 4096, 8,
#: 64, 64: 356 / 290 / 283 / 345 / 710; 1, 1024, 8, 64, 128: 59 / 51 / 48 / 63 / 92; 2, 16384, 4, 64, 64:
#: 709 / 568 / 675 / 860 / 1655. On a GPU longer chunks mean fewer launches of the state pass.
TORCH_CHUNK = {"cpu": 64, "cuda": 256}


#: ``(N, P)`` bounds of the float32 inputs the kernels were checked on (H100: every ``N`` up to 256 with ``P`` up to
#: 64, every ``N`` up to 128 with ``P`` up to 128); at ``N = 256`` with ``P = 128`` their launch raises
#: ``OutOfResources`` (shared memory; NOTES_ssd.md, session 18). Others take the torch backend under ``auto``.
FP32_TILE_LIMITS = ((256, 64), (128, 128))


def triton_supports(x: torch.Tensor, B: torch.Tensor, C: torch.Tensor) -> bool:
    """CUDA tensors with real data and Triton installed, tiles that fit (:data:`FP32_TILE_LIMITS`): what the kernels
    need apart from the decays (nothing is read from the data)."""
    if not (x.is_cuda and not any(t.is_complex() for t in (x, B, C)) and triton_installed()):
        return False
    N, P = B.shape[-1], x.shape[-1]
    return x.dtype != torch.float32 or any(N <= n and P <= p for n, p in FP32_TILE_LIMITS)


def torch_chunk(chunk_size: int | None, device: torch.device) -> int:
    """The chunk the torch implementation takes on ``device``: ``chunk_size`` up to :data:`TORCH_CHUNK`
    (256 on devices not measured)."""
    cap = TORCH_CHUNK.get(device.type, 256)
    return cap if chunk_size is None else min(chunk_size, cap)


def triton_applies(x: torch.Tensor, log_a: torch.Tensor, B: torch.Tensor, C: torch.Tensor) -> bool:
    """The Triton kernels take CUDA tensors with real data and finite log decays ``<= 0``.

    The decays are checked with one host sync, which stalls the GPU pipeline; where finite checks
    are off (:func:`~structmat.skip_finite_checks`, ``torch.compile``) the caller vouches for them,
    as the layers of ``structmat.nn`` do (their decays are ``exp(-softplus(.) exp(.))`` by construction).
    """
    return triton_supports(x, B, C) and (not finite_checks_enabled() or decays_at_most_one(log_a))


def decays_at_most_one(log_a: torch.Tensor) -> bool:
    """Every log decay finite and ``<= 0`` (one host read)."""
    return bool((torch.isfinite(log_a) & (log_a <= 0)).all())


def chunked_decay(x, log_a, B, C, *, scale=None, D=None, z=None, initial_state=None, seq_idx=None,
                  chunk_size: int | None = None, backend: str = "auto", return_chunk_states: bool = False,
                  decays_checked: bool = False):
    """The decay recurrence of the module docstring, chunked; returns ``(out, final_state)`` and, with
    ``return_chunk_states``, the states entering every chunk ``(B, n_chunks, H, P, N)``.

    ``backend="auto"`` takes the Triton kernels where :func:`triton_applies`, else torch;
    ``decays_checked`` says the caller has verified ``log_a`` finite and ``<= 0`` (not read again).

    Examples
    --------
    >>> import torch
    >>> x, B, C = torch.ones(1, 3, 1, 1), torch.ones(1, 3, 1, 1), torch.ones(1, 3, 1, 1)
    >>> out, state = chunked_decay(x, torch.full((1, 3, 1), -0.5), B, C, chunk_size=2)
    >>> out[0, :, 0, 0], state.shape
    (tensor([1.0000, 1.6065, 1.9744]), torch.Size([1, 1, 1, 1]))
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}; got {backend!r}")
    if backend == "auto":
        backend = "triton" if triton_supports(x, B, C) and (decays_checked or triton_applies(x, log_a, B, C)) else "torch"
    kw = dict(scale=scale, D=D, z=z, initial_state=initial_state, seq_idx=seq_idx, return_chunk_states=return_chunk_states)
    if backend == "triton":  # imported on first use: `import structmat` works without Triton
        # the kernels assume it: wrong results otherwise
        if finite_checks_enabled() and not decays_checked and not decays_at_most_one(log_a):
            raise ValueError("backend='triton' needs log_a finite and <= 0 (decays at most 1); use backend='torch'")
        from structmat.kernels.decay_triton import decay_chunked_triton

        return decay_chunked_triton(x, log_a, B, C, chunk_size=chunk_size or 256, **kw)
    return decay_chunked_torch(x, log_a, B, C, chunk_size=torch_chunk(chunk_size, x.device), **kw)


def states_after(x, log_a, B, chunk_states, positions, *, scale=None, seq_idx=None, chunk_size: int) -> torch.Tensor:
    """The states right after ``positions`` of batch row 0, ``(len(positions), H, P, N)`` float32
    (float64 inputs stay float64), from the states entering the chunks (the per-sequence final
    states of packed sequences). ``O(L)`` work per position."""
    h = x.shape[2]
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    Bh = B.repeat_interleave(h // B.shape[2], dim=2).to(work)
    s = torch.ones_like(log_a, dtype=work) if scale is None else scale.to(work)
    out = []
    for t in positions:
        c = t // chunk_size
        start = c * chunk_size
        steps = slice(start, t + 1)
        la = log_a[0, steps].to(work)  # (k, h)
        inclusive = torch.flip(torch.cumsum(torch.flip(la, (0,)), 0), (0,))  # sums over [j, t]
        after = torch.cat([inclusive[1:], torch.zeros_like(la[:1])])  # over (j, t]: no difference of sums
        w = torch.exp(after) * s[0, steps]
        carried = torch.exp(la.sum(0))[:, None, None] * chunk_states[0, c].to(work)
        if seq_idx is not None:
            same = (seq_idx[0, steps] == seq_idx[0, t]).to(work)
            w = w * same[:, None]
            carried = carried * (seq_idx[0, max(start - 1, 0)] == seq_idx[0, t]).to(work)
        out.append(torch.einsum("kh,khp,khn->hpn", w, x[0, steps].to(work), Bh[0, steps]) + carried)
    return torch.stack(out) if out else x.new_zeros(0, h, x.shape[3], B.shape[3], dtype=work)
