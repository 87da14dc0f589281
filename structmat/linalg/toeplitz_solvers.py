"""Inverting general Toeplitz matrices: the inverse from four generator vectors, with a solve that autograd
differentiates in the matrix and the right side (the causal inverse series: :mod:`structmat.linalg.causal_toeplitz`).

Notation: ``L(p)`` is the lower-triangular Toeplitz matrix with first column ``p``, ``U(q)`` the
upper-triangular one with first row ``q``, ``Z`` the down-shift, ``J`` the reversal, ``e_k`` the unit
vectors. The inverse of an invertible ``T x T`` Toeplitz matrix ``M`` has displacement rank 2, so

    M^{-1} = L(p1) U(q1) + L(p2) U(q2)                                   (*)

for four vectors, and an ``O(T log T)`` product with any right-hand side (six FFTs of length ``2T``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import scipy.linalg
import torch

from structmat.core.dtypes import compute_dtype
from structmat.core.host import host
from structmat.core.validation import SingularMatrixError, broadcast_shapes
from structmat.linalg.spectral import fft_length, toeplitz_matmat

__all__ = ["InverseGenerators", "toeplitz_inverse_generators", "toeplitz_solve", "DENSE_GENERATORS_MAX", "LEVINSON_TOL",
           "LEVINSON_RESIDUAL_TOL"]

@dataclasses.dataclass(eq=False)
class InverseGenerators:
    """The four vectors of ``M^{-1} = L(p1) U(q1) + L(p2) U(q2)``, each ``(*batch, T)``.

    ``M^{-T} = L(q1) U(p1) + L(q2) U(p2)`` (transposes swap the roles), so the transposed and
    conjugate-transposed inverses cost nothing more. :meth:`apply` is ``M^{-1} X`` for ``X (*, T, K)``
    by six FFTs of length ``2T`` (the spectra are computed once per real/complex kind).
    """

    p1: torch.Tensor
    q1: torch.Tensor
    p2: torch.Tensor
    q2: torch.Tensor

    def __post_init__(self):
        self._spectra: dict[bool, tuple[torch.Tensor, ...]] = {}
        self._adjoint: InverseGenerators | None = None

    def map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> InverseGenerators:
        """``fn`` on every vector (a cast, a move, a reshape: maps that commute with products)."""
        return InverseGenerators(fn(self.p1), fn(self.q1), fn(self.p2), fn(self.q2))

    def transposed(self) -> InverseGenerators:
        return InverseGenerators(self.q1, self.p1, self.q2, self.p2)

    def conj(self) -> InverseGenerators:
        return self.map(torch.conj)

    def adjoint(self) -> InverseGenerators:
        """The generators of ``M^{-H}`` (kept, with their spectra: every backward pass solves with them)."""
        if self._adjoint is None:
            self._adjoint = self.transposed().conj()
            self._adjoint._adjoint = self
        return self._adjoint

    def scaled(self, s) -> InverseGenerators:
        """The generators of ``s M^{-1}``."""
        return InverseGenerators(self.p1 * s, self.q1, self.p2 * s, self.q2)

    def _spectrum(self, complex_: bool) -> tuple[torch.Tensor, ...]:
        if complex_ not in self._spectra:
            n = fft_length(2 * self.p1.shape[-1] - 1)
            fft = torch.fft.fft if complex_ else torch.fft.rfft
            # U(q) x is a correlation with q: circularly, the convolution with (q_0, 0, ..., 0, q_{T-1}, ..., q_1)
            upper = [torch.roll(torch.nn.functional.pad(q.flip(-1), (0, n - q.shape[-1])), 1 - q.shape[-1], -1)
                     for q in (self.q1, self.q2)]
            self._spectra[complex_] = (fft(self.p1, n), fft(upper[0]), fft(self.p2, n), fft(upper[1]))
        return self._spectra[complex_]

    def apply(self, X: torch.Tensor) -> torch.Tensor:
        """``M^{-1} X`` for ``X (*, T, K)`` (batch shapes broadcast)."""
        T = self.p1.shape[-1]
        batch = broadcast_shapes(self.p1.shape[:-1], X.shape[:-2])
        dtype = torch.promote_types(self.p1.dtype, X.dtype)
        if T == 0 or X.shape[-1] == 0 or 0 in batch:  # torch's FFT refuses empty batches
            return X.new_zeros((*batch, T, X.shape[-1]), dtype=dtype)
        complex_ = dtype.is_complex
        n = fft_length(2 * T - 1)
        fft, ifft = (torch.fft.fft, torch.fft.ifft) if complex_ else (torch.fft.rfft, torch.fft.irfft)
        L1, U1, L2, U2 = (s[..., None, :] for s in self._spectrum(complex_))
        F = fft(X.transpose(-1, -2).to(dtype), n)
        A1, A2 = (fft(ifft(U * F, n)[..., :T], n) for U in (U1, U2))  # the upper factors, truncated to T
        return ifft(L1 * A1 + L2 * A2, n)[..., :T].transpose(-1, -2)


def _gohberg_semencul(c: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Generators ``(p1, q1, p2, q2)`` (a ``(4, T)`` array) by Levinson and the Gohberg-Semencul formula,
    ``M^{-1} = (L(x) U(J y) - L(Z y) U(Z J x)) / x_0`` with ``x = M^{-1} e_0``, ``y = M^{-1} e_{T-1}``;
    NaN where Levinson meets a zero leading minor (``x_0 = 0`` is the ``T - 1``-th: ``M[1:, 1:] = M[:-1, :-1]``)."""
    T = c.shape[-1]
    rhs = np.zeros((T, 2), dtype=np.result_type(c, r))
    rhs[0, 0] = rhs[-1, 1] = 1
    try:
        x, y = scipy.linalg.solve_toeplitz((c, r), rhs, check_finite=False).T
    except np.linalg.LinAlgError:
        return np.full((4, T), np.nan, dtype=rhs.dtype)
    if x[0] == 0:
        return np.full((4, T), np.nan, dtype=rhs.dtype)
    zy, zjx = np.r_[0, y[:-1]], np.r_[0, x[::-1][:-1]]
    return np.stack([x / x[0], y[::-1], -zy / x[0], zjx])


def _heinig_lu(c: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Generators ``(p1, q1, p2, q2)`` from a pivoted dense LU, for any invertible Toeplitz matrix.

    ``Z M - M Z = J a e_{T-1}^T - e_0 a^T`` with ``a = (r_1, ..., r_{T-1}, 0)``, so (Heinig's formula)
    ``M^{-1} = L(x) U(e_0 - Z v) + L(u) U(Z w)`` with ``x = M^{-1} e_0``, ``u = M^{-1} J a``,
    ``w = M^{-T} e_{T-1}``, ``v = M^{-T} a``: no condition on leading minors or on ``x_0``.
    ``O(T^2)`` memory and ``O(T^3)`` time; raises :class:`SingularMatrixError` for a zero pivot or a
    reciprocal condition number below the machine epsilon.
    """
    T = c.shape[-1]
    M = scipy.linalg.toeplitz(c, r)
    getrf, getrs, gecon = scipy.linalg.get_lapack_funcs(("getrf", "getrs", "gecon"), (M,))
    anorm = np.abs(M).sum(axis=0).max()
    lu, piv, info = getrf(M, overwrite_a=True)
    if info > 0:
        raise SingularMatrixError(f"Toeplitz matrix is singular: its LU factorisation has a zero pivot at step {info}")
    rcond, _ = gecon(lu, anorm)
    if not rcond >= np.finfo(lu.dtype).eps:
        raise SingularMatrixError(f"Toeplitz matrix is singular to working precision (reciprocal condition number {rcond:.1e})")
    a = np.r_[r[1:], 0].astype(lu.dtype)
    e0, e_last = np.eye(T, dtype=lu.dtype)[[0, -1]]
    xu, _ = getrs(lu, piv, np.stack([e0, a[::-1]], axis=1))
    wv, _ = getrs(lu, piv, np.stack([e_last, a], axis=1), trans=1)
    (x, u), (w, v) = xu.T, wv.T
    return np.stack([x, e0 - np.r_[0, v[:-1]], u, np.r_[0, w[:-1]]])


def _probe(c: torch.Tensor, r: torch.Tensor, gens: InverseGenerators) -> tuple[torch.Tensor, ...]:
    """Per batch entry, the backward error ``|M z' - z| / (|M| |z'| + |z|)`` of ``z' = M^{-1} z`` computed from
    ``gens`` for a fixed random probe ``z`` (NaN where ``gens`` are not finite), the condition number
    estimate ``|M| |z'| / |z|`` (max norms; ``|M|`` bounded by ``sum |c| + sum |r[1:]|``) and the forward
    residual ``|M z' - z| / |z|``."""
    T = c.shape[-1]
    z = torch.randn(T, 1, generator=torch.Generator().manual_seed(0), dtype=c.real.dtype).to(c.dtype)
    solved = gens.apply(z)
    residual = (toeplitz_matmat(c, r, solved) - z).abs().amax(dim=(-2, -1))
    norm = c.abs().sum(-1) + r[..., 1:].abs().sum(-1)
    size, z_size = solved.abs().amax(dim=(-2, -1)), z.abs().max()
    return residual / (norm * size + z_size), norm * size / z_size, residual / z_size


#: Levinson's generators are kept when the inverse they give has a backward error below this (float64):
#: Levinson is backward stable on positive definite matrices (well below it even at condition numbers of
#: 1e18) but loses digits as ``eps / delta`` near a leading minor ``delta``: above it, a pivoted LU is used.
LEVINSON_TOL = float(np.finfo(np.float64).eps) ** (2 / 3)

#: ... and where the probe's forward residual ``|M z' - z| / |z|`` is at most this over ``sqrt(T)`` (max norms). The
#: backward error divides by ``|z'|``, so an "inverse" of an exactly singular matrix (``|z'| ~ 1e15 |z|``, residual
#: ``~ 30 |z|``) passes it, and the probe's condition estimate ``|M| |z'| / |z|`` can fall short of ``1 / eps`` (it
#: did: ``1e15`` for the periodic second difference at T = 1000; ``2e7`` to ``1e13`` for circulants with a zero
#: eigenvalue). A singular ``M`` leaves the part of ``z`` along its left null vector ``u`` in any residual:
#: ``|M z' - z|_inf >= |u^T z| / sqrt(T)``, about ``|z|_inf / (4 sqrt(T))`` for the random probe (measured:
#: ``1e-2 |z|`` and more at T = 200 to 2000). Above the bound the pivoted LU decides: its ``rcond`` check raises where
#: the matrix is singular, and of an invertible one's two inverses the one with the smaller residual is kept (at
#: condition numbers of 1e13 to 1e15 Levinson's, whose residual ``6e-4 |z|`` at T = 600 passes the bound by little,
#: against the LU generators' 1e6). Below it: invertible matrices up to condition numbers of about ``1e12``
#: (measured: residuals ``2e-4 |z|`` at 4e11, ``3e-7 |z|`` at 4e9, T = 1000), Levinson's alone.
LEVINSON_RESIDUAL_TOL = 1e-2


def toeplitz_inverse_generators(c: torch.Tensor, r: torch.Tensor) -> InverseGenerators:
    """The generators (*) of ``Toeplitz(c, r)^{-1}`` for ``c, r (*batch, T)`` (``r[..., 0]`` ignored), detached,
    in the dtype of ``c``, ``r`` (float32 / complex64 for half precisions).

    Up to :data:`DENSE_GENERATORS_MAX` steps, Heinig's formula from the dense inverses (:func:`_heinig_dense`).
    Above, per batch entry, scipy's Levinson recursion (``O(T^2)``, float64 on the CPU) and the Gohberg-Semencul
    formula. Levinson needs non-zero leading principal minors (``(M^{-1})[0, 0] != 0`` is the last of them);
    where one vanishes, or the inverse fails a probe solve (backward error above :data:`LEVINSON_TOL`: a
    leading minor was nearly zero; or forward residual above :data:`LEVINSON_RESIDUAL_TOL` over ``sqrt(T)``: the matrix is
    singular or nearly so), that entry's generators come from a pivoted dense LU instead
    (:func:`_heinig_lu`: ``O(T^2)`` memory, ``O(T^3)`` time). A singular matrix (to float64 working
    precision: condition number above ``1 / eps``) raises :class:`SingularMatrixError` naming the reason.

    Examples
    --------
    >>> c = r = torch.tensor([0.0, 1.0], dtype=torch.float64)  # [[0, 1], [1, 0]]: Levinson fails at once
    >>> g = toeplitz_inverse_generators(c, r)
    >>> g.apply(torch.eye(2, dtype=torch.float64))
    tensor([[0., 1.],
            [1., 0.]], dtype=torch.float64)
    """
    T = c.shape[-1]
    batch = broadcast_shapes(c.shape[:-1], r.shape[:-1])
    dtype = torch.promote_types(c.dtype, r.dtype)
    if T == 0 or 0 in batch:
        empty = c.new_zeros(*batch, T, dtype=compute_dtype(dtype))
        return InverseGenerators(empty, empty, empty, empty)
    work = torch.complex128 if dtype.is_complex else torch.float64
    cw = c.detach().to("cpu", work).expand(*batch, T).reshape(-1, T)
    rw = torch.cat([cw[:, :1], r.detach().to("cpu", work).expand(*batch, T).reshape(-1, T)[:, 1:]], dim=-1)
    G = _heinig_dense(cw, rw) if T <= DENSE_GENERATORS_MAX else _levinson(cw, rw)
    return InverseGenerators(*G.to(c.device, compute_dtype(dtype)).reshape(4, *batch, T))


def _levinson(cw: torch.Tensor, rw: torch.Tensor) -> torch.Tensor:
    """The ``(4, n, T)`` generators of :func:`toeplitz_inverse_generators` for ``cw, rw (n, T)`` (float64 or
    complex128, on the CPU, ``rw[:, 0] = cw[:, 0]``) by Levinson, or per entry where it broke, a pivoted LU."""
    cn, rn = host(cw), host(rw)
    G = torch.from_numpy(np.stack([_gohberg_semencul(ci, ri) for ci, ri in zip(cn, rn)], axis=1))
    error, cond, residual = _probe(cw, rw, InverseGenerators(*G))
    broke = ~(error <= LEVINSON_TOL)  # NaN too
    if bool((~broke & ~(cond * np.finfo(np.float64).eps < 1)).any()):
        raise SingularMatrixError(f"Toeplitz matrix is singular to working precision (condition number estimate "
                                  f"{cond[~broke].max().item():.1e} from Levinson's inverse)")
    for i in torch.nonzero(broke).flatten().tolist():
        G[:, i] = torch.from_numpy(_heinig_lu(cn[i], rn[i]))
    # singular or ill-conditioned: the LU's rcond raises for the first; of an invertible matrix's two inverses the one
    # with the smaller residual is kept (Levinson's, by factors of 1e9 at condition numbers of 1e13 to 1e15)
    for i in torch.nonzero(~broke & ~(residual <= LEVINSON_RESIDUAL_TOL / cw.shape[-1] ** 0.5)).flatten().tolist():
        lu = torch.from_numpy(_heinig_lu(cn[i], rn[i]))
        if _probe(cw[i:i + 1], rw[i:i + 1], InverseGenerators(*lu[:, None]))[2].item() < residual[i].item():
            G[:, i] = lu
    return G


#: Up to this length the generators of a general Toeplitz inverse come from its dense inverse, all batch entries at
#: once (:func:`_heinig_dense`); above it, Levinson's ``O(T^2)`` recursion with a probe solve. Measured (float64,
#: one thread): 0.1 against 1.4 ms at T = 16, 0.8 against 1.75 ms at T = 128, 4.4 against 1.9 ms at T = 256.
DENSE_GENERATORS_MAX = 128


def _heinig_dense(cw: torch.Tensor, rw: torch.Tensor) -> torch.Tensor:
    """:func:`_levinson`'s generators from the dense inverses, Heinig's formula as in :func:`_heinig_lu` (no condition
    on leading minors). Raises :class:`SingularMatrixError` for a zero pivot or a reciprocal condition number (1-norm,
    exact) below the machine epsilon, as :func:`_heinig_lu` does.

    It inverts the Hankel matrix ``H = J M`` (a strided view of the diagonals, no gather): ``M^{-1} = H^{-1} J``, so
    ``x = M^{-1} e_0`` is the last column of ``H^{-1}``, ``u = M^{-1} J a = H^{-1} a``, ``w = M^{-T} e_{T-1}`` the
    reversed last row and ``v = M^{-T} a`` the reversed ``a^T H^{-1}``; norms are those of ``M`` and ``M^{-1}``."""
    n, T = cw.shape
    H = torch.cat([cw.flip(-1), rw[:, 1:]], -1).as_strided((n, T, T), (2 * T - 1, 1, 1))  # H[i, j] = M[T - 1 - i, j]
    inverse, info = torch.linalg.inv_ex(H)
    if bool(info.any()):
        raise SingularMatrixError(f"Toeplitz matrix is singular: its LU factorisation has a zero pivot at step {int(info.max())}")
    rcond = 1.0 / (torch.linalg.matrix_norm(H, 1) * torch.linalg.matrix_norm(inverse, 1))
    if not bool((rcond >= torch.finfo(rcond.dtype).eps).all()):  # NaN too
        raise SingularMatrixError(f"Toeplitz matrix is singular to working precision (reciprocal condition number "
                                  f"{rcond.min().item():.1e})")
    a = torch.nn.functional.pad(rw[:, 1:], (0, 1))
    rows = torch.stack([-(a[:, None, :] @ inverse)[:, 0, :], inverse[:, -1, :]])  # -v and w, reversed
    shifted = torch.cat([torch.tensor([1.0, 0.0], dtype=cw.dtype).expand(n, 2).T[..., None], rows[..., 1:].flip(-1)], -1)
    return torch.stack([inverse[:, :, -1], shifted[0], (inverse @ a[:, :, None])[:, :, 0], shifted[1]])  # e_0 - Z v, Z w


def _diagonal_sums(A: torch.Tensor, B: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sums along the diagonals of ``sum_k A[:, k] B[:, k]^H`` for ``A, B (*, T, K)``: the gradient of
    ``<G, A B^H>`` with respect to a Toeplitz matrix's first column (``i - j = k``) and first row
    (``j - i = k``; entry 0 is the diagonal, which belongs to the column). Cross-correlations by FFT,
    ``O(K T log T)``."""
    T = A.shape[-2]
    batch = broadcast_shapes(A.shape[:-2], B.shape[:-2])
    dtype = torch.promote_types(A.dtype, B.dtype)
    if T == 0 or A.shape[-1] == 0 or 0 in batch:
        zero = A.new_zeros(*batch, T, dtype=dtype)
        return zero, zero
    n = fft_length(2 * T - 1)
    fft, ifft = (torch.fft.fft, torch.fft.ifft) if dtype.is_complex else (torch.fft.rfft, torch.fft.irfft)
    FA, FB = fft(A.transpose(-1, -2), n), fft(B.transpose(-1, -2), n)
    corr = ifft((FA * FB.conj()).sum(-2), n)  # corr[k mod n] = sum_j A[j + k] conj(B[j])
    return corr[..., :T], torch.cat([torch.zeros_like(corr[..., :1]), corr[..., n - T + 1:].flip(-1)], dim=-1)


class _Solve(torch.autograd.Function):
    """``X = M^{-1} Y`` for ``M = Toeplitz(c, r)`` from precomputed generators. With ``G = dL/dX``, the
    backward solves the conjugate-transposed system ``Lam = M^{-H} G`` (the same generators, transposed)
    and, as ``dX = -M^{-1} dM X``, ``dL/dM = -Lam X^H``: its diagonal sums are the gradients in ``c``, ``r``."""

    @staticmethod
    def forward(ctx, c, r, Y, gens):
        X = gens.apply(Y)
        ctx.gens, ctx.y_shape = gens, Y.shape
        ctx.save_for_backward(c, r, X)
        return X

    @staticmethod
    def backward(ctx, G):
        c, r, X = ctx.saved_tensors
        Lam = _Solve.apply(r.conj(), c.conj(), G, ctx.gens.adjoint())  # M^H = Toeplitz(conj r, conj c)
        grad_c = grad_r = None
        if ctx.needs_input_grad[0] or ctx.needs_input_grad[1]:
            dc, dr = _diagonal_sums(Lam, X)
            grad_c, grad_r = (-dc).sum_to_size(c.shape), (-dr).sum_to_size(r.shape)
        grad_y = Lam.sum_to_size(ctx.y_shape) if ctx.needs_input_grad[2] else None
        return grad_c, grad_r, grad_y, None


def toeplitz_solve(c: torch.Tensor, r: torch.Tensor, Y: torch.Tensor, gens: InverseGenerators) -> torch.Tensor:
    """``Toeplitz(c, r)^{-1} Y`` for ``c, r (*, T)`` and ``Y (*, T, K)``, with ``gens`` from
    :func:`toeplitz_inverse_generators` (of the same ``c``, ``r``), differentiable in ``c``, ``r`` and ``Y``.

    ``O(K T log T)`` forward and backward (one more solve with ``M^H``).

    Examples
    --------
    >>> c = torch.tensor([0.0, 1.0], dtype=torch.float64, requires_grad=True)  # [[0, 1], [1, 0]]
    >>> r = torch.tensor([0.0, 1.0], dtype=torch.float64)
    >>> X = toeplitz_solve(c, r, torch.tensor([[2.0], [3.0]], dtype=torch.float64), toeplitz_inverse_generators(c, r))
    >>> X[:, 0].tolist()
    [3.0, 2.0]
    >>> X.sum().backward(); c.grad.tolist()  # d/dc of sum(M^{-1} y), M = [[c0, r1], [c1, c0]]
    [-5.0, -3.0]
    """
    return _Solve.apply(c, r, Y, gens)
