"""An agent's update compiled for Keras' backend: the learners write their losses once on ``keras.ops``.

A learner gives :func:`compile_update` its forward pass (a batch -> named losses and the update's outputs) and
one :class:`~r2d2kit.agent.loss_group.LossGroup` per optimiser (R2D2: one; SAC: critic, actor and temperature);
the backend's own module differentiates and compiles it: :mod:`~r2d2kit.agent.update_tensorflow`
(``tf.function`` over a ``GradientTape``) or :mod:`~r2d2kit.agent.update_jax` (``jax.jit`` over ``jax.vjp``
and the optimisers' ``stateless_apply``). The forward calls its Keras models statefully on both: on JAX a
``keras.StatelessScope`` maps the variables onto the compiled function's arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import keras
import numpy as np

from r2d2kit.agent.loss_group import Forward, LossGroup
from r2d2kit.models.backend import backend_name

__all__ = ["CompiledUpdate", "compile_update"]


class CompiledUpdate(Protocol):
    """What a Keras backend supplies to a learner: the differentiated, compiled parts of an update."""

    def update(self, batch: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """One step of every group's optimiser on ``batch``, then ``after`` (e.g. a Polyak step of a target):
        the forward's outputs and ``gradient_norm`` (the first group's, before clipping), as numpy."""

    def trace(self, batch: Mapping[str, Any]) -> None:
        """Compile the update for batches shaped like ``batch`` without running it."""

    def gradients(self, batch: Mapping[str, Any]) -> tuple[float, list[np.ndarray]]:
        """The first group's loss and its gradients w.r.t. its variables, applying nothing."""

    def sync(self) -> None:
        """The learner's occasional ``sync`` (e.g. R2D2's target copy), compiled where the backend compiles it."""


def compile_update(forward: Forward, groups: Sequence[LossGroup], state: Sequence[keras.Variable], *,
                   after: Callable[[], None] | None = None, sync: Callable[[], None] | None = None) -> CompiledUpdate:
    """The update of ``groups`` on Keras' backend (``KERAS_BACKEND``, read when Keras is imported).

    Args:
        forward: a batch -> (losses by name, outputs), calling the learner's models statefully.
        groups: each optimiser with its loss and variables; the first group's gradient norm is reported.
        state: every other variable ``forward`` or ``after`` reads or assigns (target networks, non-trainable
            weights, random seed generators): on JAX they are the compiled function's arguments and results.
        after: runs after the optimisers, inside the compiled update (its assignments to ``state`` are kept).
        sync: what :meth:`CompiledUpdate.sync` runs.
    """
    if not groups:
        raise ValueError("compile_update needs at least one LossGroup")
    if backend_name() == "tensorflow":
        from r2d2kit.agent.update_tensorflow import TensorFlowUpdate

        return TensorFlowUpdate(forward, groups, after=after, sync=sync)
    from r2d2kit.agent.update_jax import JaxUpdate

    return JaxUpdate(forward, groups, state, after=after, sync=sync)
