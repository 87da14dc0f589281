"""The transitions ``A_0, ..., A_{T-1}`` of a state-space recurrence ``h_t = A_t h_{t-1} + u_t``.

One type owns the four kinds of transition (the transitions of two recurrences joined, for sums, products and
Hadamard products, are built beside it in :mod:`structmat.core.joined_transitions`):

========  ========================  ==================================================
kind      ``values`` shape          meaning of step ``t``
========  ========================  ==================================================
``log``   ``(*, T)``, real          scalar decay ``exp(values[t])`` (``-inf``: exact 0)
``scalar`` ``(*, T)``               scalar ``values[t]`` (real or complex, any sign)
``diag``  ``(*, T, N)``             diagonal ``diag(values[t])``
``dense`` ``(*, T, N, N)``          dense ``values[t]``
========  ========================  ==================================================

Products of consecutive log decays are sums of logs (never ratios of cumulative products), so
``a_t = 0`` stays an exact zero and long products of decays near 1 stay accurate. The scalar
kinds apply to a state of any size ``N``; methods that need it take ``N``.

Log transitions may carry the decays themselves beside their logs (``decays``, the same numbers
``exp(values)``, as a user gave them), only to differentiate them: the values still come from the logs,
but the gradient goes to the decays in linear space, where ``d/da_t`` of a product of decays is the
product of the others, also at ``a_t = 0`` (through ``log a_t = -inf`` it is lost). Every operation
carries them along as scalar transitions (identity 1, products for sums of logs) while a gradient is
wanted (:func:`carries_gradient`; otherwise they cost nothing); :meth:`Transitions.actual` joins the two.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from structmat.core.dtypes import real_dtype
from structmat.core.validation import check_finite

__all__ = ["Transitions", "KINDS", "carries_gradient", "with_gradient_of"]

_TAIL = {"log": 1, "scalar": 1, "diag": 2, "dense": 3}  # trailing dims of ``values``, time first
KINDS = tuple(_TAIL)


def carries_gradient(decays: torch.Tensor | None) -> bool:
    """Whether ``decays`` (or None) are differentiated here and now."""
    return decays is not None and decays.requires_grad and torch.is_grad_enabled()


def _keeps_decays(method: Callable[..., Transitions]) -> Callable[..., Transitions]:
    """A method of log transitions that carry their decays: the decays follow as scalar transitions."""

    @functools.wraps(method)
    def carried(self: Transitions, *args, **kwargs) -> Transitions:
        out = method(self, *args, **kwargs)
        if not carries_gradient(self.decays):
            return out
        return Transitions(out.values, out.kind, method(Transitions(self.decays, "scalar"), *args, **kwargs).values)

    return carried


def with_gradient_of(values: torch.Tensor, decays: torch.Tensor) -> torch.Tensor:
    """``values`` (detached) with the gradient of ``decays``: the value of one, the derivative of the other."""
    return values.detach() + (decays - decays.detach())


class Transitions:
    """Transitions of one kind (see the module docstring), batched like ``values[..., t, ...]``.

    Examples
    --------
    >>> import torch, structmat as sm
    >>> A = sm.Transitions.from_log(torch.log(torch.tensor([1.0, 0.5, 0.5])))
    >>> A.prefix().actual()
    tensor([1.0000, 0.5000, 0.2500])
    >>> A.apply(torch.ones(3, 2, 1))[:, :, 0]
    tensor([[1.0000, 1.0000],
            [0.5000, 0.5000],
            [0.5000, 0.5000]])
    """

    __slots__ = ("values", "kind", "decays")

    def __init__(self, values: torch.Tensor, kind: str, decays: torch.Tensor | None = None):
        if not isinstance(values, torch.Tensor):
            raise TypeError(f"values must be a tensor of shape (*, T) (log, scalar), (*, T, N) (diag) or (*, T, N, N) "
                            f"(dense); got {type(values).__name__}")
        if kind not in _TAIL:
            raise ValueError(f"kind must be one of {KINDS}; got {kind!r}")
        if kind == "log" and values.is_complex():
            raise TypeError("log transitions must be real (logs of non-negative decays)")
        decays = decays if carries_gradient(decays) else None
        if decays is not None and (kind != "log" or decays.shape != values.shape):
            raise ValueError(f"only log transitions keep decays, of the shape of their logs {tuple(values.shape)}")
        self.values = values
        self.kind = kind
        self.decays = decays  # the log kind: exp(values) themselves, to differentiate exactly (or None)

    # --- construction ---------------------------------------------------------------------------
    @classmethod
    def from_log(cls, log_a: torch.Tensor, decays: torch.Tensor | None = None) -> Transitions:
        return cls(log_a, "log", decays)

    @classmethod
    def from_shape(cls, A: torch.Tensor, B: torch.Tensor) -> Transitions:
        """Scalar, diagonal or dense transitions, told apart by the shape of ``A`` against ``B (*, T, N)``."""
        extra, N = A.dim() - B.dim(), B.shape[-1]
        if extra == -1:
            return cls(A, "scalar")
        if extra == 0 and A.shape[-1] == N:
            return cls(A, "diag")
        if extra == 1 and A.shape[-2:] == (N, N):
            return cls(A, "dense")
        raise ValueError(f"A must have shape (*, T), (*, T, N) or (*, T, N, N) with N={N} and as many batch dims "
                         f"as B {tuple(B.shape)}; got {tuple(A.shape)}")

    def _like(self, values: torch.Tensor) -> Transitions:
        return Transitions(values, self.kind)

    # --- shape -------------------------------------------------------------------------------------
    @property
    def _tail(self) -> int:
        return _TAIL[self.kind]

    @property
    def _axis(self) -> int:
        return self.values.dim() - self._tail

    @property
    def length(self) -> int:
        return self.values.shape[self._axis]

    @property
    def batch_shape(self) -> torch.Size:
        return self.values.shape[: self._axis]

    @property
    def dtype(self) -> torch.dtype:
        return self.values.dtype

    @property
    def device(self) -> torch.device:
        return self.values.device

    def check_finite(self, name: str) -> None:
        check_finite(self.values, name, allow_neg_inf=self.kind == "log")

    def flops_per_column(self, N: int) -> int:
        """Multiply-adds of one step applied to one state column of size ``N``."""
        return N * N if self.kind == "dense" else N

    # --- forms -------------------------------------------------------------------------------------
    def actual(self) -> torch.Tensor:
        """The transitions as a user gives them: decays ``exp(log)`` for the log kind (with the gradient of the
        decays it keeps, where they are differentiated), else ``values``."""
        if self.kind != "log":
            return self.values
        if not carries_gradient(self.decays):
            return torch.exp(self.values)
        return with_gradient_of(torch.exp(self.values), self.decays)

    def matrices(self, N: int, dtype: torch.dtype | None = None) -> torch.Tensor:
        """Dense ``(*, T, N, N)``."""
        A = self.actual()
        A = A if dtype is None or A.dtype == dtype else A.to(dtype)
        if self.kind in ("log", "scalar"):  # one state: no identity's product (two operations), never a parameter's view
            if N == 1:
                return A[..., None, None] if A is not self.values else A[..., None, None].clone()
            return A[..., None, None] * torch.eye(N, dtype=A.dtype, device=A.device)
        return torch.diag_embed(A) if self.kind == "diag" else A

    def diagonals(self, N: int, dtype: torch.dtype | None = None) -> torch.Tensor | None:
        """``(*, T, N)`` diagonals, or None for dense transitions."""
        if self.kind == "dense":
            return None
        A = self.actual()
        A = A if dtype is None or A.dtype == dtype else A.to(dtype)
        return A[..., None].expand(*A.shape, N) if self.kind in ("log", "scalar") else A

    def log_decays(self) -> torch.Tensor | None:
        """``(*, T)`` log decays of scalar decay transitions (the kind a ``OneSS`` keeps), else None."""
        return self.values if self.kind == "log" else None

    def decay_diagonals(self, N: int) -> torch.Tensor | None:
        """``(*, T, N)`` decays in linear space beside :meth:`log_diagonals` (the decays the log kind keeps, the
        values of non-negative diagonals), for exact gradients at 0; None where there are none."""
        if self.kind == "log":
            return None if self.decays is None else self.decays[..., None].expand(*self.decays.shape, N)
        return None if self.kind == "dense" or self.values.is_complex() else self.diagonals(N)

    def promote(self, dtype: torch.dtype) -> torch.dtype:
        """The dtype of a matrix with these transitions and maps of ``dtype`` (real decays do not make it wider)."""
        return dtype if self.kind == "log" else torch.promote_types(dtype, self.dtype)

    def log_diagonals(self, N: int) -> torch.Tensor | None:
        """``(*, T, N)`` log decays when every transition is a non-negative real diagonal (step 0 ignored), else None."""
        if self.kind == "log":
            return self.values[..., None].expand(*self.values.shape, N)
        A = self.diagonals(N)
        if A is None or A.is_complex() or bool((A[..., 1:, :] < 0).any()):
            return None
        return torch.where(A > 0, torch.log(torch.where(A > 0, A, torch.ones_like(A))), float("-inf"))

    # --- along the time axis ---------------------------------------------------------------------
    def identity(self) -> torch.Tensor:
        """One neutral step (broadcastable against a step of ``values``)."""
        if self.kind == "log":
            return torch.zeros((), dtype=self.dtype, device=self.device)
        if self.kind == "dense":
            return torch.eye(self.values.shape[-1], dtype=self.dtype, device=self.device)
        return torch.ones((), dtype=self.dtype, device=self.device)

    @_keeps_decays
    def narrow(self, start: int, length: int) -> Transitions:
        return self._like(self.values.narrow(self._axis, start, length))

    @_keeps_decays
    def padded(self, steps: int) -> Transitions:
        """``steps`` neutral steps appended."""
        if steps == 0:
            return self
        shape = list(self.values.shape)
        shape[self._axis] = steps
        return self._like(torch.cat([self.values, self.identity().expand(shape)], dim=self._axis))

    @_keeps_decays
    def with_identity_first(self) -> Transitions:
        """Step 0 replaced by the identity (it is unused by definition: garbage there stays harmless)."""
        rest = self.values.narrow(self._axis, 1, self.length - 1)
        shape = list(self.values.shape)
        shape[self._axis] = 1
        return self._like(torch.cat([self.identity().expand(shape), rest], dim=self._axis))

    @_keeps_decays
    def chunked(self, L: int) -> Transitions:
        """Time cut into ``n`` chunks of ``L`` (padded with neutral steps): ``n`` becomes the last batch dim."""
        n = -(-self.length // L)
        v = self.padded(n * L - self.length).values
        return self._like(v.reshape(*v.shape[: self._axis], n, L, *v.shape[self._axis + 1 :]))

    @_keeps_decays
    def reversed(self) -> Transitions:
        """The transitions of ``J M^T J`` for a lower ``M``: ``A''_t = A_{T-t}^T`` (``roll(flip(A), 1)``)."""
        A = torch.roll(torch.flip(self.values, (self._axis,)), 1, dims=self._axis)
        return self._like(A.transpose(-1, -2) if self.kind == "dense" else A)

    @_keeps_decays
    def expand(self, batch: torch.Size | tuple[int, ...]) -> Transitions:
        tail = self.values.shape[self._axis :]
        return self._like(self.values.expand(*batch, *tail))

    @_keeps_decays
    def reshape_batch(self, batch: tuple[int, ...]) -> Transitions:
        return self._like(self.values.reshape(*batch, *self.values.shape[self._axis :]))

    def map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> Transitions:
        """``fn`` applied to ``values``; log decays stay real (a cast to complex applies to the maps only)."""
        real = lambda t: t.real if self.kind == "log" and t.is_complex() else t  # noqa: E731
        decays = real(fn(self.decays)) if carries_gradient(self.decays) else None
        return Transitions(real(fn(self.values)), self.kind, decays)

    def cast(self, dtype: torch.dtype) -> Transitions:
        """In a matrix of ``dtype``: log decays take its real dtype."""
        target = real_dtype(dtype) if self.kind == "log" else dtype
        if self.dtype == target:
            return self
        decays = self.decays.to(target) if carries_gradient(self.decays) else None
        return Transitions(self.values.to(target), self.kind, decays)

    # --- products of consecutive steps -------------------------------------------------------------
    @_keeps_decays
    def prefix(self) -> Transitions:
        """``Phi_t = A_t ... A_0`` along the time axis (for the log kind: cumulative sums of logs)."""
        if self.kind == "log":
            return self._like(torch.cumsum(self.values, dim=-1))
        if self.kind != "dense":
            return self._like(torch.cumprod(self.values, dim=self._axis))
        phi = [self.values.select(self._axis, 0)]
        for t in range(1, self.length):
            phi.append(self.values.select(self._axis, t) @ phi[-1])
        return self._like(torch.stack(phi, dim=self._axis))

    @_keeps_decays
    def suffix(self) -> Transitions:
        """``Psi_t = A_end ... A_{t+1}`` (the identity at the last step)."""
        rest = self.narrow(1, self.length - 1)
        shape = list(self.values.shape)
        shape[self._axis] = 1
        one = self.identity().expand(shape)
        if self.kind == "log":
            sums = torch.flip(torch.cumsum(torch.flip(rest.values, (-1,)), -1), (-1,))
            return self._like(torch.cat([sums, one], dim=-1))
        if self.kind != "dense":
            prods = torch.flip(torch.cumprod(torch.flip(rest.values, (self._axis,)), self._axis), (self._axis,))
            return self._like(torch.cat([prods, one], dim=self._axis))
        psi = [one.select(self._axis, 0)]
        for t in range(self.length - 1, 0, -1):
            psi.append(psi[-1] @ self.values.select(self._axis, t))
        return self._like(torch.stack(psi[::-1], dim=self._axis))

    @_keeps_decays
    def total(self) -> Transitions:
        """``A_end ... A_0`` with the time axis removed: the last batch dim becomes the time axis."""
        if self.kind == "log":
            return self._like(self.values.sum(-1))
        if self.kind != "dense":
            return self._like(self.values.prod(self._axis))
        return self.prefix().last()

    @_keeps_decays
    def last(self) -> Transitions:
        """The last step with the time axis removed: the last batch dim becomes the time axis."""
        return self._like(self.values.select(self._axis, self.length - 1))

    # --- application -------------------------------------------------------------------------------
    def apply(self, h: torch.Tensor) -> torch.Tensor:
        """``A_t h_t`` for states ``h (*, T, N, K)`` aligned with the time axis (broadcast over batch)."""
        A = self.actual()
        dtype = torch.promote_types(A.dtype, h.dtype)  # (matmul does not promote: a float32 A and float64 states)
        A, h = A.to(dtype), h.to(dtype)
        if self.kind in ("log", "scalar"):
            return A[..., None, None] * h
        if self.kind == "diag":
            return A[..., None] * h
        return A @ h

    def left_apply(self, c: torch.Tensor) -> torch.Tensor:
        """``c_t^T A_t`` for row vectors ``c (*, T, N)`` aligned with the time axis."""
        if self.kind == "dense":
            return (c.unsqueeze(-2) @ self.actual()).squeeze(-2)
        A = self.actual()
        return c * (A.unsqueeze(-1) if self.kind in ("log", "scalar") else A)

    def step_factors(self) -> torch.Tensor:
        """Per-step multipliers, time first, shaped to broadcast against a state ``(*, N, K)``."""
        A = self.actual()
        if self.kind in ("log", "scalar"):
            A = A[..., None, None]
        elif self.kind == "diag":
            A = A[..., None]
        return A.movedim(self._axis, 0)

    def stepper(self) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
        """``(u_t, a_t, h) -> u_t + A_t h`` for one factor ``a_t`` of :meth:`step_factors`."""
        if self.kind == "dense":
            return lambda u, a, h: u + a @ h
        return torch.addcmul
