"""What a learner hands the backend's update: its forward pass and one :class:`LossGroup` per optimiser."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import keras

__all__ = ["LossGroup"]

# a batch -> (the losses by name, the update's outputs); every output becomes numpy after the update
Forward = Callable[[Mapping[str, Any]], tuple[Mapping[str, Any], dict[str, Any]]]


@dataclass(frozen=True)
class LossGroup:
    """One optimiser's share of an update: it minimises the forward's loss ``loss`` over ``variables``."""

    loss: str
    variables: Sequence[keras.Variable]
    optimizer: keras.optimizers.Optimizer
