"""Greedy evaluation counts each env's first episodes (no bias towards short ones)."""

import gymnasium as gym
import keras
import numpy as np

from r2d2kit.models import MLPModel, QNetwork
from r2d2kit.runners.evaluation import evaluate


class FixedLength(gym.Env):
    """Episodes whose length is set by the reset seed: seed s gives s + 1 steps of reward 1."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.length = seed + 1
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(1, np.float32), 1.0, self.t >= self.length, False, {}


def network():
    keras.utils.set_random_seed(0)
    return QNetwork((1,), 2, MLPModel((4,)), lstm_units=4, head_units=4)


def test_evaluate_takes_each_envs_first_episodes_not_the_first_to_finish():
    # env i has episodes of i + 1 steps (seed 0 + i); 8 episodes over 4 envs: two from each env.
    # Counting episodes as they finish would take env 0's short ones (1, 1, 1, ...) first.
    returns = evaluate(network().actor(4), FixedLength, episodes=8, seed=0).returns
    assert sorted(returns.tolist()) == [1, 1, 2, 2, 3, 3, 4, 4]
    returns = evaluate(network().actor(4), FixedLength, episodes=6, seed=0).returns
    assert sorted(returns.tolist()) == [1, 1, 2, 2, 3, 4]
