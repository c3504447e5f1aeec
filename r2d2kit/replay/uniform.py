"""Uniform replay: every stored item is equally likely."""

from __future__ import annotations

from typing import Any

import numpy as np

from r2d2kit._validation import as_priority_array
from r2d2kit.replay.base import BaseReplayBuffer


class ReplayBuffer(BaseReplayBuffer):
    """Uniform replay with the same interface as the prioritized buffers.

    ``sample`` returns weights of 1; ``update_priorities`` validates its input and otherwise does
    nothing, so a training loop can switch between uniform and prioritized replay unchanged.

    Example:
        >>> buf = ReplayBuffer(1000, {"obs": ((4,), "float32"), "action": ((), "int64")}, seed=0)
        >>> buf.add(obs=np.zeros(4), action=1)
        >>> buf.sample(2)["action"]
        array([1, 1])
    """

    def _sample_indices(self, batch_size: int, beta: float) -> tuple[np.ndarray, np.ndarray]:
        indices = self._rng.integers(0, self._storage.size, size=batch_size, dtype=np.int64)
        return indices, np.ones(batch_size, dtype=np.float32)

    def _set_priorities(self, leaf_indices: np.ndarray, priorities: Any) -> None:
        as_priority_array("priorities", priorities, leaf_indices.shape[0])
