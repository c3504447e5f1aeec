"""Every agent's window priority on ``keras.ops``: :func:`masked_priorities`.

R2D2 (Kapturowski et al. 2019) prioritises a window by its TD errors' ``eta * max + (1 - eta) * mean`` over
the rows that hold transitions; R2D2 and recurrent SAC both compute it inside their compiled update, so it is
written once, on ``keras.ops``, for every Keras backend. :func:`r2d2kit.replay.sequence_priorities` is its
numpy form for code that holds numpy arrays.
"""

from __future__ import annotations

from typing import Any

import keras

__all__ = ["masked_priorities"]


def masked_priorities(abs_td: Any, mask: Any, eta: float) -> Any:
    """R2D2's window priority ``eta * max + (1 - eta) * mean`` of ``|TD|`` ``[B, T]`` over the rows in ``mask``
    (``[B]``; 0 for a window without such rows)."""
    mask = keras.ops.cast(mask, abs_td.dtype)
    masked = abs_td * mask
    mean = keras.ops.sum(masked, axis=1) / keras.ops.maximum(keras.ops.sum(mask, axis=1), 1.0)
    return eta * keras.ops.max(masked, axis=1) + (1.0 - eta) * mean
