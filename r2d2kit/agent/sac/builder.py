"""Recurrent SAC's agent builder: actor and twin critics from the config's ``model`` section (encoder and
core) and ``learner`` section (:class:`~r2d2kit.agent.sac.config.SACConfig`), the learner that receives them,
and the policies that act (sampling) and evaluate (the squashed mean).

``agent: sac`` selects it (:data:`r2d2kit.training.config.AGENTS`); the env's action space must be a ``Box``
with finite bounds (:func:`r2d2kit.spaces.box_action_layout`). ``model.dueling`` and ``model.head_units`` are
R2D2's Q head and are not read; the heads' widths are ``learner.hidden_units``.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

from r2d2kit.agent.sac.config import SACConfig
from r2d2kit.agent.sac.files import POLICY_WEIGHTS_FILE
from r2d2kit.agent.seam import EnvSpaces, WindowFields
from r2d2kit.training.config import ConfigError, TrainConfig
from r2d2kit.training.networks import check_core_name, encoder_for, user_model_errors

if TYPE_CHECKING:
    from r2d2kit.agent.sac.learner import SACLearner
    from r2d2kit.agent.sac.networks import SACNetworks
    from r2d2kit.agent.sac.policy import SACPolicy, SACPolicyFactory
    from r2d2kit.tuning.space import Dimension

__all__ = ["SACAgent", "SACBuilder", "build_sac_networks"]


def sac_config(config: TrainConfig) -> SACConfig:
    """The config's learner section, which an ``agent: sac`` config holds as a :class:`SACConfig`."""
    if not isinstance(config.learner, SACConfig):
        raise TypeError(f"agent sac needs a SACConfig learner section, got {type(config.learner).__name__} "
                        f"(the config says agent: {config.agent})")
    return config.learner


def build_sac_networks(config: TrainConfig, spaces: EnvSpaces | None = None) -> SACNetworks:
    """:class:`~r2d2kit.agent.sac.networks.SACNetworks` for the configured env (its ``spaces``; probed from a new
    env if None). Module-level, so ``functools.partial(build_sac_networks, config)`` pickles into actor
    processes, which build the same networks there.

    Raises:
        ConfigError: ``model.prev_action_reward: false`` (SAC's bodies always read them, as pomdp-baselines'
            recurrent SAC does), or a user's encoder or core that fails on the observations.
    """
    import gymnasium as gym

    from r2d2kit.agent.sac.networks import SACNetworks

    if not config.model.prev_action_reward:
        raise ConfigError("model.prev_action_reward false: agent sac's recurrent bodies always read the previous "
                          "action and reward (as pomdp-baselines' recurrent SAC does); drop the key")
    if spaces is None:  # an actor process: the spaces of one env made from the config
        from r2d2kit.training.builders import probe_spaces

        spaces = probe_spaces(config)
    learner = sac_config(config)
    obs_space, action_space = spaces.observation_space, spaces.action_space
    if not isinstance(action_space, gym.spaces.Box):
        raise TypeError(f"agent sac acts in a Box action space, got {action_space} (make_env of an agent: sac config "
                        "makes one)")
    encoder = encoder_for(config, spaces)
    check_core_name(config)
    with user_model_errors(config, spaces):
        return SACNetworks(tuple(obs_space.shape), action_space.low, action_space.high, encoder,
                           obs_dtype=str(obs_space.dtype), core=config.model.core, core_units=config.model.core_units,
                           hidden_units=tuple(learner.hidden_units), shared_core=learner.shared_core,
                           log_std_min=learner.log_std_min, log_std_max=learner.log_std_max)


class SACAgent:
    """One run's recurrent SAC: its networks, learner, and the policies that act and evaluate with them."""

    def __init__(self, config: TrainConfig, networks: SACNetworks, learner: SACLearner) -> None:
        self.config = config
        self.networks = networks
        self.learner = learner
        self.fields: WindowFields = networks.window_fields()

    def acting_policies(self, *, in_process: bool, num_actors: int, env_steps: int) -> SACPolicyFactory:
        """Sampling policies; in this process on the learner's own networks, else on networks each actor
        process builds from the config. (SAC's exploration is its policy's entropy: no schedule to resume.)"""
        from r2d2kit.agent.sac.policy import SACPolicyFactory

        if in_process:
            networks = self.networks
            return SACPolicyFactory(lambda: networks, self.config.env.num_envs)
        return SACPolicyFactory(functools.partial(build_sac_networks, self.config), self.config.env.num_envs)

    def evaluation_policy(self, num_envs: int) -> SACPolicy:
        """The deterministic policy (the squashed mean) on the learner's live weights."""
        from r2d2kit.agent.sac.policy import SACPolicy

        return SACPolicy(self.networks, num_envs, deterministic=True)

    def diagnostics(self, seed: int) -> None:
        """None: SAC's health values are its update's outputs (critic error quantiles, gradient norm, entropy)."""
        return None

    def describe_networks(self) -> str:
        """Encoder, cores, heads and weight count."""
        nets, model = self.networks, self.config.model
        cores = "one shared core" if nets.shared_core else "separate actor and critic cores"
        memory = f"{model.core} {model.core_units}" if model.core != "none" else "no core (feed-forward)"
        weights = sum(m.count_params() for m in {id(m): m for m in (
            nets.actor_body, nets.critic_body, nets.policy_head, nets.q_head)}.values())
        return (f"{model.encoder} encoder, {memory} ({cores}), policy and twin Q heads {list(nets.hidden_units)}: "
                f"{weights:,} weights (online; the target critic holds the critic's again)")

    def describe_exploration(self, num_actors: int, env_steps: int) -> str:
        """Sampling from the squashed Gaussian; its entropy is steered to the target by the temperature."""
        return f"actions sampled from the policy (entropy target {self.learner.target_entropy:g})"


class SACBuilder:
    """``agent: sac``: recurrent SAC over a Box action, with R2D2's stored state and burn-in."""

    continuous_actions = True
    policy_weights_file = POLICY_WEIGHTS_FILE  # SACLearner.save writes the policy model there

    def build(self, config: TrainConfig, spaces: EnvSpaces) -> SACAgent:
        """The networks and the learner that receives them."""
        from r2d2kit.agent.sac.learner import SACLearner

        networks = build_sac_networks(config, spaces)
        learner = SACLearner(networks, sac_config(config), config.replay.layout, seed=config.run.seed)
        return SACAgent(config, networks, learner)

    def evaluation_policy(self, config: TrainConfig, spaces: EnvSpaces, num_envs: int, weights: Path) -> SACPolicy:
        """The deterministic policy of networks built from the config with the weights of ``weights``."""
        from r2d2kit.agent.sac.policy import SACPolicy
        from r2d2kit.training.checkpoint import load_policy_weights

        networks = build_sac_networks(config, spaces)
        load_policy_weights(networks.policy_model, weights)
        return SACPolicy(networks, num_envs, deterministic=True)

    def search_dimensions(self, config: TrainConfig) -> list[Dimension]:
        """The actor's and the critic's learning rates (log ranges x0.3..x3) and the Polyak step ``learner.tau``
        (log range x0.2..x5, at most 1)."""
        from r2d2kit.tuning.space import Dimension, scaled

        learner = sac_config(config)
        tau_low, tau_high = scaled(learner.tau, 0.2, 5.0)
        rates = [(f"learner.{name}_learning_rate", scaled(getattr(learner, f"{name}_learning_rate"), 0.3, 3.0))
                 for name in ("actor", "critic")]
        return [*(Dimension(key, low=low, high=high, log=True) for key, (low, high) in rates),
                Dimension("learner.tau", low=tau_low, high=min(tau_high, 1.0), log=True)]
