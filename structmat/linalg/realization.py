"""Minimal realizations of lower SSS generators (what ``compress`` computes).

Two sweeps of the same step: a forward *reachability* sweep keeps, at each ``t``, an orthonormal
basis ``V_t`` of the reachable states (the range of the reachability Gramian) and projects the state onto it
(``A'_t = V_t^H A_t V_{t-1}``, ``B'_t = V_t^H B_t``, ``C'_t = V_t^T C_t``); the *observability*
sweep is the reachability sweep of the flipped transpose ``J M^T J``, flipped back. The bases carry
their weights (square roots of the Gramians), so directions are dropped by their actual size, not by their size
after renormalisation; the observability sweep also measures them against the unreduced states' weights at the same
step, so a part that cancels (``S - S``) drops to order 0. Exact up to the weights dropped below ``tol``. Cost
``O(T N^3)``: the square roots of every step's Gramian by a blocked scan (:mod:`structmat.linalg.gramian_factors`),
then one batched SVD per sweep.
"""

from __future__ import annotations

import torch

from structmat.core.transitions import Transitions
from structmat.core.validation import check_tolerance
from structmat.linalg.gramian_factors import reachability_factors
from structmat.linalg.semiseparable import Generators

__all__ = ["minimal_realization"]


def _reachability_sweep(A: torch.Tensor, B: torch.Tensor, C: torch.Tensor, tol: float, floor: torch.Tensor | None = None):
    """One sweep on dense ``A (*, T, N, N)``; returns the reduced ``(A', B', C')`` padded to the largest rank.

    The basis ``V_t`` of each step is that of the square root ``S_t`` of the reachability Gramian
    (:func:`~structmat.linalg.gramian_factors.reachability_factors`, all steps at once): a direction is kept while its
    weight (singular value of ``S_t``) is above ``tol`` times the largest, so rounding noise stays at its own small
    weight even where an unstable ``A`` amplifies every direction; and, with ``floor (*, T)``, above ``tol`` times
    ``floor``: the largest weight of the same step before an earlier sweep reduced the states, which sees a part that
    the reduction left as rounding noise at every step (``S - S``). Each step keeps the largest rank over the batch;
    the columns beyond it are zeros."""
    T = B.shape[-2]
    U, s, _ = torch.linalg.svd(reachability_factors(A, B[..., None]))  # one batched SVD of every step's factor
    scale = s[..., :1] if floor is None else torch.maximum(s[..., :1], floor[..., None])
    kept = (s > tol * scale.clamp_min(torch.finfo(s.dtype).tiny)).sum(-1)
    ranks = kept.reshape(-1, T).amax(0)  # (T,)
    r_max = int(ranks.max()) if T else 0
    Vs = U[..., :r_max] * (torch.arange(r_max, device=U.device) < ranks[:, None])[:, None, :]  # (*, T, N, r)
    V_prev = torch.cat([torch.zeros_like(Vs[..., :1, :, :]), Vs[..., :-1, :, :]], dim=-3)
    return Vs.mH @ A @ V_prev, (Vs.mH @ B[..., None])[..., 0], (Vs.mT @ C[..., None])[..., 0]


class _NotDifferentiable(torch.autograd.Function):
    @staticmethod
    def forward(ctx, value, *inputs):
        return value.clone()

    @staticmethod
    def backward(ctx, *_):
        raise RuntimeError("compress() is not differentiable: the states it keeps are chosen by ranks, which change "
                           "under a perturbation of the parameters (its factorizations' derivatives are NaN there); "
                           "differentiate the uncompressed matrix, or compress a detached copy")


def _differentiated(G: Generators) -> list[torch.Tensor]:
    """The parameters of ``G`` a backward pass would differentiate here and now."""
    wanted = torch.is_grad_enabled()
    return [t for t in (G.A.values, G.A.decays, G.B, G.C) if wanted and t is not None and t.requires_grad]


def _not_differentiable(R: Generators, inputs: list[torch.Tensor]) -> Generators:
    """``R`` (computed without a graph) whose strict part (or diagonal, at order 0) raises when a backward pass reaches
    it from ``inputs``: a silent NaN or zero gradient otherwise."""
    if R.order > 0:
        return Generators(R.A, _NotDifferentiable.apply(R.B, *inputs), R.C, R.D)
    D = R.diagonal() if R.D is None else R.D
    return Generators(R.A, R.B, R.C, _NotDifferentiable.apply(D, *inputs))


def _read_outputs(A: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """``C_t`` without its part that ``A_t`` annihilates exactly (singular values that are zero: a zero decay, a zero
    transition): the strict part reads ``C_t`` only through ``A_t^T C_t``, so those directions are no state to keep
    (a part whose transitions are zero has order 0). Exact zeros only: a small singular value can carry a large entry
    through large maps, which no threshold on ``A`` alone can tell; ``C`` as it is where no step has one."""
    U, s, _ = torch.linalg.svd(A)
    zero = s == 0
    if not bool(zero.any()):
        return C
    U = U * (~zero)[..., None, :].to(U.dtype)
    return (U.conj() @ (U.mT @ C[..., None]))[..., 0]  # (A^T reads C: the projection fixing A^T is conj(U) U^T)


def _largest_weights(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """The largest singular value of each step's reachability factor ``(*, T)``."""
    return torch.linalg.matrix_norm(reachability_factors(A, B[..., None]), ord=2)


#: Dtypes whose realization is reduced in double precision and rounded back: each step's transformation rounds once and
#: ``T`` of them compound (float32, ``OneSS + OneSS`` of decays ``1 - 1e-7`` compressed: 6e-5 off at ``T = 2000``,
#: 3e-3 at ``T = 1e5``, against 1e-7 uncompressed).
_WIDER = {torch.float16: torch.float64, torch.bfloat16: torch.float64, torch.float32: torch.float64,
          torch.complex32: torch.complex128, torch.complex64: torch.complex128}


def _cast(G: Generators, dtype: torch.dtype) -> Generators:
    return Generators(G.A.cast(dtype), G.B.to(dtype), G.C.to(dtype), None if G.D is None else G.D.to(dtype))


def minimal_realization(G: Generators, tol: float | None = None) -> Generators:
    """Generators equal to ``G`` (to ``tol``) whose order is minimal in the SSS convention.

    Parameters
    ----------
    G : Generators
    tol : float, optional
        Relative singular-value cutoff at each step, in ``[0, 1)``; default ``100 N eps``.

    Examples
    --------
    >>> import torch
    >>> T = 30
    >>> a = Transitions(torch.rand(T, 2, dtype=torch.float64), "diag")
    >>> b = torch.ones(T, 2, dtype=torch.float64)
    >>> minimal_realization(Generators(a, b, b)).order  # two states, both needed
    2
    """
    tol = check_tolerance(tol, below=1.0)
    if G.length == 0 or G.order == 0 or G.B.numel() == 0:
        return G
    if inputs := _differentiated(G):
        with torch.no_grad():
            R = minimal_realization(G, tol)
        return _not_differentiable(R, inputs)
    dtype = G.B.dtype
    if tol is None:
        tol = 100 * max(G.order, 2) * torch.finfo(dtype).eps
    if (wide := _WIDER.get(dtype)) is not None:  # the sweeps' rounding compounds over T steps: in double precision
        R = minimal_realization(_cast(G, wide), tol)
        return _cast(R, dtype)
    batch = G.batch_shape
    A = G.A.matrices(G.order, dtype).expand(*batch, G.length, G.order, G.order)
    B, C = G.B.expand(*batch, *G.B.shape[-2:]), G.C.expand(*batch, *G.C.shape[-2:])
    strict = G.D is not None  # an explicit diagonal: the outputs read C_t only through A_t^T C_t
    if strict:
        C = _read_outputs(A, C)
    original = Generators(Transitions(A, "dense"), B, C).flipped()
    floors = (None, _largest_weights(original.A.values, original.B))  # the observability of the unreduced states
    for floor in floors:  # reachability, then reachability of the flipped transpose (observability)
        A, B, C = _reachability_sweep(A, B, C, tol, floor)
        if strict and floor is None:
            C = _read_outputs(A, C)  # (in the reduced states: the range of A_t they reach)
        flipped = Generators(Transitions(A, "dense"), B, C).flipped()
        A, B, C = flipped.A.values, flipped.B, flipped.C
    transitions = Transitions(A[..., 0, 0], "scalar") if A.shape[-1] == 1 else Transitions(A, "dense")
    return Generators(transitions, B, C, G.D)
