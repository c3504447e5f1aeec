"""CueMemory: the smallest task that needs memory.

The first observation shows a cue (+1 or -1); the next ``delay`` observations show nothing; then
the agent is told "now" and is paid +1 for the action matching the cue (action 0 for -1, action 1
for +1) and -1 otherwise. Earlier actions do nothing. A feed-forward Q-network sees the same "now"
observation either way and earns 0 on average; a recurrent one that keeps the cue earns 1.

Observation: ``[cue, now]`` as float32. Episode length: ``delay + 2`` steps.
``render_mode="rgb_array"`` draws the observation as a small image (green/red cue, white "now").
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class CueMemoryEnv(gym.Env):
    """Remember a cue over ``delay`` blank steps, then act on it."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 4}

    def __init__(self, delay: int = 4, render_mode: str | None = None) -> None:
        if not isinstance(delay, int) or delay < 0:
            raise ValueError(f"delay must be an integer >= 0, got {delay!r}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.delay = delay
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._cue = 1.0
        self._time = 0

    def _observation(self) -> np.ndarray:
        cue = self._cue if self._time == 0 else 0.0
        now = 1.0 if self._time == self.delay + 1 else 0.0
        return np.array([cue, now], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._cue = 1.0 if self.np_random.random() < 0.5 else -1.0
        self._time = 0
        return self._observation(), {}

    def step(self, action):
        if self._time == self.delay + 1:
            reward = 1.0 if int(action) == (1 if self._cue > 0 else 0) else -1.0
            return np.zeros(2, dtype=np.float32), reward, True, False, {}
        self._time += 1
        return self._observation(), 0.0, False, False, {}

    def render(self) -> np.ndarray | None:
        """A 32x64 RGB frame: left half the cue (green +1, red -1, black none), right half white at "now"."""
        if self.render_mode != "rgb_array":
            return None
        cue, now = self._observation()
        frame = np.zeros((32, 64, 3), dtype=np.uint8)
        frame[:, :32] = (0, 200, 0) if cue > 0 else (200, 0, 0) if cue < 0 else (0, 0, 0)
        frame[:, 32:] = 255 if now else 0
        return frame


class ContinuousCueEnv(gym.Env):
    """Remember a continuous cue and answer it with a continuous action, every step of a short episode.

    The first observation shows a cue drawn uniformly from [-1, 1] (and a flag saying it is the first step);
    the later ones show zeros. Every step pays ``-(action - cue)^2`` for an action in [-1, 1]; the episode
    terminates after ``length`` steps. A memoryless policy can answer only the first step and then earns at
    best ``-1/3`` a step (the cue's variance): ``-(length - 1) / 3`` per episode; one that keeps the cue
    earns 0. Uniformly random actions earn ``-2/3`` a step.

    Observation: ``[cue or 0, first step]`` as float32; action: ``Box(-1, 1, (1,))``.
    """

    def __init__(self, length: int = 4) -> None:
        if isinstance(length, bool) or not isinstance(length, int) or length < 1:
            raise ValueError(f"length must be an integer >= 1, got {length!r}")
        self.length = length
        self.observation_space = gym.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
        self._cue = 0.0
        self._time = 0

    def _observation(self) -> np.ndarray:
        first = self._time == 0
        return np.array([self._cue if first else 0.0, 1.0 if first else 0.0], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._cue = float(self.np_random.uniform(-1.0, 1.0))
        self._time = 0
        return self._observation(), {}

    def step(self, action):
        answer = float(np.clip(np.asarray(action, dtype=np.float64).reshape(-1)[0], -1.0, 1.0))
        reward = -(answer - self._cue) ** 2
        self._time += 1
        return self._observation(), reward, self._time >= self.length, False, {}
