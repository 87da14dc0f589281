"""Algorithms on tensors and generators, below the matrix classes: scans, compiled recurrences, FFT
products, block solves, realizations, the quasiseparable LU, Toeplitz solvers."""
