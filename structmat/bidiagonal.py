"""Lower bidiagonal matrices (the inverses of 1-SS matrices)."""

from __future__ import annotations

import torch

from structmat.base import SingularMatrixError, StructuredMatrix, as_tensor, check_finite

__all__ = ["Bidiagonal"]


class Bidiagonal(StructuredMatrix):
    """Lower bidiagonal: ``M[t, t] = diag[t]``, ``M[t + 1, t] = sub[t]``.

    Parameters
    ----------
    diag : array_like, shape ``(*, T)``
    sub : array_like, shape ``(*, T - 1)``

    Notes
    -----
    Matvec ``O(T K)``; ``inv()`` is a :class:`~structmat.OneSS` (with ``b``), ``O(T)``.
    As an SSS it has order 2 (``to_sss``): with ``M[j, i] = C_j^T A_j ... A_{i+1} B_i`` the
    output always passes through ``A_j``, so a lone subdiagonal needs a two-state shift register.

    Examples
    --------
    >>> import torch, structmat as sm
    >>> M = sm.Bidiagonal(torch.ones(3), -0.5 * torch.ones(2))
    >>> M.inv().to_dense()
    tensor([[1.0000, 0.0000, 0.0000],
            [0.5000, 1.0000, 0.0000],
            [0.2500, 0.5000, 1.0000]])
    """

    order = 2

    def __init__(self, diag, sub):
        diag = as_tensor(diag, "diag")
        sub = as_tensor(sub, "sub", device=diag.device)
        if diag.dim() < 1 or sub.dim() != diag.dim() or sub.shape[-1] != diag.shape[-1] - 1:
            raise ValueError(f"diag and sub must have shapes (*, T) and (*, T-1); got {tuple(diag.shape)} and {tuple(sub.shape)}")
        check_finite(diag, "diag")
        check_finite(sub, "sub")
        dtype = torch.promote_types(diag.dtype, sub.dtype)
        self.diag, self.sub = diag.to(dtype), sub.to(dtype)

    @property
    def shape(self) -> torch.Size:
        batch = torch.broadcast_shapes(self.diag.shape[:-1], self.sub.shape[:-1])
        T = self.diag.shape[-1]
        return torch.Size((*batch, T, T))

    @property
    def dtype(self) -> torch.dtype:
        return self.diag.dtype

    @property
    def device(self) -> torch.device:
        return self.diag.device

    def diagonal(self) -> torch.Tensor:
        return self.diag

    def to_dense(self) -> torch.Tensor:
        return torch.diag_embed(self.diag) + torch.diag_embed(self.sub, offset=-1)

    def _matmat(self, X: torch.Tensor) -> torch.Tensor:
        shifted = self.sub[..., None] * X[..., :-1, :]
        return self.diag[..., None] * X + torch.nn.functional.pad(shifted, (0, 0, 1, 0))

    def _map(self, fn) -> Bidiagonal:
        return Bidiagonal(fn(self.diag), fn(self.sub))

    def _scale(self, s) -> Bidiagonal:
        return Bidiagonal(self.diag * s, self.sub * s)

    def to_sss(self):
        """The same matrix as an order-2 :class:`~structmat.SSS` (shift register)."""
        from structmat.sss import SSS

        T = self.shape[-1]
        z = torch.zeros((), dtype=self.dtype, device=self.device)
        shift = torch.tensor([[0.0, 0.0], [1.0, 0.0]], dtype=self.dtype, device=self.device)
        A = shift.expand(T, 2, 2)
        B = torch.tensor([1.0, 0.0], dtype=self.dtype, device=self.device).expand(*self.diag.shape, 2)
        sub = torch.cat([z.expand(*self.sub.shape[:-1], 1), self.sub], dim=-1)
        C = torch.stack([torch.zeros_like(sub), sub], dim=-1)
        batch = self.shape[:-2]
        return SSS(A.expand(*batch, T, 2, 2), B.expand(*batch, T, 2), C.expand(*batch, T, 2), self.diag.expand(*batch, T))

    def inv(self):
        """Exact inverse as a :class:`~structmat.OneSS`: ``x_t = (y_t - sub_{t-1} x_{t-1}) / diag_t``.

        Negative ratios are carried by signs in ``b`` and ``c`` so the decays stay in log space.
        """
        from structmat.one_ss import OneSS, safe_log

        if bool((self.diag == 0).any()):
            raise SingularMatrixError("Bidiagonal has a zero diagonal entry")
        ratio = -self.sub / self.diag[..., 1:]
        if ratio.is_complex():
            raise TypeError("Bidiagonal.inv() as OneSS needs real entries; use to_sss().inv()")
        ratio = torch.cat([torch.ones_like(self.diag[..., :1]).expand(*ratio.shape[:-1], 1), ratio], dim=-1)
        sign = torch.cumprod(torch.where(ratio < 0, -1.0, 1.0).to(ratio.dtype), dim=-1)
        return OneSS(safe_log(ratio.abs()), b=sign / self.diag, c=sign)

    def solve(self, Y) -> torch.Tensor:
        return self.inv().matmul(Y)
