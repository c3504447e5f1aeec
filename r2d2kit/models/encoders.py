"""Observation encoders: the ``ImageModel`` base class users subclass, and the built-ins.

An encoder maps a batch of observations to features. The Q-network builder calls
:meth:`ImageModel.create_image_model` exactly once, with a Keras input that has a time axis
(``[batch, time, *obs_shape]``) and ``time_steps=True``; the resulting Keras model is shared by the
learner (``[batch, L]`` windows) and the actors (``[envs, 1]`` steps), so both see the same weights.
Wrap per-frame layers in ``keras.layers.TimeDistributed`` when ``time_steps`` is true (the helper
:meth:`ImageModel.per_frame` does it for you).
"""

from __future__ import annotations

import keras
import numpy as np


class ImageModel:
    """Base class for encoders: override :meth:`create_image_model`.

    Example:
        >>> class TinyConv(ImageModel):
        ...     def create_image_model(self, x, time_steps):
        ...         x = self.per_frame(keras.layers.Conv2D(8, 3, strides=2, activation="relu"), x, time_steps)
        ...         return self.per_frame(keras.layers.Flatten(), x, time_steps)
    """

    def create_image_model(self, x, time_steps: bool):
        """Map ``x`` (``[B, T, *obs]`` if ``time_steps`` else ``[B, *obs]``) to features (``[B, T, F]`` or ``[B, F]``)."""
        raise NotImplementedError("subclass ImageModel and implement create_image_model(x, time_steps)")

    @staticmethod
    def per_frame(layer: keras.layers.Layer, x, time_steps: bool):
        """Apply ``layer`` to every frame: wrapped in ``TimeDistributed`` when there is a time axis."""
        return keras.layers.TimeDistributed(layer)(x) if time_steps else layer(x)

    @staticmethod
    def scale_uint8(x):
        """Cast to float32, dividing by 255 if the input is uint8 (images are stored as uint8)."""
        if x.dtype == "uint8":
            return keras.ops.cast(x, "float32") / 255.0
        return keras.ops.cast(x, "float32")

    def build(self, obs_shape: tuple[int, ...], obs_dtype: str = "float32") -> keras.Model:
        """The shared encoder model: ``[B, T, *obs_shape] -> [B, T, features]``."""
        inputs = keras.Input(shape=(None,) + tuple(obs_shape), dtype=obs_dtype, name="obs")
        outputs = self.create_image_model(inputs, time_steps=True)
        if len(outputs.shape) != 3:
            raise ValueError(
                f"{type(self).__name__}.create_image_model must return [batch, time, features] when "
                f"time_steps=True, got shape {outputs.shape}; add a Flatten (per frame) before returning"
            )
        return keras.Model(inputs, outputs, name=type(self).__name__)


class MLPModel(ImageModel):
    """Dense layers for vector observations (``InputType.VALUES``).

    Args:
        units: width of each dense layer.
        activation: their activation.
        input_scale: a constant (one number, or one per observation entry) the observation is
            multiplied by before the first layer, to bring entries of small range to unit scale
            (e.g. a pole angle of +-0.2 rad, whose step-to-step changes carry its velocity);
            default: none.
    """

    def __init__(self, units: tuple[int, ...] = (64,), activation: str = "relu",
                 input_scale: float | tuple[float, ...] | None = None) -> None:
        self.units = tuple(units)
        self.activation = activation
        self.input_scale = None if input_scale is None else np.asarray(input_scale, dtype=np.float32)
        if self.input_scale is not None and (self.input_scale.ndim > 1 or not np.all(np.isfinite(self.input_scale))):
            raise ValueError(f"input_scale must be a finite number or one number per observation entry, "
                             f"got {input_scale!r}")

    def create_image_model(self, x, time_steps: bool):
        x = self.scale_uint8(x)
        if self.input_scale is not None:
            x = x * self.input_scale  # a constant, broadcast over the last (observation) axis
        if len(x.shape) > (3 if time_steps else 2):
            x = self.per_frame(keras.layers.Flatten(), x, time_steps)
        for width in self.units:
            x = keras.layers.Dense(width, activation=self.activation)(x)  # Dense acts on the last axis
        return x


class DQNImageModel(ImageModel):
    """The Nature DQN CNN (Mnih et al. 2015): 32x8x8/4, 64x4x4/2, 64x3x3/1, dense 512."""

    def __init__(self, dense_units: int = 512) -> None:
        self.dense_units = dense_units

    def create_image_model(self, x, time_steps: bool):
        x = self.scale_uint8(x)
        if len(x.shape) == (4 if time_steps else 3):  # gray 2-D: add a channel axis
            x = keras.ops.expand_dims(x, -1)
        for filters, kernel, stride in ((32, 8, 4), (64, 4, 2), (64, 3, 1)):
            x = self.per_frame(keras.layers.Conv2D(filters, kernel, strides=stride, activation="relu"), x, time_steps)
        x = self.per_frame(keras.layers.Flatten(), x, time_steps)
        return keras.layers.Dense(self.dense_units, activation="relu")(x)


class R2D3ImageModel(ImageModel):
    """IMPALA ResNet as used by R2D3 (Espeholt et al. 2018): stacks of conv, max-pool and 2 residual blocks."""

    def __init__(self, channels: tuple[int, ...] = (16, 32, 32), dense_units: int = 256) -> None:
        self.channels = tuple(channels)
        self.dense_units = dense_units

    def create_image_model(self, x, time_steps: bool):
        frame = self.per_frame
        x = self.scale_uint8(x)
        if len(x.shape) == (4 if time_steps else 3):
            x = keras.ops.expand_dims(x, -1)
        for channels in self.channels:
            x = frame(keras.layers.Conv2D(channels, 3, padding="same"), x, time_steps)
            x = frame(keras.layers.MaxPooling2D(3, strides=2, padding="same"), x, time_steps)
            for _ in range(2):
                shortcut = x
                x = keras.layers.Activation("relu")(x)
                x = frame(keras.layers.Conv2D(channels, 3, padding="same"), x, time_steps)
                x = keras.layers.Activation("relu")(x)
                x = frame(keras.layers.Conv2D(channels, 3, padding="same"), x, time_steps)
                x = keras.layers.Add()([x, shortcut])
        x = keras.layers.Activation("relu")(x)
        x = frame(keras.layers.Flatten(), x, time_steps)
        return keras.layers.Dense(self.dense_units, activation="relu")(x)
