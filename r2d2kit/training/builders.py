"""From a :class:`~r2d2kit.training.config.TrainConfig` to the objects a run needs: envs, encoder, Q-network.

The factories are module-level functions taking the config, so ``functools.partial(make_env, config)``
pickles into spawned actor processes, which rebuild the same env and network there.
"""

from __future__ import annotations

import importlib
from typing import Any

from r2d2kit.training.config import ConfigError, TrainConfig


def _import(spec: str, what: str) -> Any:
    module_name, _, attribute = spec.partition(":")
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise ConfigError(f"{what} {spec!r} cannot be imported: {error}") from None


def make_env(config: TrainConfig) -> Any:
    """One env: ``gymnasium.make(env.id, **env.kwargs)`` with ``env.wrappers`` applied in order."""
    import gymnasium as gym

    from r2d2kit.envs import (
        ensure_registered,  # registers r2d2kit's ids, also in a fresh actor process
    )

    ensure_registered(config.env.id)
    env = gym.make(config.env.id, **config.env.kwargs)
    for wrapper in config.env.wrappers:
        env = _import(wrapper, "env.wrappers entry")(env)
    return env


def build_encoder(config: TrainConfig) -> Any:
    """The encoder named by ``model.encoder``: mlp, dqn, r2d3, or ``package.module:Class``."""
    from r2d2kit.models import DQNImageModel, ImageModel, MLPModel, R2D3ImageModel

    name = config.model.encoder
    builtins = {"mlp": lambda: MLPModel(tuple(config.model.hidden), input_scale=config.model.input_scale),
                "dqn": DQNImageModel, "r2d3": R2D3ImageModel}
    if name in builtins:
        return builtins[name]()
    if ":" not in name:
        raise ConfigError(f"model.encoder {name!r} must be one of {sorted(builtins)} or 'package.module:Class'")
    cls = _import(name, "model.encoder")
    if not (isinstance(cls, type) and issubclass(cls, ImageModel)):
        raise ConfigError(f"model.encoder {name!r} is not an r2d2kit.models.ImageModel subclass")
    return cls()


def env_spaces(config: TrainConfig) -> tuple[Any, Any]:
    """(observation space, action space) of the configured env; R2D2 needs Discrete actions."""
    import gymnasium as gym

    probe = make_env(config)
    spaces = probe.observation_space, probe.action_space
    probe.close()
    if not isinstance(spaces[1], gym.spaces.Discrete):
        raise ConfigError(f"env.id {config.env.id!r} has action space {spaces[1]}; R2D2 needs Discrete actions")
    return spaces


def build_network(config: TrainConfig) -> Any:
    """The online :class:`~r2d2kit.models.QNetwork` for the configured env and model."""
    from r2d2kit.models import QNetwork

    obs_space, action_space = env_spaces(config)
    return QNetwork(obs_space.shape, int(action_space.n), build_encoder(config), obs_dtype=str(obs_space.dtype),
                    lstm_units=config.model.lstm_units, dueling=config.model.dueling,
                    head_units=config.model.head_units, prev_action_reward=config.model.prev_action_reward,
                    layer_norm=config.model.layer_norm)
