"""Brute-force reference for ``SequenceBuilder``, written from its module docstring alone.

Slow and obvious on purpose: whole episodes are known up front, every window is written out row by
row with Python loops, and nothing here imports r2d2kit, so a bug in the code under test cannot leak
into the expectations.

The layout being modelled (``r2d2kit/replay/sequence_builder.py``)::

    one episode of T transitions -> rows 0 .. T
        row t < T : obs_t, action_t, reward_t, terminated_t, truncated_t   (a transition)
        row T     : the final observation only (the obs of the NEXT_STEP autoreset step)
    window k      : rows t0 .. t0 + L - 1, t0 = -burn_in + k * period, L = burn_in + trace_length + n_step,
                    kept while its trace holds a transition (t0 + burn_in < T)
    obs_mask      : 0 <= t <= T          mask: 0 <= t < T          anything else: zero padding
    prev_action/prev_reward of row t: action/reward of row t - 1 (zero at t = 0; row T has them too)
    state         : the recurrent state given with row max(t0, 0)

The vector-env side (``vector_steps``): env ``e`` plays its episodes back to back. Episode ``j``
starts at global step ``s_j`` (``s_0 = 0``); row ``t`` of it is fed at step ``s_j + t``, so its final
observation comes at ``s_j + T`` (gymnasium's NEXT_STEP autoreset: that step's action is ignored, its
reward is 0 and both flags are False) and the next episode starts at ``s_{j+1} = s_j + T + 1``.

A window is emittable at the first step where all of its rows are known, or where the episode's end is
known (its final observation has arrived): ``s_j + min(t0 + L - 1, T)``.

Episode ids: env ``e``'s first episode is ``e``; later episodes are numbered ``num_envs, num_envs + 1,
...`` in the order they start (same step: lower env first).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

ROW_KEYS = ("obs", "action", "reward", "prev_action", "prev_reward", "terminated", "truncated")
STATE_KEYS = ("state_h", "state_c")


@dataclass
class RecordedEpisode:
    """One whole episode as an env and an actor produced it.

    Attributes:
        obs: ``[T + 1, *obs_shape]``; row ``T`` is the final observation.
        action: ``[T, *action_shape]``.
        reward: ``[T]``.
        terminated: ``[T]`` bool; at most the last is True.
        truncated: ``[T]`` bool; at most the last is True (one of the two flags ends the episode).
        state: ``None`` or ``(h, c)``, each ``[T + 1, *units]``: the recurrent state given with each
            row's step (row ``T``: the state given on the autoreset step).
    """

    obs: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    state: tuple[np.ndarray, np.ndarray] | None = None

    def __post_init__(self) -> None:
        self.obs = np.asarray(self.obs)
        self.action = np.asarray(self.action)
        self.reward = np.asarray(self.reward)
        self.terminated = np.asarray(self.terminated, dtype=bool)
        self.truncated = np.asarray(self.truncated, dtype=bool)
        T = self.transitions
        assert T >= 1, "an episode has at least one transition"
        assert self.obs.shape[0] == T + 1, "obs needs T + 1 rows (the last is the final observation)"
        assert self.action.shape[0] == T and self.terminated.shape == (T,) and self.truncated.shape == (T,)
        done = self.terminated | self.truncated
        assert done[-1] and not done[:-1].any(), "exactly the last transition ends the episode"
        if self.state is not None:
            assert len(self.state) == 2, "state is (h, c)"
            self.state = tuple(np.asarray(part) for part in self.state)
            assert all(part.shape[0] == T + 1 for part in self.state)

    @property
    def transitions(self) -> int:
        return int(self.reward.shape[0])

    @property
    def span(self) -> int:
        """Vector steps the episode occupies: its T transitions plus the autoreset step."""
        return self.transitions + 1


@dataclass
class ExpectedWindow:
    step: int  # global step at which the window becomes emittable
    env: int
    episode: int
    start: int  # t0, may be negative
    rows: dict[str, np.ndarray]  # ROW_KEYS + "mask" + "obs_mask", each [L, ...]
    state: tuple[np.ndarray, np.ndarray] | None


def episode_start_steps(episodes_per_env: Sequence[Sequence[RecordedEpisode]]) -> list[list[int]]:
    """Global step of each episode's row 0 (back to back: the next starts after the autoreset step)."""
    starts = []
    for episodes in episodes_per_env:
        step, mine = 0, []
        for episode in episodes:
            mine.append(step)
            step += episode.span
        starts.append(mine)
    return starts


def episode_ids(episodes_per_env: Sequence[Sequence[RecordedEpisode]]) -> list[list[int]]:
    """Id of each episode: numbered in the order episodes start, lower env first on the same step."""
    starts = episode_start_steps(episodes_per_env)
    order = sorted((step, env, j) for env, mine in enumerate(starts) for j, step in enumerate(mine))
    ids = [[-1] * len(mine) for mine in starts]
    for number, (_, env, j) in enumerate(order):
        ids[env][j] = number
    return ids


def window_starts(transitions: int, burn_in: int, period: int) -> list[int]:
    """Every t0 = -burn_in + k * period whose trace holds a transition (t0 + burn_in < T)."""
    starts = []
    k = 0
    while -burn_in + k * period + burn_in < transitions:
        starts.append(-burn_in + k * period)
        k += 1
    return starts


def window_rows(episode: RecordedEpisode, start: int, length: int) -> dict[str, np.ndarray]:
    """Rows ``start .. start + length - 1`` of one episode, zero-padded outside ``0 .. T``."""
    T = episode.transitions
    obs_shape, action_shape = episode.obs.shape[1:], episode.action.shape[1:]
    rows = {
        "obs": np.zeros((length,) + obs_shape, episode.obs.dtype),
        "action": np.zeros((length,) + action_shape, episode.action.dtype),
        "reward": np.zeros(length, np.float32),
        "prev_action": np.zeros((length,) + action_shape, episode.action.dtype),
        "prev_reward": np.zeros(length, np.float32),
        "terminated": np.zeros(length, bool),
        "truncated": np.zeros(length, bool),
        "mask": np.zeros(length, bool),
        "obs_mask": np.zeros(length, bool),
    }
    for i in range(length):
        t = start + i
        if 0 <= t <= T:  # an observation: a transition's or the final one
            rows["obs"][i] = episode.obs[t]
            rows["obs_mask"][i] = True
            if t >= 1:
                rows["prev_action"][i] = episode.action[t - 1]
                rows["prev_reward"][i] = np.float32(episode.reward[t - 1])
        if 0 <= t < T:  # a transition
            rows["action"][i] = episode.action[t]
            rows["reward"][i] = np.float32(episode.reward[t])
            rows["terminated"][i] = episode.terminated[t]
            rows["truncated"][i] = episode.truncated[t]
            rows["mask"][i] = True
    return rows


def expected_windows(episodes_per_env: Sequence[Sequence[RecordedEpisode]], burn_in: int, trace_length: int,
                     n_step: int, period: int, num_steps: int | None = None) -> list[ExpectedWindow]:
    """Every window of every episode, in emission order (step, then env, then start).

    With ``num_steps``, only the windows emittable within the first ``num_steps`` vector steps.
    """
    length = burn_in + trace_length + n_step
    starts = episode_start_steps(episodes_per_env)
    ids = episode_ids(episodes_per_env)
    windows = []
    for env, episodes in enumerate(episodes_per_env):
        for j, episode in enumerate(episodes):
            T = episode.transitions
            for t0 in window_starts(T, burn_in, period):
                step = starts[env][j] + min(t0 + length - 1, T)
                if num_steps is not None and step >= num_steps:
                    continue
                first_real = max(t0, 0)
                state = None if episode.state is None else tuple(part[first_real] for part in episode.state)
                windows.append(ExpectedWindow(step, env, ids[env][j], t0, window_rows(episode, t0, length), state))
    windows.sort(key=lambda w: (w.step, w.env, w.start))
    return windows


def stack_windows(windows: Sequence[ExpectedWindow]) -> dict[str, np.ndarray]:
    """Windows as the builder returns them: ``[W, L, ...]`` rows, ``[W]`` ids, ``[W, ...]`` states."""
    out = {key: np.stack([w.rows[key] for w in windows]) for key in ROW_KEYS + ("mask", "obs_mask")}
    out["env"] = np.array([w.env for w in windows], dtype=np.int64)
    out["episode"] = np.array([w.episode for w in windows], dtype=np.int64)
    out["start"] = np.array([w.start for w in windows], dtype=np.int64)
    if windows[0].state is not None:
        for part, key in enumerate(STATE_KEYS):
            out[key] = np.stack([w.state[part] for w in windows])
    return out


def vector_steps(episodes_per_env: Sequence[Sequence[RecordedEpisode]], num_steps: int,
                 ignored_action: Any = -7) -> list[dict[str, Any]]:
    """The arguments of ``SequenceBuilder.step`` for the first ``num_steps`` steps of a NEXT_STEP vector env.

    On an autoreset step the env's obs is the final observation, its action is ``ignored_action``
    (what the policy picked; gymnasium ignores it), its reward 0 and both flags False.
    """
    starts = episode_start_steps(episodes_per_env)
    for env, episodes in enumerate(episodes_per_env):
        assert starts[env][-1] + episodes[-1].span >= num_steps, f"env {env} has too few episodes recorded"
    first = episodes_per_env[0][0]
    with_state = first.state is not None
    steps = []
    for step in range(num_steps):
        obs, action, reward, terminated, truncated = [], [], [], [], []
        state_h, state_c = [], []
        for env, episodes in enumerate(episodes_per_env):
            j = max(i for i, s in enumerate(starts[env]) if s <= step)
            episode, t = episodes[j], step - starts[env][j]
            obs.append(episode.obs[t])
            if t < episode.transitions:
                action.append(episode.action[t])
                reward.append(episode.reward[t])
                terminated.append(episode.terminated[t])
                truncated.append(episode.truncated[t])
            else:  # autoreset step: the final observation
                action.append(np.full(first.action.shape[1:], ignored_action, first.action.dtype))
                reward.append(0.0)
                terminated.append(False)
                truncated.append(False)
            if with_state:
                state_h.append(episode.state[0][t])
                state_c.append(episode.state[1][t])
        steps.append({
            "obs": np.stack(obs),                      # [E, *obs_shape]
            "action": np.stack(action),                # [E, *action_shape]
            "reward": np.array(reward, np.float32),    # [E]
            "terminated": np.array(terminated, bool),  # [E]
            "truncated": np.array(truncated, bool),    # [E]
            "state": (np.stack(state_h), np.stack(state_c)) if with_state else None,
        })
    return steps
