"""Keras builders: observation encoders (``ImageModel`` and built-ins) and the recurrent Q-network."""

from r2d2kit.models.encoders import (
    DQNImageModel,
    ImageModel,
    MinAtarImageModel,
    MiniGridImageModel,
    MLPModel,
    R2D3ImageModel,
)
from r2d2kit.models.input_types import InputType, infer_input_type
from r2d2kit.models.qnetwork import QNetwork, StatefulActor

__all__ = ["ImageModel", "MLPModel", "DQNImageModel", "R2D3ImageModel", "MinAtarImageModel", "MiniGridImageModel",
           "InputType", "infer_input_type", "QNetwork", "StatefulActor"]
