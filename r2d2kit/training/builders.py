"""From a :class:`~r2d2kit.training.config.TrainConfig` to the objects a run needs: envs, encoder, Q-network.

The factories are module-level functions taking the config, so ``functools.partial(make_env, config)``
pickles into spawned actor processes, which rebuild the same env and network there.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from r2d2kit.training.config import ConfigError, TrainConfig


def _import(spec: str, what: str) -> Any:
    module_name, _, attribute = spec.partition(":")
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise ConfigError(f"{what} {spec!r} cannot be imported: {error}") from None


def make_env(config: TrainConfig) -> Any:
    """One env: ``gymnasium.make(env.id, **env.kwargs)`` with ``env.wrappers`` applied in order, then
    :func:`r2d2kit.spaces.wrap_spaces` (non-Box observations -> stored codes, MultiDiscrete actions
    -> one Discrete), so actors, replay and evaluation all see the same spaces.

    Raises:
        ConfigError: the env's observation or action space is not supported (naming the space, the
            reason and a fix).
    """
    import gymnasium as gym

    from r2d2kit.envs import (
        ensure_registered,  # registers r2d2kit's ids, also in a fresh actor process
    )
    from r2d2kit.spaces import UnsupportedSpaceError, wrap_spaces

    ensure_registered(config.env.id)
    env = gym.make(config.env.id, **config.env.kwargs)
    for wrapper in config.env.wrappers:
        env = _import(wrapper, "env.wrappers entry")(env)
    try:
        return wrap_spaces(env)
    except UnsupportedSpaceError as error:
        env.close()
        wrapped = f" after env.wrappers {config.env.wrappers}" if config.env.wrappers else ""
        raise ConfigError(f"env.id {config.env.id!r}{wrapped}: {error}") from None


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
    """(observation space, action space) the actors see: after :func:`make_env`'s space wrappers, so
    a Box (codes for non-Box observations) and a ``Discrete`` (flattened where needed)."""
    observation_space, action_space, _ = _probe(config)
    return observation_space, action_space


def observation_layout(config: TrainConfig) -> Any:
    """The :class:`~r2d2kit.spaces.ObservationLayout` of the configured env, or ``None`` for a Box
    observation space (fed to the encoder as it is). Makes one env, so it also checks the config
    against the env's spaces (``python -m r2d2kit.train`` calls it before it builds anything).

    Raises:
        ConfigError: an unsupported observation or action space, or a ``model`` section that cannot
            read the encoded observation (a convolutional encoder, an ``input_scale`` of another length).
    """
    layout = _probe(config)[2]
    if layout is not None:
        _check_encoder_for_codes(config, layout)
    return layout


def _probe(config: TrainConfig) -> tuple[Any, Any, Any]:
    """(observation space, action space, observation layout or None) of one env made and closed."""
    probe = make_env(config)
    try:
        layout = probe.get_wrapper_attr("observation_layout")
    except AttributeError:  # a Box observation space: no codes
        layout = None
    spaces = probe.observation_space, probe.action_space
    probe.close()
    return (*spaces, layout)


@dataclass
class GoalReward:
    """What hindsight relabelling needs from a goal env: the sizes of the network input's two parts
    (observation, then desired goal) and the env's ``compute_reward``, bound to an env kept open."""

    observation_size: int
    goal_size: int
    compute_reward: Callable[..., Any]
    compute_terminated: Callable[..., Any] | None  # None: the env has none (stored flags are kept)
    env: Any  # the env compute_reward belongs to; close() it when done

    def close(self) -> None:
        """Close the env behind ``compute_reward``."""
        self.env.close()


def goal_reward(config: TrainConfig) -> GoalReward:
    """The :class:`GoalReward` of the configured env (``replay.her`` needs one).

    Raises:
        ConfigError: the env is not a GoalEnv (no Dict observation of ``observation``,
            ``achieved_goal``, ``desired_goal``) or has no ``compute_reward``.
    """
    env = make_env(config)
    try:
        observation_size = env.get_wrapper_attr("observation_size")
        goal_size = env.get_wrapper_attr("goal_size")
    except AttributeError:
        env.close()
        raise ConfigError(f"replay.her relabels goals, but env.id {config.env.id!r} is not a goal env (its "
                          f"observation space is {env.unwrapped.observation_space}, not a Dict of 'observation', "
                          "'achieved_goal' and 'desired_goal'); remove replay.her, or train a GoalEnv") from None
    compute_reward = getattr(env.unwrapped, "compute_reward", None)
    if not callable(compute_reward):
        env.close()
        raise ConfigError(f"replay.her needs env.id {config.env.id!r} to have a vectorised compute_reward(achieved_goal, "
                          "desired_goal, info) method (the GoalEnv protocol); it has none")
    compute_terminated = getattr(env.unwrapped, "compute_terminated", None)
    return GoalReward(int(observation_size), int(goal_size), compute_reward,
                      compute_terminated if callable(compute_terminated) else None, env)


def build_network(config: TrainConfig) -> Any:
    """The online :class:`~r2d2kit.models.QNetwork` for the configured env and model; for a non-Box
    observation space the encoder is wrapped in :class:`~r2d2kit.models.code_encoding.CodeEncoder`."""
    from r2d2kit.models import QNetwork

    obs_space, action_space, layout = _probe(config)
    encoder = build_encoder(config)
    if layout is not None:
        from r2d2kit.models.code_encoding import CodeEncoder

        _check_encoder_for_codes(config, layout)
        encoder = CodeEncoder(layout, encoder)
    return QNetwork(obs_space.shape, int(action_space.n), encoder, obs_dtype=str(obs_space.dtype),
                    lstm_units=config.model.lstm_units, dueling=config.model.dueling,
                    head_units=config.model.head_units, prev_action_reward=config.model.prev_action_reward,
                    layer_norm=config.model.layer_norm)


def _check_encoder_for_codes(config: TrainConfig, layout: Any) -> None:
    """The encoder of a non-Box observation gets a flat vector of ``layout.encoded_size`` entries."""
    where = (f"env.id {config.env.id!r} observes {layout.space}, which the network gets as a vector of "
             f"{layout.encoded_size} entries (one-hots and values, see r2d2kit.spaces)")
    if config.model.encoder in ("dqn", "r2d3"):
        raise ConfigError(f"model.encoder {config.model.encoder!r} is a convolutional encoder for images, but {where};"
                          " use model.encoder: mlp (or an ImageModel of your own for vectors)")
    scale = config.model.input_scale
    if isinstance(scale, list) and len(scale) not in (1, layout.encoded_size):
        raise ConfigError(f"model.input_scale has {len(scale)} entries, but {where}; give one number, or "
                          f"{layout.encoded_size} (one per network input, in the order layout.describe() prints)")
