"""Acting in the learner's process (``actors.runner: local``): one vector env, the learner's weights."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from r2d2kit.agent.seam import PolicyFactory
from r2d2kit.runners.acting import ActingLoop
from r2d2kit.runners.callbacks import Callback
from r2d2kit.runners.pool import Experience, Incarnations

if TYPE_CHECKING:
    import gymnasium as gym
    import keras
    from numpy.typing import DTypeLike

    from r2d2kit.agent.seam import WindowLayout


class LocalActors:
    """An :class:`~r2d2kit.runners.pool.ActorPool` of one actor in this process, sharing the learner's weights.

    It takes the arguments the other pools take; ``make_policy`` builds a policy on the learner's own
    networks (nothing is copied). The actor acts with the newest parameters: :meth:`publish` (called after
    every update) tells the policy to read them again before its next step, and between updates it reads
    nothing. Each :meth:`collect` is one vector step.
    """

    def __init__(self, make_env: Callable[[], gym.Env], make_policy: PolicyFactory, layout: WindowLayout, *,
                 incarnations: Incarnations, callbacks: Callback | None = None,
                 extras: Mapping[str, tuple[tuple[int, ...], DTypeLike]] | None = None) -> None:
        self.incarnations = incarnations
        self.restarts = 0
        self.source, seed = incarnations.start(0)
        self.loop = ActingLoop.build(make_env, make_policy(0, seed), layout, seed, tuple(extras or {}),
                                     callbacks=callbacks)
        self._version = 0

    def collect(self) -> Experience:
        """One vector step."""
        windows, returns, lengths = self.loop.step()
        episodes = list(zip(returns.tolist(), lengths.tolist()))
        return Experience([(windows, self.source)] if windows is not None else [], self.loop.num_envs, episodes)

    def supervise(self) -> None:
        """Nothing to watch: the actor runs in this process, between updates."""

    def publish(self, variables: Sequence[keras.Variable], updates: int) -> None:
        """The learner changed the shared weights: the policy reads them before its next step."""
        self.loop.policy.refresh_weights()
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
