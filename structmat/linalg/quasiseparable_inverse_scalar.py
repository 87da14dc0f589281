"""The two recurrences of the host inverse (:mod:`structmat.linalg.quasiseparable_inverse_host`) for sides of order 1
(the LION and bidirectional masks), as log-depth scans instead of one Python step per row.

With scalar generators the LU recurrence of :mod:`structmat.linalg.quasiseparable_lu` keeps one number ``f`` between
steps, and its step (the bordered product ``Y_k = left_k F right_k - corner_k`` and the elimination of ``Y_k``'s last
row and column) is a Moebius map: its quadratic terms cancel, and with ``p = a c``, ``h = a_u c_u``

    f_k = (alpha_k f_{k-1} + beta_k) / (gamma_k f_{k-1} + delta'_k),
    alpha = a (h b_u - a_u d) + b p a_u,   beta = -b b_u,   gamma = p h,   delta' = -d,   f_{-1} = 0.

So ``f_k`` is the ratio of the two entries of ``M_k ... M_0 [0, 1]^T`` (``M_k`` the map's ``2 x 2`` matrix): prefix
products, each rescaled to its largest entry (the ratio does not see the scale). From ``f_{k-1}`` every output of the
step is one expression: ``s = (a h f - b) / (p h f - d)``, ``g = b_u - p a_u f``, ``delta = d - p h f``. The backward
states ``Z_{k-1} = base_k + beta_k Z_k ell_k`` are scalars too: an affine recurrence, composed pairwise.

Both scans combine steps in another order than the row recursion; their products span at most
:data:`SCALAR_SCAN_MAX` steps, and where a pivot cancels (:data:`PIVOT_CANCELLATION`) the row recursion runs instead
(it keeps each state tied to the pivot it divides by). Measured (one thread, float32, fresh LION matrices, ``inv()``):
410-420 us at T = 16 where the row recursion took 650-700 us, 470-490 us at T = 64 where it took 1.9 ms.
"""

from __future__ import annotations

import numpy as np

__all__ = ["PIVOT_CANCELLATION", "SCALAR_SCAN_MAX", "scalar_lu", "scalar_backward_states"]

#: Largest cancellation a pivot ``delta = d - p h f`` may show (``|delta|`` against ``|d| + |p h f|``) for the scans'
#: result to stand. The recursion forms each state from the pivot it divides by; the scan forms the states by another
#: route, so where a pivot cancels, the next state's error is no longer tied to it and is amplified by the cancellation
#: (measured: a leading minor of relative size 1e-9 gave the inverse a relative error of 4e-8 through the scans and
#: 8e-12 through the recursion; at 1e-6, 1.4e-14 and 1.1e-14).
PIVOT_CANCELLATION = 1e-4

#: Longest sequence whose LU and backward states run as the scans here: the affine scan multiplies up to this many
#: closed-loop transitions unscaled (the blocked recursion never more than its chunk), and the scans' work grows as
#: ``T log T``.
SCALAR_SCAN_MAX = 64


def _moebius_ratios(M: np.ndarray) -> np.ndarray:
    """``f_k`` for the maps ``M (*, T, 2, 2)`` from ``f_{-1} = 0``: the second columns of the prefix products."""
    P = M.copy()
    T, shift = M.shape[-3], 1
    while shift < T:
        P[..., shift:, :, :] = P[..., shift:, :, :] @ P[..., :-shift, :, :]
        P /= np.abs(P).max(axis=(-2, -1), keepdims=True)  # (a zero map is a zero pivot: NaN, reported as singular)
        shift *= 2
    return P[..., 0, 1] / P[..., 1, 1]


def scalar_lu(p: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``s, g, delta`` of :func:`~structmat.linalg.quasiseparable_lu.lu_recurrence` for order-1 sides (``p`` the
    dense parts as numpy arrays: ``A (*, T, 1, 1)``, ``B, C (*, T, 1)``, ``d (*, T)``, the same for the upper side),
    ``T >= 1``; None where a pivot cancels (:data:`PIVOT_CANCELLATION`) or vanishes: the row recursion then runs (and
    names a zero minor)."""
    a, au = p["A"][..., 0, 0].copy(), p["Au"][..., 0, 0]
    a[..., 0] = 1  # (step 0's transition is unused: the state entering it is 0)
    b, c, bu, cu, d = p["B"][..., 0], p["C"][..., 0], p["Bu"][..., 0], p["Cu"][..., 0], p["d"]
    pc, h = a * c, au * cu
    maps = np.empty(d.shape + (2, 2), np.result_type(a, b, bu, d))
    maps[..., 0, 0] = a * (h * bu - au * d) + b * pc * au
    maps[..., 0, 1] = -b * bu
    maps[..., 1, 0] = pc * h
    maps[..., 1, 1] = -d
    f = np.zeros_like(maps[..., 0, 0])
    f[..., 1:] = _moebius_ratios(maps)[..., :-1]  # the state entering each step
    fed = pc * h * f
    delta = d - fed
    if not (np.abs(delta) > PIVOT_CANCELLATION * (np.abs(d) + np.abs(fed))).all():  # (NaN included)
        return None
    return ((b - a * h * f) / delta)[..., None], (bu - pc * au * f)[..., None], delta


def _affine_prefix(b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``h_j = b_j + c_j h_{j-1}`` (``h_{-1} = 0``) along the last axis: the maps ``h -> b + c h`` composed pairwise."""
    b, c = b.copy(), c.copy()
    T, shift = b.shape[-1], 1
    while shift < T:
        b[..., shift:] = b[..., shift:] + c[..., shift:] * b[..., :-shift]
        c[..., shift:] = c[..., shift:] * c[..., :-shift]
        shift *= 2
    return b


def scalar_backward_states(p: dict[str, np.ndarray], s: np.ndarray, v: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """``Z_k (*, T, 1, 1)`` of :func:`~structmat.linalg.quasiseparable_inverse._backward_states` for order-1 sides:
    ``Z_{T-1} = 0``, ``Z_{k-1} = h_k p_k / delta_k + beta_k ell_k Z_k``."""
    a, c, au, cu = p["A"][..., 1:, 0, 0], p["C"][..., 1:, 0], p["Au"][..., 1:, 0, 0], p["Cu"][..., 1:, 0]
    ell = (1 - s[..., 1:, 0] * c) * a
    beta = au * (1 - cu * v[..., 1:, 0])
    base = (au * cu) * (a * c) / delta[..., 1:]
    Z = np.zeros(delta.shape, np.result_type(base, ell, beta))
    Z[..., :-1] = _affine_prefix(base[..., ::-1], (beta * ell)[..., ::-1])[..., ::-1]
    return Z[..., None, None]
