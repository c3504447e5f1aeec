"""The acting code every pool runs: a vector env stepped by an agent's policy, cut into replay windows.

:meth:`ActingLoop.build` is the one actor set-up (envs, :class:`~r2d2kit.replay.SequenceBuilder`, the
agent's :class:`~r2d2kit.agent.seam.Policy`), used in the learner's process (``runner: local``), in
every actor process and in every Ray actor, so the three runners differ only in transport. What an
action is and how the policy explores are the policy's business: this loop only steps and records.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from r2d2kit.replay import SequenceBuilder
from r2d2kit.runners.callbacks import Callback
from r2d2kit.runners.episodes import EpisodeTracker

if TYPE_CHECKING:
    import gymnasium as gym
    from numpy.typing import ArrayLike

    from r2d2kit.agent.seam import Policy, WindowLayout

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def limit_threads(threads: int) -> None:
    """Cap BLAS/OpenMP threads before numpy or TensorFlow start their pools (actor processes)."""
    for name in THREAD_VARIABLES:
        os.environ[name] = str(threads)


class ActingLoop:
    """One vector env stepped by a :class:`~r2d2kit.agent.seam.Policy`, cut into replay windows.

    ``extras`` names per-env ``info`` entries stored beside each observation row (a goal env's
    ``"achieved_goal"``, which :class:`~r2d2kit.spaces.GoalObservation` puts in the info of every
    ``reset`` and ``step``): the entry that came with an observation goes into that observation's row.
    ``callbacks`` get the actor hooks (``on_actor_begin`` here, ``on_actor_episode`` per finished
    episode, ``on_actor_end`` in :meth:`close`) under ``actor_id``.
    """

    def __init__(self, envs: gym.vector.VectorEnv, policy: Policy, builder: SequenceBuilder, seed: int,
                 extras: Sequence[str] = (), *, actor_id: int = 0, callbacks: Callback | None = None) -> None:
        self.envs: gym.vector.VectorEnv | None = envs  # None once closed
        self.policy, self.builder = policy, builder
        if policy.num_envs != envs.num_envs:
            raise ValueError(f"a policy for {policy.num_envs} envs cannot act in {envs.num_envs} envs")
        self.env_steps = 0  # taken by this loop, over its envs
        self.tracker = EpisodeTracker.for_space(envs.num_envs, envs.single_action_space)
        self.extras = tuple(extras)
        self.actor_id = actor_id
        self.callbacks = callbacks or Callback()
        self.obs, info = envs.reset(seed=seed)
        self.obs_extras = self._extras_of(info)
        self.callbacks.on_actor_begin(actor_id)

    @classmethod
    def build(cls, make_env: Callable[[], gym.Env], policy: Policy, layout: WindowLayout, seed: int,
              extras: Sequence[str] = (), *, actor_id: int = 0, callbacks: Callback | None = None) -> ActingLoop:
        """The actor set-up: ``policy.num_envs`` envs from ``make_env`` (reset with ``seed``), windows shaped by
        ``layout`` (a :class:`~r2d2kit.agent.seam.WindowLayout`) storing the policy's state."""
        import gymnasium as gym

        from r2d2kit.models.cores import state_fields

        envs = gym.vector.SyncVectorEnv([make_env] * policy.num_envs)
        builder = SequenceBuilder(policy.num_envs, layout.burn_in, layout.trace_length, layout.n_step, layout.period,
                                  state_names=tuple(state_fields(policy.state_spec())))
        return cls(envs, policy, builder, seed, extras, actor_id=actor_id, callbacks=callbacks)

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
        state = self.policy.get_state()
        action = self.policy.act(self.obs, tracker.prev_action, tracker.prev_reward)
        self.env_steps += len(action)
        next_obs, reward, terminated, truncated, info = envs.step(action)
        windows = self.builder.step(self.obs, action, reward, terminated, truncated, state, extras=self.obs_extras)
        _, returns, lengths, restart = tracker.record(action, reward, terminated, truncated)
        self.policy.reset(restart)
        self.obs, self.obs_extras = next_obs, self._extras_of(info)
        for episode_return, length in zip(returns.tolist(), lengths.tolist()):
            self.callbacks.on_actor_episode(self.actor_id, episode_return, length)
        return windows, returns, lengths

    @property
    def num_envs(self) -> int:
        """Envs stepped together (env steps per :meth:`step`)."""
        return self.policy.num_envs

    def close(self) -> None:
        """Run the end hook and close the envs (safe to call twice)."""
        envs = self.envs
        if envs is not None:
            self.callbacks.on_actor_end(self.actor_id)
            envs.close()
            self.envs = None
