"""A goal task that needs both memory and hindsight: stop a point mass on a goal, seeing only its position.

A point mass moves on a line (``dims=1``) or a plane (``dims=2``). Each step the agent pushes it
left, right or not at all along each axis; the velocity changes by ``acceleration`` per push and
persists (no friction), so the mass drifts until pushed back. The episode succeeds, and ends, when
the mass is within ``radius`` of the goal *and at rest* (speed below half a push). Reward: 0 on that
step, -1 on every other (the HER paper's sparse convention).

Why it needs both:
    * **memory**: the observation is the position only. Whether the mass is at rest cannot be read
      from one frame; a feed-forward agent cannot tell "on the goal and still" from "on the goal and
      passing through". A recurrent agent can: the velocity is the difference of two positions, or
      the sum of its past pushes (R2D2 feeds the previous action to the LSTM).
    * **relabelling**: a random walk almost never stops on a small goal (on the default plane, 0.2%
      of random 50-step episodes succeed), so without hindsight relabelling the agent almost never
      sees a reward other than -1.

GoalEnv protocol: ``observation`` is the position ``[dims]``; ``achieved_goal`` is the position and
the velocity in push units (``[2 * dims]``: ``velocity / acceleration``, an integer vector after any
sequence of pushes); ``desired_goal`` is the goal position with velocity 0. ``compute_reward`` is
vectorised and depends on the two goals only, so relabelled goals (a position reached *with some
velocity*) are goals too: "be at p moving at v".

Walls at +-1 stop the mass (position clipped, velocity zeroed along that axis).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import numpy.typing as npt
from gymnasium import spaces

from r2d2kit._validation import check_float, check_positive_int

__all__ = ["PointMassGoalEnv", "make_point_mass_goal"]


class PointMassGoalEnv(gym.Env):
    """Push a point mass to rest on a goal, observing its position only (velocity hidden).

    Args:
        dims: 2 (a plane, 9 actions: -1/0/+1 push on each axis; the default) or 1 (a line, 3 actions;
            random episodes succeed several percent of the time there, too often to need relabelling).
        acceleration: velocity change of one push (position units per step per step).
        max_speed: speed limit per axis (a multiple of ``acceleration``; pushes beyond it do nothing).
        radius: success distance between the position and the goal.
        goal_range: goals and starts are drawn uniformly from ``[-goal_range, goal_range]`` per axis.
        min_start_distance: the goal is redrawn until it is at least this far from the start, so no
            episode starts solved.

    Example:
        >>> env = PointMassGoalEnv()
        >>> obs, info = env.reset(seed=0)
        >>> obs["observation"].shape, obs["achieved_goal"].shape, obs["desired_goal"].shape
        ((2,), (4,), (4,))
        >>> float(env.compute_reward(obs["achieved_goal"], obs["desired_goal"], info))
        -1.0
    """

    action_space: spaces.Discrete  # 3 ** dims pushes (set in __init__)

    def __init__(self, dims: int = 2, acceleration: float = 0.02, max_speed: float = 0.1, radius: float = 0.08,
                 goal_range: float = 0.8, min_start_distance: float = 0.2) -> None:
        self.dims = check_positive_int("dims", dims)
        if self.dims > 2:
            raise ValueError(f"dims must be 1 (a line) or 2 (a plane), got {dims!r}")
        self.acceleration = check_float("acceleration", acceleration, 1e-6, 1.0)
        self.max_steps_per_axis = round(check_float("max_speed", max_speed, self.acceleration, 2.0)
                                        / self.acceleration)
        self.radius = check_float("radius", radius, 1e-6, 2.0)
        self.goal_range = check_float("goal_range", goal_range, 0.0, 1.0)
        self.min_start_distance = check_float("min_start_distance", min_start_distance, 0.0, 2.0)
        if self.min_start_distance >= 2 * self.goal_range * np.sqrt(self.dims):
            raise ValueError(f"min_start_distance {min_start_distance} cannot be met within goal_range "
                             f"{goal_range}; make it smaller")
        position = spaces.Box(-1.0, 1.0, (self.dims,), dtype=np.float32)
        bound = np.float32(self.max_steps_per_axis)
        goal = spaces.Box(np.concatenate([-np.ones(self.dims), -np.full(self.dims, bound)]).astype(np.float32),
                          np.concatenate([np.ones(self.dims), np.full(self.dims, bound)]).astype(np.float32))
        self.observation_space = spaces.Dict({"observation": position, "achieved_goal": goal, "desired_goal": goal})
        self.action_space = spaces.Discrete(3 ** self.dims)
        self._position = np.zeros(self.dims)
        self._velocity_steps = np.zeros(self.dims, dtype=np.int64)  # velocity in pushes: exact, no float drift
        self._goal = np.zeros(self.dims)

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """A start at rest and a goal at least ``min_start_distance`` away, from ``self.np_random``."""
        super().reset(seed=seed)
        self._position = self.np_random.uniform(-self.goal_range, self.goal_range, self.dims)
        self._velocity_steps[:] = 0
        self._goal = self._position
        while np.linalg.norm(self._goal - self._position) < self.min_start_distance:
            self._goal = self.np_random.uniform(-self.goal_range, self.goal_range, self.dims)
        return self._observation(), {"is_success": False}

    def push(self, action: int | np.integer) -> np.ndarray:
        """The push of ``action`` on each axis, in {-1, 0, +1}: axis ``i`` reads digit ``i`` in base 3."""
        return np.array([(int(action) // 3 ** axis) % 3 - 1 for axis in range(self.dims)], dtype=np.int64)

    def step(self, action: int | np.integer) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        if not self.action_space.contains(action):
            raise ValueError(f"action must be an integer in [0, {self.action_space.n}), got {action!r}")
        limit = self.max_steps_per_axis
        self._velocity_steps = np.clip(self._velocity_steps + self.push(action), -limit, limit)
        self._position = self._position + self._velocity_steps * self.acceleration
        hit_wall = np.abs(self._position) > 1.0
        self._position = np.clip(self._position, -1.0, 1.0)
        self._velocity_steps[hit_wall] = 0
        obs = self._observation()
        success = bool(self.compute_terminated(obs["achieved_goal"], obs["desired_goal"]))
        reward = float(self.compute_reward(obs["achieved_goal"], obs["desired_goal"], {}))
        return obs, reward, success, False, {"is_success": success}

    def compute_reward(self, achieved_goal: npt.ArrayLike, desired_goal: npt.ArrayLike,
                       info: object = None) -> np.ndarray:
        """0 where the achieved position is within ``radius`` of the desired one and the velocities
        match to within half a push, -1 elsewhere (float32). Vectorised over leading axes; ``info``
        is ignored."""
        return self.compute_terminated(achieved_goal, desired_goal).astype(np.float32) - 1.0

    def compute_terminated(self, achieved_goal: npt.ArrayLike, desired_goal: npt.ArrayLike,
                           info: object = None) -> np.ndarray:
        """True where the goal is reached (the episode ends on success), vectorised like ``compute_reward``."""
        achieved, desired = np.asarray(achieved_goal, np.float64), np.asarray(desired_goal, np.float64)
        width = 2 * self.dims
        if achieved.shape[-1:] != (width,) or desired.shape[-1:] != (width,):
            raise ValueError(f"goals must end in an axis of 2 * dims = {width} (position, velocity in pushes), "
                             f"got shapes {achieved.shape} and {desired.shape}")
        d = self.dims
        near = np.linalg.norm(achieved[..., :d] - desired[..., :d], axis=-1) <= self.radius
        same_velocity = np.all(np.abs(achieved[..., d:] - desired[..., d:]) < 0.5, axis=-1)
        return near & same_velocity

    def _observation(self) -> dict[str, np.ndarray]:
        position = self._position.astype(np.float32)
        achieved = np.concatenate([position, self._velocity_steps.astype(np.float32)])
        desired = np.concatenate([self._goal, np.zeros(self.dims)]).astype(np.float32)
        return {"observation": position, "achieved_goal": achieved, "desired_goal": desired}


def make_point_mass_goal(max_steps: int = 50, **kwargs: Any) -> gym.Env:
    """``PointMassGoalEnv(**kwargs)`` in a ``TimeLimit`` of ``max_steps``: ``PointMassGoal-v0``'s entry point."""
    return gym.wrappers.TimeLimit(PointMassGoalEnv(**kwargs), check_positive_int("max_steps", max_steps))
