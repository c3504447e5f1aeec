"""Acting in the learner's process (``actors.runner: local``): one vector env, the learner's weights."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import numpy.typing as npt

from r2d2kit.agent.policies import EpsilonSchedule
from r2d2kit.runners.acting import ActingLoop
from r2d2kit.runners.callbacks import Callback
from r2d2kit.runners.pool import Experience, Incarnations

if TYPE_CHECKING:
    import gymnasium as gym
    from numpy.typing import DTypeLike

    from r2d2kit.agent.config import R2D2Config
    from r2d2kit.models.qnetwork import QNetwork


class LocalActors:
    """An :class:`~r2d2kit.runners.pool.ActorPool` of one actor in this process, sharing the learner's network.

    It takes the arguments the other pools take (``make_network`` unused: the actor acts with ``network``
    itself). The actor acts with the newest parameters: :meth:`publish` (called after every update) tells it
    to read them again before its next step, and between updates it reads nothing. Each
    :meth:`collect` is one vector step.
    """

    def __init__(self, make_env: Callable[[], gym.Env], make_network: Callable[[], QNetwork] | None,
                 network: QNetwork, config: R2D2Config, *, epsilons: npt.ArrayLike | EpsilonSchedule,
                 incarnations: Incarnations,
                 callbacks: Callback | None = None,
                 extras: Mapping[str, tuple[tuple[int, ...], DTypeLike]] | None = None) -> None:
        self.incarnations = incarnations
        self.restarts = 0
        self.source, seed = incarnations.start(0)
        self.loop = ActingLoop.build(make_env, network, config, epsilons, seed, tuple(extras or {}),
                                     callbacks=callbacks)
        self._version = 0

    def collect(self) -> Experience:
        """One vector step."""
        windows, returns, lengths = self.loop.step()
        episodes = list(zip(returns.tolist(), lengths.tolist()))
        return Experience([(windows, self.source)] if windows is not None else [], len(self.loop.epsilons),
                          episodes)

    def supervise(self) -> None:
        """Nothing to watch: the actor runs in this process, between updates."""

    def publish(self, network: QNetwork, updates: int) -> None:
        """The learner changed the shared weights: the actor reads them before its next step."""
        self.loop.refresh_weights()
        self._version += 1

    @property
    def weight_lag(self) -> float:
        """0: the actor reads the learner's weights before every step."""
        return 0.0

    @property
    def weights_version(self) -> int:
        """Updates published so far (every update: the actor shares the learner's weights)."""
        return self._version

    def actor_pids(self) -> dict[int, int]:
        """This process."""
        return {0: os.getpid()}

    def close(self) -> None:
        """Close the envs."""
        self.loop.close()
