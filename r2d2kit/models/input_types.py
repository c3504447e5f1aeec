"""What kind of observation a network gets, inferred from the gymnasium space (overridable)."""

from __future__ import annotations

import enum

import gymnasium as gym


class InputType(enum.Enum):
    """Observation kinds the built-in encoders understand (names from the Keras-RL R2D2 port)."""

    VALUES = "values"  # a flat vector: [features]
    GRAY_2D = "gray_2d"  # [height, width]
    GRAY_CHANNEL = "gray_channel"  # [height, width, 1]
    COLOR = "color"  # [height, width, 3]

    @classmethod
    def coerce(cls, value: InputType | str) -> InputType:
        if isinstance(value, cls):
            return value
        try:
            return cls(str(value).lower())
        except ValueError:
            raise ValueError(f"input_type must be one of {[m.value for m in cls]}, got {value!r}") from None


def infer_input_type(space: gym.Space) -> InputType:
    """Guess the input type from a Box space's shape: 1-D values, 2-D gray, 3-D with 1 or 3 channels."""
    shape = getattr(space, "shape", None)
    if not isinstance(space, gym.spaces.Box) or shape is None:
        raise ValueError(f"cannot infer an input type from {space}; pass input_type explicitly")
    if len(shape) == 1:
        return InputType.VALUES
    if len(shape) == 2:
        return InputType.GRAY_2D
    if len(shape) == 3 and shape[-1] == 1:
        return InputType.GRAY_CHANNEL
    if len(shape) == 3 and shape[-1] == 3:
        return InputType.COLOR
    raise ValueError(f"cannot infer an input type from shape {shape}; pass input_type explicitly")
