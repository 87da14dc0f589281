"""Sums and products of quasiseparable matrices whose four sides are 1-SS decays, in few array operations.

The LION masks and every ``Quasiseparable.bidirectional`` of two ``OneSS`` (``Quasiseparable.lion``, ``lion_decay``)
have on each side an order-1 SSS with log decays: ``M[i, j] = c_i (a_{j+1} ... a_i) b_j`` below the diagonal and the
same form of the transpose above. For these the closure formulas of :mod:`structmat.algebra.quasiseparable` reduce
to scalars per step, and the lower part of a product and (the transpose of) its upper part are one computation on
tensors with a leading axis of two, ``[lower, upper]``: ``(M1 M2)^T = M2^T M1^T`` swaps the roles of the operands'
sides. A closure operation on small matrices costs its number of tensor operations (several microseconds each, on
tensors of ``T`` entries), so each step below serves both parts.

Notation: ``1``, ``2`` the operands; ``l``, ``u`` their lower and upper sides (the upper one by the generators of its
transpose); ``a`` decays, ``b`` input maps, ``c`` output maps, ``d`` diagonals. The cross terms ``L1 U2`` and
``U1 L2`` meet the pairs of decays ``f = a1l a2u`` and ``g = a2l a1u``, through ``F[i, k] = f_{k+1} ... f_i`` and
``G[i, k] = g_{k+1} ... g_i`` for ``k < i`` (0 elsewhere):

* pair states ``z = F (b1l b2u)`` and ``v = G^T (c1u c2l)``;
* lower part, order 2: ``A = [[a1l, a2l b1l c2l], [0, a2l]]``, ``B = [b1l d2 + c2u z, b2l]``,
  ``C = [c1l, (d1 - c1l b1l) c2l + b1u v]``;
* upper part: the same with ``(1l, 2l, 1u, 2u, d1, d2)`` replaced by ``(2u, 1u, 2l, 1l, d2, d1)`` (``z`` and ``v``
  stay): ``A = [[a2u, a1u b2u c1u], [0, a1u]]``, ``B = [b2u d1 + c1l z, b1u]``, ``C = [c2u, (d2 - c2u b2u) c1u + b2l v]``;
* diagonal ``d1 d2 + c1l c2u z + b1u b2l v``.

A sum is the blocks side by side: decays ``[a1l, a2l]`` and maps ``[b1l, b2l]``, ``[c1l, c2l]`` (and the same above).
A product runs in one compiled call for real dtypes where no gradient is wanted on the CPU, else in numpy there (its
pair states by LAPACK), else in torch (:func:`decay_matmul`).
"""

from __future__ import annotations

import numpy as np
import scipy.linalg.lapack
import torch

from structmat.algebra.quasiseparable_decay_compiled import compiled_decay_product
from structmat.algebra.semiseparable import batch_of, fit
from structmat.core.host import host, host_steps_apply
from structmat.core.transitions import Transitions
from structmat.linalg.first_order import first_order_scan
from structmat.linalg.segsum import decay_products
from structmat.matrices.quasiseparable import Quasiseparable
from structmat.matrices.sss import SSS

__all__ = ["PAIRS_DENSE_MAX_ENTRIES", "Sides", "decay_sides", "decay_add", "decay_matmul"]

#: Most entries (``T x T`` times the batch) of the segment products from which the torch path takes the pair states
#: (a few tensor operations, ``O(T^2)`` per row) rather than from first-order scans (``O(T)``, about 0.5 ms of fixed
#: cost for the two). Measured (one thread, float32, fresh operands; products against scans, whole product, ms):
#: unbatched 0.83 / 1.19 at T = 64, 1.12 / 1.21 at T = 128, 1.85 / 1.25 at T = 192; 8 rows 1.00 / 1.36 at T = 32,
#: 1.61 / 1.44 at T = 64.
PAIRS_DENSE_MAX_ENTRIES = 128 * 128


Sides = list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]


def decay_sides(M1: Quasiseparable, M2: Quasiseparable) -> Sides | None:
    """``(log decays (*, T), b, c (*, T, 1))`` of the sides ``1l, 1u, 2l, 2u`` where every side of both operands is an
    order-1 SSS with log decays whose decays are not differentiated, else None (those go through the generic rules,
    which carry them). As stored: their batch sizes may still differ (:func:`_at_batch`)."""
    grad = torch.is_grad_enabled()  # (asked once, not per side)
    sides = []
    for P in (M1.lower_part, M1.upper_part, M2.lower_part, M2.upper_part):
        A = P.transitions
        if A.kind != "log" or P.B.shape[-1] != 1 or (grad and A.decays is not None and A.decays.requires_grad):
            return None
        sides.append((A.values, P.B, P.C))
    return sides


def _at_batch(sides: Sides, batch, T: int) -> Sides:
    """``sides`` expanded to the common ``batch`` (for operands whose parameters' batch sizes differ)."""
    full, maps = (*batch, T), (*batch, T, 1)
    return [(fit(A, *full), fit(B, *maps), fit(C, *maps)) for A, B, C in sides]


def _result(lower: tuple, upper: tuple, zeros: torch.Tensor, diag: torch.Tensor, batch) -> Quasiseparable:
    """The quasiseparable matrix of strict parts with transitions, input and output maps ``lower`` and ``upper`` (one
    dtype, at the batch) and diagonal ``diag``, unchecked (each check or intermediate object costs a noticeable part of
    these operations)."""
    T = diag.shape[-1]
    zeros = zeros if zeros.shape == lower[1].shape[:-1] else zeros.expand(lower[1].shape[:-1])
    shape, dtype, device = torch.Size((*batch, T, T)), diag.dtype, diag.device
    return Quasiseparable._of(SSS._of_one_dtype(*lower, zeros, True, shape, dtype, device),
                              SSS._of_one_dtype(*upper, zeros, False, shape, dtype, device), diag, batch)


def decay_add(M1: Quasiseparable, M2: Quasiseparable, sides: Sides) -> Quasiseparable:
    """``M1 + M2`` for operands with 1-SS sides (:func:`decay_sides`): on each side the decays side by side as
    diagonal transitions ``[a1, a2]`` and the maps ``[b1, b2]``, ``[c1, c2]``; orders ``(2, 2)``. Six tensor
    operations and the objects (measured, one thread, T = 16, fresh operands, with :func:`decay_sides`: 38 us, where
    the generic sum :func:`~structmat.algebra.quasiseparable.qs_add` took 122 us, and this one 45-50 us while it
    checked the sides' shapes and built ``Generators`` and checked parts)."""
    batch = batch_of(M1, M2)
    try:  # both sides in one tensor per generator (each operation costs more than the T entries it moves)
        a, maps = _stacked(sides)
    except RuntimeError:  # batch sizes still to broadcast (checked only here: a shape's check costs as much as a join)
        a, maps = _stacked(_at_batch(sides, batch, M1.shape[-1]))
    # each side a view, made in one call (two slices cost twice as much); the maps' by ``unsafe_chunk`` (a fifth less
    # than ``chunk``, whose views autograd guards against in-place changes: ``cat`` saves nothing they could corrupt;
    # ``exp_`` saves its result, so the decays' views stay guarded)
    a = a.exp_() if a.dtype == maps.dtype else a.exp_().to(maps.dtype)  # (complex maps: diagonal transitions of theirs)
    a_lower, a_upper = a.chunk(2, -1)
    b_lower, b_upper, c_lower, c_upper = maps.unsafe_chunk(4, -1)
    lower, upper = (Transitions(a_lower, "diag"), b_lower, c_lower), (Transitions(a_upper, "diag"), b_upper, c_upper)
    return _result(lower, upper, M1.lower_part.D, M1.diag + M2.diag, batch)


def _stacked(sides: Sides) -> tuple[torch.Tensor, torch.Tensor]:
    """The log decays ``[l1, l2, u1, u2]`` stacked last, and the maps ``[b1l, b2l, b1u, b2u, c1l, c2l, c1u, c2u]``."""
    (l1, b1l, c1l), (m1, b1u, c1u), (l2, b2l, c2l), (m2, b2u, c2u) = sides
    return torch.stack([l1, l2, m1, m2], -1), torch.cat([b1l, b2l, b1u, b2u, c1l, c2l, c1u, c2u], -1)


def _host_pair_states(fg: np.ndarray, u: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``z = F u`` and ``v = G^T y`` (module docstring) in numpy for the log decays ``fg = [f, g] (2, R, T)`` and
    ``u, y (R, T)``: the first-order recurrence ``h = (I - S diag(f))^{-1} u`` and the transposed one of ``g`` by
    LAPACK ``dtbtrs``, row by row in float64 as :mod:`structmat.linalg.iir` runs them, each read one step off
    (``f_i h_{i-1}``, never ``h_i - u_i``, which cancels under strong decays). Complex maps: their real and imaginary
    parts as two columns."""
    R, T = u.shape
    a = np.exp(fg.astype(np.float64, copy=False))
    # per row the transpose of LAPACK's band storage of the unit bidiagonal I - S diag(a): dtbtrs reads only the
    # subdiagonal (diag="U": the ones are implied, the last column's slot below the band is outside the matrix)
    band = np.empty((2, R, T, 2))
    np.negative(a[..., 1:], out=band[..., :-1, 1])
    complex_maps = np.iscomplexobj(u)
    h = np.empty((2, R, 1 + complex_maps, T))  # (solved in place: h[., r].T is Fortran-ordered)
    h[0, :, 0], h[1, :, 0] = u.real, y.real
    if complex_maps:
        h[0, :, 1], h[1, :, 1] = u.imag, y.imag
    for r in range(R):
        scipy.linalg.lapack.dtbtrs(band[0, r].T, h[0, r].T, uplo="L", trans="N", diag="U", overwrite_b=1)
        scipy.linalg.lapack.dtbtrs(band[1, r].T, h[1, r].T, uplo="L", trans="T", diag="U", overwrite_b=1)
    zv = np.zeros_like(h)
    zv[0, ..., 1:] = a[0, :, None, 1:] * h[0, ..., :-1]
    zv[1, ..., :-1] = a[1, :, None, 1:] * h[1, ..., 1:]
    zv = (zv[:, :, 0] + 1j * zv[:, :, 1] if complex_maps else zv[:, :, 0]).astype(u.dtype, copy=False)
    return zv[0], zv[1]


def _pair_states(fg: torch.Tensor, u: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``z = F u`` and ``v = G^T y`` in torch for ``fg = [f, g] (2, *, T)``: from the segment products up to
    :data:`PAIRS_DENSE_MAX_ENTRIES`, else from first-order scans read one step off (``f_i h_{i-1}``, never
    ``h_i - u_i``, which cancels under strong decays)."""
    f, g = fg.unbind(0)
    if u.numel() * u.shape[-1] <= PAIRS_DENSE_MAX_ENTRIES:
        P = decay_products(fg).tril(-1).to(u.dtype)
        return (P[0] @ u[..., None])[..., 0], (y[..., None, :] @ P[1])[..., 0, :]
    pad = torch.nn.functional.pad
    h = first_order_scan(f, u[..., None])[..., :-1, 0]
    k = first_order_scan(g, y[..., None], transpose=True)[..., 1:, 0]
    return pad(torch.exp(f[..., 1:]).to(u.dtype) * h, (1, 0)), pad(torch.exp(g[..., 1:]).to(y.dtype) * k, (0, 1))


def _product_generators(rows, a, z, v, empty) -> tuple:
    """The stacked ``[lower, upper]`` generators of the product (module docstring), written into ``empty(shape)`` (a
    torch or numpy array): ``A (2, *, T, 2, 2)``, ``B, C (2, *, T, 2)`` and the diagonal ``(*, T)``. ``rows``: the
    pairs ``[lower, upper]`` of each part's first and second factor's maps and diagonals, and the maps the cross
    terms bring (``[c2u, c1l]``, ``[b1u, b2l]``); ``a = [[a1l, a2u], [a2l, a1u]]``."""
    fb, fc, sb, sc, fd, sd, cz, bv = rows
    fa, sa = a
    A, B, C = empty(tuple(fb.shape) + (2, 2)), empty(tuple(fb.shape) + (2,)), empty(tuple(fb.shape) + (2,))
    A[..., 0, 0], A[..., 0, 1], A[..., 1, 0], A[..., 1, 1] = fa, sa * fb * sc, 0, sa
    B[..., 0], B[..., 1] = fb * sd + cz * z, sb
    C[..., 0], C[..., 1] = fc, (fd - fc * fb) * sc + bv * v
    return A, B, C, fd[0] * fd[1] + fc[0] * fc[1] * z + sb[0] * sb[1] * v


def decay_matmul(M1: Quasiseparable, M2: Quasiseparable, sides: Sides) -> Quasiseparable:
    """``M1 @ M2`` for operands with 1-SS sides (:func:`decay_sides`): orders ``(2, 2)`` (module docstring).

    Real float32 and float64 on the CPU where no gradient is wanted: one compiled call
    (:mod:`~structmat.algebra.quasiseparable_decay_compiled`). Else (complex maps, or an installation without a C
    compiler) on the CPU where no gradient is wanted (:func:`~structmat.core.host.host_steps_apply`) the arithmetic
    runs in numpy, the pair states by LAPACK (:func:`_host_pair_states`): some forty operations on arrays
    of ``T`` entries cost 4-10 us each in torch, 1-5 us in numpy. Measured (one thread, float32, fresh operands, the
    whole product in ms, numpy against torch): 0.35 / 0.71 at T = 16, 0.37 / 0.91 at T = 64, 0.38 / 1.33 at
    T = 256; with a batch of 64 rows 0.92 / 1.34, 1.21 / 2.40, 2.46 / 3.93; of 1024 rows at T = 16, 9.5 / 11.8.
    Else torch (:func:`_pair_states`); both write the generators by :func:`_product_generators`."""
    batch = batch_of(M1, M2)
    T = M1.shape[-1]
    full, maps = (*batch, T), (*batch, T, 1)
    if any(A.shape != full or B.shape != maps or C.shape != maps for A, B, C in sides):
        sides = _at_batch(sides, batch, T)
    d1, d2 = fit(M1.diag, *batch, T), fit(M2.diag, *batch, T)
    if (compiled := compiled_decay_product(sides, d1, d2, batch, T)) is not None:
        A_lower, A_upper, B_lower, B_upper, C_lower, C_upper, diag = compiled
        return _result((Transitions(A_lower, "dense"), B_lower, C_lower), (Transitions(A_upper, "dense"), B_upper, C_upper),
                       M1.lower_part.D, diag, batch)
    (l1, b1l, c1l), (m1, b1u, c1u), (l2, b2l, c2l), (m2, b2u, c2u) = sides
    # [lower, upper] pairs: the first and the second factor's input and output maps, then their diagonals
    maps = torch.stack([b1l, b2u, c1l, c2u, b2l, b1u, c2l, c1u])
    d = torch.stack([d1, d2])
    logs = torch.stack([l1, m2, l2, m1])  # [a1l, a2u], [a2l, a1u] as logs
    shape = (2, 2, *batch, T)
    if host_steps_apply(maps, d, logs):
        R = batch.numel()
        m, d, logs = host(maps).reshape((4,) + shape[1:]), host(d), host(logs).reshape(shape)
        fb, fc, sb, sc = m
        z, v = _host_pair_states(logs.sum(1).reshape(2, R, T), (fb[0] * fb[1]).reshape(R, T), (sc[0] * sc[1]).reshape(R, T))
        z, v = z.reshape(shape[2:]), v.reshape(shape[2:])
        rows = (fb, fc, sb, sc, d, d[::-1], fc[::-1], sb[::-1])
        a = np.exp(logs.astype(np.float64, copy=False)).astype(logs.dtype, copy=False)  # (float32's exp: off by an ulp)
        A, B, C, diag = _product_generators(rows, a, z, v, lambda s: np.empty(s, m.dtype))
        A, B, C = ((torch.from_numpy(x[0]), torch.from_numpy(x[1])) for x in (A, B, C))
        diag = torch.from_numpy(diag)
    else:
        fb, fc, sb, sc = maps[..., 0].unflatten(0, (4, 2))
        z, v = _pair_states(logs.unflatten(0, (2, 2)).sum(1), fb[0] * fb[1], sc[0] * sc[1])
        rows = (fb, fc, sb, sc, d, d.flip(0), fc.flip(0), sb.flip(0))
        A, B, C, diag = _product_generators(rows, torch.exp(logs.unflatten(0, (2, 2))), z, v,
                                            lambda s: maps.new_empty(s))
        A, B, C = A.unbind(0), B.unbind(0), C.unbind(0)
    lower, upper = (Transitions(A[0], "dense"), B[0], C[0]), (Transitions(A[1], "dense"), B[1], C[1])
    return _result(lower, upper, M1.lower_part.D, diag, batch)
