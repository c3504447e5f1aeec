"""Brute-force reference for HerReplayBuffer (STUMPY's ``naive.py`` style); nothing here imports r2d2kit.

The model keeps every step ever fed, per env, as a Python list and cuts it into episodes. Which
steps are still in the ring, which can be sampled, which goal steps a strategy may pick and what
an n-step return under a goal is are all answered by scanning those lists, one step at a time.

Sections:
    * Encoded rollouts: a scripted vector env whose observations and goals spell out (env, episode, t)
    * ReferenceHer: the ring, episodes and relabelling rules as plain lists
    * PER formulas
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# =====================================================================================================
# Encoded rollouts
# =====================================================================================================

#: observation = [env, episode, t, count]; achieved_goal = [env, episode, t] (t: steps taken so far);
#: desired_goal = [env, episode, UNREACHED] so an original goal is never achieved.
UNREACHED = 1000.0


def encoded_obs(env: int, episode: int, t: int, count: int) -> dict[str, np.ndarray]:
    """The observation dict after ``t`` steps of ``episode`` of ``env``; ``count`` = the env's step count."""
    return {
        "observation": np.array([env, episode, t, count], dtype=np.float32),
        "achieved_goal": np.array([env, episode, t], dtype=np.float32),
        "desired_goal": np.array([env, episode, UNREACHED], dtype=np.float32),
    }


def distance_reward(achieved_goal: np.ndarray, desired_goal: np.ndarray, info: Any = None) -> np.ndarray:
    """``-sum |achieved - desired|`` over the last axis: 0 exactly on the goal, distinct values elsewhere."""
    achieved = np.asarray(achieved_goal, dtype=np.float64)
    desired = np.asarray(desired_goal, dtype=np.float64)
    return -np.abs(achieved - desired).sum(axis=-1)


def reached(achieved_goal: np.ndarray, desired_goal: np.ndarray, info: Any = None) -> np.ndarray:
    """True where every component matches (a compute_terminated for envs that end on success)."""
    return np.all(np.asarray(achieved_goal) == np.asarray(desired_goal), axis=-1)


def stored_reward(env: int, episode: int, t: int) -> float:
    """The reward the scripted env returns for step ``t``: distinct per step, never a relabelled value."""
    return 0.25 + 10.0 * env + 0.5 * episode + 0.125 * t


def scripted_rollout(seed: int, num_envs: int, num_calls: int, max_len: int, autoreset_mode: str = "next_step",
                     terminate_probability: float = 0.5,
                     lengths: Sequence[Sequence[tuple[int, str]]] | None = None) -> list[dict[str, Any]]:
    """Vector-env calls that follow gymnasium's autoreset protocol, with encoded observations.

    Each env runs episodes of 1 .. ``max_len`` steps (or the given ``lengths[env]``: ``(length,
    "terminated" | "truncated")``, then one unfinished episode), ending by termination or
    truncation. With ``"next_step"`` the call after an episode's end returns the reset observation
    as ``next_obs`` (obs = the final observation, reward 0, both flags False): not a transition.
    With ``"same_step"`` the finishing call's ``next_obs`` is the reset observation and
    ``infos["final_obs"]`` holds the true final one, as gymnasium's vector envs report it.

    Returns:
        one dict per call: ``obs``, ``next_obs`` (dicts of ``[E, ...]``), ``action``, ``reward``,
        ``terminated``, ``truncated`` (``[E]``) and ``infos``.
    """
    rng = np.random.default_rng(seed)
    plans = [list(lengths[env]) if lengths is not None else None for env in range(num_envs)]

    def next_plan(env: int) -> tuple[int, str]:
        if plans[env] is None:
            length = int(rng.integers(1, max_len + 1))
            return length, "terminated" if rng.random() < terminate_probability else "truncated"
        return plans[env].pop(0) if plans[env] else (10**9, "unfinished")

    state = []
    for env in range(num_envs):
        length, ending = next_plan(env)
        state.append({"episode": 0, "t": 0, "count": 0, "length": length, "ending": ending, "reset_next": False})
    calls = []
    for _ in range(num_calls):
        obs = {key: [] for key in ("observation", "achieved_goal", "desired_goal")}
        next_obs = {key: [] for key in obs}
        action, reward, terminated, truncated = [], [], [], []
        finals: list[Any] = []
        for env in range(num_envs):
            s = state[env]
            before = encoded_obs(env, s["episode"], s["t"], s["count"])
            finals.append(None)
            if s["reset_next"]:  # NEXT_STEP autoreset: obs is the final observation, next_obs the reset one
                s.update(episode=s["episode"] + 1, t=0, reset_next=False)
                after = encoded_obs(env, s["episode"], 0, s["count"])
                step = (before, after, -7, 0.0, False, False)
            else:
                t = s["t"]
                r = stored_reward(env, s["episode"], t)
                s["t"] = t + 1
                s["count"] += 1
                after = encoded_obs(env, s["episode"], t + 1, s["count"])
                done = s["t"] == s["length"]
                term = done and s["ending"] == "terminated"
                trunc = done and s["ending"] == "truncated"
                step = (before, after, 100 * env + t, r, term, trunc)
                if done:
                    s["length"], s["ending"] = next_plan(env)
                    if autoreset_mode == "next_step":
                        s["reset_next"] = True
                    else:
                        finals[env] = after
                        s.update(episode=s["episode"] + 1, t=0)
                        step = (before, encoded_obs(env, s["episode"], 0, s["count"]), *step[2:])
            for key in obs:
                obs[key].append(step[0][key])
                next_obs[key].append(step[1][key])
            action.append(step[2])
            reward.append(step[3])
            terminated.append(step[4])
            truncated.append(step[5])
        infos: dict[str, Any] = {}
        if any(final is not None for final in finals):
            infos["final_obs"] = np.empty(num_envs, dtype=object)  # gymnasium: an object array of dicts
            infos["final_obs"][:] = finals
            infos["_final_obs"] = np.array([final is not None for final in finals])
        calls.append({
            "obs": {key: np.stack(value) for key, value in obs.items()},
            "next_obs": {key: np.stack(value) for key, value in next_obs.items()},
            "action": np.array(action, dtype=np.int64), "reward": np.array(reward, dtype=np.float64),
            "terminated": np.array(terminated), "truncated": np.array(truncated), "infos": infos,
        })
    return calls


def true_next_obs(call: dict[str, Any]) -> dict[str, np.ndarray]:
    """``next_obs`` with each finished env's final observation from ``infos`` (what same_step mode stores)."""
    patched = {key: value.copy() for key, value in call["next_obs"].items()}
    infos = call["infos"]
    for env in np.flatnonzero(infos.get("_final_obs", np.zeros(0, bool))):
        for key in patched:
            patched[key][env] = infos["final_obs"][env][key]
    return patched


# =====================================================================================================
# ReferenceHer
# =====================================================================================================


@dataclass
class Step:
    """One stored transition of the reference."""

    env: int
    count: int
    observation: np.ndarray
    achieved_goal: np.ndarray
    desired_goal: np.ndarray
    action: Any
    reward: float
    terminated: bool
    truncated: bool
    next_observation: np.ndarray
    next_achieved_goal: np.ndarray


@dataclass
class Episode:
    start: int
    end: int | None = None  # one past the last count; None while unfinished
    steps: list[Step] = field(default_factory=list)


class ReferenceHer:
    """The ring as lists: per env, every step ever fed and the episodes they form.

    Args:
        capacity: transitions over all envs; each env keeps its last ``capacity // num_envs`` steps.
        num_envs: envs of the vector env.
        autoreset_mode: ``"next_step"`` drops the step after an episode end; otherwise every step counts.
    """

    def __init__(self, capacity: int, num_envs: int, autoreset_mode: str = "next_step") -> None:
        self.num_envs = num_envs
        self.rows = capacity // num_envs
        self.autoreset_mode = autoreset_mode
        self.steps: list[list[Step]] = [[] for _ in range(num_envs)]
        self.episodes: list[list[Episode]] = [[] for _ in range(num_envs)]
        self.skip = [False] * num_envs

    def add(self, obs, action, reward, next_obs, terminated, truncated) -> None:
        for env in range(self.num_envs):
            if self.skip[env]:
                self.skip[env] = False
                continue
            count = len(self.steps[env])
            episodes = self.episodes[env]
            if not episodes or episodes[-1].end is not None:
                episodes.append(Episode(start=count))
            step = Step(env, count, obs["observation"][env].copy(), obs["achieved_goal"][env].copy(),
                        obs["desired_goal"][env].copy(), np.asarray(action[env]).copy(), float(reward[env]),
                        bool(terminated[env]), bool(truncated[env]), next_obs["observation"][env].copy(),
                        next_obs["achieved_goal"][env].copy())
            self.steps[env].append(step)
            episodes[-1].steps.append(step)
            if terminated[env] or truncated[env]:
                episodes[-1].end = count + 1
                self.skip[env] = self.autoreset_mode == "next_step"

    # ------------------------------------------------------------------ ring
    def flat_index(self, env: int, count: int) -> int:
        """Slot of the env's ``count``-th step: row ``count % rows`` of the env's column."""
        return (count % self.rows) * self.num_envs + env

    def written(self, env: int) -> int:
        return len(self.steps[env])

    def in_ring(self, env: int, count: int) -> bool:
        """The env's last ``rows`` steps are stored."""
        return self.written(env) - self.rows <= count < self.written(env)

    def episode_of(self, env: int, count: int) -> Episode:
        for episode in self.episodes[env]:
            stop = episode.end if episode.end is not None else self.written(env)
            if episode.start <= count < stop:
                return episode
        raise KeyError((env, count))

    def sampleable(self) -> dict[int, Step]:
        """Slot -> step for every step whose whole episode is still in the ring."""
        out = {}
        for env in range(self.num_envs):
            for episode in self.episodes[env]:
                if all(self.in_ring(env, step.count) for step in episode.steps):
                    for step in episode.steps:
                        out[self.flat_index(env, step.count)] = step
        return out

    def stored(self) -> dict[int, Step]:
        """Slot -> step for every step in the ring, sampleable or not."""
        out = {}
        for env in range(self.num_envs):
            for step in self.steps[env]:
                if self.in_ring(env, step.count):
                    out[self.flat_index(env, step.count)] = step
        return out

    # ------------------------------------------------------------------ relabelling rules
    def may_relabel(self, env: int, count: int, relabel_unfinished: bool) -> bool:
        return self.episode_of(env, count).end is not None or relabel_unfinished

    def goal_counts(self, env: int, count: int, strategy: str) -> list[int]:
        """Counts of the steps whose ``next_achieved_goal`` the strategy may use (not 'random')."""
        episode = self.episode_of(env, count)
        counts = [step.count for step in episode.steps]  # so far, if unfinished
        if strategy in ("future", "trace_future"):  # on a transition the trace is the one step
            return [c for c in counts if c >= count]
        if strategy == "final":
            return [counts[-1]]
        if strategy == "episode":
            return counts
        raise ValueError(strategy)

    def random_goals(self) -> set[bytes]:
        """Every goal 'random' may pick: the next achieved goal of any sampleable step (as bytes)."""
        return {step.next_achieved_goal.tobytes() for step in self.sampleable().values()}

    def nstep(self, env: int, count: int, goal: np.ndarray | None, n_step: int, gamma: float,
              compute_reward: Callable | None, compute_terminated: Callable | None = None) -> dict[str, Any]:
        """The n-step sample for step ``count``, under ``goal`` (None: the stored rewards and flags).

        Sums steps ``count, count + 1, ...`` of the same episode (stored so far), at most ``n_step``,
        stopping after a terminated step (under ``goal``, if ``compute_terminated`` is given).
        """
        episode = self.episode_of(env, count)
        following = [step for step in episode.steps if step.count >= count][:n_step]
        total, scale, ended, last = 0.0, 1.0, False, following[0]
        for step in following:
            if goal is None:
                reward, terminal = step.reward, step.terminated
            else:
                reward = float(compute_reward(step.next_achieved_goal[None], goal[None], {})[0])
                terminal = step.terminated if compute_terminated is None else \
                    bool(compute_terminated(step.next_achieved_goal[None], goal[None], {})[0])
            total += scale * reward
            scale *= gamma
            last = step
            if terminal:
                ended = True
                break
        return {"reward": total, "discount": 0.0 if ended else scale, "next_observation": last.next_observation,
                "next_achieved_goal": last.next_achieved_goal, "summed": len(following)}


# =====================================================================================================
# PER formulas
# =====================================================================================================


def is_weights(tree_values: dict[int, float], indices: Sequence[int], beta: float) -> np.ndarray:
    """``w_i = (N P(i))^-beta / max_j (N P(j))^-beta`` over the ``N`` slots with positive mass."""
    positive = {slot: value for slot, value in tree_values.items() if value > 0.0}
    n = len(positive)
    total = math.fsum(positive.values())
    largest = max((n * value / total) ** -beta for value in positive.values())
    return np.array([(n * positive[int(i)] / total) ** -beta / largest for i in indices])
