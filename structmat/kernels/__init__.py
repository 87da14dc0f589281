"""The chunked-decay primitive (``[B, T, H, *]`` inputs, ``[B, T, H]`` log decays, ``(B, H, P, N)`` states)
with its step-by-step reference, its torch implementation and its Triton kernels beside it, and the exact
gradient of its decays in linear space (:mod:`structmat.kernels.decay_adjoint`)."""

from structmat.kernels.chunked_decay import chunked_decay

__all__ = ["chunked_decay"]
