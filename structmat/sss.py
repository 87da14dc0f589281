"""N-semiseparable matrices in sequentially-semiseparable (SSS) form (Mamba-2, Def. 3.2).

A lower ``SSS`` has entries ``M[j, i] = C_j^T A_j ... A_{i+1} B_i`` for ``j > i``, ``D_i`` (or
``C_i^T B_i`` when ``D`` is None) on the diagonal and zeros above. ``y = M x`` is the recurrence

    h_t = A_t h_{t-1} + B_t x_t,     y_t = C_t^T A_t h_{t-1} + D_t x_t,

which :func:`structmat.scan.linear_scan` evaluates in ``O(T N K)`` (diagonal ``A``) or
``O(T N^2 K)`` (dense ``A``). The upper mirror (``lower=False``) is ``M.T`` of the lower matrix
with the same parameters; it is applied by reversing time (:func:`flip_params`).
"""

from __future__ import annotations

import torch

from structmat.base import StructuredMatrix, as_tensor, check_finite
from structmat.scan import apply_transition, linear_scan

__all__ = ["SSS", "flip_params", "transition_kind"]


def transition_kind(A: torch.Tensor, B: torch.Tensor) -> str:
    """``scalar``/``diag``/``dense`` from the rank of ``A`` relative to ``B`` of shape ``(*, T, N)``."""
    extra = A.dim() - B.dim()
    N = B.shape[-1]
    if extra == -1:
        return "scalar"
    if extra == 0 and A.shape[-1] == N:
        return "diag"
    if extra == 1 and A.shape[-2:] == (N, N):
        return "dense"
    raise ValueError(
        f"A must have shape (*, T), (*, T, N) or (*, T, N, N) with N={N} and the batch dims of B "
        f"{tuple(B.shape[:-2])}; got {tuple(A.shape)}"
    )


_TAIL = {"log": 1, "scalar": 1, "diag": 2, "dense": 3}  # trailing dims of A, time first


def _time_len(A: torch.Tensor, kind: str) -> int:
    return A.shape[-_TAIL[kind]]


def _neutral_first(A: torch.Tensor, kind: str) -> torch.Tensor:
    """``A[..., 0]`` is unused by definition: make it neutral so that garbage there is harmless."""
    if kind in ("log", "scalar"):
        first = torch.zeros_like(A[..., :1]) if kind == "log" else torch.ones_like(A[..., :1])
        return torch.cat([first, A[..., 1:]], dim=-1)
    if kind == "diag":
        return torch.cat([torch.ones_like(A[..., :1, :]), A[..., 1:, :]], dim=-2)
    eye = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device).expand_as(A[..., :1, :, :])
    return torch.cat([eye, A[..., 1:, :, :]], dim=-3)


def flip_params(A, B, C, D, kind):
    """Parameters of the lower matrix ``J M^T J`` for ``M`` lower with ``(A, B, C, D)``.

    With ``J`` the reversal, ``J M^T J`` is lower again with ``A'' = roll(flip(A), 1)^T``,
    ``B'' = flip(C)``, ``C'' = flip(B)``, ``D'' = flip(D)``; the map is an involution.
    """
    t_axis = -_TAIL[kind]
    A2 = torch.roll(torch.flip(A, (t_axis,)), 1, dims=t_axis)
    if kind == "dense":
        A2 = A2.transpose(-1, -2)
    flip = lambda t: None if t is None else torch.flip(t, (-2,) if t.dim() == B.dim() else (-1,))  # noqa: E731
    return A2, flip(C), flip(B), flip(D)


class SSS(StructuredMatrix):
    """Lower (or upper) N-semiseparable matrix in SSS form.

    Parameters
    ----------
    A : array_like, shape ``(*, T)``, ``(*, T, N)`` or ``(*, T, N, N)``
        Scalar, diagonal or dense transitions. ``A[..., 0, ...]`` is unused.
    B, C : array_like, shape ``(*, T, N)``
        Input and output maps.
    D : array_like, shape ``(*, T)``, optional
        Explicit diagonal; by default the diagonal is ``C_i^T B_i``.
    lower : bool
        ``False`` gives the upper mirror, the transpose of the lower matrix with these parameters.

    All parameters share the number of batch dims (sizes broadcast). ``order == N``.

    Notes
    -----
    ``M[j, i] = C_j^T A_j ... A_{i+1} B_i`` (``j > i``). Matvec ``O(T N K)`` for scalar and
    diagonal ``A``, ``O(T N^2 K)`` for dense ``A``; memory ``O(T N K)``.

    Examples
    --------
    >>> import torch, structmat as sm
    >>> M = sm.SSS(torch.full((5,), 0.5), torch.ones(5, 1), torch.ones(5, 1))
    >>> M.to_dense()[4, 0].item()  # 0.5 ** 4
    0.0625
    >>> M
    SSS(shape=(5, 5), order=1, dtype=float32)
    """

    def __init__(self, A, B, C, D=None, *, lower: bool = True):
        B = as_tensor(B, "B")
        C = as_tensor(C, "C", device=B.device)
        A = as_tensor(A, "A", device=B.device)
        if B.dim() < 2 or C.shape[-2:] != B.shape[-2:] or C.dim() != B.dim():
            raise ValueError(f"B and C must both have shape (*, T, N); got {tuple(B.shape)} and {tuple(C.shape)}")
        kind = getattr(self, "_kind_override", None) or transition_kind(A, B)
        tensors = [A, B, C]
        if D is not None:
            D = as_tensor(D, "D", device=B.device)
            if D.dim() != B.dim() - 1 or D.shape[-1] != B.shape[-2]:
                raise ValueError(f"D must have shape (*, T) with T={B.shape[-2]}; got {tuple(D.shape)}")
            tensors.append(D)
        if _time_len(A, kind) != B.shape[-2]:
            raise ValueError(f"A has {_time_len(A, kind)} time steps but B has T={B.shape[-2]}")
        for name, t in zip("ABCD", tensors):
            check_finite(t, name, allow_neg_inf=(kind == "log" and name == "A"))
        dtype = B.dtype
        for t in tensors:
            dtype = torch.promote_types(dtype, t.dtype)
        batch = torch.broadcast_shapes(*(t.shape[: B.dim() - 2] for t in (B, C)), A.shape[: B.dim() - 2])
        if D is not None:
            batch = torch.broadcast_shapes(batch, D.shape[:-1])
        real = dtype.to_real() if dtype.is_complex else dtype
        self._A = A.to(real if kind == "log" else dtype)
        self.B, self.C = B.to(dtype), C.to(dtype)
        self.D = None if D is None else D.to(dtype)
        self.kind, self.lower = kind, lower
        self._dtype = dtype
        self._shape = torch.Size((*batch, B.shape[-2], B.shape[-2]))

    # --- basic attributes --------------------------------------------------------------------
    @property
    def shape(self) -> torch.Size:
        return self._shape

    @property
    def dtype(self) -> torch.dtype:
        return self._dtype

    @property
    def device(self) -> torch.device:
        return self.B.device

    @property
    def order(self) -> int:
        return self.B.shape[-1]

    @property
    def A(self) -> torch.Tensor:
        """Transitions as given (scalar, diagonal or dense)."""
        return torch.exp(self._A) if self.kind == "log" else self._A

    def diag_values(self) -> torch.Tensor:
        """Effective diagonal, shape ``(*, T)``: ``D`` or ``C_i^T B_i``."""
        return self.D if self.D is not None else (self.C * self.B).sum(-1)

    def diagonal(self) -> torch.Tensor:
        """Main diagonal, shape ``(*batch_shape, T)``."""
        return self.diag_values().expand(self.shape[:-1])

    def _map(self, fn) -> SSS:
        D = None if self.D is None else fn(self.D)
        return SSS(fn(self.A), fn(self.B), fn(self.C), D, lower=self.lower)

    @property
    def T(self) -> SSS:
        out = self._map(lambda t: t)
        out.lower = not self.lower
        return out

    def _scale(self, s) -> SSS:
        D = None if self.D is None else self.D * s
        return SSS(self.A, self.B, self.C * s, D, lower=self.lower)

    def lower_params(self):
        """``(A, B, C, D, kind)`` of a *lower* SSS equal to ``J M J`` (upper) or ``M`` (lower)."""
        if self.lower:
            return self._A, self.B, self.C, self.D, self.kind
        return (*flip_params(self._A, self.B, self.C, self.D, self.kind), self.kind)

    # --- matvec -----------------------------------------------------------------------------
    def _matmat(self, X: torch.Tensor) -> torch.Tensor:
        A, B, C, D, kind = self.lower_params()
        if not self.lower:
            X = torch.flip(X, (-2,))
        Y = lower_matmat(A, B, C, D, kind, X)
        return Y if self.lower else torch.flip(Y, (-2,))

    # --- dense --------------------------------------------------------------------------------
    def to_dense(self) -> torch.Tensor:
        """Entry by entry from the definition, column recurrences vectorised: ``O(T^2 N^2)``."""
        kind, batch, T = self.kind, self.batch_shape, self.shape[-1]
        A = self._A.expand(*batch, *self._A.shape[len(self._A.shape) - _TAIL[kind] :])
        B, C = (t.expand(*batch, *t.shape[-2:]) for t in (self.B, self.C))
        D = None if self.D is None else self.D.expand(*batch, T)
        rows = []
        V = None  # V[..., :, i] = A_j ... A_{i+1} B_i for the columns i < j seen so far
        for j in range(T):
            Bj = B[..., j, :, None]
            if V is None:
                V = Bj
            else:
                Aj = A.select(A.dim() - _TAIL[kind], j)
                V = torch.cat([apply_transition(Aj, V, kind), Bj], dim=-1)
            row = (C[..., j, :, None] * V).sum(-2)  # (*, j+1)
            if D is not None:
                row = torch.cat([row[..., :-1], D[..., j, None].expand(*row.shape[:-1], 1)], dim=-1)
            rows.append(torch.nn.functional.pad(row, (0, T - j - 1)))
        dense = torch.stack(rows, dim=-2)
        return dense if self.lower else dense.transpose(-1, -2)

    # --- algebra (closure rules live in structmat.closure) ------------------------------------
    def inv(self) -> SSS:
        """Inverse as an SSS by the state-space inversion recurrence (never a dense LU).

        Order ``N`` with an explicit ``D`` when ``D_i != C_i^T B_i`` for all ``i``; otherwise the
        DESIGN's convention (the output passes through ``A_j``) cannot hold the inverse at order
        ``N`` (a bidiagonal needs order 2) and the result has order ``N + 1``.
        Raises :class:`~structmat.SingularMatrixError` for a zero diagonal entry.
        """
        from structmat.sss_algebra import sss_inverse

        return sss_inverse(self)

    def solve(self, Y) -> torch.Tensor:
        """Solve ``M X = Y`` (``Y`` of shape ``(*, T, K)`` or ``(T,)``) by block forward substitution
        (:func:`structmat.sss_solve.sss_solve`), ``O(T (L + N) K)`` for diagonal transitions."""
        from structmat.sss_solve import sss_solve

        self._check_square("solve()")
        Y = torch.as_tensor(Y, device=self.device)
        vector = Y.dim() == 1
        dtype = torch.promote_types(self.dtype, Y.dtype)
        M = self if dtype == self.dtype else self.to(dtype)
        X = sss_solve(M, (Y[:, None] if vector else Y).to(dtype))
        return X[..., 0] if vector else X

    def compress(self, tol: float | None = None) -> SSS:
        """Equivalent SSS of minimal order (see :func:`structmat.compress.minimal_realization`)."""
        from structmat.compress import minimal_realization

        return minimal_realization(self, tol)

    @classmethod
    def from_generators(cls, U, V) -> SSS:
        """``tril(U V^T)`` for ``U, V`` of shape ``(*, T, r)``: order ``r``, ``A = 1``.

        The generator form is numerically unstable for decaying data: a decay ``a^{j-i}``
        written as ``a^j a^{-i}`` overflows; use ``A`` for decays instead.
        """
        from structmat.lowrank import LowRank

        return LowRank(U, V).tril()


def time_slice(A, B, C, D, kind: str, steps: slice):
    """The parameters of the diagonal block ``M[steps, steps]`` (a lower SSS of the same kind)."""
    A = A.narrow(A.dim() - _TAIL[kind], steps.start, steps.stop - steps.start)
    return A, B[..., steps, :], C[..., steps, :], None if D is None else D[..., steps], kind


def lower_matmat(A, B, C, D, kind, X):
    """``M X`` for a lower SSS; ``X`` of shape ``(*, T, K)``."""
    return lower_matmat_carry(A, B, C, D, kind, X)[0]


def lower_matmat_carry(A, B, C, D, kind, X, h0=None):
    """``M X`` for a lower SSS continuing from the state ``h0`` ``(*, N, K)``; also returns the last state.

    With ``h0`` the first transition ``A[..., 0]`` applies to it, so a long product can be run in
    consecutive time blocks: ``Y_1, h = lower_matmat_carry(params[:t], X[:t])``, then
    ``lower_matmat_carry(params[t:], X[t:], h)``.
    """
    A = _neutral_first(A, kind) if h0 is None else A
    u = B[..., :, :, None] * X[..., :, None, :]
    h = linear_scan(A, u, kind, h0)
    if D is None:
        return (C[..., :, :, None] * h).sum(-2), h[..., -1, :, :]
    first = torch.zeros_like(h[..., :1, :, :]) if h0 is None else h0[..., None, :, :].expand_as(h[..., :1, :, :])
    prev = torch.cat([first, h[..., :-1, :, :]], dim=-3)
    return (C[..., :, :, None] * apply_transition(A, prev, kind)).sum(-2) + D[..., None] * X, h[..., -1, :, :]
