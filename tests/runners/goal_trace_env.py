"""A goal env whose every value says where it came from, for checking relabelled windows end to end.

Importing this module registers ``TraceGoal-v0`` (configs name it ``tests.runners.goal_trace_env:TraceGoal-v0``,
so actor processes and Ray workers import it too). An episode gets an id ``uid`` (an integer drawn
at reset) and a length ``T = transitions(uid)``; at episode time ``t``::

    observation    [uid, t]
    achieved_goal  [uid, t + 0.5]          so a goal's episode time is goal[1] - 0.5
    desired_goal   [UNREACHED, UNREACHED]  never achieved: a stored reward is never a relabelled one
    reward         0.25 + 0.125 t          (> 0; compute_reward gives <= 0)

The episode terminates at ``T`` for even ``uid`` and is truncated there for odd ones. Actions are
ignored. ``compute_reward = -sum |achieved - desired|``: distinct for every pair of times;
``compute_terminated``: exactly on the goal.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

ENV_ID = "TraceGoal-v0"
UNREACHED = 1000.0


def transitions(uid: float) -> int:
    """The episode length of episode ``uid``: 3 .. 13 transitions."""
    return 3 + int(uid) % 11


def distance_reward(achieved_goal: Any, desired_goal: Any, info: Any = None) -> np.ndarray:
    """``-sum |achieved - desired|`` over the last axis."""
    return -np.abs(np.asarray(achieved_goal, np.float64) - np.asarray(desired_goal, np.float64)).sum(axis=-1)


class TraceGoalEnv(gym.Env):
    """See the module docstring."""

    def __init__(self) -> None:
        box = gym.spaces.Box(-1e6, 1e6, (2,), dtype=np.float32)
        self.observation_space = gym.spaces.Dict({"observation": box, "achieved_goal": box, "desired_goal": box})
        self.action_space = gym.spaces.Discrete(2)
        self.uid, self.t = 0.0, 0

    def _obs(self) -> dict[str, np.ndarray]:
        return {"observation": np.array([self.uid, self.t], np.float32),
                "achieved_goal": np.array([self.uid, self.t + 0.5], np.float32),
                "desired_goal": np.full(2, UNREACHED, np.float32)}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.uid, self.t = float(self.np_random.integers(1, 1_000_000)), 0
        return self._obs(), {"is_success": False}

    def step(self, action: Any):
        reward = 0.25 + 0.125 * self.t
        self.t += 1
        ended = self.t == transitions(self.uid)
        terminated = ended and int(self.uid) % 2 == 0
        return self._obs(), reward, terminated, ended and not terminated, {"is_success": terminated}

    compute_reward = staticmethod(distance_reward)

    @staticmethod
    def compute_terminated(achieved_goal: Any, desired_goal: Any, info: Any = None) -> np.ndarray:
        return distance_reward(achieved_goal, desired_goal) == 0


if ENV_ID not in gym.envs.registry:
    gym.register(ENV_ID, entry_point=TraceGoalEnv)
