"""Proportional prioritized replay (Schaul et al. 2016, https://arxiv.org/abs/1511.05952)."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from r2d2kit._validation import as_priority_array, check_float
from r2d2kit.kernels import sumtree as kernels
from r2d2kit.replay.base import BaseReplayBuffer
from r2d2kit.replay.persistence import require_arrays
from r2d2kit.sumtree import SumTree


class PrioritizedReplayBuffer(BaseReplayBuffer):
    """Proportional PER: ``P(i) = p_i^alpha / sum_k p_k^alpha`` with ``p_i = priority_i + eps``.

    New items get the running maximum priority (1.0 until a larger one is seen), so each is
    sampled at least once soon. ``sample`` returns importance weights
    ``w_i = (N * P(i))^-beta / max_j w_j``, the max taken over the stored items (via a min tree).

    Args:
        capacity: number of items kept.
        fields: ``{"name": (shape, dtype)}`` per item.
        alpha: prioritisation exponent, 0 = uniform (PER: 0.6).
        eps: added to every priority so that no item with a zero TD error starves. With
            ``eps=0`` a zero priority is allowed and that item is never sampled.
        seed: int seed, ``None`` or a ``np.random.Generator``.

    Example:
        >>> buf = PrioritizedReplayBuffer(1000, {"obs": ((4,), "float32")}, alpha=0.6, seed=0)
        >>> buf.add_batch(obs=np.zeros((8, 4)))
        >>> batch = buf.sample(4, beta=0.4)
        >>> buf.update_priorities(batch["indices"], np.full(4, 2.0))
    """

    def __init__(self, capacity: int, fields: Mapping[str, Any], alpha: float = 0.6, eps: float = 1e-6,
                 seed: Any = None) -> None:
        super().__init__(capacity, fields, seed)
        self.alpha = check_float("alpha", alpha, 0.0)
        self.eps = check_float("eps", eps, 0.0)
        self._tree = SumTree(self.capacity)
        self._max_priority = 1.0

    @property
    def max_priority(self) -> float:
        """Largest ``priority + eps`` seen so far; new items get it."""
        return self._max_priority

    @property
    def tree(self) -> SumTree:
        """The sum tree of ``(priority + eps)^alpha`` values (read it, don't write it)."""
        return self._tree

    def _on_written(self, start: int, stop: int) -> None:
        t = self._tree.arrays
        kernels.priority_trees_fill(t.sum_tree, t.min_tree, t.level_offsets, start, stop,
                                    self._max_priority ** self.alpha)

    def _sample_indices(self, batch_size: int, beta: float) -> tuple[np.ndarray, np.ndarray]:
        if not self._tree.total() > 0.0:
            raise ValueError("cannot sample: every stored priority is 0 (possible only with eps=0)")
        uniforms = self._rng.random(batch_size)
        t = self._tree.arrays
        return kernels.sum_tree_sample_weighted(t.sum_tree, t.min_tree, t.level_offsets, uniforms, beta)

    def _set_priorities(self, leaf_indices: np.ndarray, priorities: Any) -> None:
        values = as_priority_array("priorities", priorities, leaf_indices.shape[0])
        t = self._tree.arrays
        largest = kernels.priority_trees_update_scaled(
            t.sum_tree, t.min_tree, t.level_offsets, leaf_indices, values, self.eps, self.alpha
        )
        if largest > self._max_priority:
            self._max_priority = largest

    def _params(self) -> dict[str, Any]:
        return {"alpha": self.alpha, "eps": self.eps}

    def _state(self, size: int) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        return {"max_priority": self._max_priority}, {"tree_values": self._tree.leaves()[:size]}

    def _restore(self, scalars, arrays, path) -> None:
        size = len(self)
        require_arrays(path, arrays, {"tree_values": (size,)})
        leaves = np.zeros(self.capacity)
        leaves[:size] = arrays["tree_values"]
        self._tree.set_leaves(leaves)
        self._max_priority = check_float("max_priority", scalars["max_priority"], 0.0)
