"""Every learner's draw-train-reprioritise step, written once: :class:`ReplayBatches`.

A learner's ``train_from`` samples a batch (by priority, with importance weights), trains on it and writes
the new priorities back. The batch is consumed before the next is drawn, so one set of arrays per replay
serves every update (``replay.sample_buffers``): no allocation per update.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from r2d2kit.replay.sequence import SequenceReplayBuffer

__all__ = ["ReplayBatches"]


class ReplayBatches:
    """Draws ``batch_size`` windows with importance exponent ``importance_exponent`` into reused arrays."""

    def __init__(self, batch_size: int, importance_exponent: float) -> None:
        self.batch_size = int(batch_size)
        self.importance_exponent = float(importance_exponent)
        self.replay: SequenceReplayBuffer | None = None  # the replay the arrays below are shaped for
        self.arrays: dict[str, np.ndarray] = {}

    def sample(self, replay: SequenceReplayBuffer) -> dict[str, np.ndarray]:
        """One batch from ``replay``, in the arrays of the previous batch when it came from the same replay."""
        if self.replay is not replay:
            self.replay, self.arrays = replay, replay.sample_buffers(self.batch_size)
        return replay.sample(self.batch_size, beta=self.importance_exponent, out=self.arrays)

    def train_from(self, replay: SequenceReplayBuffer,
                   train: Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        """Sample, ``train(batch)``, write its ``priorities`` back; returns ``train``'s outputs."""
        batch = self.sample(replay)
        out = train(batch)
        replay.update_priorities(batch["indices"], out["priorities"], batch["generations"])
        return out
