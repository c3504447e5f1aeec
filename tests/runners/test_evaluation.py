"""Greedy evaluation counts each env's first episodes (no bias towards short ones)."""

import gymnasium as gym
import keras
import numpy as np

from r2d2kit.agent.r2d2 import QNetwork
from r2d2kit.agent.r2d2.policies import GreedyPolicy
from r2d2kit.models import MLPModel
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
    return QNetwork((1,), 2, MLPModel((4,)), core_units=4, head_units=4)


def test_evaluate_takes_each_envs_first_episodes_not_the_first_to_finish():
    # env i has episodes of i + 1 steps (seed 0 + i); 8 episodes over 4 envs: two from each env.
    # Counting episodes as they finish would take env 0's short ones (1, 1, 1, ...) first.
    returns = evaluate(GreedyPolicy(network().actor(4)), FixedLength, episodes=8, seed=0).returns
    assert sorted(returns.tolist()) == [1, 1, 2, 2, 3, 3, 4, 4]
    returns = evaluate(GreedyPolicy(network().actor(4)), FixedLength, episodes=6, seed=0).returns
    assert sorted(returns.tolist()) == [1, 1, 2, 2, 3, 4]


class FilmedLength(FixedLength):
    """FixedLength drawing its step count as a 1x1 frame (render_mode "rgb_array")."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, render_mode=None):
        self.render_mode = render_mode

    def render(self):
        return np.full((1, 1, 3), self.t, np.uint8)


def test_frames_film_env_0s_first_episode_from_its_reset_to_its_last_step():
    """Env 0 (seed 5: 6 steps) is filmed while env 1 (seed 6) plays on: reset + 6 steps = 7 frames."""
    frames = []
    returns = evaluate(GreedyPolicy(network().actor(2)), lambda: FilmedLength("rgb_array"), episodes=4, seed=5,
                       frames=frames).returns
    assert sorted(returns.tolist()) == [6, 6, 7, 7]
    assert [int(frame[0, 0, 0]) for frame in frames] == [0, 1, 2, 3, 4, 5, 6]
    capped = []
    evaluate(GreedyPolicy(network().actor(2)), lambda: FilmedLength("rgb_array"), episodes=2, seed=5, frames=capped,
             max_frames=3)
    assert [int(frame[0, 0, 0]) for frame in capped] == [0, 1, 2]
