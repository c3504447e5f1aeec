"""Numba kernels: ``@njit(cache=True)`` functions on flat arrays, no validation, no r2d2kit imports.

Use the validated wrappers (``r2d2kit.SumTree``, ``r2d2kit.replay``) unless you are writing a new
kernel-level component and have checked your input yourself.
"""
