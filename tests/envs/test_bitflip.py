"""BitFlipEnv: hand-checked episodes, the vectorised compute_reward, seeding, registration, env checker."""

from __future__ import annotations

import importlib
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import r2d2kit.envs
from r2d2kit.envs import BitFlipEnv

KEYS = ["achieved_goal", "desired_goal", "observation"]


def bits(text: str) -> np.ndarray:
    return np.array([int(c) for c in text], dtype=np.float32)


def set_state(env: BitFlipEnv, state: str, goal: str) -> None:
    """Put the env in a hand-picked state (after reset): the episodes below are written for it."""
    env._state, env._goal = bits(state), bits(goal)


# =====================================================================================================
# Hand-checked episodes
# =====================================================================================================

# (state, goal, actions, per step: (state after, reward, terminated))
EPISODES = {
    "two_flips_reach_the_goal": ("0110", "1100", [0, 2],
                                 [("1110", -1.0, False), ("1100", 0.0, True)]),
    "a_wrong_flip_costs_a_step": ("0110", "1100", [3, 3, 0, 2],
                                  [("0111", -1.0, False), ("0110", -1.0, False), ("1110", -1.0, False),
                                   ("1100", 0.0, True)]),
    "one_bit": ("0", "1", [0], [("1", 0.0, True)]),
}


@pytest.mark.parametrize("name", list(EPISODES))
def test_hand_checked_episode(name):
    state, goal, actions, expected = EPISODES[name]
    env = BitFlipEnv(n_bits=len(state))
    env.reset(seed=0)
    set_state(env, state, goal)
    for action, (after, reward, terminated) in zip(actions, expected):
        obs, r, term, trunc, info = env.step(action)
        assert sorted(obs) == KEYS
        np.testing.assert_array_equal(obs["observation"], bits(after))
        np.testing.assert_array_equal(obs["achieved_goal"], bits(after))
        np.testing.assert_array_equal(obs["desired_goal"], bits(goal))
        assert (r, term, trunc, info["is_success"]) == (reward, terminated, False, terminated)
        assert isinstance(r, float)


@pytest.mark.parametrize("n_bits, max_steps, expected", [(5, None, 5), (3, 7, 7), (12, None, 12)])
def test_registered_env_truncates_after_n_bits_steps(n_bits, max_steps, expected):
    kwargs = {} if max_steps is None else {"max_steps": max_steps}
    env = gym.make("BitFlip-v0", n_bits=n_bits, **kwargs)
    assert env.spec.max_episode_steps == expected and env.unwrapped.n_bits == n_bits
    env.reset(seed=0)
    set_state(env.unwrapped, "0" * n_bits, "1" * n_bits)  # flipping bit 0 back and forth never gets there
    outcomes = [env.step(0)[2:4] for _ in range(expected)]
    assert outcomes == [(False, False)] * (expected - 1) + [(False, True)]


# =====================================================================================================
# compute_reward
# =====================================================================================================


@pytest.mark.parametrize("batch_shape", [(), (1,), (7,), (3, 5)])
def test_compute_reward_batched_equals_the_loop(batch_shape):
    env = BitFlipEnv(n_bits=6)
    rng = np.random.default_rng(0)
    achieved = rng.integers(0, 2, batch_shape + (6,)).astype(np.float32)
    desired = achieved.copy()
    flip = rng.random(batch_shape) < 0.5  # about half the pairs differ in one bit
    desired[..., 0] = np.where(flip, 1 - desired[..., 0], desired[..., 0])
    rewards = env.compute_reward(achieved, desired, {})
    assert rewards.shape == batch_shape and rewards.dtype == np.float32
    for index in np.ndindex(*batch_shape):
        expected = 0.0 if all(achieved[index] == desired[index]) else -1.0
        assert rewards[index] == expected
        assert env.compute_reward(achieved[index], desired[index], None) == expected
    np.testing.assert_array_equal(env.compute_terminated(achieved, desired, {}), rewards == 0.0)
    np.testing.assert_array_equal(env.compute_truncated(achieved, desired, {}), np.zeros(batch_shape, bool))


def test_compute_reward_accepts_lists_and_broadcasts_one_goal():
    env = BitFlipEnv(n_bits=3)
    assert env.compute_reward([0, 1, 1], [0, 1, 1], {}) == 0.0
    np.testing.assert_array_equal(env.compute_reward([[0, 1, 1], [1, 1, 1]], [0, 1, 1], {}), [0.0, -1.0])
    with pytest.raises(ValueError, match="n_bits = 3"):
        env.compute_reward(np.zeros((2, 4)), np.zeros((2, 4)), {})


# =====================================================================================================
# Seeding, spaces, checker, registration
# =====================================================================================================


def test_seeding_reproduces_episodes():
    def rollout(seed: int) -> list[list[float]]:
        env = gym.make("BitFlip-v0", n_bits=8)
        obs, _ = env.reset(seed=seed)
        env.action_space.seed(seed)
        trace = [obs["observation"].tolist() + obs["desired_goal"].tolist()]
        for _ in range(20):  # several episodes: later resets continue the seeded generator
            obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                obs, _ = env.reset()
            trace.append(obs["observation"].tolist() + obs["desired_goal"].tolist())
        return trace

    assert rollout(5) == rollout(5)
    assert rollout(5) != rollout(6)


def test_goal_differs_from_the_initial_state_and_both_vary():
    env = BitFlipEnv(n_bits=2)
    starts, goals = set(), set()
    obs, _ = env.reset(seed=0)
    for _ in range(200):
        assert not np.array_equal(obs["observation"], obs["desired_goal"])
        starts.add(obs["observation"].tobytes())
        goals.add(obs["desired_goal"].tobytes())
        obs, _ = env.reset()
    assert len(starts) == 4 and len(goals) == 4


def test_spaces_are_float32_bits():
    env = BitFlipEnv(n_bits=4)
    for key in KEYS:
        space = env.observation_space[key]
        assert isinstance(space, gym.spaces.Box) and space.shape == (4,) and space.dtype == np.float32
    assert env.action_space == gym.spaces.Discrete(4)
    obs, _ = env.reset(seed=1)
    assert env.observation_space.contains(obs)


@pytest.mark.parametrize("make", ["class", "registry"])
def test_env_checker_passes(make):
    env = BitFlipEnv(n_bits=7) if make == "class" else gym.make("BitFlip-v0", n_bits=7).unwrapped
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the checker reports problems as warnings
        check_env(env, skip_render_check=True)


def test_invalid_arguments():
    with pytest.raises(ValueError, match="n_bits"):
        BitFlipEnv(n_bits=0)
    with pytest.raises(TypeError, match="n_bits"):
        gym.make("BitFlip-v0", n_bits=2.5)
    with pytest.raises(ValueError, match="render_mode"):
        BitFlipEnv(render_mode="human")
    env = BitFlipEnv(n_bits=3)
    env.reset(seed=0)
    for bad in (3, -1, 1.5):
        with pytest.raises(ValueError, match=r"action must be an integer in \[0, 3\)"):
            env.step(bad)


def test_render_ansi():
    env = BitFlipEnv(n_bits=4, render_mode="ansi")
    env.reset(seed=0)
    set_state(env, "0110", "1100")
    assert env.render() == "0110 -> 1100"
    assert BitFlipEnv(n_bits=4).render() is None


def test_registration_is_idempotent():
    spec = gym.spec("BitFlip-v0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        importlib.reload(r2d2kit.envs)
    assert gym.spec("BitFlip-v0") is spec
    assert spec.entry_point == "r2d2kit.envs.bitflip:make_bitflip"


def test_vector_env_of_bitflip():
    envs = gym.make_vec("BitFlip-v0", num_envs=3, vectorization_mode="sync", n_bits=4)
    obs, _ = envs.reset(seed=0)
    assert {key: value.shape for key, value in obs.items()} == {key: (3, 4) for key in KEYS}
    envs.close()
