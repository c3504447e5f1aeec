"""Brute-force references for the replay buffers and the n-step accumulator (STUMPY's ``naive.py`` style).

Everything here is slow and obvious on purpose: Python lists, one item at a time, float64 numpy
formulas written straight from the papers. Nothing in this module imports r2d2kit, so a bug in the
code under test cannot leak into the expectations. The chi-square test is ``reference.chi_square_test``.

Sections:
    * Prioritisation formulas: PER probabilities and IS weights, exact ranks, rank-based probabilities
    * ReferenceBuffer: a ring of Python objects with per-slot priorities, for all three buffer kinds
    * n-step: expected transitions of a logged vector-env rollout, per env and per episode
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

# =====================================================================================================
# Prioritisation formulas (float64, straight from Schaul et al. 2016)
# =====================================================================================================


def per_probabilities(shifted: np.ndarray, alpha: float) -> np.ndarray:
    """P(i) = (p_i + eps)^alpha / sum_k (p_k + eps)^alpha, given ``shifted = p + eps`` per stored item."""
    mass = per_mass(shifted, alpha)
    return mass / mass.sum()


def per_mass(shifted: np.ndarray, alpha: float) -> np.ndarray:
    """(p + eps)^alpha, except that a zero ``p + eps`` has no mass even at alpha = 0 (where 0^0 = 1).

    The documented contract: with eps = 0 a zero priority is allowed and that item is never sampled.
    """
    shifted = np.asarray(shifted, dtype=np.float64)
    return np.where(shifted > 0.0, shifted ** alpha, 0.0)


def is_weights(probabilities: np.ndarray, sampled: np.ndarray, beta: float) -> np.ndarray:
    """w_i = (N * P(i))^-beta / max_j (N * P(j))^-beta, N = number of stored items, max over stored items.

    Items with P(j) = 0 can never be drawn and are left out of the max.
    """
    probabilities = np.asarray(probabilities, dtype=np.float64)
    n = probabilities.shape[0]
    raw = (n * probabilities[np.asarray(sampled)]) ** -beta
    largest = ((n * probabilities[probabilities > 0]) ** -beta).max()
    return raw / largest


def exact_ranks(priorities: np.ndarray) -> np.ndarray:
    """Rank per item, 1 = highest priority; priorities must be distinct (ties have no exact rank)."""
    priorities = np.asarray(priorities, dtype=np.float64)
    if np.unique(priorities).size != priorities.size:
        raise ValueError("exact ranks need distinct priorities")
    ranks = np.empty(priorities.size, dtype=np.int64)
    for rank, item in enumerate(sorted(range(priorities.size), key=lambda i: -priorities[i]), start=1):
        ranks[item] = rank
    return ranks


def rank_probabilities(ranks: np.ndarray, alpha: float) -> np.ndarray:
    """P(i) = rank_i^-alpha / sum_{r=1..N} r^-alpha, N = number of items."""
    ranks = np.asarray(ranks, dtype=np.float64)
    normaliser = math.fsum(r ** -alpha for r in range(1, ranks.size + 1))
    return ranks ** -alpha / normaliser


def mass_intervals(masses: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[low_i, high_i): the slice of cumulative mass that item ``i`` owns, in item order."""
    masses = np.asarray(masses, dtype=np.float64)
    high = np.array([math.fsum(masses[:i + 1]) for i in range(masses.size)])
    return high - masses, high


# =====================================================================================================
# Reference ring buffer
# =====================================================================================================


class ReferenceBuffer:
    """A ring of Python objects, one slot at a time, with the priority bookkeeping of each buffer kind.

    Args:
        capacity: number of slots.
        kind: ``"uniform"``, ``"per"`` (stores ``p + eps`` per slot) or ``"rank"`` (stores raw ``p``).
        alpha: prioritisation exponent.
        eps: PER's additive constant (ignored otherwise).
        sort_every: rank-based: priority values between automatic full sorts.
    """

    def __init__(self, capacity: int, kind: str, alpha: float = 0.6, eps: float = 0.0,
                 sort_every: int | None = None) -> None:
        self.capacity = capacity
        self.kind = kind
        self.alpha = alpha
        self.eps = eps
        self.sort_every = capacity if sort_every is None else sort_every
        self.slots: list[Any] = [None] * capacity
        self.priority: list[float] = [0.0] * capacity  # per: p + eps; rank: p
        self.position = 0
        self.size = 0
        self.max_priority = 1.0
        self.updates_since_sort = 0
        self.sorted = True  # rank: heap known to be exactly sorted

    def add(self, item: Any) -> None:
        """Write one item at the ring position with the running max priority."""
        self.slots[self.position] = item
        self.priority[self.position] = self.max_priority
        self.position = (self.position + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)
        self.sorted = False

    def add_batch(self, items: Sequence[Any]) -> None:
        """Exactly what adding the items one at a time does."""
        for item in items:
            self.add(item)

    def update(self, indices: Sequence[int], priorities: Sequence[float]) -> None:
        """Set priorities in order (a repeated index: the last value wins); every value raises the max."""
        for index, value in zip(indices, priorities):
            assert 0 <= index < self.size
            shifted = value + self.eps if self.kind == "per" else value
            self.priority[index] = shifted
            self.max_priority = max(self.max_priority, shifted)
        if self.kind == "rank":
            self.sorted = False
            self.updates_since_sort += len(priorities)
            if self.updates_since_sort >= self.sort_every:
                self.sort()

    def sort(self) -> None:
        self.updates_since_sort = 0
        self.sorted = True

    def stored(self) -> list[Any]:
        return self.slots[:self.size]

    def priorities(self) -> np.ndarray:
        return np.array(self.priority[:self.size], dtype=np.float64)

    def tree_values(self) -> np.ndarray:
        """PER sum-tree leaves: (p + eps)^alpha per stored slot (no mass for a zero p + eps)."""
        return per_mass(self.priorities(), self.alpha)


# =====================================================================================================
# n-step transitions
# =====================================================================================================


def expected_nstep_transitions(log: Sequence[dict[str, np.ndarray]], num_envs: int, n_step: int, gamma: float,
                               autoreset_mode: str) -> tuple[list[list[dict[str, Any]]], np.ndarray]:
    """Transitions an n-step accumulator must emit for a logged vector-env rollout, call by call.

    ``log[c]`` holds the arrays passed to call ``c``: ``obs``, ``action``, ``reward``, ``next_obs``,
    ``terminated``, ``truncated`` (leading axis = envs). Per env the steps are cut into episodes; in
    ``"next_step"`` mode the step right after an episode end only carries the reset observation and
    is dropped. For step ``t`` of an episode of ``L`` steps the window is ``m = min(n, L - t)`` steps
    (SB3's ``compute_expected_nstep_reward``)::

        reward   = sum_{k < m} gamma^k r_{t+k}
        next_obs = next_obs of step t + m - 1
        discount = 0 if the window reaches a terminal step, else gamma^m

    A window is emitted by the call that feeds its last step; windows of an unfinished episode that
    are still short of ``n`` steps are pending.

    Returns:
        per call, a list of transitions (dicts with env, obs, action, reward, next_obs, discount),
        and the pending count per env at the end.
    """
    num_calls = len(log)
    emitted: list[list[dict[str, Any]]] = [[] for _ in range(num_calls)]
    pending = np.zeros(num_envs, dtype=np.int64)
    for env in range(num_envs):
        episodes: list[tuple[list[tuple[int, dict[str, Any]]], bool]] = []
        current: list[tuple[int, dict[str, Any]]] = []
        skip = False
        for c, call in enumerate(log):
            if skip:
                skip = False
                continue
            step = {key: call[key][env] for key in ("obs", "action", "reward", "next_obs")}
            step["terminated"] = bool(call["terminated"][env])
            step["truncated"] = bool(call["truncated"][env])
            current.append((c, step))
            if step["terminated"] or step["truncated"]:
                episodes.append((current, True))
                current = []
                skip = autoreset_mode == "next_step"
        episodes.append((current, False))
        for steps, finished in episodes:
            length = len(steps)
            for t in range(length):
                m = min(n_step, length - t)
                if m < n_step and not finished:
                    pending[env] += 1
                    continue
                last_call, last = steps[t + m - 1]
                reaches_terminal = finished and t + m == length and last["terminated"]
                emitted[last_call].append({
                    "env": env,
                    "obs": steps[t][1]["obs"],
                    "action": steps[t][1]["action"],
                    "reward": math.fsum(gamma ** k * float(steps[t + k][1]["reward"]) for k in range(m)),
                    "next_obs": last["next_obs"],
                    "discount": 0.0 if reaches_terminal else gamma ** m,
                })
    return emitted, pending
