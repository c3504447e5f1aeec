"""The continuous-action envs: PendulumNoVel and HalfCheetah-P observe the full env's observation minus
exactly its velocities (checked against the unwrapped env's state), ContinuousCue pays -(a - cue)^2."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest

import r2d2kit.envs  # noqa: F401  (registers the ids)
from r2d2kit.spaces import box_action_layout


def test_pendulum_no_velocity_observes_cos_and_sin_of_the_angle_only() -> None:
    env = gym.make("PendulumNoVel-v1")
    full = gym.make("Pendulum-v1")
    assert env.observation_space.shape == (2,) and env.spec.max_episode_steps == 200
    assert box_action_layout(env.action_space).size == 1
    obs, _ = env.reset(seed=4)
    full_obs, _ = full.reset(seed=4)
    rng = np.random.default_rng(0)
    for _ in range(30):
        theta, theta_dot = env.unwrapped.state
        np.testing.assert_allclose(obs, [np.cos(theta), np.sin(theta)], rtol=1e-6)
        np.testing.assert_array_equal(obs, full_obs[:2])  # the full observation is (cos, sin, theta_dot)
        assert full_obs[2] == np.float32(theta_dot)
        action = rng.uniform(-2.0, 2.0, 1).astype(np.float32)
        obs, reward, _, _, _ = env.step(action)
        full_obs, full_reward, _, _, _ = full.step(action)
        assert reward == full_reward


def test_half_cheetah_positions_observes_qpos_without_any_velocity(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # MuJoCo writes its warnings to MUJOCO_LOG.TXT in the working directory
    pytest.importorskip("mujoco")
    pytest.importorskip("imageio")
    env = gym.make("HalfCheetah-P-v5")
    full = gym.make("HalfCheetah-v5")
    nq, nv = env.unwrapped.data.qpos.size, env.unwrapped.data.qvel.size
    assert env.observation_space.shape == (nq - 1,) and full.observation_space.shape == (nq - 1 + nv,)
    obs, _ = env.reset(seed=1)
    full_obs, _ = full.reset(seed=1)
    rng = np.random.default_rng(0)
    for _ in range(20):
        data = env.unwrapped.data
        np.testing.assert_allclose(obs, data.qpos[1:], rtol=1e-12)  # positions bar the x position
        np.testing.assert_allclose(full_obs, np.concatenate([full.unwrapped.data.qpos[1:],
                                                             full.unwrapped.data.qvel]), rtol=1e-12)
        np.testing.assert_array_equal(obs, full_obs[:nq - 1])  # same seed, same actions: the same state
        action = rng.uniform(-1.0, 1.0, 6).astype(np.float32)
        obs, _, _, _, _ = env.step(action)
        full_obs, _, _, _, _ = full.step(action)


def test_half_cheetah_positions_keeps_x_when_the_full_env_shows_it(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    pytest.importorskip("mujoco")
    pytest.importorskip("imageio")
    env = gym.make("HalfCheetah-P-v5", exclude_current_positions_from_observation=False)
    obs, _ = env.reset(seed=2)
    np.testing.assert_allclose(obs, env.unwrapped.data.qpos, rtol=1e-12)


def test_half_cheetah_positions_builds_without_mujoco_log_noise(tmp_path, monkeypatch, capfd) -> None:
    """gymnasium's asset triggers MuJoCo's settotalmass deprecation: neither printed nor logged to a file."""
    monkeypatch.chdir(tmp_path)
    mujoco = pytest.importorskip("mujoco")
    pytest.importorskip("imageio")
    from r2d2kit.envs.pomdp import mujoco_warning

    previous = mujoco.get_mju_user_warning()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a routed warning would raise here
        gym.make("HalfCheetah-P-v5").reset(seed=0)
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()
    printed = capfd.readouterr()
    assert "settotalmass" not in printed.out + printed.err
    assert mujoco.get_mju_user_warning() is previous  # MuJoCo's own handler is back after the build
    with pytest.warns(RuntimeWarning, match="MuJoCo: Nan, Inf or huge value in QACC"):
        mujoco_warning("Nan, Inf or huge value in QACC at DOF 0.")  # any other warning reaches Python


def test_continuous_cue_pays_minus_the_squared_error_to_the_first_observation_cue() -> None:
    env = gym.make("ContinuousCue-v0", length=3)
    for seed in range(5):
        obs, _ = env.reset(seed=seed)
        cue = float(obs[0])
        assert -1.0 <= cue <= 1.0 and obs[1] == 1.0
        rewards, done = [], False
        for answer in (cue, 0.5, -1.0):
            assert not done
            obs, reward, done, truncated, _ = env.step(np.array([answer], np.float32))
            assert obs.tolist() == [0.0, 0.0] and not truncated
            rewards.append(reward)
        assert done
        np.testing.assert_allclose(rewards, [0.0, -(0.5 - cue) ** 2, -(-1.0 - cue) ** 2], atol=1e-6)
    with pytest.raises(ValueError, match="length must be an integer >= 1"):
        gym.make("ContinuousCue-v0", length=0)
