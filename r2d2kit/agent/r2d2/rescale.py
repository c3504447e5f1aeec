"""Value rescaling ``h`` and its exact inverse (Pohlen et al. 2018, used by R2D2), in numpy.

    h(x)     = sign(x) (sqrt(|x| + 1) - 1) + eps x
    h^-1(x)  = sign(x) (((sqrt(1 + 4 eps (|x| + 1 + eps)) - 1) / (2 eps))^2 - 1)

Both are written in cancellation-free forms, so ``h^-1(h(x))`` returns ``x`` to float64 precision
from 1e-12 to 1e6 (the textbook forms lose all digits for tiny ``x``):

    sqrt(|x| + 1) - 1             = |x| / (sqrt(|x| + 1) + 1)
    ((s - 1) / (2 eps))^2 - 1      = d (d + 2),   d = 2 |x| / (s + 1 + 2 eps),   s = sqrt(1 + 4 eps (|x| + 1 + eps))

R2D2 targets apply ``h`` to the whole n-step return, ``h(R + gamma^n h^-1(Q))``; the shortcut
``h(r) + gamma Q`` found in some ports is a different (wrong) target.
These numpy forms serve numpy code and tests without importing Keras; the learner's update computes the same
formulas on ``keras.ops`` (:mod:`r2d2kit.agent.r2d2.losses`, names alike), on every Keras backend.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

DEFAULT_EPS = 1e-3


def _as_float_array(x: npt.ArrayLike) -> np.ndarray:
    """Floating arrays keep their precision; anything else (ints, Python floats) becomes float64."""
    array = np.asarray(x)
    return array if np.issubdtype(array.dtype, np.floating) else array.astype(np.float64)


def value_rescale(x: npt.ArrayLike, eps: float = DEFAULT_EPS) -> np.ndarray:
    """``h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x`` (numpy; float inputs keep their dtype, others become float64)."""
    x = _as_float_array(x)
    magnitude = np.abs(x)
    return np.sign(x) * magnitude / (np.sqrt(magnitude + 1.0) + 1.0) + eps * x


def inverse_value_rescale(x: npt.ArrayLike, eps: float = DEFAULT_EPS) -> np.ndarray:
    """Exact closed-form inverse of :func:`value_rescale` (numpy)."""
    x = _as_float_array(x)
    magnitude = np.abs(x)
    if eps == 0.0:
        return np.sign(x) * magnitude * (magnitude + 2.0)
    root = np.sqrt(1.0 + 4.0 * eps * (magnitude + 1.0 + eps))
    d = 2.0 * magnitude / (root + 1.0 + 2.0 * eps)
    return np.sign(x) * d * (d + 2.0)
