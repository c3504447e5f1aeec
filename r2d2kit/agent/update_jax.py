"""An update on JAX: ``jax.jit`` over ``jax.vjp`` of the learner's ``keras.ops`` forward and each optimiser's
``stateless_apply``.

The JAX half of :func:`~r2d2kit.agent.update.compile_update`. JAX differentiates functions, not variables:
the compiled step takes every group's weights, the other variables the forward reads (``state``) and the
optimisers' slots as arguments, maps them onto the Keras variables with a ``keras.StatelessScope`` while the
forward runs statefully, and returns the new values. They are written back into the Keras variables after
every update, so everything that reads the variables (the actors' published weights, checkpoints, the target
sync, the health check) sees the same state as on TensorFlow; the write-back swaps array references (no copy).
One ``vjp`` serves every group: each group's gradient is the pull-back of its own loss alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import keras
import numpy as np

from r2d2kit.agent.loss_group import Forward, LossGroup

__all__ = ["JaxUpdate", "global_norm"]


def global_norm(arrays: Sequence[Any]) -> Any:
    """``sqrt(sum ||a||^2)`` over ``arrays``: the norm an optimiser's global clipping compares with its limit."""
    return keras.ops.sqrt(sum(keras.ops.sum(keras.ops.square(a)) for a in arrays))


class JaxUpdate:
    """The update compiled once per batch shape by ``jax.jit``; the sync runs eagerly (see
    :class:`~r2d2kit.agent.update.CompiledUpdate`)."""

    def __init__(self, forward: Forward, groups: Sequence[LossGroup], state: Sequence[keras.Variable], *,
                 after: Callable[[], None] | None = None, sync: Callable[[], None] | None = None) -> None:
        self.forward = forward
        self.groups = tuple(groups)
        self._after = after
        self._sync = sync
        grouped = {id(v) for group in self.groups for v in group.variables}
        self.state = [v for v in state if id(v) not in grouped]
        for group in self.groups:
            if not group.optimizer.built:
                group.optimizer.build(group.variables)  # stateless_apply needs its slots to exist
        self._update = jax.jit(self._step)
        self._first_gradients = jax.jit(jax.value_and_grad(self._first_loss))

    # ------------------------------------------------------------------ pure functions
    def _mapping(self, group_values: Sequence[Sequence[Any]], state_values: Sequence[Any]) -> list[tuple[Any, Any]]:
        pairs = [(v, value) for group, values in zip(self.groups, group_values, strict=True)
                 for v, value in zip(group.variables, values, strict=True)]
        return pairs + list(zip(self.state, state_values, strict=True))

    def _losses(self, group_values: Sequence[Sequence[Any]], state_values: Sequence[Any],
                batch: Mapping[str, Any]) -> tuple[tuple[Any, ...], tuple[dict[str, Any], list[Any]]]:
        with keras.StatelessScope(state_mapping=self._mapping(group_values, state_values)) as scope:
            losses, outputs = self.forward(batch)
            state_values = [scope.get_current_value(v) for v in self.state]  # e.g. a seed generator moved on
        return tuple(losses[group.loss] for group in self.groups), (outputs, state_values)

    def _first_loss(self, first: Sequence[Any], rest: Sequence[Sequence[Any]], state_values: Sequence[Any],
                    batch: Mapping[str, Any]) -> Any:
        losses, _ = self._losses([first, *rest], state_values, batch)
        return losses[0]

    def _step(self, group_values: list[list[Any]], state_values: list[Any], optimizer_values: list[list[Any]],
              batch: Mapping[str, Any]) -> tuple[dict[str, Any], list[list[Any]], list[Any], list[list[Any]]]:
        losses, pull_back, (outputs, state_values) = jax.vjp(
            lambda values: self._losses(values, state_values, batch), group_values, has_aux=True)
        gradients = []
        for i in range(len(self.groups)):
            (all_gradients,) = pull_back(tuple(keras.ops.ones_like(loss) if j == i else keras.ops.zeros_like(loss)
                                               for j, loss in enumerate(losses)))
            gradients.append(all_gradients[i])
        outputs["gradient_norm"] = global_norm(gradients[0])  # before clipping, as the TensorFlow update reports it
        new_values, new_slots = [], []
        for group, values, group_gradients, slots in zip(self.groups, group_values, gradients, optimizer_values,
                                                          strict=True):
            values, slots = group.optimizer.stateless_apply(slots, group_gradients, values)
            new_values.append(values)
            new_slots.append(slots)
        if self._after is not None:
            with keras.StatelessScope(state_mapping=self._mapping(new_values, state_values)) as scope:
                self._after()
                state_values = [scope.get_current_value(v) for v in self.state]
        return outputs, new_values, state_values, new_slots

    # ------------------------------------------------------------------ the Keras variables
    def _arguments(self) -> tuple[list[list[Any]], list[Any], list[list[Any]]]:
        return ([[v.value for v in group.variables] for group in self.groups], [v.value for v in self.state],
                [[v.value for v in group.optimizer.variables] for group in self.groups])

    def update(self, batch: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """One step of every group's optimiser (see :meth:`~r2d2kit.agent.update.CompiledUpdate.update`)."""
        group_values, state_values, optimizer_values = self._arguments()
        outputs, group_values, state_values, optimizer_values = self._update(group_values, state_values,
                                                                             optimizer_values, batch)
        for group, values, slots in zip(self.groups, group_values, optimizer_values, strict=True):
            for variable, value in zip(group.variables, values, strict=True):
                variable.assign(value)
            for variable, value in zip(group.optimizer.variables, slots, strict=True):
                variable.assign(value)
        for variable, value in zip(self.state, state_values, strict=True):
            variable.assign(value)
        return {key: np.asarray(value) for key, value in outputs.items()}

    def trace(self, batch: Mapping[str, Any]) -> None:
        """Compile the update for batches shaped like ``batch`` without running it."""
        self._update.lower(*self._arguments(), batch).compile()

    def gradients(self, batch: Mapping[str, Any]) -> tuple[float, list[np.ndarray]]:
        """The first group's loss and gradients w.r.t. its variables, applying nothing."""
        group_values, state_values, _ = self._arguments()
        loss, gradients = self._first_gradients(group_values[0], group_values[1:], state_values, batch)
        return float(loss), [np.asarray(g) for g in gradients]

    def sync(self) -> None:
        """Run the learner's ``sync`` (nothing when it gave none)."""
        if self._sync is not None:
            self._sync()
