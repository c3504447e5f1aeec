"""An env whose observation says which actor incarnation and which step it came from.

Importing this module registers ``LongEpisode-v0`` (configs name it
``tests.runners.long_episode_env:LongEpisode-v0``, so actor processes import it too). Observation
``[token, t]``: ``token`` is the seed of the reset that started the env (each actor incarnation
seeds its envs differently), ``t`` the step within the episode. Episodes last 100,000 steps, so a
short run never leaves its first episode.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

ENV_ID = "LongEpisode-v0"
LENGTH = 100_000


class LongEpisodeEnv(gym.Env):
    observation_space = gym.spaces.Box(0.0, 1e7, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.token = float(seed)
        self.t = 0
        return np.array([self.token, self.t], np.float32), {}

    def step(self, action):
        self.t += 1
        obs = np.array([self.token, self.t], np.float32)
        return obs, 0.0, False, self.t >= LENGTH, {}


if ENV_ID not in gym.envs.registry:
    gym.register(ENV_ID, entry_point=LongEpisodeEnv)
