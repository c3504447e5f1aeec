"""The agent builder seam: what the config's ``agent`` key names, and how its builder is found.

Every agent package (``r2d2kit.agent.r2d2``, ``r2d2kit.agent.sac``) has a ``builder`` module whose builder
class (an :class:`AgentBuilder`, made without arguments) :data:`r2d2kit.training.config.AGENTS` names.
:func:`r2d2kit.training.builders.build_run` asks it for the run's
:class:`~r2d2kit.agent.seam.Agent`; ``python -m r2d2kit.evaluate`` asks it for an evaluation policy. The
trainer, the pools, checkpoints and evaluation never import an agent's package: adding an agent is a package
with a builder and an entry in :data:`r2d2kit.training.config.AGENTS`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast

from r2d2kit._validation import import_named
from r2d2kit.training.config import AGENTS, ConfigError

if TYPE_CHECKING:
    from r2d2kit.agent.seam import Agent, EnvSpaces, Policy
    from r2d2kit.training.config import TrainConfig
    from r2d2kit.tuning.space import Dimension

__all__ = ["AgentBuilder", "agent_builder"]


class AgentBuilder(Protocol):
    """Makes one agent from a config (an agent package's builder class, made without arguments)."""

    continuous_actions: bool  # the agent acts in a Box (SAC); else in one Discrete (R2D2)
    policy_weights_file: str  # the checkpoint's file holding what Learner.save_policy_weights writes

    def build(self, config: TrainConfig, spaces: EnvSpaces) -> Agent:
        """The run's agent: networks built once (the learner receives them), learner, policies."""

    def evaluation_policy(self, config: TrainConfig, spaces: EnvSpaces, num_envs: int, weights: Path) -> Policy:
        """A policy without exploration reading its weights from ``weights`` (what
        :meth:`~r2d2kit.agent.seam.Learner.save_policy_weights` wrote), for ``python -m r2d2kit.evaluate``;
        builds no learner.

        Raises:
            CheckpointError: the file does not hold the networks' weights.
        """

    def search_dimensions(self, config: TrainConfig) -> list[Dimension]:
        """The agent's own hyper-parameters ``python -m r2d2kit.tune`` searches by default, around the config's."""


def agent_builder(name: str) -> AgentBuilder:
    """The builder of the agent ``name`` (a key of :data:`~r2d2kit.training.config.AGENTS`)."""
    if name not in AGENTS:
        raise ConfigError(f"agent must be one of {sorted(AGENTS)}, got {name!r}")
    return cast("AgentBuilder", import_named(AGENTS[name].builder, "agent", "an agent builder class")())
