"""What every agent's networks share, built from the config's ``model`` section: the encoder for the env's
observations (:func:`encoder_for`), the check of a user's core, and the one error a user's encoder or core
failing becomes (:func:`user_model_errors`). Agent builders (``r2d2kit.agent.*.builder``) call these; the run's
assembly (:mod:`r2d2kit.training.builders`) does not, so a run enters it once, from the agent's builder.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from r2d2kit.training.config import ConfigError, TrainConfig, import_user_code

if TYPE_CHECKING:
    from r2d2kit.agent.seam import EnvSpaces
    from r2d2kit.models.encoders import ImageModel
    from r2d2kit.spaces import ObservationLayout

__all__ = ["CONV_ENCODERS", "build_encoder", "check_core_name", "check_encoder_for_codes", "encoder_for",
           "user_model_errors"]


def build_encoder(config: TrainConfig) -> ImageModel:
    """The encoder named by ``model.encoder``: mlp, dqn, r2d3, minatar, minigrid, or ``package.module:Class``."""
    from r2d2kit.models import (
        DQNImageModel,
        ImageModel,
        MinAtarImageModel,
        MiniGridImageModel,
        MLPModel,
        R2D3ImageModel,
    )

    name = config.model.encoder
    scale = config.model.input_scale
    input_scale = tuple(scale) if isinstance(scale, list) else scale
    builtins: dict[str, Callable[[], ImageModel]] = {
        "mlp": lambda: MLPModel(tuple(config.model.hidden), input_scale=input_scale), "dqn": DQNImageModel,
        "r2d3": R2D3ImageModel, "minatar": MinAtarImageModel, "minigrid": MiniGridImageModel}
    if name in builtins:
        return builtins[name]()
    if ":" not in name:
        raise ConfigError(f"model.encoder {name!r} must be one of {sorted(builtins)} or 'package.module:Class'")
    cls = import_user_code(name, "model.encoder")
    if not (isinstance(cls, type) and issubclass(cls, ImageModel)):
        raise ConfigError(f"model.encoder {name!r} is not an r2d2kit.models.ImageModel subclass")
    try:
        return cls()
    except TypeError as error:
        raise ConfigError(f"model.encoder {name!r} cannot be built without arguments ({error}); the config builds "
                          "it as Class(): give every constructor argument a default") from None


def encoder_for(config: TrainConfig, spaces: EnvSpaces) -> ImageModel:
    """The configured encoder for the env's observations: :func:`build_encoder`'s, wrapped in
    :class:`~r2d2kit.models.code_encoding.CodeEncoder` for a non-Box observation space (stored as codes)."""
    encoder = build_encoder(config)
    if spaces.layout is None:
        return encoder
    from r2d2kit.models.code_encoding import CodeEncoder

    check_encoder_for_codes(config, spaces.layout)
    return CodeEncoder(spaces.layout, encoder)


def check_core_name(config: TrainConfig) -> None:
    """A ``model.core`` naming a user's factory (``package.module:factory``) must import."""
    from r2d2kit.models.cores import import_factory

    if ":" in config.model.core:
        try:
            import_factory(config.model.core)
        except ValueError as error:
            raise ConfigError(f"model.{error}") from None


@contextlib.contextmanager
def user_model_errors(config: TrainConfig, spaces: EnvSpaces) -> Iterator[None]:
    """Inside: a network being built. A user's encoder or core failing (in any way Keras can) becomes one
    :class:`~r2d2kit.training.config.ConfigError` naming it and the observations; a built-in one failing is
    r2d2kit's bug and keeps its traceback."""
    obs_space = spaces.observation_space
    try:
        yield
    except Exception as error:  # noqa: BLE001  (a user's encoder or core can fail in any way Keras can)
        users = [f"model.{key} {getattr(config.model, key)!r}" for key in ("encoder", "core")
                 if ":" in getattr(config.model, key)]
        if not users:
            raise
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise ConfigError(f"{' or '.join(users)} failed on env.id {config.env.id!r}'s observations "
                          f"(shape {tuple(obs_space.shape)}, {obs_space.dtype}): {type(error).__name__}: "
                          f"{first_line[:300]}; check that an encoder's layers fit that input (a convolution needs "
                          "an image) and that a core's cell takes [batch, features] inputs with the states its "
                          "state_size declares") from None


CONV_ENCODERS = ("dqn", "r2d3", "minatar", "minigrid")  # built-ins that convolve images


def check_encoder_for_codes(config: TrainConfig, layout: ObservationLayout) -> None:
    """The encoder of a non-Box observation gets a flat vector of ``layout.encoded_size`` entries."""
    where = (f"env.id {config.env.id!r} observes {layout.space}, which the network gets as a vector of "
             f"{layout.encoded_size} entries (one-hots and values, see r2d2kit.spaces)")
    if config.model.encoder in CONV_ENCODERS:
        raise ConfigError(f"model.encoder {config.model.encoder!r} is a convolutional encoder for images, but {where};"
                          " use model.encoder: mlp (or an ImageModel of your own for vectors)")
    scale = config.model.input_scale
    if isinstance(scale, list) and len(scale) not in (1, layout.encoded_size):
        raise ConfigError(f"model.input_scale has {len(scale)} entries, but {where}; give one number, or "
                          f"{layout.encoded_size} (one per network input, in the order layout.describe() prints)")
