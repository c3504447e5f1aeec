"""An update on TensorFlow: a ``GradientTape`` over the learner's ``keras.ops`` forward, in one ``tf.function``.

The TensorFlow half of :func:`~r2d2kit.agent.update.compile_update`: the models are called statefully, so the
tape watches their variables and the optimisers update them in place.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from r2d2kit.agent.loss_group import Forward, LossGroup

__all__ = ["TensorFlowUpdate"]


class TensorFlowUpdate:
    """The update and the sync, each traced once per batch shape by ``tf.function`` (see
    :class:`~r2d2kit.agent.update.CompiledUpdate`)."""

    def __init__(self, forward: Forward, groups: Sequence[LossGroup], *, after: Callable[[], None] | None = None,
                 sync: Callable[[], None] | None = None) -> None:
        self.forward = forward
        self.groups = tuple(groups)
        self._after = after
        self._update = tf.function(self._step)
        self._sync = tf.function(sync) if sync is not None else None

    def _step(self, batch: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        with tf.GradientTape(persistent=len(self.groups) > 1) as tape:
            losses, outputs = self.forward(batch)
        gradients = [tape.gradient(losses[group.loss], group.variables) for group in self.groups]
        del tape
        # the norm the first optimiser's global clipping compares with its limit (it clips the same gradients)
        outputs["gradient_norm"] = tf.linalg.global_norm(gradients[0])
        for group, group_gradients in zip(self.groups, gradients, strict=True):
            group.optimizer.apply_gradients(zip(group_gradients, group.variables))
        if self._after is not None:
            self._after()
        return outputs

    def update(self, batch: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """One step of every group's optimiser (see :meth:`~r2d2kit.agent.update.CompiledUpdate.update`)."""
        return {key: value.numpy() for key, value in self._update(batch).items()}

    def trace(self, batch: Mapping[str, Any]) -> None:
        """Compile the update for batches shaped like ``batch`` without running it."""
        self._update.get_concrete_function(batch)

    def gradients(self, batch: Mapping[str, Any]) -> tuple[float, list[np.ndarray]]:
        """The first group's loss and gradients w.r.t. its variables, applying nothing."""
        group = self.groups[0]
        with tf.GradientTape() as tape:
            losses, _ = self.forward(batch)
        gradients = tape.gradient(losses[group.loss], group.variables)
        return float(losses[group.loss]), [np.zeros(v.shape) if g is None else g.numpy()
                                           for g, v in zip(gradients, group.variables, strict=True)]

    def sync(self) -> None:
        """Run the learner's ``sync`` (nothing when it gave none)."""
        if self._sync is not None:
            self._sync()
