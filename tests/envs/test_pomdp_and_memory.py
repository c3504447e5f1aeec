"""Partially observable CartPole and CueMemory: hand-checked against the full env."""

import gymnasium as gym
import numpy as np
import pytest

import r2d2kit.envs  # noqa: F401
from r2d2kit.envs import CueMemoryEnv, MaskObservation


def test_cartpole_no_velocity_hides_exactly_the_velocities():
    full = gym.make("CartPole-v1")
    masked = gym.make("CartPoleNoVel-v1")
    assert masked.observation_space.shape == (2,)
    assert masked.spec.max_episode_steps == 500
    full_obs, _ = full.reset(seed=3)
    masked_obs, _ = masked.reset(seed=3)
    for action in [0, 1, 1, 0, 1, 0, 0]:
        np.testing.assert_array_equal(masked_obs, full_obs[[0, 2]])
        full_obs, full_reward, full_term, _, _ = full.step(action)
        masked_obs, reward, term, _, _ = masked.step(action)
        assert (reward, term) == (full_reward, full_term)


def test_mask_observation_refuses_bad_indices():
    with pytest.raises(ValueError, match="keep"):
        MaskObservation(gym.make("CartPole-v1"), keep=[0, 4])


@pytest.mark.parametrize("delay", [0, 3])
@pytest.mark.parametrize("cue_action", [0, 1])
def test_cue_memory_pays_only_the_matching_final_action(delay, cue_action):
    env = gym.make("CueMemory-v0", delay=delay)
    for seed in range(20):
        obs, _ = env.reset(seed=seed)
        cue = obs[0]
        assert cue in (-1.0, 1.0) and obs[1] == 0.0
        rewards = []
        for _t in range(delay + 1):
            obs, reward, terminated, _, _ = env.step(cue_action)
            rewards.append(reward)
            assert not terminated and obs[0] == 0.0
        assert obs[1] == 1.0  # "now"
        _, reward, terminated, _, _ = env.step(cue_action)
        assert terminated and rewards == [0.0] * (delay + 1)
        assert reward == (1.0 if cue_action == (1 if cue > 0 else 0) else -1.0)


def test_cue_memory_validates_delay():
    with pytest.raises(ValueError, match="delay"):
        CueMemoryEnv(delay=-1)
