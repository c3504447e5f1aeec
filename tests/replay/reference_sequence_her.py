"""Brute-force reference for SequenceHerReplayBuffer (STUMPY's ``naive.py`` style); nothing here imports r2d2kit.

Whole episodes are known up front and replayed one vector step at a time, exactly as a NEXT_STEP
vector env feeds ``SequenceBuilder``. Every expectation is written out row by row with Python loops
from the module docstring of ``r2d2kit/replay/sequence_her.py``:

    episode of T transitions: observations o_0 .. o_T (o_T: the final observation, no action)
    window at t0 (L rows):    rows t0 .. t0 + L - 1; obs rows 0 <= t <= T, transition rows 0 <= t < T
    s_last                    min(t0 + L - 1, T - 1), the window's last transition
    'future' goal             ag(o_tau) for any tau in s_last + 1 .. T;   'final': ag(o_T)
    'trace_future' goal       ag(o_tau) for any tau in t0 + burn_in + 1 .. T
    relabelled row t          obs = observation(o_t) ++ goal;  reward = R(ag(o_t+1), goal) if t < T
                              prev_reward = R(ag(o_t), goal) if t >= 1 (0 at t = 0)
    relabelled at all         only once the episode is finished: its final observation was fed

Encoding: every value says where it came from, so a row read from the wrong place cannot hide::

    observation      [env, j, t]               j: the episode's index within its env
    achieved_goal    [env, j, t + 0.5]         so goal[2] - 0.5 is the goal's episode time tau
    desired_goal     [env, j, UNREACHED]       never achieved: stored rewards are never a relabelled value
    stored reward    0.25 + 10 env + 0.5 j + 0.125 t  (> 0; relabelled rewards are <= 0)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

UNREACHED = 1000.0


def distance_reward(achieved_goal: Any, desired_goal: Any, info: Any = None) -> np.ndarray:
    """``-sum |achieved - desired|`` over the last axis: 0 exactly on the goal, distinct values elsewhere."""
    achieved = np.asarray(achieved_goal, dtype=np.float64)
    desired = np.asarray(desired_goal, dtype=np.float64)
    return -np.abs(achieved - desired).sum(axis=-1)


def distance_terminated(achieved_goal: Any, desired_goal: Any, info: Any = None) -> np.ndarray:
    """True exactly on the goal (an env that ends on success)."""
    return distance_reward(achieved_goal, desired_goal) == 0


def scalar_reward(achieved: Sequence[float], goal: Sequence[float]) -> np.float32:
    """``distance_reward`` of one pair, written out as a loop."""
    total = 0.0
    for a, g in zip(achieved, goal):
        total += abs(float(a) - float(g))
    return np.float32(-total)


@dataclass
class GoalEpisode:
    """Episode ``j`` of env ``env`` with ``T`` transitions, ending by termination or truncation."""

    env: int
    j: int
    transitions: int
    ending: str  # "terminated" or "truncated"

    @property
    def span(self) -> int:
        """Vector steps it occupies: T transitions and the autoreset step carrying o_T."""
        return self.transitions + 1

    def observation(self, t: int) -> list[float]:
        return [float(self.env), float(self.j), float(t)]

    def achieved_goal(self, t: int) -> list[float]:
        return [float(self.env), float(self.j), t + 0.5]

    def desired_goal(self) -> list[float]:
        return [float(self.env), float(self.j), UNREACHED]

    def action(self, t: int) -> int:
        return 1 + 100 * self.env + 10 * self.j + t

    def reward(self, t: int) -> float:
        return 0.25 + 10.0 * self.env + 0.5 * self.j + 0.125 * t

    def terminated(self, t: int) -> bool:
        return t == self.transitions - 1 and self.ending == "terminated"

    def truncated(self, t: int) -> bool:
        return t == self.transitions - 1 and self.ending == "truncated"

    def state(self, t: int) -> tuple[list[float], list[float]]:
        """The recurrent state the actor gives with row ``t``."""
        return [float(self.env), float(self.j) + 0.25 * t], [-float(self.env) - 1.0, float(t)]


def random_episodes(rng: np.random.Generator, num_envs: int, num_steps: int, max_len: int) -> list[list[GoalEpisode]]:
    """Per env, episodes of 1 .. max_len transitions back to back, enough for ``num_steps`` vector steps."""
    episodes = []
    for env in range(num_envs):
        mine, steps = [], 0
        while steps <= num_steps:
            length = int(rng.integers(1, max_len + 1))
            mine.append(GoalEpisode(env, len(mine), length, "terminated" if rng.random() < 0.5 else "truncated"))
            steps += length + 1
        episodes.append(mine)
    return episodes


def fixed_episodes(lengths: Sequence[Sequence[int]], repeat_to: int) -> list[list[GoalEpisode]]:
    """Per env, the given episode lengths cycled until they cover ``repeat_to`` vector steps."""
    episodes = []
    for env, cycle in enumerate(lengths):
        mine, steps = [], 0
        while steps <= repeat_to:
            length = cycle[len(mine) % len(cycle)]
            mine.append(GoalEpisode(env, len(mine), length, "terminated" if len(mine) % 2 else "truncated"))
            steps += length + 1
        episodes.append(mine)
    return episodes


class ReferenceSequenceHer:
    """Episodes replayed step by step; windows, goals and rewards written out row by row.

    Args:
        episodes_per_env: per env, its episodes in order (NEXT_STEP autoreset between them).
        burn_in, trace_length, n_step, period: the window layout.
    """

    def __init__(self, episodes_per_env: Sequence[Sequence[GoalEpisode]], burn_in: int, trace_length: int,
                 n_step: int, period: int) -> None:
        self.episodes = [list(mine) for mine in episodes_per_env]
        self.burn_in, self.trace_length, self.n_step, self.period = burn_in, trace_length, n_step, period
        self.length = burn_in + trace_length + n_step
        self.start_step = []  # [env][j]: vector step of the episode's row 0
        for mine in self.episodes:
            step, starts = 0, []
            for episode in mine:
                starts.append(step)
                step += episode.span
            self.start_step.append(starts)

    # ------------------------------------------------------------------ the vector env
    def vector_step(self, step: int) -> dict[str, Any]:
        """The arguments of ``SequenceBuilder.step`` (flat obs, extras) for vector step ``step``."""
        obs, achieved, action, reward, terminated, truncated, state_h, state_c = ([] for _ in range(8))
        for env, mine in enumerate(self.episodes):
            j = max(i for i, start in enumerate(self.start_step[env]) if start <= step)
            episode, t = mine[j], step - self.start_step[env][j]
            obs.append(episode.observation(t) + episode.desired_goal())
            achieved.append(episode.achieved_goal(t))
            if t < episode.transitions:
                action.append(episode.action(t))
                reward.append(episode.reward(t))
                terminated.append(episode.terminated(t))
                truncated.append(episode.truncated(t))
            else:  # NEXT_STEP autoreset: the final observation; the action is ignored
                action.append(-7)
                reward.append(0.0)
                terminated.append(False)
                truncated.append(False)
            h, c = episode.state(t)
            state_h.append(h)
            state_c.append(c)
        return {"obs": np.array(obs, np.float32), "action": np.array(action, np.int64),
                "reward": np.array(reward, np.float32), "terminated": np.array(terminated),
                "truncated": np.array(truncated),
                "state": (np.array(state_h, np.float32), np.array(state_c, np.float32)),
                "extras": {"achieved_goal": np.array(achieved, np.float32)}}

    def finished(self, env: int, j: int, fed_steps: int) -> bool:
        """Has the episode's final observation been fed within the first ``fed_steps`` vector steps?"""
        return fed_steps > self.start_step[env][j] + self.episodes[env][j].transitions

    def fed_rows(self, env: int, j: int, fed_steps: int) -> int:
        """Rows of the episode fed so far (row t arrives at step start + t)."""
        return max(0, min(fed_steps - self.start_step[env][j], self.episodes[env][j].span))

    def window_starts(self, env: int, j: int) -> list[int]:
        """Every t0 = -burn_in + k * period whose trace holds a transition."""
        T = self.episodes[env][j].transitions
        starts, k = [], 0
        while -self.burn_in + k * self.period + self.burn_in < T:
            starts.append(-self.burn_in + k * self.period)
            k += 1
        return starts

    # ------------------------------------------------------------------ windows
    def rows(self, env: int, j: int, start: int, goal: Sequence[float] | None = None,
             terminate_on_goal: bool = False) -> dict[str, np.ndarray]:
        """The window's rows as stored (``goal`` None) or relabelled with ``goal``, one row at a time;
        ``terminate_on_goal``: a relabelled transition terminates exactly when it reaches the goal."""
        episode = self.episodes[env][j]
        T, L = episode.transitions, self.length
        out = {"obs": np.zeros((L, 6), np.float32), "achieved_goal": np.zeros((L, 3), np.float32),
               "action": np.zeros(L, np.int64), "prev_action": np.zeros(L, np.int64),
               "reward": np.zeros(L, np.float32), "prev_reward": np.zeros(L, np.float32),
               "terminated": np.zeros(L, bool), "truncated": np.zeros(L, bool),
               "mask": np.zeros(L, bool), "obs_mask": np.zeros(L, bool)}
        for i in range(L):
            t = start + i
            if not 0 <= t <= T:
                continue  # padding: zeros
            desired = episode.desired_goal() if goal is None else list(goal)
            out["obs"][i] = episode.observation(t) + desired
            out["achieved_goal"][i] = episode.achieved_goal(t)
            out["obs_mask"][i] = True
            if t >= 1:
                out["prev_action"][i] = episode.action(t - 1)
                out["prev_reward"][i] = episode.reward(t - 1) if goal is None else \
                    scalar_reward(episode.achieved_goal(t), goal)
            if t < T:
                out["action"][i] = episode.action(t)
                out["reward"][i] = episode.reward(t) if goal is None else \
                    scalar_reward(episode.achieved_goal(t + 1), goal)
                out["terminated"][i] = episode.terminated(t) if goal is None or not terminate_on_goal else \
                    scalar_reward(episode.achieved_goal(t + 1), goal) == 0
                out["truncated"][i] = episode.truncated(t)
                out["mask"][i] = True
        return out

    def state(self, env: int, j: int, start: int) -> tuple[np.ndarray, np.ndarray]:
        h, c = self.episodes[env][j].state(max(start, 0))
        return np.array(h, np.float32), np.array(c, np.float32)

    def goal_times(self, env: int, j: int, start: int, strategy: str) -> list[int]:
        """Episode times tau of the observations whose achieved goal the strategy may pick."""
        T = self.episodes[env][j].transitions
        last_transition = min(start + self.length - 1, T - 1)
        if strategy == "future":
            return list(range(last_transition + 1, T + 1))
        if strategy == "final":
            return [T]
        if strategy == "trace_future":
            return list(range(start + self.burn_in + 1, T + 1))
        raise ValueError(strategy)

    def goal(self, env: int, j: int, tau: int) -> list[float]:
        return self.episodes[env][j].achieved_goal(tau)
