"""R2D2's update on JAX: ``jax.jit`` over the sequence models' ``stateless_call``, ``jax.value_and_grad`` and the
optimiser's ``stateless_apply``.

The learner's JAX-specific part (:func:`~r2d2kit.agent.r2d2.learner.compiled_step` picks it when
``KERAS_BACKEND`` is ``jax``), beside :class:`~r2d2kit.agent.r2d2.step_tensorflow.TensorFlowStep`. JAX
differentiates functions, not variables: the compiled step takes the online weights, the optimiser's slots and
the target weights as arguments and returns the new online weights and slots. They are written back into the
Keras variables after every update, so everything that reads the variables (the actors' published weights,
checkpoints, the target sync, the health check) sees the same state as on TensorFlow. The write-back only
swaps array references (no copy), so keeping the arrays as the step's own state would save nothing worth a
second copy of the truth.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import keras
import numpy as np

__all__ = ["JaxStep"]

Forward = Callable[[Mapping[str, Any], Callable, Callable], tuple[Any, dict[str, Any]]]


def global_norm(arrays: Sequence[Any]) -> Any:
    """``sqrt(sum ||a||^2)`` over ``arrays``: the norm the optimiser's global clipping compares with its limit."""
    return keras.ops.sqrt(sum(keras.ops.sum(keras.ops.square(a)) for a in arrays))


class JaxStep:
    """The learner's update, compiled once per batch shape by ``jax.jit``; the target sync runs eagerly.

    Args:
        forward: the loss and outputs of a batch, given calls of the online and the target sequence models
            (:meth:`~r2d2kit.agent.r2d2.learner.R2D2Learner.forward`).
        online: the online sequence model; its trainable weights are differentiated and updated.
        target: the target sequence model.
        optimizer: updates ``online``'s trainable weights (built here for them).
        update_target: moves the target weights to the online ones (variable assignments).
    """

    def __init__(self, forward: Forward, online: keras.Model, target: keras.Model,
                 optimizer: keras.optimizers.Optimizer, update_target: Callable[[], None]) -> None:
        self.forward = forward
        self.online = online
        self.target = target
        self.optimizer = optimizer
        self._update_target = update_target
        optimizer.build(online.trainable_variables)  # stateless_apply needs its slots to exist
        self._update = jax.jit(self._step)
        self._loss_and_gradients = jax.jit(jax.value_and_grad(self._loss, has_aux=True))

    def _arguments(self) -> tuple[list[Any], list[Any], list[Any], list[Any]]:
        """The arrays the compiled functions take: online trainable and non-trainable, target (trainable, then
        non-trainable), optimiser."""
        online, target = self.online, self.target
        return ([v.value for v in online.trainable_variables], [v.value for v in online.non_trainable_variables],
                [v.value for v in [*target.trainable_variables, *target.non_trainable_variables]],
                [v.value for v in self.optimizer.variables])

    def _loss(self, trainable: list[Any], non_trainable: list[Any], target_weights: list[Any],
              batch: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        """The learner's forward with the models called on the given weights (differentiated w.r.t. ``trainable``)."""
        target_trainable = target_weights[:len(self.target.trainable_variables)]
        target_non_trainable = target_weights[len(self.target.trainable_variables):]

        def online(inputs: list[Any]) -> Any:
            outputs, _ = self.online.stateless_call(trainable, non_trainable, inputs)
            return outputs

        def target(inputs: list[Any]) -> Any:
            outputs, _ = self.target.stateless_call(target_trainable, target_non_trainable, inputs)
            return outputs

        return self.forward(batch, online, target)

    def _step(self, trainable: list[Any], non_trainable: list[Any], target_weights: list[Any],
              optimizer_variables: list[Any], batch: Mapping[str, Any]) -> tuple[dict[str, Any], list[Any], list[Any]]:
        (_, outputs), gradients = jax.value_and_grad(self._loss, has_aux=True)(trainable, non_trainable,
                                                                                target_weights, batch)
        outputs["gradient_norm"] = global_norm(gradients)  # before clipping, as the TensorFlow step reports it
        trainable, optimizer_variables = self.optimizer.stateless_apply(optimizer_variables, gradients, trainable)
        return outputs, trainable, optimizer_variables

    def update(self, batch: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """One optimiser step; the new weights and slots are written back into the Keras variables."""
        trainable, non_trainable, target_weights, optimizer_variables = self._arguments()
        outputs, trainable, optimizer_variables = self._update(trainable, non_trainable, target_weights,
                                                               optimizer_variables, batch)
        for variable, value in zip(self.online.trainable_variables, trainable, strict=True):
            variable.assign(value)
        for variable, value in zip(self.optimizer.variables, optimizer_variables, strict=True):
            variable.assign(value)
        return {key: np.asarray(value) for key, value in outputs.items()}

    def trace(self, batch: Mapping[str, Any]) -> None:
        """Compile the update for batches shaped like ``batch`` (no weight or optimiser step)."""
        self._update.lower(*self._arguments(), batch).compile()

    def gradients(self, batch: Mapping[str, Any]) -> tuple[float, list[np.ndarray]]:
        """The loss and its gradients w.r.t. the online trainable weights."""
        trainable, non_trainable, target_weights, _ = self._arguments()
        (loss, _), gradients = self._loss_and_gradients(trainable, non_trainable, target_weights, batch)
        return float(loss), [np.asarray(g) for g in gradients]

    def sync_target(self) -> None:
        """The learner's target update, eagerly (one assignment per variable)."""
        self._update_target()
