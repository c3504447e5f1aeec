"""SuccessOnPositiveReward: a success is a termination with a positive reward, nothing else."""

import gymnasium
import numpy as np
import pytest

from r2d2kit.envs import SuccessOnPositiveReward


class Scripted(gymnasium.Env):
    """Plays back (reward, terminated, truncated) steps."""

    observation_space = gymnasium.spaces.Discrete(1)
    action_space = gymnasium.spaces.Discrete(1)

    def __init__(self, steps):
        self.steps = list(steps)

    def reset(self, *, seed=None, options=None):
        return 0, {}

    def step(self, action):
        reward, terminated, truncated = self.steps.pop(0)
        return 0, reward, terminated, truncated, {"kept": True}


@pytest.mark.parametrize("steps, expected", [
    ([(0.0, False, False), (0.6, True, False)], [False, True]),  # reached the goal
    ([(0.0, False, False), (0.0, True, False)], [False, False]),  # the wrong object: terminated, no reward
    ([(0.0, False, False), (0.4, False, True)], [False, False]),  # a time limit is no success
    ([(0.5, False, False), (-1.0, True, False)], [False, False]),  # a positive reward before a failing end
])
def test_success_is_a_termination_with_a_positive_reward(steps, expected):
    env = SuccessOnPositiveReward(Scripted(steps))
    env.reset()
    infos = [env.step(0)[4] for _ in steps]
    assert [info["is_success"] for info in infos] == expected
    assert all(info["kept"] for info in infos)


def test_minigrid_memory_successes_are_its_rewarded_terminations():
    pytest.importorskip("minigrid")
    from r2d2kit.envs import ensure_registered

    ensure_registered("MiniGrid-MemoryS7-v0")
    env = SuccessOnPositiveReward(gymnasium.make("MiniGrid-MemoryS7-v0"))
    rng = np.random.default_rng(0)
    for episode in range(5):
        env.reset(seed=episode)
        terminated = truncated = False
        while not (terminated or truncated):
            _, reward, terminated, truncated, info = env.step(int(rng.integers(3)))  # turn left/right, forward
            assert info["is_success"] == (terminated and reward > 0)
