"""What an actor pool hands the learner on each ``collect()`` call, and the in-process pool.

Both pools (:class:`LocalActors` here, :class:`~r2d2kit.runners.processes.ProcessActors`) have the
same three verbs, so the trainer's loop does not care where acting happens:

* ``collect() -> Experience``: new windows, env steps taken and finished episodes since the last call;
* ``publish(network, updates)``: make the learner's newest weights available to the actors;
* ``close()``: stop acting and release everything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from r2d2kit.agent.policies import epsilon_greedy
from r2d2kit.replay import SequenceBuilder
from r2d2kit.runners.callbacks import Callback
from r2d2kit.runners.episodes import EpisodeTracker


@dataclass
class Experience:
    """Data gathered since the previous ``collect()``."""

    windows: list[tuple[dict[str, np.ndarray], int]] = field(default_factory=list)  # (windows, actor id)
    env_steps: int = 0
    episodes: list[tuple[float, int]] = field(default_factory=list)  # (return, length)


class ActingLoop:
    """One vector env stepped by a stateful actor with per-env epsilons, cut into R2D2 windows.

    Used by the in-process pool and by every actor process (the same code path for both).

    ``extras`` names per-env ``info`` entries stored beside each observation row (a goal env's
    ``"achieved_goal"``, which :class:`~r2d2kit.spaces.GoalObservation` puts in the info of every
    ``reset`` and ``step``): the entry that came with an observation goes into that observation's row.
    """

    def __init__(self, envs: Any, actor: Any, builder: SequenceBuilder, epsilons: np.ndarray, seed: int,
                 extras: Sequence[str] = ()) -> None:
        self.envs, self.actor, self.builder = envs, actor, builder
        self.epsilons = np.asarray(epsilons)
        self.rng = np.random.default_rng(seed)
        self.tracker = EpisodeTracker(envs.num_envs)
        self.extras = tuple(extras)
        self.obs, info = envs.reset(seed=seed)
        self.obs_extras = self._extras_of(info)

    def _extras_of(self, info: Mapping[str, Any]) -> dict[str, np.ndarray] | None:
        """The ``extras`` of every env from a vector env's ``info`` (each env must have given them)."""
        if not self.extras:
            return None
        out = {}
        for name in self.extras:
            given = info.get(f"_{name}")
            if name not in info or (given is not None and not np.all(given)):
                raise KeyError(f"the env's info has no {name!r} for every env; a goal env's achieved goal is put "
                               "there by r2d2kit.spaces.GoalObservation (training.builders.make_env applies it)")
            out[name] = np.asarray(info[name])
        return out

    def step(self) -> tuple[dict[str, np.ndarray] | None, np.ndarray, np.ndarray]:
        """Act once in every env; return (finished windows or None, episode returns, episode lengths)."""
        tracker = self.tracker
        state = self.actor.get_state()
        q_values = self.actor.q_values(self.obs, tracker.prev_action, tracker.prev_reward)
        action = epsilon_greedy(q_values, self.epsilons, self.rng)
        next_obs, reward, terminated, truncated, info = self.envs.step(action)
        windows = self.builder.step(self.obs, action, reward, terminated, truncated, state, extras=self.obs_extras)
        _, returns, lengths, restart = tracker.record(action, reward, terminated, truncated)
        self.actor.reset(restart)
        self.obs, self.obs_extras = next_obs, self._extras_of(info)
        return windows, returns, lengths


class LocalActors:
    """Acting in the learner's process: one vector env, the actor shares the learner's weights.

    The actor acts with the newest parameters: :meth:`publish` (called after every update) tells it
    to read them again before its next step, and between updates it reads nothing.
    """

    def __init__(self, make_env: Callable[[], Any], network: Any, config: Any, num_envs: int, epsilons: np.ndarray,
                 seed: int, callbacks: Callback | None = None, extras: Sequence[str] = ()) -> None:
        import gymnasium as gym

        self.callbacks = callbacks or Callback()
        self.envs = gym.vector.SyncVectorEnv([make_env] * num_envs)
        builder = SequenceBuilder(num_envs, config.burn_in, config.trace_length, config.n_step, config.period)
        self.actor = network.actor(num_envs, follow_weights=False)  # publish() says when the weights changed
        self.loop = ActingLoop(self.envs, self.actor, builder, epsilons, seed, extras)
        self.num_envs = num_envs
        self.restarts = 0
        self.callbacks.on_actor_begin(0)

    def collect(self) -> Experience:
        """One vector step."""
        windows, returns, lengths = self.loop.step()
        episodes = list(zip(returns.tolist(), lengths.tolist()))
        for episode_return, length in episodes:
            self.callbacks.on_actor_episode(0, episode_return, length)
        return Experience([(windows, 0)] if windows is not None else [], self.num_envs, episodes)

    def publish(self, network: Any, updates: int) -> None:
        """The learner changed the shared weights: the actor reads them before its next step."""
        self.actor.refresh_weights()

    def close(self) -> None:
        """Close the envs."""
        if self.envs is not None:
            self.callbacks.on_actor_end(0)
            self.envs.close()
            self.envs = None
