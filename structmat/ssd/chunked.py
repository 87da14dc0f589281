"""Chunked SSD in pure torch (the ``"torch"`` backend): any device, autograd throughout.

The sequence is cut into chunks of ``L``. Inside a chunk the output is the quadratic form
``(C B^T o exp(segsum(dA))) (dt x)``; across chunks it flows through the ``(P, N)`` states,
passed from chunk to chunk by a short recurrence. Decay products are segment sums of
``dA = dt A`` (masked cumulative sums), never differences of long cumulative sums.
"""

from __future__ import annotations

import torch

__all__ = ["ssd_chunked", "segsum"]


def segsum(x: torch.Tensor) -> torch.Tensor:
    """``out[..., i, j] = sum_{k=j+1..i} x[..., k]`` for ``i >= j``, ``-inf`` above (stable)."""
    L = x.shape[-1]
    rep = x[..., None, :].expand(*x.shape[:-1], L, L)  # rep[..., i, k] = x[k]
    strictly_lower = torch.ones(L, L, dtype=torch.bool, device=x.device).tril(-1)
    # rep[..., i, k] for k in (j, i]: cumulative along the row index of the transposed view
    sums = torch.cumsum(rep.transpose(-1, -2).masked_fill(~strictly_lower, 0), dim=-2)
    lower = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
    return sums.masked_fill(~lower, float("-inf"))


def _chunks(t: torch.Tensor, L: int, *, edge: bool = False) -> torch.Tensor:
    """``(b, l, ...) -> (b, c, L, ...)``, padded at the end with zeros (or the last value)."""
    pad = (-t.shape[1]) % L
    if pad:
        fill = t[:, -1:].expand(t.shape[0], pad, *t.shape[2:]) if edge else t.new_zeros(t.shape[0], pad, *t.shape[2:])
        t = torch.cat([t, fill], dim=1)
    return t.reshape(t.shape[0], -1, L, *t.shape[2:])


def ssd_chunked(x, dt, A, B, C, chunk_size: int = 64, *, initial_states=None, seq_idx=None, dA=None):
    """Chunked SSD on processed ``dt``; same contract as :func:`structmat.ssd.naive.ssd_sequential`.

    ``dA`` (``(b, l, h)``, optional) gives the log decays directly (``-inf`` allowed) instead of
    ``dt A``; ``dt`` then only scales the inputs. Computes in float32 (float64 stays float64), or
    complex when an input is complex. Returns ``(y, final_states, chunk_states)`` where
    ``chunk_states[:, c]`` is the state entering chunk ``c``, shape ``(b, c, h, p, n)``.
    """
    b, l, h, p = x.shape
    g = B.shape[2]
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    for t in (x, B, C):
        work = torch.promote_types(work, t.dtype) if t.dtype.is_complex else work
    x, B, C = (t.to(work) for t in (x, B, C))
    real = work.to_real() if work.is_complex else work
    dt, A = dt.to(real), A.to(real)
    L = chunk_size
    Bh = _chunks(B.repeat_interleave(h // g, dim=2), L)  # (b, c, L, h, n)
    Ch = _chunks(C.repeat_interleave(h // g, dim=2), L)
    xc = _chunks(x, L)  # (b, c, L, h, p)
    dtc = _chunks(dt, L)  # (b, c, L, h)
    dA = (dtc * A if dA is None else _chunks(dA.to(real), L)).permute(0, 3, 1, 2)  # (b, h, c, L)
    seg = segsum(dA)  # (b, h, c, L, L)
    if seq_idx is not None:
        # ids must be non-decreasing along l; padded steps continue the last sequence (dt = 0 there)
        sidx = _chunks(seq_idx, L, edge=True)  # (b, c, L)
        same = sidx[:, None, :, :, None] == sidx[:, None, :, None, :]
        seg = seg.masked_fill(~same, float("-inf"))
    decay = torch.exp(seg)
    w = lambda t: t.to(work)  # noqa: E731  (einsum wants one dtype; complex inputs make it complex)
    # pairwise contractions in a fixed order: a many-operand einsum may broadcast C against B
    # before contracting n, an (L x L x N) intermediate per chunk
    dt_s = dtc.permute(0, 3, 1, 2)[..., None, :]  # (b, h, c, 1, L): dt of the source step
    scores = torch.einsum("bclhn,bcshn->bhcls", Ch, Bh) * w(decay * dt_s)
    y_intra = torch.einsum("bhcls,bcshp->bclhp", scores, xc)

    to_end = decay[..., -1, :]  # (b, h, c, L): products from s+1 to the chunk end
    weighted = xc * w(to_end * dtc.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)[..., None]  # (b, c, L, h, p)
    chunk_states = torch.einsum("bcshn,bcshp->bchpn", Bh, weighted)
    from_start = torch.exp(torch.cumsum(dA, dim=-1))  # (b, h, c, L): products over [start, i]
    chunk_decay = from_start[..., -1]  # (b, h, c)
    if seq_idx is not None:
        # the state entering chunk c holds the sequence of the step before it (chunk 0: of step 0)
        prev_end = torch.cat([sidx[:, :1, :1], sidx[:, :-1, -1:]], dim=1)
        from_start = from_start * (sidx == prev_end)[:, None].to(real)
        chunk_decay = from_start[..., -1]
        survives = (sidx[:, :, -1:] == sidx)[:, None].to(real)
        weighted = xc * w(to_end * survives * dtc.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)[..., None]
        chunk_states = torch.einsum("bcshn,bcshp->bchpn", Bh, weighted)

    state = x.new_zeros(b, h, p, B.shape[-1]) if initial_states is None else initial_states.to(work)
    entering = []
    for c in range(xc.shape[1]):
        entering.append(state)
        state = chunk_decay[:, :, c, None, None] * state + chunk_states[:, c]
    entering = torch.stack(entering, dim=1)  # (b, c, h, p, n)
    y_inter = torch.einsum("bclhn,bchpn->bclhp", Ch, entering) * w(from_start).permute(0, 2, 3, 1)[..., None]
    y = (y_intra + y_inter).reshape(b, -1, h, p)[:, :l]
    return y, state, entering
