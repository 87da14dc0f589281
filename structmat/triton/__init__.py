"""Triton kernels. Importable without a GPU; under ``TRITON_INTERPRET=1`` they run on the CPU."""
