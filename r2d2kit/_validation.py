"""Input checks shared by the public API: convert what is safe, refuse the rest by name.

Compiled kernels trust their input, so every array reaches them through one of these helpers.
Messages name the argument, the offending position and value, and the fix.
"""

from __future__ import annotations

import importlib
import numbers
from collections.abc import Callable
from typing import TypeAlias

import numpy as np
import numpy.typing as npt

from r2d2kit.kernels.sumtree import first_invalid_priority, first_out_of_range

# What ``as_generator`` takes: an int seed, ``None`` (fresh entropy), a seed sequence, or a generator used as is
Seed: TypeAlias = int | np.integer | np.random.SeedSequence | np.random.Generator | None


def import_named(spec: str, what: str, expected: str) -> Callable[..., object]:
    """The callable a ``"package.module:name"`` string names (a config's way to point at user code).

    Raises:
        ValueError: it cannot be imported, or is no callable (``what`` names the setting, ``expected``
            says what it should be).
    """
    module_name, _, attribute = spec.partition(":")
    try:
        found = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"{what} {spec!r} cannot be imported: {error}") from None
    if not callable(found):
        raise ValueError(f"{what} {spec!r} is a {type(found).__name__}, not {expected}")
    return found


def check_positive_int(name: str, value: object, minimum: int = 1) -> int:
    """Return ``value`` as an int, or raise naming ``name`` if it is not an integer >= minimum."""
    if type(value) is int and value >= minimum:  # the common case, 0.05 us instead of 0.5 (ABC isinstance)
        return value
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer >= {minimum}, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value}")
    return int(value)


def check_float(name: str, value: object, low: float | None = None, high: float | None = None,
                low_inclusive: bool = True) -> float:
    """Return ``value`` as a finite float in the given range, or raise naming ``name``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r} ({type(value).__name__})")
    value = float(value)
    if not np.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if low is not None and (value < low or (value == low and not low_inclusive)):
        bound = ">=" if low_inclusive else ">"
        raise ValueError(f"{name} must be {bound} {low}, got {value}")
    if high is not None and value > high:
        raise ValueError(f"{name} must be <= {high}, got {value}")
    return value


def as_index_array(name: str, indices: npt.ArrayLike, size: int) -> np.ndarray:
    """Indices as a 1-D int64 array, each in ``[0, size)``.

    Raises:
        TypeError: the indices are not integers (a float array is refused rather than truncated).
        IndexError: an index is outside ``[0, size)``; the message names the first one.
    """
    array = np.asarray(indices)
    if array.ndim == 0:
        array = array.reshape(1)
    elif array.ndim != 1:
        raise ValueError(f"{name} must be a scalar or a 1-D array, got shape {array.shape}")
    if array.dtype != np.int64:
        if array.size and not np.issubdtype(array.dtype, np.integer):
            raise TypeError(
                f"{name} must hold integers, got dtype {array.dtype}; convert with .astype(np.int64)"
            )
        array = array.astype(np.int64)
    bad = first_out_of_range(array, size)
    if bad >= 0:
        raise IndexError(f"{name}[{bad}] = {array[bad]} is out of range: valid indices are 0 .. {size - 1}")
    return array


def as_priority_array(name: str, priorities: npt.ArrayLike, count: int, limit: float = np.inf) -> np.ndarray:
    """Priorities as a 1-D float64 array of length ``count`` (a scalar is broadcast).

    ``limit``: values from here up are refused too (a sampler's ``priority_limit``: the largest value
    its tree can hold over every slot).

    Raises:
        TypeError: the values are not real numbers.
        ValueError: wrong length, or a value is NaN, infinite, negative or at least ``limit`` (the first
            one is named).
    """
    array = np.asarray(priorities)
    if array.dtype != np.float64:
        if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)
                or array.dtype == np.bool_):
            raise TypeError(f"{name} must hold real numbers, got dtype {array.dtype}")
        array = array.astype(np.float64)
    if array.ndim == 0:
        array = np.full(count, float(array))
    elif array.ndim != 1 or array.shape[0] != count:
        raise ValueError(f"{name} must have shape ({count},) to match the indices, got {array.shape}")
    bad = first_invalid_priority(array, limit)
    if bad >= 0 and np.isfinite(array[bad]) and array[bad] >= 0.0:
        raise ValueError(f"{name}[{bad}] = {float(array[bad])!r} is too large: raised to the sampler's exponent "
                         f"and summed over every slot it would overflow; keep priorities (|TD errors|) below "
                         f"{limit:.3g}")
    if bad >= 0:
        raise ValueError(
            f"{name}[{bad}] = {float(array[bad])!r} is not a valid priority: priorities must be finite and >= 0 "
            "(use np.abs(td_error) and check the loss for NaN/inf)"
        )
    return array


def as_generator(seed_or_rng: Seed) -> np.random.Generator:
    """A ``np.random.Generator`` from a seed, ``None`` or an existing generator (used as is)."""
    if isinstance(seed_or_rng, np.random.Generator):
        return seed_or_rng
    if seed_or_rng is None or isinstance(seed_or_rng, (numbers.Integral, np.random.SeedSequence)):
        return np.random.default_rng(seed_or_rng)
    raise TypeError(f"rng must be a numpy Generator, an int seed or None, got {type(seed_or_rng).__name__}")


def as_per_env(name: str, values: npt.ArrayLike, num_envs: int, dtype: npt.DTypeLike) -> np.ndarray:
    """One value per env as a ``[num_envs]`` array of ``dtype``, or a ValueError naming ``name``."""
    array = np.asarray(values)
    if array.shape != (num_envs,):
        raise ValueError(f"{name} must have shape ({num_envs},), got {array.shape}")
    return array.astype(dtype, copy=False)
