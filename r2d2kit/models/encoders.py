"""Observation encoders: the ``ImageModel`` base class users subclass, and the built-ins.

An encoder maps frames to features. The Q-network builder calls :meth:`ImageModel.build` once; the
base class folds the time axis into the batch (``[B, T, *obs] -> [B*T, *obs]``), calls the
subclass's :meth:`ImageModel.create_image_model` on those frames and unfolds
the features (``[B*T, F] -> [B, T, F]``). So every layer sees a plain batch of frames: one Conv2D
call over all ``B*T`` frames, where Keras' ``TimeDistributed`` would unroll a fixed time axis frame
by frame in the gradient graph (a 125-row Pong window: 255 Conv2D + 255 backprop ops, 4x the
memory). The resulting Keras model is shared by the learner (``[batch, L]`` windows) and the actors
(``[envs, 1]`` steps), so both see the same weights.
"""

from __future__ import annotations

import keras
import numpy as np


class FoldTime(keras.layers.Layer):
    """``[B, T, *frame] -> [B*T, *frame]``: the encoder's layers see a batch of frames."""

    def call(self, x):
        return keras.ops.reshape(x, (-1,) + tuple(x.shape[2:]))

    def compute_output_spec(self, x):
        batch, time = x.shape[:2]
        shape = (None if batch is None or time is None else batch * time,) + tuple(x.shape[2:])
        return keras.KerasTensor(shape, dtype=x.dtype)  # keep uint8 frames uint8 (scale_uint8 reads it)


class UnfoldTime(keras.layers.Layer):
    """``[B*T, F]`` features back to ``[B, T, F]``, with ``B`` and ``T`` read from the encoder's input."""

    def call(self, features, frames):
        shape = keras.ops.shape(frames)
        return keras.ops.reshape(features, (shape[0], shape[1], features.shape[-1]))

    def compute_output_shape(self, features_shape, frames_shape):
        return (frames_shape[0], frames_shape[1], features_shape[-1])


class ImageModel:
    """Base class for encoders: override :meth:`create_image_model`, which maps a batch of frames
    ``[N, *obs]`` to features ``[N, F]``; :meth:`build` folds time around it.

    Example:
        >>> class TinyConv(ImageModel):
        ...     def create_image_model(self, x):
        ...         x = keras.layers.Conv2D(8, 3, strides=2, activation="relu")(self.scale_uint8(x))
        ...         return keras.layers.Flatten()(x)
    """

    def create_image_model(self, x):
        """Map a batch of frames ``x`` (``[N, *obs]``) to features (``[N, F]``); every layer sees plain frames."""
        raise NotImplementedError("subclass ImageModel and implement create_image_model(x)")

    @staticmethod
    def scale_uint8(x):
        """Cast to float32, dividing by 255 if the input is uint8 (images are stored as uint8)."""
        if x.dtype == "uint8":
            return keras.ops.cast(x, "float32") / 255.0
        return keras.ops.cast(x, "float32")

    def build(self, obs_shape: tuple[int, ...], obs_dtype: str = "float32") -> keras.Model:
        """The shared encoder model: ``[B, T, *obs_shape] -> [B, T, features]``, time folded into the batch."""
        inputs = keras.Input(shape=(None,) + tuple(obs_shape), dtype=obs_dtype, name="obs")
        frames = FoldTime(name="fold_time")(inputs)
        features = self.create_image_model(frames)
        if len(features.shape) != 2:
            raise ValueError(
                f"{type(self).__name__}.create_image_model must return features [frames, features] for a batch of "
                f"frames {tuple(frames.shape)}, got shape {tuple(features.shape)}; end with a Flatten (or a pooling "
                f"layer) before the dense layers"
            )
        outputs = UnfoldTime(name="unfold_time")(features, inputs)
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

    def create_image_model(self, x):
        x = self.scale_uint8(x)
        if self.input_scale is not None:
            x = x * self.input_scale  # a constant, broadcast over the last (observation) axis
        if len(x.shape) > 2:  # e.g. a [H, W] grid: flatten each frame
            x = keras.layers.Flatten()(x)
        for width in self.units:
            x = keras.layers.Dense(width, activation=self.activation)(x)  # Dense acts on the last axis
        return x


class DQNImageModel(ImageModel):
    """The Nature DQN CNN (Mnih et al. 2015): 32x8x8/4, 64x4x4/2, 64x3x3/1, dense 512."""

    def __init__(self, dense_units: int = 512) -> None:
        self.dense_units = dense_units

    def create_image_model(self, x):
        x = self.scale_uint8(x)
        if len(x.shape) == 3:  # gray 2-D: add a channel axis
            x = keras.ops.expand_dims(x, -1)
        for filters, kernel, stride in ((32, 8, 4), (64, 4, 2), (64, 3, 1)):
            x = keras.layers.Conv2D(filters, kernel, strides=stride, activation="relu")(x)
        x = keras.layers.Flatten()(x)
        return keras.layers.Dense(self.dense_units, activation="relu")(x)


class R2D3ImageModel(ImageModel):
    """IMPALA ResNet as used by R2D3 (Espeholt et al. 2018): stacks of conv, max-pool and 2 residual blocks."""

    def __init__(self, channels: tuple[int, ...] = (16, 32, 32), dense_units: int = 256) -> None:
        self.channels = tuple(channels)
        self.dense_units = dense_units

    def create_image_model(self, x):
        x = self.scale_uint8(x)
        if len(x.shape) == 3:  # gray 2-D: add a channel axis
            x = keras.ops.expand_dims(x, -1)
        for channels in self.channels:
            x = keras.layers.Conv2D(channels, 3, padding="same")(x)
            x = keras.layers.MaxPooling2D(3, strides=2, padding="same")(x)
            for _ in range(2):
                shortcut = x
                x = keras.layers.Activation("relu")(x)
                x = keras.layers.Conv2D(channels, 3, padding="same")(x)
                x = keras.layers.Activation("relu")(x)
                x = keras.layers.Conv2D(channels, 3, padding="same")(x)
                x = keras.layers.Add()([x, shortcut])
        x = keras.layers.Activation("relu")(x)
        x = keras.layers.Flatten()(x)
        return keras.layers.Dense(self.dense_units, activation="relu")(x)


class MinAtarImageModel(ImageModel):
    """The MinAtar paper's network (Young & Tian 2019): one conv of 16 3x3 filters, stride 1, no
    padding, ReLU, then a dense layer of 128 ReLU units.

    For MinAtar's ``10x10xC`` bool channels (one per object kind; ``C`` is 4 to 10 by game), stored
    as bool (one byte a cell) and cast to 0/1 floats here: ``10x10`` -> ``8x8x16`` -> 128 features.
    """

    def __init__(self, filters: int = 16, dense_units: int = 128) -> None:
        self.filters = filters
        self.dense_units = dense_units

    def create_image_model(self, x):
        if len(x.shape) not in (3, 4):
            raise ValueError(f"MinAtarImageModel convolves [height, width, channels] frames, got frames of shape "
                             f"{tuple(x.shape[1:])}; use model.encoder: mlp for vector observations")
        x = self.scale_uint8(x)  # bool channels -> 0.0 / 1.0
        if len(x.shape) == 3:  # one 2-D channel: add its axis
            x = keras.ops.expand_dims(x, -1)
        x = keras.layers.Conv2D(self.filters, 3, strides=1, activation="relu")(x)  # [N, H-2, W-2, filters]
        x = keras.layers.Flatten()(x)
        return keras.layers.Dense(self.dense_units, activation="relu")(x)


class OneHotChannels(keras.layers.Layer):
    """``[..., C]`` integer indices -> ``[..., sum(categories)]`` float32 one-hots, channel ``c``
    taking ``categories[c]`` slots (no weights); an index outside ``[0, categories[c])`` gives zeros."""

    def __init__(self, categories: tuple[int, ...], **kwargs) -> None:
        super().__init__(**kwargs)
        self.categories = tuple(int(n) for n in categories)

    def call(self, x):
        x = keras.ops.cast(x, "int32")
        return keras.ops.concatenate([keras.ops.one_hot(x[..., c], n) for c, n in enumerate(self.categories)],
                                     axis=-1)

    def compute_output_shape(self, input_shape: tuple) -> tuple:
        return tuple(input_shape[:-1]) + (sum(self.categories),)

    def get_config(self) -> dict:
        return {**super().get_config(), "categories": list(self.categories)}


class MiniGridImageModel(ImageModel):
    """A small CNN over MiniGrid's egocentric ``7x7x3`` view of (object, colour, state) indices,
    each one-hot encoded first: they name kinds (a key, a ball, a wall), so scaled as numbers a
    ball (6) would sit between a key (5) and a box (7).

    Replay keeps the ``uint8`` index image (147 bytes a step; the one-hots, 980 floats, are made in
    the network). After the one-hots (``sum(categories)`` channels), the convolutions of the
    rl-starter-files / torch-ac MiniGrid model: 16 2x2, max-pool 2x2, 32 2x2, 64 2x2, all ReLU
    (``7x7`` -> ``6x6`` -> ``3x3`` -> ``2x2`` -> ``1x1x64``): 64 features.

    Args:
        categories: one-hot width of each channel; default MiniGrid's 11 object kinds, 6 colours
            and 3 door states (``minigrid.core.constants``: ``OBJECT_TO_IDX``, ``COLOR_TO_IDX``,
            ``STATE_TO_IDX``).
        filters: filters of the three convolutions.
    """

    def __init__(self, categories: tuple[int, ...] = (11, 6, 3), filters: tuple[int, int, int] = (16, 32, 64)) -> None:
        self.categories = tuple(int(n) for n in categories)
        self.filters = tuple(int(n) for n in filters)
        if len(self.filters) != 3 or min(self.categories + self.filters, default=0) < 1:
            raise ValueError(f"MiniGridImageModel: categories must be positive and filters three positive numbers, "
                             f"got {categories!r} and {filters!r}")

    def create_image_model(self, x):
        if len(x.shape) != 4 or x.shape[-1] != len(self.categories):
            raise ValueError(f"MiniGridImageModel reads [height, width, {len(self.categories)}] frames of indices "
                             f"(one channel per entry of categories {list(self.categories)}), got frames of shape "
                             f"{tuple(x.shape[1:])}; keep MiniGrid's image unflattened (minigrid.wrappers:"
                             f"ImgObsWrapper, no FlattenObservation)")
        x = OneHotChannels(self.categories, name="one_hot_channels")(x)  # [N, 7, 7, 20]
        x = keras.layers.Conv2D(self.filters[0], 2, activation="relu")(x)  # [N, 6, 6, 16]
        x = keras.layers.MaxPooling2D(2)(x)  # [N, 3, 3, 16]
        x = keras.layers.Conv2D(self.filters[1], 2, activation="relu")(x)  # [N, 2, 2, 32]
        x = keras.layers.Conv2D(self.filters[2], 2, activation="relu")(x)  # [N, 1, 1, 64]
        return keras.layers.Flatten()(x)
