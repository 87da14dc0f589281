"""N-semiseparable matrices in sequentially-semiseparable (SSS) form (Mamba-2, Def. 3.2)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from structmat.core import small
from structmat.core.base import StructuredMatrix
from structmat.core.dtypes import compute_dtype
from structmat.core.transitions import Transitions
from structmat.core.validation import (
    as_tensor,
    broadcast_batch,
    check_dtype,
    check_finite,
    check_flag,
    check_same_device,
    check_solution,
    trusted_parameters,
)
from structmat.linalg import banded, chunk_form
from structmat.linalg.block_solve import WIDE_CHUNK, WIDE_COLUMNS, ChunkMaps, block_solve, chunk_maps
from structmat.linalg.dense_form import sss_dense
from structmat.linalg.first_order import scalar_sss_product
from structmat.linalg.realization import minimal_realization
from structmat.linalg.semiseparable import Generators

__all__ = ["SSS", "SSSInverse"]


class SSS(StructuredMatrix):
    """Lower (or upper) N-semiseparable matrix in SSS form.

    ``M[j, i] = C_j^T A_j ... A_{i+1} B_i`` for ``j > i``, ``D_i`` (or ``C_i^T B_i``) on the
    diagonal, zero above; ``y = M x`` is the recurrence ``h_t = A_t h_{t-1} + B_t x_t``,
    ``y_t = C_t^T A_t h_{t-1} + D_t x_t``. The upper mirror (``lower=False``) is the transpose of
    the lower matrix with the same parameters.

    Parameters
    ----------
    A : array_like, shape ``(*, T)``, ``(*, T, N)`` or ``(*, T, N, N)``, or a ``Transitions``
        Scalar, diagonal or dense transitions. ``A[..., 0, ...]`` is unused.
    B, C : array_like, shape ``(*, T, N)``
        Input and output maps.
    D : array_like, shape ``(*, T)``, optional
        Explicit diagonal; by default the diagonal is ``C_i^T B_i``.
    lower : bool
        ``False`` gives the upper mirror.
    dtype, device : optional
        Convert the parameters (as ``torch.as_tensor``); by default they keep theirs.

    Notes
    -----
    All parameters share the number of batch dims (sizes broadcast). ``order == N``.
    Matvec ``O(T N K)`` for scalar and diagonal ``A``, ``O(T N^2 K)`` for dense ``A``; memory
    ``O(T N K)``. ``solve`` is a block forward substitution, ``O(T (L + N) K)``.

    Examples
    --------
    >>> import torch, structmat as sm
    >>> M = sm.SSS(torch.full((5,), 0.5), torch.ones(5, 1), torch.ones(5, 1))
    >>> M.to_dense()[4, 0].item()  # 0.5 ** 4
    0.0625
    >>> M
    SSS(shape=(5, 5), order=1, dtype=float32)
    """

    small_dense = True

    def __init__(self, A, B, C, D=None, *, lower: bool = True, dtype: torch.dtype | None = None, device=None):
        dtype = check_dtype(dtype)
        B = as_tensor(B, "B", dtype=dtype, device=device)
        C = as_tensor(C, "C", dtype=dtype, device=device, like=("B", B))
        if B.dim() < 2 or C.shape[-2:] != B.shape[-2:] or C.dim() != B.dim():
            raise ValueError(f"B and C must both have shape (*, T, N); got {tuple(B.shape)} and {tuple(C.shape)}")
        if isinstance(A, Transitions):
            if device is None:
                check_same_device(A.values, "A", B, "B")
            A = A.map(lambda t: t.to(device=B.device)) if dtype is None else A.map(lambda t: t.to(device=B.device)).cast(dtype)
        else:
            A = Transitions.from_shape(as_tensor(A, "A", dtype=dtype, device=device, like=("B", B)), B)
        T = B.shape[-2]
        if A.length != T or len(A.batch_shape) != B.dim() - 2:
            raise ValueError(f"A must have {B.dim() - 2} batch dims and T={T} steps like B {tuple(B.shape)}; "
                             f"got {A.length} steps with batch {tuple(A.batch_shape)}")
        if D is not None:
            D = as_tensor(D, "D", dtype=dtype, device=device, like=("B", B))
            if D.dim() != B.dim() - 1 or D.shape[-1] != T:
                raise ValueError(f"D must have shape (*, T) with T={T} and {B.dim() - 2} batch dims; got {tuple(D.shape)}")
        A.check_finite("A")
        for name, t in (("B", B), ("C", C), ("D", D)):
            if t is not None:
                check_finite(t, name)
        dtype = A.promote(torch.promote_types(B.dtype, C.dtype) if D is None else
                          torch.promote_types(torch.promote_types(B.dtype, C.dtype), D.dtype))
        named = [("A", A.batch_shape), ("B", B.shape[:-2]), ("C", C.shape[:-2])] + ([] if D is None else [("D", D.shape[:-1])])
        batch = broadcast_batch(*named)
        self.transitions = A.cast(dtype)
        self.B, self.C = B.to(dtype), C.to(dtype)
        self.D = None if D is None else D.to(dtype)
        self.lower = check_flag(lower, "lower")
        super().__init__((*batch, T, T), dtype, B.device)

    # --- parameters -------------------------------------------------------------------------------
    @property
    def A(self) -> torch.Tensor:
        """Transitions as given (scalar, diagonal or dense; decays for a ``OneSS``)."""
        return self.transitions.actual()

    @property
    def order(self) -> int:
        return self.B.shape[-1]

    @property
    def generators(self) -> Generators:
        """``(A, B, C, D)`` as stored: of ``M`` if lower, of ``M^T`` if upper."""
        return Generators(self.transitions, self.B, self.C, self.D)

    def time_lower(self) -> tuple[Generators, bool]:
        """``(F, reversed)``: generators of a lower matrix with ``M = F`` or, if ``reversed``, ``M = J F J``."""
        return (self.generators, False) if self.lower else (self.generators.flipped(), True)

    @classmethod
    def _from_generators(cls, G: Generators, lower: bool) -> SSS:
        return SSS(G.A, G.B, G.C, G.D, lower=lower)

    @classmethod
    def _assemble(cls, G: Generators, lower: bool, batch: tuple[int, ...]) -> SSS:
        """The SSS of generators that an operation computed from checked matrices: on one device, with shapes
        that fit (``batch`` their broadcast batch). Dtypes are promoted; nothing is checked (a closure
        operation on small matrices costs less than the constructor's checks)."""
        M = object.__new__(SSS)
        M._set(G.A, G.B, G.C, G.D, lower, batch)
        return M

    @classmethod
    def _of_one_dtype(cls, A: Transitions, B: torch.Tensor, C: torch.Tensor, D: torch.Tensor | None, lower: bool,
                      shape: torch.Size, dtype: torch.dtype, device: torch.device) -> SSS:
        """:meth:`_assemble` of generators of ``dtype`` (nothing to promote) for a matrix of ``shape`` on ``device``
        (a ``torch.device``): for closure results of a few tens of microseconds, where each check, ``Generators`` or
        reading of a tensor's device (half a microsecond) is a noticeable part."""
        M = object.__new__(SSS)
        M.transitions, M.B, M.C, M.D, M.lower = A, B, C, D, lower
        StructuredMatrix.__init__(M, shape, dtype, device)
        return M

    def _set(self, A: Transitions, B: torch.Tensor, C: torch.Tensor, D: torch.Tensor | None, lower: bool,
             batch: tuple[int, ...]) -> None:
        """The state of an SSS with generators ``(A, B, C, D)`` (see :meth:`_assemble`)."""
        dtype = B.dtype
        if C.dtype != dtype or (D is not None and D.dtype != dtype) or A.dtype != dtype:  # else nothing to cast
            for t in (C, D):
                if t is not None and t.dtype != dtype:
                    dtype = torch.promote_types(dtype, t.dtype)
            dtype = A.promote(dtype)
            cast = lambda t: t if t is None or t.dtype == dtype else t.to(dtype)  # noqa: E731
            A, B, C, D = A.cast(dtype), cast(B), cast(C), cast(D)
        self.transitions, self.B, self.C, self.D, self.lower = A, B, C, D, lower
        T = B.shape[-2]
        StructuredMatrix.__init__(self, (*batch, T, T), dtype, B.device)

    def diagonal(self) -> torch.Tensor:
        return self.generators.diagonal().expand(self.shape[:-1])

    def matvec_flops(self, K: int) -> float:
        N = self.order
        return float(K * self.shape[-1] * (2 * self.transitions.flops_per_column(N) + 2 * N))

    # --- structure ---------------------------------------------------------------------------------
    def _map(self, fn) -> SSS:
        G = self.generators
        return self._from_generators(Generators(G.A.map(fn), fn(G.B), fn(G.C), None if G.D is None else fn(G.D)),
                                     self.lower)

    @property
    def T(self) -> SSS:
        return small.keep(self, "T", lambda: self._assemble(self.generators, not self.lower, self.batch_shape))

    def _scale(self, s) -> SSS:
        G = self.generators
        return self._from_generators(Generators(G.A, G.B, G.C * s, None if G.D is None else G.D * s), self.lower)

    def reverse(self) -> SSS:
        """``J M J`` with ``J`` the reversal of time (lower becomes upper and back)."""
        return self._assemble(self.generators.flipped(), not self.lower, self.batch_shape)

    # --- products -----------------------------------------------------------------------------------
    def _matmat(self, X: torch.Tensor) -> torch.Tensor:
        if (F := self._chunk_form(X)) is not None:
            return chunk_form.apply(F, X)
        G = self.generators
        if G.A.kind == "log" and G.order == 1 and not banded.keeps(G, self.batch_shape):  # one scan, no band to build
            return scalar_sss_product(G.A.values, G.B, G.C, G.D, X, G.A.decays, self.lower)
        if banded.applies(G, X, transpose=not self.lower, batch=self.batch_shape):  # compiled code, both triangles
            return banded.sss_matmat(G, X, not self.lower, self._band(False, G))
        G, reversed_ = self.time_lower()
        if not reversed_:
            return G.matmat(X)[0]
        return torch.flip(G.matmat(torch.flip(X, (-2,)))[0], (-2,))

    def _chunk_form(self, X: torch.Tensor, inverse: bool = False) -> chunk_form.ChunkForm | None:
        """The kept :mod:`~structmat.linalg.chunk_form` of the matrix (``inverse``: of its inverse) for ``X (*, T, K)``
        in the matrix's dtype, once the matrix has multiplied enough columns to pay for it
        (:func:`~structmat.linalg.chunk_form.after_columns`, fewer for a solve outside the band, whose block
        substitution builds its chunk maps on every call); else None."""
        T, N = self.shape[-1], self.order
        if not chunk_form.applies(self.dtype, X, T, N, self.batch_shape.numel()):
            return None
        rebuilt = inverse and not banded.applies(self.generators, X, solve=True, batch=self.batch_shape)
        after = chunk_form.after_columns(T, N, maps_rebuilt=rebuilt)
        replaces = (("band", True), "chunk maps") if inverse else (("band", False),)  # (what the form serves instead)
        columns = X.shape[:-2].numel() * X.shape[-1]
        if rebuilt:  # (its rent is mostly per call: the chunk maps)
            columns = 1 + columns / chunk_form.REBUILT_MAPS_COLUMNS
        return small.keep_when_used(self, ("chunk form", inverse), lambda: self._built_form(inverse), columns, after,
                                    replaces)

    def _built_form(self, inverse: bool) -> chunk_form.ChunkForm | None:
        G = self.generators
        F = chunk_form.lower_inverse_form(G) if inverse else chunk_form.lower_form(G)
        return F if F is None or self.lower else F.T

    def _band(self, solve: bool, G: Generators) -> banded.Band | None:
        """:func:`structmat.linalg.banded.band` of the generators ``G``, kept with the matrix
        (:func:`structmat.linalg.banded.keeps`); else None (the banded functions build what they need, in time
        blocks for a lower matrix)."""
        if not banded.keeps(G, self.batch_shape):
            return None
        return small.keep(self, ("band", solve), lambda: banded.band(G, solve))

    def to_dense(self) -> torch.Tensor:
        """From the definition, ``O(T^2 N)`` for scalar and diagonal transitions, ``O(T^2 N^2)`` for dense ones
        (:func:`~structmat.linalg.dense_form.sss_dense`)."""
        dense = sss_dense(self.generators).expand(self.shape)
        return dense if self.lower else dense.transpose(-1, -2)

    def solve(self, Y) -> torch.Tensor:
        """Solve ``M X = Y`` (``Y`` of shape ``(*, T, K)`` or ``(T,)``): on the CPU (real, no gradient, ``N <= 8``) a
        banded LAPACK solve (:mod:`structmat.linalg.banded`), or from ``WIDE_COLUMNS`` columns block forward
        substitution with kept chunk maps; else block forward substitution, ``O(T (L + N) K)`` for diagonal
        transitions (:mod:`structmat.linalg.block_solve`)."""
        self._check_square("solve()")
        if compute_dtype(self.dtype) != self.dtype:
            return self._solve_in_float32(Y)
        X = self._small_solve(Y, "lower" if self.lower else "upper", "SSS is singular: a diagonal entry is zero")
        if X is not None:
            return X
        M, Y, vector = self._operand(Y, "Y")
        X = check_solution(M._solve(Y), Y, "SSS.solve")
        return X[..., 0] if vector else X

    def _solve(self, Y: torch.Tensor) -> torch.Tensor:
        """:meth:`solve` for ``Y (*, T, K)`` in the matrix's dtype, past the small dense path."""
        if (F := self._chunk_form(Y, inverse=True)) is not None:
            return chunk_form.apply(F, Y)
        G, maps = self.generators, None
        if banded.applies(G, Y, solve=True, batch=self.batch_shape):
            maps = self._wide_maps(Y)
            if maps is None:
                return banded.sss_solve(G, Y, not self.lower, self._band(True, G))
        G, reversed_ = self.time_lower()
        if reversed_:
            return torch.flip(block_solve(G, torch.flip(Y, (-2,)), maps=maps), (-2,))
        return block_solve(G, Y, maps=maps)

    def _wide_maps(self, Y: torch.Tensor) -> ChunkMaps | None:
        """The chunk maps of the time-lower generators, kept for solves of a plain ``Y (T, K)`` of at least
        :data:`~structmat.linalg.block_solve.WIDE_COLUMNS` columns (the banded solve runs one column at a time),
        where they are small (``T (WIDE_CHUNK + 2 N)`` entries within the band's bound); else None."""
        T = self.shape[-1]
        if Y.dim() != 2 or self.batch_shape or Y.shape[-1] < WIDE_COLUMNS \
                or T * (WIDE_CHUNK + 2 * self.order) > banded.KEEP_MAX_ENTRIES:
            return None
        return small.keep(self, "chunk maps", lambda: chunk_maps(self.time_lower()[0], WIDE_CHUNK))

    def compress(self, tol: float | None = None) -> SSS:
        """Equivalent SSS of minimal order (:func:`structmat.linalg.realization.minimal_realization`).

        A strictly lower part that cancels to rounding noise (``S - S``, ``S @ S.inv()``) keeps no state: order 0.

        Examples
        --------
        >>> import torch, structmat as sm
        >>> a = sm.OneSS.from_decays(torch.rand(50, dtype=torch.float64))
        >>> (a + a).order, (a + a).compress().order
        (2, 1)
        """
        return SSS._from_generators(minimal_realization(self.generators, tol), self.lower)

    @classmethod
    def from_generators(cls, U, V, *, dtype: torch.dtype | None = None, device=None) -> SSS:
        """``tril(U V^T)`` for ``U, V`` of shape ``(*, T, r)``: order ``r``, ``A = 1``.

        The generator form is numerically unstable for decaying data: a decay ``a^{j-i}``
        written as ``a^j a^{-i}`` overflows; use ``A`` for decays instead.
        """
        U = as_tensor(U, "U", dtype=dtype, device=device)
        V = as_tensor(V, "V", dtype=dtype, device=device, like=("U", U))
        if U.dim() < 2 or V.dim() < 2 or U.shape[-2:] != V.shape[-2:]:
            raise ValueError(f"U and V must both have shape (*, T, r); got {tuple(U.shape)} and {tuple(V.shape)}")
        broadcast_batch(("U", U.shape[:-2]), ("V", V.shape[:-2]))
        check_finite(U, "U")
        check_finite(V, "V")
        with trusted_parameters():  # checked here, under the names the caller wrote
            return cls(torch.ones(U.shape[:-1], dtype=U.dtype, device=U.device), V, U)


class SSSInverse(SSS):
    """``M^{-1}`` of an SSS ``M``, in SSS form (the generators of the inversion recurrence, see
    :func:`structmat.algebra.semiseparable.sss_inverse`), whose products run ``M.solve``: the block
    forward substitution keeps diagonal transitions diagonal (``O(T (L + N) K)``), where the
    inverse's own transitions are dense (``O(T N^2 K)``). Everything else (closure operations,
    ``to_dense``, ``order``) uses the inverse's generators.

    Examples
    --------
    >>> import torch, structmat as sm
    >>> M = sm.SSS(torch.rand(6, 2, dtype=torch.float64), torch.randn(6, 2, dtype=torch.float64),
    ...            torch.randn(6, 2, dtype=torch.float64), D=3 + torch.rand(6, dtype=torch.float64))
    >>> inverse = M.inv()
    >>> type(inverse).__name__, inverse.order
    ('SSSInverse', 2)
    >>> bool(torch.allclose(inverse @ (M @ torch.ones(6, dtype=torch.float64)), torch.ones(6, dtype=torch.float64)))
    True
    """

    small_dense = False  # its products are the solves of ``of``, which keeps the dense form

    def __init__(self, of: SSS, generators: Callable[[], Generators], order: int):
        # The generators cost O(T N^3) and a dense (T, N, N) transition buffer, and products never
        # read them: they are built on first use (closure operations, to_dense).
        self.of, self._build, self._order, self._generators = of, generators, order, None
        self.lower = of.lower
        StructuredMatrix.__init__(self, of.shape, of.dtype, of.device)

    def __getstate__(self) -> dict:
        """Copies and pickles carry the generators built, without a graph: the builder is a closure over the data of
        the matrix it came from (a copy would keep reading the original's; a closure does not pickle)."""
        state = super().__getstate__()
        if state["_generators"] is None:
            with torch.no_grad():
                state["_generators"] = self._build()
        state["_build"] = None
        return state

    @property
    def generators(self) -> Generators:
        if self._build is None:  # (a copy or an unpickled inverse: built when it was copied)
            return self._generators
        # kept with the matrix inverted, as its other kept forms: built again after an in-place change of its
        # parameters, and at every use where they want a gradient (a kept graph could be walked back only once)
        return small.keep(self.of, "inverse generators", self._build)

    transitions = property(lambda self: self.generators.A)
    B = property(lambda self: self.generators.B)
    C = property(lambda self: self.generators.C)
    D = property(lambda self: self.generators.D)

    @property
    def order(self) -> int:
        return self._order

    def _matmat(self, X: torch.Tensor) -> torch.Tensor:
        return self.of.solve(X)

    def _map(self, fn) -> SSSInverse:
        def mapped() -> Generators:
            G = self.generators
            return Generators(G.A.map(fn), fn(G.B), fn(G.C), None if G.D is None else fn(G.D))

        return SSSInverse(self.of._map(fn), mapped, self._order)

    @property
    def T(self) -> SSSInverse:
        return SSSInverse(self.of.T, lambda: self.generators, self._order)
