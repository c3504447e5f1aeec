"""Actor-side n-step accumulation for a batch of environments.

For one env and ``n_step = 3``, steps ``s0 a0 r0 -> s1 a1 r1 -> s2 a2 r2 -> s3 ...`` become::

    (s0, a0, r0 + g r1 + g^2 r2, s3, discount = g^3)          # full window
    ... episode ends at step t:
    (s_{t-1}, a_{t-1}, r_{t-1}, s_t, discount = g   or 0)    # shortened windows, flushed at once
                                         truncated   terminated

so a learner computes ``y = reward + discount * Q(next_obs)``: termination stops bootstrapping,
truncation (a time limit) does not.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from r2d2kit._validation import as_per_env, check_float, check_positive_int
from r2d2kit.replay.autoreset import AutoresetMode, ResetSteps


class NStepAccumulator:
    """Turns a stream of vector-env steps into n-step transitions with their discounts.

    Call :meth:`step` once per ``envs.step``; it returns the transitions completed by that step
    as a dict of arrays (``obs``, ``action``, ``reward``, ``next_obs``, ``discount``, ``env``),
    ready for ``buffer.add_batch(**{k: v for k, v in out.items() if k in buffer.fields})``.

    Args:
        num_envs: number of environments in the vector env.
        n_step: steps summed per transition (1 = ordinary one-step transitions).
        gamma: discount factor.
        autoreset_mode: gymnasium's vector autoreset mode. ``"next_step"`` (the gymnasium >= 1.0
            default): the step after an episode ends only carries the reset observation, so it is
            ignored for that env. ``"same_step"`` / ``"disabled"``: every step is a transition; pass
            the true final observation (``infos["final_obs"]``) as ``next_obs`` on episode ends.
    """

    def __init__(self, num_envs: int, n_step: int, gamma: float, autoreset_mode: AutoresetMode = "next_step") -> None:
        self.num_envs = check_positive_int("num_envs", num_envs)
        self.n_step = check_positive_int("n_step", n_step)
        self.gamma = check_float("gamma", gamma, 0.0, 1.0)
        self._resets = ResetSteps(self.num_envs, autoreset_mode)
        self.autoreset_mode = self._resets.mode
        self._powers = self.gamma ** np.arange(self.n_step + 1)  # [n + 1]
        self._obs: np.ndarray | None = None  # [n, E, *obs_shape]
        self._action: np.ndarray | None = None  # [n, E, *action_shape]
        self._reward = np.zeros((self.n_step, self.num_envs), dtype=np.float64)  # [n, E]
        self._head = np.zeros(self.num_envs, dtype=np.int64)  # next ring slot per env (mod n)
        self._count = np.zeros(self.num_envs, dtype=np.int64)  # pending steps per env

    def reset(self) -> None:
        """Drop all pending steps (e.g. after resetting the envs by hand)."""
        self._count[:] = 0
        self._resets.clear()

    def pending(self) -> np.ndarray:
        """Steps per env that wait for more steps before they become transitions."""
        return self._count.copy()

    def step(self, obs: npt.ArrayLike, action: npt.ArrayLike, reward: npt.ArrayLike, next_obs: npt.ArrayLike,
             terminated: npt.ArrayLike, truncated: npt.ArrayLike) -> dict[str, np.ndarray]:
        """Feed one vector-env step (``obs`` is where ``action`` was taken); return finished transitions."""
        obs_array, action_array, next_obs_array = np.asarray(obs), np.asarray(action), np.asarray(next_obs)
        rewards = as_per_env("reward", reward, self.num_envs, np.float64)
        terminated_flags = as_per_env("terminated", terminated, self.num_envs, bool)
        truncated_flags = as_per_env("truncated", truncated, self.num_envs, bool)
        for name, array in (("obs", obs_array), ("action", action_array), ("next_obs", next_obs_array)):
            if array.ndim == 0 or array.shape[0] != self.num_envs:
                raise ValueError(f"{name} must have a leading axis of num_envs={self.num_envs}, "
                                 f"got shape {array.shape}")
        if next_obs_array.shape != obs_array.shape:
            raise ValueError(f"next_obs has shape {next_obs_array.shape} but obs has shape {obs_array.shape}")
        obs_ring, action_ring = self._allocate(obs_array, action_array)

        active, done = self._resets.advance(terminated_flags | truncated_flags)  # [E] each
        envs = np.flatnonzero(active)
        slots = self._head[envs] % self.n_step
        obs_ring[slots, envs] = obs_array[envs]
        action_ring[slots, envs] = action_array[envs]
        self._reward[slots, envs] = rewards[envs]
        self._head[envs] += 1
        self._count[envs] += 1

        full = np.flatnonzero(active & ~done & (self._count == self.n_step))
        parts = [self._emit_full(full, next_obs_array, obs_ring, action_ring)] if full.size else []
        for env in np.flatnonzero(done):
            parts.append(self._emit_episode_end(env, next_obs_array[env], bool(terminated_flags[env]), obs_ring,
                                                action_ring))
            self._count[env] = 0
        return self._concatenate(parts, obs_array, action_array)

    def _emit_full(self, envs: np.ndarray, next_obs: np.ndarray, obs_ring: np.ndarray,
                   action_ring: np.ndarray) -> dict[str, np.ndarray]:
        n = self.n_step
        first = (self._head[envs] - n) % n  # [m] oldest slot
        returns = np.zeros(envs.size)
        for k in range(n):
            returns += self._powers[k] * self._reward[(first + k) % n, envs]
        self._count[envs] -= 1
        return {
            "obs": obs_ring[first, envs],
            "action": action_ring[first, envs],
            "reward": returns,
            "next_obs": next_obs[envs],
            "discount": np.full(envs.size, self._powers[n]),
            "env": envs.astype(np.int64),
        }

    def _emit_episode_end(self, env: int | np.integer, final_obs: np.ndarray, terminated: bool, obs_ring: np.ndarray,
                          action_ring: np.ndarray) -> dict[str, np.ndarray]:
        n, count = self.n_step, int(self._count[env])
        slots = (self._head[env] - count + np.arange(count)) % n  # [count] oldest first
        rewards = self._reward[slots, env]
        returns = np.array([np.dot(self._powers[:count - j], rewards[j:]) for j in range(count)])
        horizons = count - np.arange(count)
        discount = np.zeros(count) if terminated else self._powers[horizons]
        return {
            "obs": obs_ring[slots, env],
            "action": action_ring[slots, env],
            "reward": returns,
            "next_obs": np.repeat(final_obs[np.newaxis], count, axis=0),
            "discount": discount,
            "env": np.full(count, env, dtype=np.int64),
        }

    def _concatenate(self, parts: list[dict[str, np.ndarray]], obs: np.ndarray,
                     action: np.ndarray) -> dict[str, np.ndarray]:
        if not parts:
            return {
                "obs": np.empty((0,) + obs.shape[1:], obs.dtype),
                "action": np.empty((0,) + action.shape[1:], action.dtype),
                "reward": np.empty(0, np.float32),
                "next_obs": np.empty((0,) + obs.shape[1:], obs.dtype),
                "discount": np.empty(0, np.float32),
                "env": np.empty(0, np.int64),
            }
        out = {key: np.concatenate([part[key] for part in parts]) for key in parts[0]}
        out["reward"] = out["reward"].astype(np.float32)
        out["discount"] = out["discount"].astype(np.float32)
        return out

    def _allocate(self, obs: np.ndarray, action: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The obs and action rings, allocated by the first step; later steps must keep their shapes."""
        if self._obs is None or self._action is None:
            self._obs = np.zeros((self.n_step,) + obs.shape, dtype=obs.dtype)
            self._action = np.zeros((self.n_step,) + action.shape, dtype=action.dtype)
        elif self._obs.shape[1:] != obs.shape or self._action.shape[1:] != action.shape:
            raise ValueError(
                f"obs/action shapes changed from {self._obs.shape[1:]}/{self._action.shape[1:]} "
                f"to {obs.shape}/{action.shape}"
            )
        return self._obs, self._action
