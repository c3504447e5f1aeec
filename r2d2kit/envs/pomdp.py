"""Partially observable variants of classic control tasks, for recurrent agents.

``CartPoleNoVel-v1``: CartPole-v1 observing only cart position and pole angle. The velocities must
be inferred from successive observations, which a feed-forward policy cannot do reliably.
"""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import numpy as np


class MaskObservation(gym.ObservationWrapper):
    """Keep only the observation entries at ``keep`` (a flat Box observation)."""

    def __init__(self, env: gym.Env, keep: Sequence[int]) -> None:
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise ValueError(f"MaskObservation needs a flat Box observation space, got {space}")
        self.keep = np.asarray(keep, dtype=np.int64)
        if self.keep.size == 0 or self.keep.min() < 0 or self.keep.max() >= space.shape[0]:
            raise ValueError(f"keep must index 0 .. {space.shape[0] - 1}, got {list(keep)}")
        self.observation_space = gym.spaces.Box(space.low[self.keep], space.high[self.keep], dtype=space.dtype)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation[self.keep]


def make_cartpole_no_velocity(**kwargs) -> gym.Env:
    """CartPole-v1 dynamics observing (cart position, pole angle) only; time limit from registration."""
    from gymnasium.envs.classic_control.cartpole import CartPoleEnv

    return MaskObservation(CartPoleEnv(**kwargs), keep=(0, 2))
