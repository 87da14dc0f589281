"""Inverting Toeplitz matrices: the causal inverse series and the Gohberg-Semencul generators."""

from __future__ import annotations

import numpy as np
import scipy.linalg
import torch

from structmat.core.validation import SingularMatrixError
from structmat.linalg.spectral import linear_convolution

__all__ = ["causal_inverse_series", "levinson_generators", "DIRECT_INVERSE_MAX"]

#: Up to this length the causal inverse series comes from one dense triangular solve; above it,
#: Newton doubling with FFT products (``O(T log T)``) wins.
DIRECT_INVERSE_MAX = 64


def causal_inverse_series(c: torch.Tensor) -> torch.Tensor:
    """First column ``d`` of ``L(c)^{-1}`` for the lower-triangular Toeplitz ``L(c)``: the power series
    ``1 / c(z) mod z^T``.

    Newton doubling ``d <- d (2 - c d)`` with FFT products, ``O(T log T)``; one dense triangular
    solve for ``T <= DIRECT_INVERSE_MAX``. The FFT products are accurate relative to the largest
    coefficient: if ``c(z)`` has zeros inside the unit disk the series grows geometrically and its
    small leading terms lose relative accuracy (as any method in floating point would).

    Examples
    --------
    >>> causal_inverse_series(torch.tensor([1.0, -0.5, 0.0]))  # 1 / (1 - z/2)
    tensor([1.0000, 0.5000, 0.2500])
    """
    T = c.shape[-1]
    if c.numel() == 0:  # length 0 or a batch of 0: nothing to invert (and no FFT of an empty batch)
        return c.clone()
    if bool((c[..., 0] == 0).any()):
        raise SingularMatrixError("causal Toeplitz with c[0] == 0 is singular")
    if T <= DIRECT_INVERSE_MAX:
        idx = torch.arange(T, device=c.device)
        diff = idx[:, None] - idx[None, :]
        L = torch.where(diff >= 0, c[..., diff.clamp(min=0)], torch.zeros((), dtype=c.dtype, device=c.device))
        e0 = torch.zeros(T, 1, dtype=c.dtype, device=c.device)
        e0[0] = 1
        return torch.linalg.solve_triangular(L, e0.expand(*L.shape[:-1], 1), upper=False)[..., 0]
    d = 1.0 / c[..., :1]
    m = 1
    while m < T:
        m = min(2 * m, T)
        two_minus = -linear_convolution(c[..., :m], d, m)
        two_minus[..., 0] = two_minus[..., 0] + 2.0
        d = linear_convolution(d, two_minus, m)
    return d


def levinson_generators(c: torch.Tensor, r: torch.Tensor, batch) -> tuple[torch.Tensor, torch.Tensor]:
    """``x = M^{-1} e_0`` and ``y = M^{-1} e_{T-1}`` for ``M = Toeplitz(c, r)`` per batch entry
    (scipy's Levinson recursion on the CPU; not differentiated)."""
    T = c.shape[-1]
    if T == 0 or 0 in batch:
        empty = c.new_zeros(*batch, T)
        return empty, empty
    cn = c.expand(*batch, T).detach().cpu().resolve_conj().numpy().reshape(-1, T)
    rn = r.expand(*batch, T).detach().cpu().resolve_conj().numpy().reshape(-1, T)
    rhs = np.zeros((T, 2), dtype=np.result_type(cn, rn))
    rhs[0, 0] = rhs[-1, 1] = 1
    out = []
    for ci, ri in zip(cn, rn):
        try:
            out.append(scipy.linalg.solve_toeplitz((ci, ri), rhs))
        except np.linalg.LinAlgError as err:
            raise SingularMatrixError(f"Levinson recursion met a singular leading minor: {err}") from err
    sol = torch.as_tensor(np.stack(out), device=c.device).reshape(*batch, T, 2).to(c.dtype)
    return sol[..., 0], sol[..., 1]
