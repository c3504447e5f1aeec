"""Rank-based prioritized replay: ``P(i) ~ 1 / rank(i)^alpha`` (Schaul et al. 2016, section 3.3).

Ranks depend only on the order of priorities, so outliers in ``|TD|`` cannot dominate sampling.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from r2d2kit._validation import as_index_array, as_priority_array, check_float, check_positive_int
from r2d2kit.kernels import rank as kernels
from r2d2kit.replay.base import BaseReplayBuffer
from r2d2kit.replay.persistence import require_arrays


class RankBasedReplayBuffer(BaseReplayBuffer):
    """Rank-based PER over a binary heap kept approximately sorted, as in the PER paper.

    The heap array stands in for the sorted order (position ``k`` has rank ``k + 1``); every
    ``sort_every`` priority updates it is sorted exactly. Sampling is stratified over
    ``batch_size`` equal-probability segments of the rank distribution, whose cumulative sums are
    precomputed once for the full capacity (so no recomputation as the buffer fills).
    Importance weights are ``(N * P(i))^-beta / max_j w_j = (rank_i / N)^(alpha * beta)``.

    Args:
        capacity: number of items kept.
        fields: ``{"name": (shape, dtype)}`` per item.
        alpha: rank exponent (PER: 0.7 for rank-based).
        sort_every: priority updates between full sorts; default ``capacity``.
        seed: int seed, ``None`` or a ``np.random.Generator``.
    """

    def __init__(self, capacity: int, fields: Mapping[str, Any], alpha: float = 0.7,
                 sort_every: int | None = None, seed: Any = None) -> None:
        super().__init__(capacity, fields, seed)
        self.alpha = check_float("alpha", alpha, 0.0)
        self.sort_every = check_positive_int("sort_every", self.capacity if sort_every is None else sort_every)
        ranks = np.arange(1, self.capacity + 1, dtype=np.float64)
        self._cumulative = np.cumsum(ranks ** -self.alpha)  # [capacity]
        self._priorities = np.zeros(self.capacity, dtype=np.float64)
        self._heap = np.zeros(self.capacity, dtype=np.int64)
        self._position_of = np.full(self.capacity, -1, dtype=np.int64)
        self._heap_size = 0
        self._max_priority = 1.0
        self._updates_since_sort = 0

    @property
    def max_priority(self) -> float:
        """Largest priority seen so far; new items get it."""
        return self._max_priority

    def ranks(self, indices: Any) -> np.ndarray:
        """Current (approximate) rank of each item, 1 = highest priority."""
        with self._lock:
            return self._position_of[as_index_array("indices", indices, len(self))] + 1

    def sort(self) -> None:
        """Sort the heap exactly (a sorted array is a valid max-heap)."""
        with self._lock:
            size = self._heap_size
            items = self._heap[:size]
            order = np.argsort(-self._priorities[items], kind="stable")
            self._heap[:size] = items[order]
            self._position_of[self._heap[:size]] = np.arange(size)
            self._updates_since_sort = 0

    def _on_written(self, start: int, stop: int) -> None:
        self._heap_size = kernels.rank_heap_write(
            self._priorities, self._heap, self._position_of, self._heap_size, start, stop, self._max_priority
        )

    def _sample_indices(self, batch_size: int, beta: float) -> tuple[np.ndarray, np.ndarray]:
        uniforms = self._rng.random(batch_size)
        return kernels.rank_sample(self._cumulative, self._heap_size, self._heap, uniforms, self.alpha * beta)

    def _set_priorities(self, leaf_indices: np.ndarray, priorities: Any) -> None:
        values = as_priority_array("priorities", priorities, leaf_indices.shape[0])
        kernels.rank_heap_update(self._priorities, self._heap, self._position_of, self._heap_size,
                                 leaf_indices, values)
        if values.size:
            self._max_priority = max(self._max_priority, float(values.max()))
        self._updates_since_sort += values.size
        if self._updates_since_sort >= self.sort_every:
            self.sort()

    def _params(self) -> dict[str, Any]:
        return {"alpha": self.alpha, "sort_every": self.sort_every}

    def _state(self, size: int) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        scalars = {"max_priority": self._max_priority, "updates_since_sort": self._updates_since_sort}
        return scalars, {"priorities": self._priorities[:size].copy(), "heap": self._heap[:size].copy()}

    def _restore(self, scalars, arrays, path) -> None:
        size = len(self)
        require_arrays(path, arrays, {"priorities": (size,), "heap": (size,)})
        heap = arrays["heap"].astype(np.int64)
        if size and not np.array_equal(np.sort(heap), np.arange(size)):
            raise ValueError(f"{path!r}: the saved heap is not a permutation of the stored items")
        self._priorities[:size] = as_priority_array("priorities", arrays["priorities"], size)
        self._heap[:size] = heap
        self._position_of[heap] = np.arange(size)
        self._heap_size = size
        self._max_priority = check_float("max_priority", scalars["max_priority"], 0.0)
        self._updates_since_sort = int(scalars["updates_since_sort"])
