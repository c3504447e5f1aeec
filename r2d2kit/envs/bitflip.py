"""Bit flipping, the HER paper's toy task (Andrychowicz et al. 2017, section 3.1), as a gymnasium GoalEnv.

State and goal are ``n_bits`` bits; action ``i`` flips bit ``i``. The reward is 0 when every bit
matches the goal and -1 otherwise, so without hindsight relabelling a random policy almost never
sees a reward other than -1 once ``n_bits`` exceeds ~13::

    n_bits = 4        observation / achieved_goal   desired_goal   action   reward   terminated
    reset             0 1 1 0                       1 1 0 0
    step              1 1 1 0                       1 1 0 0        0        -1       False
    step              1 1 0 0                       1 1 0 0        2         0       True

Choices (documented because they change what a learner sees):
    * observations are float32 0/1 arrays (``Box(0, 1, (n_bits,), float32)``): a Keras model takes
      them as they are, no casting or one-hot layers needed. ``observation`` and ``achieved_goal``
      hold the same bits (the state is its own achieved goal).
    * the episode terminates when the goal is reached (the reward is 0 on that step). A policy
      that reached the goal cannot leave it again, and the HER paper's success metric "goal reached
      by the end" equals "episode terminated".
    * the goal is redrawn until it differs from the initial state, so no episode starts solved.
    * truncation is a time limit: ``gymnasium.make("BitFlip-v0", n_bits=n)`` wraps the env in
      ``TimeLimit(n)`` (``n`` flips can reach any goal). Pass ``max_steps`` to change it; the
      ``max_episode_steps`` argument of ``gymnasium.make`` adds an outer limit that can only shorten
      episodes.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import numpy.typing as npt
from gymnasium import spaces

from r2d2kit._validation import check_positive_int

__all__ = ["BitFlipEnv", "make_bitflip"]


class BitFlipEnv(gym.Env):
    """Flip bits until the state equals the goal; GoalEnv protocol with a vectorised ``compute_reward``.

    Args:
        n_bits: number of bits (>= 1).
        render_mode: ``None`` or ``"ansi"`` (``render()`` returns ``"0110 -> 1100"``).

    Example:
        >>> env = BitFlipEnv(n_bits=4)
        >>> obs, info = env.reset(seed=0)
        >>> sorted(obs)
        ['achieved_goal', 'desired_goal', 'observation']
        >>> env.compute_reward(obs["achieved_goal"], obs["desired_goal"], info)   # not solved at reset
        array(-1., dtype=float32)
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, n_bits: int = 10, render_mode: str | None = None) -> None:
        self.n_bits = check_positive_int("n_bits", n_bits)
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.render_mode = render_mode
        bits = spaces.Box(0.0, 1.0, (self.n_bits,), dtype=np.float32)
        self.observation_space = spaces.Dict(
            {"observation": bits, "achieved_goal": bits, "desired_goal": bits})
        self.action_space = spaces.Discrete(self.n_bits)
        self._state = np.zeros(self.n_bits, dtype=np.float32)  # [n_bits]
        self._goal = np.ones(self.n_bits, dtype=np.float32)  # [n_bits]

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Draw a new state and a different goal from ``self.np_random`` (seeded by ``seed``)."""
        super().reset(seed=seed)
        self._state = self.np_random.integers(0, 2, self.n_bits).astype(np.float32)
        self._goal = self._state.copy()
        while np.array_equal(self._goal, self._state):
            self._goal = self.np_random.integers(0, 2, self.n_bits).astype(np.float32)
        return self._observation(), {"is_success": False}

    def step(self, action: int | np.integer) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        if not self.action_space.contains(action):
            raise ValueError(f"action must be an integer in [0, {self.n_bits}), got {action!r}")
        self._state[int(action)] = 1.0 - self._state[int(action)]
        obs = self._observation()
        success = bool(np.array_equal(self._state, self._goal))
        reward = float(self.compute_reward(obs["achieved_goal"], obs["desired_goal"], {}))
        return obs, reward, success, False, {"is_success": success}

    def compute_reward(self, achieved_goal: npt.ArrayLike, desired_goal: npt.ArrayLike,
                       info: object = None) -> np.ndarray:
        """0 where ``achieved_goal`` equals ``desired_goal`` (all bits), -1 elsewhere, as float32.

        Vectorised over any leading batch axes: ``[..., n_bits]`` pairs give ``[...]`` rewards (a
        single pair gives a 0-d array). ``info`` is ignored.
        """
        return -self._mismatch(achieved_goal, desired_goal).astype(np.float32)

    def compute_terminated(self, achieved_goal: npt.ArrayLike, desired_goal: npt.ArrayLike,
                           info: object = None) -> np.ndarray:
        """True where the goal is reached (the episode ends on success), vectorised like ``compute_reward``."""
        return ~self._mismatch(achieved_goal, desired_goal)

    def compute_truncated(self, achieved_goal: npt.ArrayLike, desired_goal: npt.ArrayLike,
                          info: object = None) -> np.ndarray:
        """Always False: truncation comes from the ``TimeLimit`` wrapper only."""
        return np.zeros(np.broadcast_shapes(np.shape(achieved_goal), np.shape(desired_goal))[:-1], dtype=bool)

    def _mismatch(self, achieved_goal: npt.ArrayLike, desired_goal: npt.ArrayLike) -> np.ndarray:
        achieved, desired = np.asarray(achieved_goal), np.asarray(desired_goal)
        if achieved.shape[-1:] != (self.n_bits,) or desired.shape[-1:] != (self.n_bits,):
            raise ValueError(f"goals must end in an axis of n_bits = {self.n_bits}, got shapes "
                             f"{achieved.shape} and {desired.shape}")
        return np.any(achieved != desired, axis=-1)

    def _observation(self) -> dict[str, np.ndarray]:
        return {"observation": self._state.copy(), "achieved_goal": self._state.copy(),
                "desired_goal": self._goal.copy()}

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            bits = "".join(str(int(b)) for b in self._state)
            return f"{bits} -> {''.join(str(int(b)) for b in self._goal)}"
        return None


def make_bitflip(n_bits: int = 10, max_steps: int | None = None, render_mode: str | None = None) -> gym.Env:
    """``BitFlipEnv(n_bits)`` in a ``TimeLimit`` of ``max_steps`` (default ``n_bits``): ``BitFlip-v0``'s entry point.

    The limit depends on ``n_bits``, which a registration's fixed ``max_episode_steps`` cannot
    express, so the entry point applies it; ``gymnasium.make("BitFlip-v0", n_bits=15)`` then
    truncates after 15 steps and reports ``spec.max_episode_steps == 15``.
    """
    env = BitFlipEnv(n_bits, render_mode=render_mode)
    limit = env.n_bits if max_steps is None else check_positive_int("max_steps", max_steps)
    return gym.wrappers.TimeLimit(env, limit)
