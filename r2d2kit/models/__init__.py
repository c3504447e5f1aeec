"""Keras builders every agent shares: observation encoders (``ImageModel`` and built-ins); the memory cores are
``r2d2kit.models.cores``. An agent's own networks live in its package (R2D2's Q-network: ``r2d2kit.agent.r2d2``)."""

from r2d2kit.models.encoders import (
    DQNImageModel,
    ImageModel,
    MinAtarImageModel,
    MiniGridImageModel,
    MLPModel,
    R2D3ImageModel,
)
from r2d2kit.models.input_types import InputType, infer_input_type

__all__ = ["ImageModel", "MLPModel", "DQNImageModel", "R2D3ImageModel", "MinAtarImageModel", "MiniGridImageModel",
           "InputType", "infer_input_type"]
