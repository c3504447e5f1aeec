"""Network side of :mod:`r2d2kit.spaces`: stored observation codes -> one-hots and values, inside the model.

Replay and actors carry the compact code vector of a Discrete / MultiDiscrete / Tuple / Dict
observation; :class:`CodeEncoder` puts a :class:`CodeEncoding` layer in front of any encoder, so the
encoder (the built-in MLP or yours) sees the one-hot encoded vector and never the codes::

    codes [..., code_size] --CodeEncoding--> [..., encoded_size] --your encoder--> features

The encoding is one gather and one comparison on the last axis, so it works on any leading axes
(``[N, D]`` frames or ``[B, T, D]`` windows) and adds no weights.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import numpy.typing as npt

from r2d2kit.models.encoders import ImageModel
from r2d2kit.spaces import ObservationLayout

__all__ = ["CodeEncoding", "CodeEncoder"]


class CodeEncoding(keras.layers.Layer):
    """Codes ``[..., code_size]`` -> ``[..., encoded_size]`` float32 by a gather plan (no weights).

    Entry ``j`` of the output is ``codes[..., source[j]]`` where ``category[j] < 0`` (a value, fed
    as it is), else ``1.0`` if ``codes[..., source[j]] == category[j]`` and ``0.0`` otherwise (a
    one-hot slot); :meth:`r2d2kit.spaces.ObservationLayout.encoding_plan` gives the plan.

    Args:
        source: code column read by each output entry.
        category: the category a one-hot slot stands for, or -1 for a value.
    """

    def __init__(self, source: npt.ArrayLike, category: npt.ArrayLike, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.source = np.asarray(source, dtype=np.int32).reshape(-1)
        self.category = np.asarray(category, dtype=np.float32).reshape(-1)
        if self.source.shape != self.category.shape or (self.source < 0).any():
            raise ValueError(f"CodeEncoding: source and category must be equally long with source >= 0, got "
                             f"{self.source.shape} and {self.category.shape}")

    def call(self, codes):
        """Encode the last axis of ``codes``."""
        gathered = keras.ops.take(keras.ops.cast(codes, "float32"), self.source, axis=-1)  # [..., E]
        one_hot = keras.ops.cast(keras.ops.equal(gathered, self.category), "float32")
        return keras.ops.where(self.category < 0, gathered, one_hot)

    def compute_output_shape(self, input_shape: tuple) -> tuple:
        """Same leading axes, ``encoded_size`` entries last."""
        return tuple(input_shape[:-1]) + (int(self.source.size),)

    def get_config(self) -> dict:
        """The plan, so the layer can be rebuilt from its config."""
        return {**super().get_config(), "source": self.source.tolist(), "category": self.category.tolist()}


class CodeEncoder(ImageModel):
    """An encoder fed the one-hot encoded observation instead of the stored codes.

    ``r2d2kit.training.builders.build_network`` wraps the configured encoder in it whenever the
    env's observation space is not a Box; with your own loop, wrap yours the same way::

        layout = env.get_wrapper_attr("observation_layout")   # env = r2d2kit.spaces.wrap_spaces(raw_env)
        network = QNetwork(env.observation_space.shape, n, CodeEncoder(layout, MLPModel((64,))),
                           obs_dtype=str(env.observation_space.dtype))

    An MLP's ``input_scale`` then has one entry per encoded input (``layout.encoded_size``).

    Args:
        layout: the observation layout of the env (:func:`r2d2kit.spaces.observation_layout`).
        encoder: the encoder that maps the encoded vector to features.
    """

    def __init__(self, layout: ObservationLayout, encoder: ImageModel) -> None:
        if not isinstance(encoder, ImageModel):
            raise TypeError(f"CodeEncoder: encoder must be an r2d2kit.models.ImageModel, got {type(encoder).__name__}")
        super().__init__()
        self.layout = layout
        self.encoder = encoder

    def create_image_model(self, x):
        """Encode the codes (last axis), then build the wrapped encoder on the result."""
        source, category = self.layout.encoding_plan()
        encoded = CodeEncoding(source, category, name="code_encoding")(x)
        return self.encoder.create_image_model(encoded)
