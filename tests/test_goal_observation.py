"""Goal envs in the trainer's env factory: the network sees the observation and the desired goal
(never the achieved goal, which may hold hidden state), the achieved goal travels in ``info``."""

import gymnasium as gym
import numpy as np
import pytest

import r2d2kit.envs  # noqa: F401  (registers PointMassGoal-v0 and BitFlip-v0)
from r2d2kit.agent.r2d2.builder import build_q_network
from r2d2kit.replay import SequenceHerReplayBuffer
from r2d2kit.spaces import GoalObservation, UnsupportedSpaceError, is_goal_space, wrap_spaces
from r2d2kit.training.builders import make_env
from r2d2kit.training.config import build_config


@pytest.mark.parametrize("env_id, kwargs", [("PointMassGoal-v0", {}), ("BitFlip-v0", {"n_bits": 6})])
def test_the_network_input_is_observation_then_desired_goal(env_id, kwargs):
    config = build_config({"env": {"id": env_id, "kwargs": kwargs}})
    wrapped, raw = make_env(config), gym.make(env_id, **kwargs)
    assert is_goal_space(raw.observation_space) and not is_goal_space(wrapped.observation_space)
    rng = np.random.default_rng(0)
    obs, info = wrapped.reset(seed=3)
    raw_obs, _ = raw.reset(seed=3)
    for _ in range(60):
        expected = SequenceHerReplayBuffer.flatten_obs({k: v[None] for k, v in raw_obs.items()})[0]
        np.testing.assert_array_equal(obs, expected)  # the achieved goal is not in it
        np.testing.assert_array_equal(info["achieved_goal"], raw_obs["achieved_goal"])
        assert wrapped.observation_space.contains(obs)
        action = int(rng.integers(raw.action_space.n))
        obs, reward, terminated, truncated, info = wrapped.step(action)
        raw_obs, raw_reward, *_ = raw.step(action)
        assert reward == raw_reward
        if terminated or truncated:
            seed = int(rng.integers(1000))
            obs, info = wrapped.reset(seed=seed)
            raw_obs, _ = raw.reset(seed=seed)
    assert callable(wrapped.get_wrapper_attr("compute_reward"))  # relabelling reaches the env's reward


def test_point_mass_goal_hides_the_velocity_from_the_network():
    config = build_config({"env": {"id": "PointMassGoal-v0"},
                           "model": {"hidden": [16], "core_units": 8, "head_units": 8}})
    network = build_q_network(config)
    assert network.obs_shape == (2 + 4,)  # position (2) and desired goal (position 2 + velocity 2), no achieved goal
    q = network.actor(2).q_values(np.zeros((2, 6), np.float32), [0, 0], [0.0, 0.0])
    assert q.shape == (2, 9)


class ImageGoalEnv(gym.Env):
    observation_space = gym.spaces.Dict({
        "observation": gym.spaces.Box(0, 255, (8, 8), np.uint8),
        "achieved_goal": gym.spaces.Box(-1, 1, (2,), np.float32),
        "desired_goal": gym.spaces.Box(-1, 1, (2,), np.float32)})
    action_space = gym.spaces.Discrete(2)


def test_an_image_observation_in_a_goal_env_is_refused_with_the_fix():
    with pytest.raises(UnsupportedSpaceError, match=r"obs\['observation'\].*Box of at most one axis.*fix"):
        wrap_spaces(ImageGoalEnv())
    with pytest.raises(UnsupportedSpaceError, match="Dict of"):
        GoalObservation(gym.make("CartPole-v1"))
