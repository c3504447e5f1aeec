"""Weight transport from the learner to actors elsewhere: the network as one float32 vector.

Actor processes receive it through :class:`~r2d2kit.runners.shm.WeightBroadcast`, Ray actors
through the object store; a policy loads it with :func:`load_flat_weights` (its ``load_weights``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import keras


def flatten_weights(variables: Iterable[keras.Variable]) -> np.ndarray:
    """All variables as one float32 vector (the broadcast payload)."""
    return np.concatenate([np.asarray(v.numpy(), np.float32).ravel() for v in variables])


def load_flat_weights(variables: Iterable[keras.Variable], vector: np.ndarray) -> None:
    """Assign a :func:`flatten_weights` vector to ``variables`` (the same variables, in the same order).

    Raises:
        ValueError: the vector holds another number of values than the variables.
    """
    variables = list(variables)
    total = sum(int(np.prod(variable.shape)) for variable in variables)
    if total != vector.size:
        raise ValueError(f"weight vector has {vector.size} values, the network {total}")
    offset = 0
    for variable in variables:
        size = int(np.prod(variable.shape))
        variable.assign(vector[offset:offset + size].reshape(variable.shape))
        offset += size


def weight_lag(version: int, versions_seen: Mapping[int, int], publish_every: int) -> float:
    """Updates the most out-of-date actor's weights are behind the newest broadcast: ``version`` less the oldest
    version an actor acted with, in publishes of ``publish_every`` updates; NaN before any actor reported one."""
    if not versions_seen:
        return float("nan")
    return float((version - min(versions_seen.values())) * publish_every)
