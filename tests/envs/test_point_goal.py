"""PointMassGoal: hand-checked dynamics, rewards that relabelling can recompute from stored goals,
solvable with memory (a controller reading velocity from two positions), not by chance."""

import gymnasium
import numpy as np
import pytest

import r2d2kit.envs  # noqa: F401  (registers the ids)
from r2d2kit.envs import PointMassGoalEnv


def test_a_hand_checked_episode_on_the_line():
    env = PointMassGoalEnv(dims=1, acceleration=0.1, max_speed=0.2, radius=0.05, goal_range=0.5,
                           min_start_distance=0.2)
    env.reset(seed=0)
    env._position, env._goal = np.array([0.0]), np.array([0.4])  # noqa: SLF001  (a chosen start and goal)
    # pushes: right, right (capped at 2 pushes of speed), none, left, left: positions 0.1, 0.3, 0.5, 0.6, 0.6
    expected = [(0.1, 1, -1.0), (0.3, 2, -1.0), (0.5, 2, -1.0), (0.6, 1, -1.0), (0.6, 0, -1.0)]
    for action, (position, velocity, reward) in zip([2, 2, 2, 0, 0], expected):
        obs, r, terminated, truncated, info = env.step(action)
        np.testing.assert_allclose(obs["observation"], [position], atol=1e-6)
        np.testing.assert_allclose(obs["achieved_goal"], [position, velocity], atol=1e-6)
        assert (r, terminated, truncated) == (reward, False, False)
    # back towards the goal at 0.4
    obs, r, terminated, _, _ = env.step(0)  # velocity -1: 0.5
    obs, r, terminated, _, _ = env.step(2)  # velocity 0: at rest at 0.5, 0.1 from the goal
    assert (r, terminated) == (-1.0, False)
    obs, r, terminated, _, _ = env.step(0)  # velocity -1: 0.4, on the goal but moving
    assert (r, terminated) == (-1.0, False)
    obs, r, terminated, _, info = env.step(2)  # velocity 0: at rest on the goal
    np.testing.assert_allclose(obs["achieved_goal"], [0.4, 0.0], atol=1e-6)
    assert (r, terminated, info["is_success"]) == (0.0, True, True)


def test_walls_stop_the_mass():
    env = PointMassGoalEnv(dims=1, acceleration=0.5, max_speed=1.0, goal_range=0.5)
    env.reset(seed=1)
    env._position = np.array([0.8])  # noqa: SLF001
    obs, *_ = env.step(2)
    np.testing.assert_allclose(obs["achieved_goal"], [1.0, 0.0])


def test_rewards_recomputed_from_stored_goals_equal_the_step_rewards():
    env = gymnasium.make("PointMassGoal-v0")
    rng = np.random.default_rng(0)
    achieved, desired, rewards = [], [], []
    obs, _ = env.reset(seed=3)
    for _ in range(200):
        obs, reward, terminated, truncated, _ = env.step(int(rng.integers(9)))
        achieved.append(obs["achieved_goal"])
        desired.append(obs["desired_goal"])
        rewards.append(reward)
        if terminated or truncated:
            obs, _ = env.reset()
    recomputed = env.unwrapped.compute_reward(np.array(achieved), np.array(desired), {})
    np.testing.assert_array_equal(recomputed, rewards)
    # a relabelled goal: the achieved goal itself is always reached
    np.testing.assert_array_equal(env.unwrapped.compute_reward(np.array(achieved), np.array(achieved), {}), 0.0)


def run_episodes(policy, episodes, seed, **kwargs):
    env = gymnasium.make("PointMassGoal-v0", **kwargs)
    successes = 0
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + episode)
        previous = obs["observation"].copy()
        done = False
        while not done:
            action = policy(obs, previous, env.unwrapped)
            previous = obs["observation"].copy()
            obs, _, terminated, truncated, info = env.step(action)
            done = terminated or truncated
        successes += info["is_success"]
    return successes / episodes


def axis_push(position, previous, goal, env, tolerance):
    """-1, 0 or +1 on one axis: the velocity read as the difference of the last two positions (what an
    LSTM can do), braking when the stopping distance reaches the goal."""
    velocity = round((position - previous) / env.acceleration)
    stopping = env.acceleration * velocity * (abs(velocity) - 1) / 2  # distance covered while braking to rest
    error = goal - position
    if velocity != 0 and abs(error - stopping) <= env.acceleration * abs(velocity) / 2 + 1e-9:
        return -1 if velocity > 0 else 1
    if abs(error) <= tolerance and velocity == 0:
        return 0
    return 1 if error - stopping > 0 else -1


def memory_controller(obs, previous, env):
    pushes = [axis_push(float(obs["observation"][i]), float(previous[i]), float(obs["desired_goal"][i]), env,
                        env.radius / np.sqrt(env.dims)) for i in range(env.dims)]
    return sum((push + 1) * 3 ** axis for axis, push in enumerate(pushes))


def position_only_controller(obs, previous, env):
    """What a feed-forward agent can do: push towards the goal, rest inside the radius."""
    pushes = []
    for axis in range(env.dims):
        error = float(obs["desired_goal"][axis] - obs["observation"][axis])
        pushes.append(0 if abs(error) <= env.radius / np.sqrt(env.dims) else int(np.sign(error)))
    return sum((push + 1) * 3 ** axis for axis, push in enumerate(pushes))


def test_solvable_with_memory_and_not_by_chance_or_from_one_frame():
    assert run_episodes(memory_controller, 100, seed=0) >= 0.95
    assert run_episodes(memory_controller, 100, seed=0, dims=1) >= 0.95
    assert run_episodes(position_only_controller, 100, seed=0) <= 0.05
    rng = np.random.default_rng(0)
    assert run_episodes(lambda *_: int(rng.integers(9)), 1000, seed=0) <= 0.005


@pytest.mark.parametrize("kwargs, field", [({"dims": 3}, "dims"), ({"acceleration": 0.0}, "acceleration"),
                                           ({"goal_range": 0.05, "min_start_distance": 0.5}, "min_start_distance")])
def test_bad_arguments_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        PointMassGoalEnv(**kwargs)


def test_goal_shape_errors_say_what_is_expected():
    env = PointMassGoalEnv(dims=2)
    with pytest.raises(ValueError, match="2 \\* dims = 4"):
        env.compute_reward(np.zeros(3), np.zeros(4))
