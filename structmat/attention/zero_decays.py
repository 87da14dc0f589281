"""Exact decay gradients at ``a_t = 0`` for SMA with a 1-SS (or LION) mask built from its decays.

Every order forms products of decays in log space (segment sums, the chunked primitive, its Triton
kernels); at ``log a_t = -inf`` the derivative ``d/da_t prod a`` (the product of the other factors)
is gone from the graph, and autograd gives 0. The output is affine in each ``a_t``, so

    dY/da_t = Y(a with a_t := 1) - Y(a),

non-zero only from ``t`` to the next zero decay and fed only by the steps since the previous one: two
short re-runs of SMA on that window (``a_t := 1`` and as it is). :func:`zero_decay_terms` returns
``sum_t a_t dY/da_t`` over the zero decays, exactly zero in value, whose gradient with respect to each
``a_t`` is the exact derivative (first order: the re-runs carry no graph).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from structmat.attention.heads import mask_as_bh
from structmat.core.validation import finite_checks_enabled, trusted_parameters
from structmat.matrices.one_ss import OneSS

__all__ = ["zero_decay_terms", "zero_decays_apply"]


def _parts(mask) -> tuple:
    """The 1-SS masks with differentiated decays whose outputs add up to the mask's (off its diagonal)."""
    if isinstance(mask, OneSS):
        parts = (mask,)
    else:  # a LION mask keeps its two 1-SS halves beside the generic quasiseparable form
        parts = getattr(mask, "decay_parts", None) or ()
    return tuple(p for p in parts if p.decays is not None and p.decays.requires_grad)


def zero_decays_apply(mask) -> bool:
    """Whether :func:`zero_decay_terms` may add anything: a 1-SS (or LION) mask with differentiated decays."""
    # finding the zeros reads the decays on the host: not while tracing (torch.compile) nor where checks are off
    return bool(_parts(mask)) and torch.is_grad_enabled() and finite_checks_enabled()


def _window(M: OneSS, row: tuple[int, int], start: int, stop: int, t: int | None) -> OneSS:
    """Rows/columns ``[start, stop)`` of the mask's batch entry ``row``, with ``a_t := 1`` unless ``t`` is None."""
    bh, T = M.batch_shape, M.shape[-1]
    pick = lambda x: None if x is None else x.detach().expand(*bh, T)[row][start:stop]  # noqa: E731
    log_a = pick(M.log_a).clone()
    if t is not None:
        log_a[t - start] = 0.0
    with trusted_parameters():
        return OneSS(log_a[None, None], b=None if M.b is None else pick(M.b)[None, None],
                     c=None if M.c is None else pick(M.c)[None, None])


def zero_decay_terms(q, k, v, mask, run: Callable) -> torch.Tensor | None:
    """``sum_{t: a_t = 0} a_t dY/da_t`` (see the module docstring) for ``Y = sma(q, k, v, mask)`` with ``q, k, v``
    of ``H`` heads; ``run(q, k, v, mask)`` is SMA with the same scale. None where nothing applies."""
    if not zero_decays_apply(mask):
        return None
    terms = [t for t in (_one_ss_terms(q, k, v, part, run) for part in _parts(mask)) if t is not None]
    return sum(terms) if terms else None


def _one_ss_terms(q, k, v, mask: OneSS, run: Callable) -> torch.Tensor | None:
    if not mask.lower:  # an upper mask is a lower one in reversed time
        fix = _one_ss_terms(*(x.flip(1) for x in (q, k, v)), mask.reverse(), run)
        return None if fix is None else fix.flip(1)
    M = mask_as_bh(mask, q.shape[0], q.shape[2])
    bh, T = M.batch_shape, M.shape[-1]
    a = M.decays.expand(*bh, T)
    found = (a.detach()[..., 1:] == 0).nonzero().tolist()  # a[..., 0] enters no entry
    if not found:
        return None
    cuts = {}
    for b, h, t in found:
        cuts.setdefault((b, h), []).append(t + 1)
    fix = None
    for (b, h), zeros in cuts.items():
        bs, hs = (slice(None) if bh[0] == 1 else slice(b, b + 1)), (slice(None) if bh[1] == 1 else slice(h, h + 1))
        for i, t in enumerate(zeros):
            start, stop = (zeros[i - 1] if i else 0), (zeros[i + 1] if i + 1 < len(zeros) else T)
            with torch.no_grad():
                part = [x.detach()[bs, start:stop][:, :, hs] for x in (q, k, v)]
                dy = run(*part, _window(M, (b, h), start, stop, t)) - run(*part, _window(M, (b, h), start, stop, None))
            fix = torch.zeros(q.shape[:3] + v.shape[3:], dtype=dy.dtype, device=dy.device) if fix is None else fix
            fix[bs, t:stop, hs] = fix[bs, t:stop, hs] + a[b, h, t] * dy[:, t - start:]
    return fix
