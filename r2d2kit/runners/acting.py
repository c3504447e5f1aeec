"""The acting code every pool runs: a vector env stepped by a stateful actor, cut into R2D2 windows.

:meth:`ActingLoop.build` is the one actor set-up (envs, :class:`~r2d2kit.replay.SequenceBuilder`,
the actor's network copy, exploration), used in the learner's process (``runner: local``), in
every actor process and in every Ray actor, so the three runners differ only in transport.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from r2d2kit.agent.policies import EpsilonSchedule, as_schedule, epsilon_greedy
from r2d2kit.replay import SequenceBuilder
from r2d2kit.runners.callbacks import Callback
from r2d2kit.runners.episodes import EpisodeTracker

if TYPE_CHECKING:
    import gymnasium as gym
    from numpy.typing import ArrayLike

    from r2d2kit.agent.seam import WindowLayout
    from r2d2kit.models.qnetwork import QNetwork, StatefulActor

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def limit_threads(threads: int) -> None:
    """Cap BLAS/OpenMP threads before numpy or TensorFlow start their pools (actor processes)."""
    for name in THREAD_VARIABLES:
        os.environ[name] = str(threads)


class ActingLoop:
    """One vector env stepped by a stateful actor with per-env epsilons, cut into R2D2 windows.

    ``epsilons``: fixed per-env rates, or an :class:`~r2d2kit.agent.policies.EpsilonSchedule` (rates
    that fall with the env steps taken).

    ``extras`` names per-env ``info`` entries stored beside each observation row (a goal env's
    ``"achieved_goal"``, which :class:`~r2d2kit.spaces.GoalObservation` puts in the info of every
    ``reset`` and ``step``): the entry that came with an observation goes into that observation's row.
    ``callbacks`` get the actor hooks (``on_actor_begin`` here, ``on_actor_episode`` per finished
    episode, ``on_actor_end`` in :meth:`close`) under ``actor_id``.
    """

    def __init__(self, envs: gym.vector.VectorEnv, actor: StatefulActor, builder: SequenceBuilder,
                 epsilons: ArrayLike | EpsilonSchedule, seed: int, extras: Sequence[str] = (), *, actor_id: int = 0,
                 callbacks: Callback | None = None) -> None:
        self.envs: gym.vector.VectorEnv | None = envs  # None once closed
        self.actor, self.builder = actor, builder
        self.schedule = as_schedule(epsilons)
        if len(self.schedule) != envs.num_envs:
            raise ValueError(f"{len(self.schedule)} exploration rates for {envs.num_envs} envs: give one per env")
        self.env_steps = 0  # taken by this loop, over its envs
        self.rng = np.random.default_rng(seed)
        self.tracker = EpisodeTracker(envs.num_envs)
        self.extras = tuple(extras)
        self.actor_id = actor_id
        self.callbacks = callbacks or Callback()
        self.obs, info = envs.reset(seed=seed)
        self.obs_extras = self._extras_of(info)
        self.callbacks.on_actor_begin(actor_id)

    @classmethod
    def build(cls, make_env: Callable[[], gym.Env], network: QNetwork, layout: WindowLayout,
              epsilons: ArrayLike | EpsilonSchedule, seed: int, extras: Sequence[str] = (), *, actor_id: int = 0,
              callbacks: Callback | None = None) -> ActingLoop:
        """The actor set-up: ``len(epsilons)`` envs from ``make_env``, windows shaped by ``layout`` (a
        :class:`~r2d2kit.agent.seam.WindowLayout`), acting with ``network``'s weights, which are read
        again only after :meth:`refresh_weights` or :meth:`load_weights` (acting never changes them)."""
        import gymnasium as gym

        from r2d2kit.models.cores import state_fields

        epsilons = as_schedule(epsilons)
        num_envs = len(epsilons)
        envs = gym.vector.SyncVectorEnv([make_env] * num_envs)
        builder = SequenceBuilder(num_envs, layout.burn_in, layout.trace_length, layout.n_step, layout.period,
                                  state_names=tuple(state_fields(network.state_spec())))
        actor = network.actor(num_envs, follow_weights=False)
        return cls(envs, actor, builder, epsilons, seed, extras, actor_id=actor_id, callbacks=callbacks)

    def _extras_of(self, info: Mapping[str, ArrayLike]) -> dict[str, np.ndarray] | None:
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
        envs = self.envs
        if envs is None:
            raise RuntimeError("the acting loop is closed")
        tracker = self.tracker
        state = self.actor.get_state()
        q_values = self.actor.q_values(self.obs, tracker.prev_action, tracker.prev_reward)
        action = epsilon_greedy(q_values, self.epsilons, self.rng)
        self.env_steps += len(action)
        next_obs, reward, terminated, truncated, info = envs.step(action)
        windows = self.builder.step(self.obs, action, reward, terminated, truncated, state, extras=self.obs_extras)
        _, returns, lengths, restart = tracker.record(action, reward, terminated, truncated)
        self.actor.reset(restart)
        self.obs, self.obs_extras = next_obs, self._extras_of(info)
        for episode_return, length in zip(returns.tolist(), lengths.tolist()):
            self.callbacks.on_actor_episode(self.actor_id, episode_return, length)
        return windows, returns, lengths

    @property
    def epsilons(self) -> np.ndarray:
        """Each env's exploration rate now."""
        return self.schedule.epsilons(self.env_steps)

    def refresh_weights(self) -> None:
        """The network's weights changed in place: read them before the next step."""
        self.actor.refresh_weights()

    def load_weights(self, vector: np.ndarray) -> None:
        """Take a published weight vector (:func:`~r2d2kit.runners.weights.flatten_weights`)."""
        from r2d2kit.runners.weights import load_published_weights

        load_published_weights(self.actor, vector)

    def close(self) -> None:
        """Run the end hook and close the envs (safe to call twice)."""
        envs = self.envs
        if envs is not None:
            self.callbacks.on_actor_end(self.actor_id)
            envs.close()
            self.envs = None
