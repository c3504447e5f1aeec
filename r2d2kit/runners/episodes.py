"""Episode bookkeeping for a gymnasium vector env under NEXT_STEP autoreset, shared by every loop.

With gymnasium >= 1.0 the step after an episode ends only resets that env: it returns the first
observation of the next episode, its action is ignored and its reward is 0. That step is not a
transition, its reward belongs to no return, the previous action/reward fed to the network must be
zeroed for the new episode, and the recurrent state must restart. :class:`EpisodeTracker` keeps
those consequences in one place for the training loops, the actor processes and evaluation; which
step is reset-only is :mod:`r2d2kit.replay.autoreset`'s rule.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from r2d2kit.replay.autoreset import ResetSteps

if TYPE_CHECKING:
    import gymnasium as gym


class EpisodeTracker:
    """Running returns and the network's previous action/reward per env.

    Args:
        num_envs: envs in the vector env.
        action_shape: one action's shape: ``()`` for R2D2's action index, ``(size,)`` for a continuous
            agent's flat action vector (SAC's).
        action_dtype: the dtype ``prev_action`` is kept in: int32 for R2D2's index (the network's input),
            float32 for a continuous agent's vector.
    """

    def __init__(self, num_envs: int, action_shape: tuple[int, ...] = (),
                 action_dtype: npt.DTypeLike = np.int32) -> None:
        self.num_envs = num_envs
        self.action_shape = tuple(int(n) for n in action_shape)
        self.action_dtype = np.dtype(action_dtype)
        self.prev_action = np.zeros((num_envs,) + self.action_shape, self.action_dtype)
        self.prev_reward = np.zeros(num_envs, np.float32)
        self.resets = ResetSteps(num_envs)  # gymnasium's default mode: the step after an episode's end resets
        self.running = np.zeros(num_envs, np.float64)
        self.lengths = np.zeros(num_envs, np.int64)

    @classmethod
    def for_space(cls, num_envs: int, action_space: gym.Space) -> EpisodeTracker:
        """A tracker feeding back actions of ``action_space``: an index as int32 (one Discrete, what R2D2's
        network reads), a vector as float32 (a Box, SAC's)."""
        shape = tuple(action_space.shape or ())
        if not shape and np.issubdtype(np.dtype(action_space.dtype), np.integer):
            return cls(num_envs)
        return cls(num_envs, shape, np.float32)

    def record(self, action: np.ndarray, reward: np.ndarray, terminated: np.ndarray,
               truncated: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Account one vector step.

        Returns:
            ``(ended, returns, lengths, restart)``: which envs finished an episode on this step, the
            returns and lengths of those episodes (in env order), and which envs start a new episode on
            the next step (reset their recurrent state: they were in their autoreset step).
        """
        reward = np.asarray(reward)
        restart = self.resets.pending.copy()
        real, ended = self.resets.advance(np.asarray(terminated) | np.asarray(truncated))
        self.running += np.where(real, reward, 0.0)
        self.lengths += real
        returns, lengths = self.running[ended].copy(), self.lengths[ended].copy()
        self.running[ended] = 0.0
        self.lengths[ended] = 0
        real_rows = real.reshape((self.num_envs,) + (1,) * len(self.action_shape))  # broadcast over a vector action
        self.prev_action = np.where(real_rows, action, 0).astype(self.action_dtype)
        self.prev_reward = np.where(real, reward, 0.0).astype(np.float32)
        return ended, returns, lengths, restart
