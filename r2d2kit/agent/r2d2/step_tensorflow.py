"""R2D2's update on TensorFlow: a ``GradientTape`` over the learner's ``keras.ops`` loss, in one ``tf.function``.

The learner's only TensorFlow-specific part (:func:`~r2d2kit.agent.r2d2.learner.compiled_step` picks it when
``KERAS_BACKEND`` is ``tensorflow``): the networks are called statefully, so the tape watches their variables
and the optimiser updates them in place. It knows the learner only through what it is given (no import of it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import keras
import numpy as np
import tensorflow as tf

__all__ = ["TensorFlowStep"]

Forward = Callable[[Mapping[str, Any], Callable, Callable], tuple[Any, dict[str, Any]]]


class TensorFlowStep:
    """The learner's update and target sync, each traced once per batch shape by ``tf.function``.

    Args:
        forward: the loss and outputs of a batch, given calls of the online and the target sequence models
            (:meth:`~r2d2kit.agent.r2d2.learner.R2D2Learner.forward`).
        online: the online sequence model; its trainable weights are differentiated and updated.
        target: the target sequence model.
        optimizer: updates ``online``'s trainable weights.
        update_target: moves the target weights to the online ones.
    """

    def __init__(self, forward: Forward, online: keras.Model, target: keras.Model,
                 optimizer: keras.optimizers.Optimizer, update_target: Callable[[], None]) -> None:
        self.forward = forward
        self.online = online
        self.target = target
        self.optimizer = optimizer
        self._update = tf.function(self._step)
        self._sync_target = tf.function(update_target)

    def _loss(self, batch: Mapping[str, tf.Tensor]) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        return self.forward(batch, self.online, self.target)

    def _step(self, batch: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        with tf.GradientTape() as tape:
            loss, outputs = self._loss(batch)
        variables = self.online.trainable_variables
        gradients = tape.gradient(loss, variables)
        # the norm the optimiser's global clipping compares with max_gradient_norm (it clips the same gradients)
        outputs["gradient_norm"] = tf.linalg.global_norm(gradients)
        self.optimizer.apply_gradients(zip(gradients, variables))
        return outputs

    def update(self, batch: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """One optimiser step; the outputs as numpy."""
        return {key: value.numpy() for key, value in self._update(batch).items()}

    def trace(self, batch: Mapping[str, Any]) -> None:
        """Trace the update for batches shaped like ``batch`` (no weight or optimiser step)."""
        self._update.get_concrete_function(batch)

    def gradients(self, batch: Mapping[str, Any]) -> tuple[float, list[np.ndarray]]:
        """The loss and its gradients w.r.t. the online trainable weights (zeros where one gets none), eagerly."""
        variables = self.online.trainable_variables
        with tf.GradientTape() as tape:
            loss, _ = self._loss(batch)
        gradients = tape.gradient(loss, variables)
        return float(loss), [np.zeros(v.shape) if g is None else g.numpy() for g, v in zip(gradients, variables)]

    def sync_target(self) -> None:
        """The learner's target update, compiled."""
        self._sync_target()
