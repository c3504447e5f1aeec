"""R2D2's agent builder: a recurrent Q-network from the config's ``model`` section, its learner, and the
epsilon-greedy policies (Ape-X's fixed per-env rates or one annealed rate, ``actors.exploration``) that act.

``agent: r2d2`` (the default) selects it (:data:`r2d2kit.training.config.AGENTS`); the trainer sees the
:class:`R2D2Agent` only through the :class:`~r2d2kit.agent.seam.Agent` seam.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

from r2d2kit.agent.r2d2.config import R2D2Config
from r2d2kit.agent.seam import EnvSpaces, WindowFields
from r2d2kit.training.config import TrainConfig
from r2d2kit.training.networks import check_core_name, encoder_for, user_model_errors

if TYPE_CHECKING:
    from r2d2kit.agent.r2d2.diagnostics import HealthCheck
    from r2d2kit.agent.r2d2.learner import R2D2Learner
    from r2d2kit.agent.r2d2.policies import EpsilonGreedyFactory, EpsilonSchedule, GreedyPolicy
    from r2d2kit.agent.r2d2.qnetwork import QNetwork
    from r2d2kit.tuning.space import Dimension

__all__ = ["R2D2Agent", "R2D2Builder", "build_q_network", "exploration_schedule"]


def r2d2_config(config: TrainConfig) -> R2D2Config:
    """The config's learner section, which an ``agent: r2d2`` config holds as an :class:`R2D2Config`."""
    if not isinstance(config.learner, R2D2Config):
        raise TypeError(f"agent r2d2 needs an R2D2Config learner section, got {type(config.learner).__name__} "
                        f"(the config says agent: {config.agent})")
    return config.learner


def build_q_network(config: TrainConfig, spaces: EnvSpaces | None = None) -> QNetwork:
    """The online :class:`~r2d2kit.agent.r2d2.qnetwork.QNetwork` for the configured env (its ``spaces``; probed
    from a new env if None) and model; for a non-Box observation space the encoder is wrapped in
    :class:`~r2d2kit.models.code_encoding.CodeEncoder`. Module-level, so ``functools.partial(build_q_network,
    config)`` pickles into actor processes, which build the same network there."""
    import gymnasium as gym

    from r2d2kit.agent.r2d2.qnetwork import QNetwork

    if spaces is None:  # an actor process: the spaces of one env made from the config
        from r2d2kit.training.builders import probe_spaces

        spaces = probe_spaces(config)
    obs_space, model = spaces.observation_space, config.model
    encoder = encoder_for(config, spaces)
    check_core_name(config)
    actions = spaces.action_space
    if not isinstance(actions, gym.spaces.Discrete):
        raise TypeError(f"agent r2d2 acts in one Discrete action space, got {actions} (make_env of an agent: r2d2 "
                        "config makes one)")
    with user_model_errors(config, spaces):
        return QNetwork(obs_space.shape, int(actions.n), encoder, obs_dtype=str(obs_space.dtype),
                        core=model.core, core_units=model.core_units, dueling=model.dueling,
                        head_units=model.head_units, prev_action_reward=model.prev_action_reward,
                        layer_norm=model.layer_norm)


def exploration_schedule(config: TrainConfig, num_actors: int, env_steps: int = 0) -> EpsilonSchedule:
    """Every actor's envs' exploration rates (actor-major) for actors starting after ``env_steps`` env steps:
    Ape-X's fixed per-env rates (``actors.exploration: apex``) or one rate annealed over the run (``linear``)."""
    from r2d2kit.agent.r2d2.policies import EpsilonSchedule, apex_epsilons

    envs, actors = num_actors * config.env.num_envs, config.actors
    if actors.exploration == "linear":
        return EpsilonSchedule.linear(envs, actors.epsilon_start, actors.epsilon, actors.epsilon_decay_steps,
                                      elapsed_env_steps=env_steps)
    return EpsilonSchedule(apex_epsilons(envs, actors.epsilon, actors.epsilon_alpha), elapsed_env_steps=env_steps)


class R2D2Agent:
    """One run's R2D2: the online network, its learner, and the policies that act and evaluate with it."""

    def __init__(self, config: TrainConfig, network: QNetwork, learner: R2D2Learner) -> None:
        self.config = config
        self.network = network
        self.learner = learner
        self.fields: WindowFields = network.window_fields()

    def acting_policies(self, *, in_process: bool, num_actors: int, env_steps: int) -> EpsilonGreedyFactory:
        """Epsilon-greedy policies; in this process on the learner's own network, else on a network each actor
        process builds from the config."""
        from r2d2kit.agent.r2d2.policies import EpsilonGreedyFactory

        epsilons = exploration_schedule(self.config, num_actors, env_steps)
        if in_process:
            network = self.network
            return EpsilonGreedyFactory(lambda: network, epsilons, self.config.env.num_envs)
        return EpsilonGreedyFactory(functools.partial(build_q_network, self.config), epsilons,
                                    self.config.env.num_envs)

    def evaluation_policy(self, num_envs: int) -> GreedyPolicy:
        """The greedy policy on the online network's live weights."""
        from r2d2kit.agent.r2d2.policies import GreedyPolicy

        return GreedyPolicy(self.network.actor(num_envs))

    def diagnostics(self, seed: int) -> HealthCheck:
        """R2D2's health values: delta-Q, action gap, greedy churn, dead units, gate saturation, overestimation."""
        from r2d2kit.agent.r2d2.diagnostics import HealthCheck

        return HealthCheck(self.learner, seed=seed)

    def describe_networks(self) -> str:
        """Encoder, core, head and weight count of the online network."""
        from r2d2kit.models.cores import BUILT_IN_CORES

        network, model = self.network, self.config.model
        encoder = network.config["encoder"]
        core = network.core.upper() if network.core in BUILT_IN_CORES else model.core
        state = ", ".join(f"{field.name}{list(field.shape)}" for field in network.state_spec())
        memory = (f"{core} {network.core_units} (state {state})" if network.cell is not None else
                  "no core (feed-forward)")
        return (f"{type(encoder).__module__}.{type(encoder).__qualname__} encoder, {memory}, "
                f"{'dueling ' if model.dueling else ''}head {model.head_units}: "
                f"{network.model.count_params():,} weights (online; the target network holds as many)")

    def describe_exploration(self, num_actors: int, env_steps: int) -> str:
        """The epsilons of every actor's envs."""
        return exploration_schedule(self.config, num_actors, env_steps).describe()


class R2D2Builder:
    """``agent: r2d2``: R2D2 (Kapturowski et al. 2019) over one Discrete action."""

    continuous_actions = False
    policy_weights_file = "online.weights.h5"  # R2D2Learner.save writes the online network there

    def build(self, config: TrainConfig, spaces: EnvSpaces) -> R2D2Agent:
        """The online network, its target (a clone) and the learner that receives both."""
        from r2d2kit.agent.r2d2.learner import R2D2Learner

        network = build_q_network(config, spaces)
        target = network.clone(name=f"{network.name}_target")
        learner = R2D2Learner(network, r2d2_config(config), config.replay.layout, target=target)
        return R2D2Agent(config, network, learner)

    def evaluation_policy(self, config: TrainConfig, spaces: EnvSpaces, num_envs: int, weights: Path) -> GreedyPolicy:
        """The greedy policy of a network built from the config with the weights of ``weights``."""
        from r2d2kit.agent.r2d2.policies import GreedyPolicy
        from r2d2kit.training.checkpoint import load_policy_weights

        network = build_q_network(config, spaces)
        load_policy_weights(network.model, weights)
        return GreedyPolicy(network.actor(num_envs))

    def search_dimensions(self, config: TrainConfig) -> list[Dimension]:
        """The learning rate (log range x0.3..x3), ``learner.adam_epsilon`` (log 1e-8..1e-3) and
        ``learner.target_update_period`` (x1/4..x4)."""
        from r2d2kit.tuning.space import Dimension, scaled

        learner = r2d2_config(config)
        low, high = scaled(learner.learning_rate, 0.3, 3.0)
        periods = sorted({max(1, round(learner.target_update_period * factor)) for factor in (0.25, 0.5, 1, 2, 4)})
        return [Dimension("learner.learning_rate", low=low, high=high, log=True),
                Dimension("learner.adam_epsilon", low=1e-8, high=1e-3, log=True),
                Dimension("learner.target_update_period", choices=tuple(periods))]
