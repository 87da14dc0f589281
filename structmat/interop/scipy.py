"""scipy ``LinearOperator`` views of structured matrices (so scipy's iterative solvers work on them)."""

from __future__ import annotations

import numpy as np
import scipy.sparse.linalg
import torch

from structmat.core.base import StructuredMatrix

__all__ = ["aslinearoperator"]


def aslinearoperator(M: StructuredMatrix) -> scipy.sparse.linalg.LinearOperator:
    """A 2-D structured matrix as a ``scipy.sparse.linalg.LinearOperator``.

    ``matvec``/``matmat`` use the fast structured product, ``rmatvec`` the conjugate transpose,
    so ``gmres``, ``cg``, ``eigs`` and ``svds`` work on any 2-D structured matrix.

    Parameters
    ----------
    M : StructuredMatrix
        Of shape ``(T, S)`` (no batch: take one matrix of a batch first), in float32, float64, complex64 or
        complex128 (the dtypes scipy's solvers take).

    Returns
    -------
    scipy.sparse.linalg.LinearOperator
        Of shape ``(T, S)`` and ``M``'s dtype; it takes numpy vectors ``(S,)`` and matrices ``(S, K)`` and returns
        numpy arrays (computed on ``M``'s device, without gradients).

    Examples
    --------
    >>> import numpy as np, scipy.sparse.linalg as sla, torch, structmat as sm
    >>> M = sm.OneSS.from_decays(torch.full((200,), 0.9, dtype=torch.float64))
    >>> y = np.ones(200)
    >>> x, info = sla.gmres(sm.aslinearoperator(M), y, rtol=1e-12)
    >>> bool(np.allclose(np.asarray(M) @ x, y))
    True
    """
    if not isinstance(M, StructuredMatrix):
        raise TypeError(f"M must be a StructuredMatrix, got {type(M).__name__}")
    if M.ndim != 2:
        raise ValueError(f"aslinearoperator needs a 2-D matrix (no batch); got shape {tuple(M.shape)}")
    if M.dtype not in (torch.float32, torch.float64, torch.complex64, torch.complex128):
        raise TypeError(f"aslinearoperator needs float32, float64, complex64 or complex128 (scipy's dtypes); got "
                        f"{M.dtype}: convert first, M.to(torch.float32)")
    MH = M.H

    def apply(op, x):
        x = np.asarray(x)
        if not x.flags.writeable or any(stride < 0 for stride in x.strides):
            x = np.array(x)  # (torch shares no reversed or read-only memory)
        x = torch.as_tensor(x, device=M.device)
        with torch.no_grad():
            return op.matmul(x).cpu().resolve_conj().numpy()

    dtype = torch.empty(0, dtype=M.dtype).numpy().dtype
    return scipy.sparse.linalg.LinearOperator(
        tuple(M.shape),
        matvec=lambda x: apply(M, x),
        rmatvec=lambda x: apply(MH, x),
        matmat=lambda X: apply(M, X),
        rmatmat=lambda X: apply(MH, X),
        dtype=dtype,
    )
