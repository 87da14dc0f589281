"""Quasiseparable (bidirectional) masks: a strictly-lower SSS, a strictly-upper SSS, a free diagonal.

These are the Hydra and LION masks: ``M = tril(M_F, -1) + triu(J M_B J, 1) + diag(d)``.
"""

from __future__ import annotations

import numbers

import torch

from structmat.core import small
from structmat.core.base import StructuredMatrix
from structmat.core.dtypes import compute_dtype, real_dtype
from structmat.core.validation import as_tensor, broadcast_batch, check_dtype, check_finite, check_same_device, check_solution
from structmat.linalg import chunk_form, quasiseparable_banded
from structmat.linalg.quasiseparable_lu import quasiseparable_lu
from structmat.linalg.quasiseparable_solve import quasiseparable_solve
from structmat.linalg.semiseparable import Generators
from structmat.matrices.one_ss import OneSS
from structmat.matrices.sss import SSS

__all__ = ["Quasiseparable"]


def strict_part(M: SSS) -> SSS:
    """The strictly triangular part of ``M``: the same generators with an explicit zero diagonal."""
    G = M.generators
    zeros = torch.zeros((), dtype=M.dtype, device=M.device).expand(*G.B.shape[:-1])
    return SSS._assemble(Generators(G.A, G.B, G.C, zeros), M.lower, M.batch_shape)


def _check_part(M, name: str, lower: bool, like: SSS | None = None, like_name: str = "", *, same_device: bool = True) -> None:
    """``M`` must be a lower (upper) SSS, square of the size of ``like`` (and on its device unless the caller moves both)."""
    if not isinstance(M, SSS) or M.lower != lower:
        got = type(M).__name__ if not isinstance(M, SSS) else f"{'a lower' if M.lower else 'an upper'} {type(M).__name__}"
        want = "a lower SSS or OneSS" if lower else "an upper SSS or OneSS (lower=False, e.g. M.T)"
        raise TypeError(f"{name} must be {want}; got {got}")
    if like is not None and M.shape[-1] != like.shape[-1]:
        T = like.shape[-1]
        raise ValueError(f"{name} must have shape (*, {T}, {T}) like {like_name}; got {tuple(M.shape)}")
    if like is not None and same_device:
        check_same_device(M.B, name, like.B, like_name)


class Quasiseparable(StructuredMatrix):
    """``M = strictly_lower(lower) + strictly_upper(upper) + diag(diag)``; orders ``(n_l, n_u)``.

    Parameters
    ----------
    lower : SSS or OneSS (lower)
        Its strictly-lower part is used.
    upper : SSS or OneSS with ``lower=False`` (e.g. ``M.T`` of a lower one)
        Its strictly-upper part is used.
    diag : array_like, shape ``(*, T)``

    Notes
    -----
    Matvec: one forward and one backward scan, ``O(T (n_l + n_u) K)`` for diagonal transitions.
    ``+`` and ``@`` with ``Quasiseparable``, ``SSS``, ``OneSS`` and ``Diagonal`` stay quasiseparable
    (orders add); ``inv()`` runs Eidelman and Gohberg's direct recursion (stable in float32) and keeps
    the orders, except that a side may need one more state (the LION decay mask, an inverse
    tridiagonal, gives orders ``(2, 2)``: docs/deviations.md).

    Examples
    --------
    >>> import torch, structmat as sm
    >>> fwd = sm.OneSS.decay(0.5, 4)
    >>> M = sm.Quasiseparable.bidirectional(fwd, fwd)  # LION: M_F + J M_B J - I
    >>> M.to_dense()
    tensor([[1.0000, 0.5000, 0.2500, 0.1250],
            [0.5000, 1.0000, 0.5000, 0.2500],
            [0.2500, 0.5000, 1.0000, 0.5000],
            [0.1250, 0.2500, 0.5000, 1.0000]])
    """

    small_dense = True

    def __init__(self, lower: SSS, upper: SSS, diag, *, dtype: torch.dtype | None = None, device=None):
        _check_part(lower, "lower", True)
        _check_part(upper, "upper", False, lower, "lower", same_device=device is None)
        if dtype is not None or device is not None:
            lower, upper = lower.to(device=device or lower.device, dtype=dtype or lower.dtype), \
                upper.to(device=device or lower.device, dtype=dtype or upper.dtype)
        d = as_tensor(diag, "diag", dtype=dtype, device=device, like=("lower", lower.B))
        if d.dim() < 1 or d.shape[-1] != lower.shape[-1]:
            raise ValueError(f"diag must have shape (*, T) with T={lower.shape[-1]}; got {tuple(d.shape)}")
        check_finite(d, "diag")
        try:
            batch = broadcast_batch(("lower", lower.batch_shape), ("upper", upper.batch_shape), ("diag", d.shape[:-1]))
        except ValueError as err:
            raise ValueError(f"batch shapes do not broadcast: lower {tuple(lower.shape)}, upper {tuple(upper.shape)}, "
                             f"diag {tuple(d.shape)} (expected (*, T, T), (*, T, T) and (*, T) with batch dims * "
                             "that broadcast)") from err
        dtype = torch.promote_types(torch.promote_types(lower.dtype, upper.dtype), d.dtype)
        lower, upper = (m if m.dtype == dtype else m.to(dtype) for m in (lower, upper))
        self.lower_part, self.upper_part = strict_part(lower), strict_part(upper)
        self.diag = d if d.dtype == dtype else d.to(dtype)
        # two 1-SS sides whose decays are differentiated (LION, bidirectional): kept whole, with their diagonals,
        # for their faster products (the generic parts' products are exact too, through the decays they carry)
        one_ss = isinstance(lower, OneSS) and isinstance(upper, OneSS)
        self.halves = (lower, upper) if one_ss and (lower.decays is not None or upper.decays is not None) else None
        T = d.shape[-1]
        super().__init__((*batch, T, T), dtype, d.device)

    @classmethod
    def _of(cls, lower: SSS, upper: SSS, diag: torch.Tensor, batch: tuple[int, ...]) -> Quasiseparable:
        """From strictly triangular parts (explicit zero diagonals, :func:`strict_part`) and a diagonal computed
        from checked matrices, of one dtype and device, ``batch`` their broadcast batch: unchecked (a closure
        operation on small matrices costs less than the constructor's checks)."""
        M = object.__new__(Quasiseparable)
        M.lower_part, M.upper_part, M.diag, M.halves = lower, upper, diag, None
        T = diag.shape[-1]
        StructuredMatrix.__init__(M, (*batch, T, T), diag.dtype, diag.device)
        return M

    @classmethod
    def bidirectional(cls, forward: SSS, backward: SSS, diag=None, *, dtype: torch.dtype | None = None,
                      device=None) -> Quasiseparable:
        """LION / Hydra mask from two lower masks: ``backward`` runs over the reversed sequence.

        With ``J`` the reversal the strictly-upper part is that of ``J M_B J``; ``diag=None`` keeps
        the diagonal of ``forward`` (for unit diagonals ``M = M_F + J M_B J - I``).
        """
        _check_part(forward, "forward", True)
        _check_part(backward, "backward", True, forward, "forward")
        return cls(forward, backward.reverse(), forward.diagonal() if diag is None else diag, dtype=dtype, device=device)

    @classmethod
    def lion(cls, a, *, b=None, c=None, dtype: torch.dtype | None = None, device=None) -> Quasiseparable:
        """LION's selective mask from the forward decays ``a (*, T)`` (``a >= 0``; ``a[..., 0]`` is unused):

        ``M[i, j] = c_i (a_{min(i,j)+1} ... a_{max(i,j)}) b_j``, so ``M[i, i] = c_i b_i`` (1 without
        scalings). The backward direction reuses the same decays: ``M`` is symmetric for ``b = c``.

        Parameters
        ----------
        a : array_like, shape ``(*, T)``
            Decays in ``[0, 1]`` in practice (any ``a >= 0``); ``a_t = 0`` cuts every link across ``t``.
        b, c : array_like, shape ``(*, T)``, optional
            Input (column) and output (row) scalings, as in :class:`OneSS`.

        Notes
        -----
        Orders ``(1, 1)``; matvec ``O(T K)``. Both triangles share the log decays (segment sums, exact
        zeros), so no ``flip(roll(a, -1))`` of the decays is needed.

        Examples
        --------
        >>> import torch, structmat as sm
        >>> M = sm.Quasiseparable.lion(torch.tensor([1.0, 0.5, 0.5, 0.0]))
        >>> M.to_dense()
        tensor([[1.0000, 0.5000, 0.2500, 0.0000],
                [0.5000, 1.0000, 0.5000, 0.0000],
                [0.2500, 0.5000, 1.0000, 0.0000],
                [0.0000, 0.0000, 0.0000, 1.0000]])
        """
        dtype = check_dtype(dtype)  # (a complex dtype is the maps': the decays take its precision)
        a = as_tensor(a, "a", dtype=None if dtype is None else real_dtype(dtype), device=device)
        if a.dim() < 1:
            raise ValueError("a must have shape (*, T); got a scalar")
        for name, x in (("b", b), ("c", c)):
            shape = None if x is None else tuple(as_tensor(x, name).shape)
            if shape is not None and (len(shape) != a.dim() or shape[-1:] != a.shape[-1:]):
                raise ValueError(f"{name} must have shape (*, T) like a {tuple(a.shape)}; got {shape}")
        return cls._lion(OneSS.from_decays(a, b=b, c=c, dtype=dtype, device=device))

    @classmethod
    def lion_decay(cls, gamma, T: int, *, dtype: torch.dtype | None = None, device=None) -> Quasiseparable:
        """LION's decay (non-selective) mask ``M[i, j] = gamma^|i - j|``; ``gamma`` a scalar or ``(*,)`` (one per
        head) in ``[0, 1]``. Orders ``(1, 1)``.

        Examples
        --------
        >>> import structmat as sm
        >>> sm.Quasiseparable.lion_decay(0.5, 3).to_dense()
        tensor([[1.0000, 0.5000, 0.2500],
                [0.5000, 1.0000, 0.5000],
                [0.2500, 0.5000, 1.0000]])
        """
        if not isinstance(T, numbers.Integral) or isinstance(T, bool) or T < 0:
            raise ValueError(f"T must be a non-negative integer; got {T!r}")
        return cls._lion(OneSS.decay(gamma, T, dtype=dtype, device=device))

    @classmethod
    def _lion(cls, forward: OneSS) -> Quasiseparable:
        # M[i, j] for i < j is c_i prod b_j: the transpose of the lower mask with b and c swapped
        upper = OneSS(forward.log_a, b=forward.c, c=forward.b, lower=False)._with_decays(forward.decays)
        return cls(forward, upper, forward.diagonal())

    @property
    def order(self) -> tuple[int, int]:
        return (self.lower_part.order, self.upper_part.order)

    def diagonal(self) -> torch.Tensor:
        return self.diag.expand(self.shape[:-1])

    def matvec_flops(self, K: int) -> float:
        return self.lower_part.matvec_flops(K) + self.upper_part.matvec_flops(K) + K * self.shape[-1]

    def _sides(self) -> tuple[SSS, SSS]:
        """The lower and upper sides: the 1-SS halves where they are kept, else the strict parts."""
        return (self.lower_part, self.upper_part) if self.halves is None else self.halves

    def _halves_diagonal(self) -> torch.Tensor:
        """What the halves' sum lacks on the diagonal: ``diag - diag(lower) - diag(upper)``."""
        return self.diag - self.halves[0].diagonal() - self.halves[1].diagonal()

    def to_dense(self) -> torch.Tensor:
        if self.halves is not None:
            return self.halves[0].to_dense() + self.halves[1].to_dense() + torch.diag_embed(self._halves_diagonal())
        return self.lower_part.to_dense() + self.upper_part.to_dense() + torch.diag_embed(self.diag)

    def _matmat(self, X: torch.Tensor) -> torch.Tensor:
        if (F := self._chunk_form(X)) is not None:
            return chunk_form.apply(F, X)
        if self.halves is not None and not torch.compiler.is_compiling():  # (their CPU scan graph-breaks)
            lower, upper = self.halves
            return lower.matmul(X) + upper.matmul(X) + self._halves_diagonal()[..., None] * X
        return self.lower_part._matmat(X) + self.upper_part._matmat(X) + self.diag[..., None] * X

    def _chunk_form(self, X: torch.Tensor) -> chunk_form.ChunkForm | None:
        """The kept :mod:`~structmat.linalg.chunk_form` of the matrix for ``X (*, T, K)`` (as
        :meth:`SSS._chunk_form <structmat.SSS._chunk_form>`), else None."""
        T, r = self.shape[-1], sum(self.order)
        if not chunk_form.applies(self.dtype, X, T, r, self.batch_shape.numel()):
            return None
        lower, upper = self.lower_part.generators, self.upper_part.generators
        return small.keep_when_used(self, "chunk form", lambda: chunk_form.quasiseparable_form(lower, upper, self.diag),
                                    X.shape[:-2].numel() * X.shape[-1], chunk_form.after_columns(T, r))

    def _map(self, fn) -> Quasiseparable:
        lower, upper = self._sides()
        return Quasiseparable(lower._map(fn), upper._map(fn), fn(self.diag))

    @property
    def T(self) -> Quasiseparable:
        if self.halves is not None:
            return Quasiseparable(self.halves[1].T, self.halves[0].T, self.diag)
        return small.keep(self, "T", lambda: Quasiseparable._of(self.upper_part.T, self.lower_part.T, self.diag,
                                                                self.batch_shape))

    def _scale(self, s) -> Quasiseparable:
        lower, upper = self._sides()
        return Quasiseparable(lower * s, upper * s, self.diag * s)

    def compress(self, tol: float | None = None) -> Quasiseparable:
        """Minimal orders for both strictly triangular parts (see :meth:`SSS.compress`): the ranks of their blocks
        below (above) the diagonal, whatever the parts' own diagonals (which the matrix does not use)."""
        return Quasiseparable(strict_part(self.lower_part).compress(tol), strict_part(self.upper_part).compress(tol),
                              self.diag)

    def tril(self) -> SSS:
        """Lower triangle with the diagonal, as an SSS of order ``n_l``."""
        G = self.lower_part.generators.expand(self.batch_shape)
        return SSS(G.A, G.B, G.C, self.diagonal())

    def triu(self) -> SSS:
        """Upper triangle with the diagonal, as an upper SSS of order ``n_u``."""
        G = self.upper_part.generators.expand(self.batch_shape)
        return SSS(G.A, G.B, G.C, self.diagonal(), lower=False)

    def solve(self, Y) -> torch.Tensor:
        """Solve ``M X = Y`` for ``Y`` of shape ``(*, T, K)`` or ``(T,)`` (batch dims broadcast).

        On the CPU (real data, no gradient wanted): one banded LU with partial pivoting of the system in ``x``
        and both states (:mod:`structmat.linalg.quasiseparable_banded`), ``O(T (n_l + n_u)^3 K)``. Else a
        chunked elimination on the generators (:mod:`structmat.linalg.quasiseparable_solve`), with
        the accuracy of a dense pivoted LU inside each chunk of ``L`` (16 to 64); it does not go
        through :meth:`inv`. Up to a few thousand steps: one batched LU of all diagonal blocks, then a
        dense system in the states at the chunk boundaries (``O(T L^2 + T n^2 K + (T n / L)^3)``, no
        Python loop over time); longer sequences, or a singular diagonal block: a blocked LU
        (``O(T L (L + n) + T n^2 K)`` in ``O(T / L)`` Python steps) that needs the leading principal
        submatrices of orders ``L, 2L, ...`` nonsingular. :class:`~structmat.SingularMatrixError`
        when ``M`` is singular.

        Examples
        --------
        >>> import torch, structmat as sm
        >>> M = sm.Quasiseparable.bidirectional(sm.OneSS.decay(0.5, 4), sm.OneSS.decay(0.5, 4))
        >>> y = torch.tensor([1.0, 2.0, 3.0, 4.0])
        >>> torch.allclose(M @ M.solve(y), y)
        True
        """
        if compute_dtype(self.dtype) != self.dtype:
            return self._solve_in_float32(Y)
        self._check_square("solve()")
        X = self._small_solve(Y, None, "Quasiseparable matrix is singular: a zero pivot in its LU factorisation")
        if X is not None:
            return X
        M, Y, vector = self._operand(Y, "Y")
        lower, upper = M.lower_part.generators, M.upper_part.generators
        if quasiseparable_banded.applies(lower, upper, M.diag, Y):
            X = quasiseparable_banded.quasiseparable_banded_solve(lower, upper, M.diag, Y)
        else:
            X = check_solution(quasiseparable_solve(lower, upper, M.diag, Y), Y, "Quasiseparable.solve")
        return X[..., 0] if vector else X

    def lu(self) -> tuple[SSS, SSS]:
        """``M = L U``: unit lower SSS of order ``n_l`` and upper SSS of order ``n_u`` (no pivoting;
        :func:`structmat.linalg.quasiseparable_lu.quasiseparable_lu`)."""
        L, U = quasiseparable_lu(self.lower_part.generators, self.upper_part.generators, self.diag, self.batch_shape)
        return SSS(L.A, L.B, L.C, L.D), SSS(U.A, U.B, U.C, U.D, lower=False)
