"""A user's memory core for tests: a Keras RNN cell with three state tensors of different sizes.

Configs name it ``model.core: tests.models.three_state_cell:make`` (actor processes and Ray workers
import it by that name). Every state tensor feeds the next step's output, so a window that stored
any of them wrongly gives different Q-values.
"""

from __future__ import annotations

import keras


class ThreeStateCell(keras.layers.Layer):
    """``a' = tanh(x K + a R + b B + c C)``; ``b' = tanh(a' V)`` (2 units); ``c' = c / 2 + tanh(a' W)`` (3 units)."""

    state_names = ("a", "b", "c")

    def __init__(self, units: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.units = int(units)
        self.state_size = [self.units, 2, 3]
        self.output_size = self.units

    def build(self, input_shape) -> None:
        units = self.units
        self.kernel = self.add_weight(shape=(input_shape[-1], units), initializer="glorot_uniform", name="kernel")
        self.recurrent = self.add_weight(shape=(units, units), initializer="orthogonal", name="recurrent")
        self.from_b = self.add_weight(shape=(2, units), initializer="glorot_uniform", name="from_b")
        self.from_c = self.add_weight(shape=(3, units), initializer="glorot_uniform", name="from_c")
        self.to_b = self.add_weight(shape=(units, 2), initializer="glorot_uniform", name="to_b")
        self.to_c = self.add_weight(shape=(units, 3), initializer="glorot_uniform", name="to_c")

    def call(self, inputs, states):
        a, b, c = states
        ops = keras.ops
        a_next = ops.tanh(ops.matmul(inputs, self.kernel) + ops.matmul(a, self.recurrent)
                          + ops.matmul(b, self.from_b) + ops.matmul(c, self.from_c))
        b_next = ops.tanh(ops.matmul(a_next, self.to_b))
        c_next = 0.5 * c + ops.tanh(ops.matmul(a_next, self.to_c))
        return a_next, [a_next, b_next, c_next]

    def get_config(self) -> dict:
        return {**super().get_config(), "units": self.units}


def make(units: int) -> ThreeStateCell:
    """The factory ``model.core`` names."""
    return ThreeStateCell(units)
