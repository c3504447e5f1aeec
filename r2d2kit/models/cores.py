"""Memory cores: the recurrent cell of a :class:`~r2d2kit.agent.r2d2.QNetwork` and the state it carries.

The POPGym benchmark's finding is that the best memory model differs by task, so the core is a
choice: ``"lstm"`` (R2D2's), ``"gru"`` (the default of Stoix's recurrent DQN and of recurrent
PQN), ``"none"`` (no memory: a feed-forward Q-network, DQN's, on the same window replay; its state
spec is empty, so windows store no state), or ``"package.module:factory"``, a function
``factory(units) -> keras cell`` returning any Keras RNN cell (a layer with ``state_size`` and
``call(inputs, states) -> (output, new_states)``).
In Python the function itself may be given; a config names it, so that actor processes and Ray
workers can import it.

Everything that stores, ships or feeds the recurrent state (the actor, SequenceBuilder, the
shared-memory record, the replay, the learner) reads its layout from one place,
:func:`state_spec`: one :class:`StateField` per state tensor, in the cell's order. A window stores
each as the field ``state_<name>``: ``state_h`` and ``state_c`` for the LSTM, ``state_h`` for the
GRU, ``state_0``, ``state_1``, ... for a user's cell (or the names in its ``state_names``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import keras
import numpy as np
import numpy.typing as npt

from r2d2kit._validation import import_named

__all__ = ["StateField", "check_core_name", "import_factory", "make_cell", "q_and_state", "state_spec", "zero_state",
           "state_fields"]

FEED_FORWARD = "none"  # the core name of a network without memory
BUILT_IN_CORES = ("lstm", "gru", FEED_FORWARD)
STATE_DTYPE = "float32"  # the state leaves the models in float32 under any dtype policy
_BUILT_IN_STATE_NAMES = {"lstm": ("h", "c"), "gru": ("h",)}


@dataclass(frozen=True)
class StateField:
    """One tensor of the recurrent state, per env: ``name``, ``shape`` (without the batch axis), ``dtype``."""

    name: str
    shape: tuple[int, ...]
    dtype: str = STATE_DTYPE

    @property
    def key(self) -> str:
        """The field name of this tensor in a window (``state_<name>``)."""
        return f"state_{self.name}"


Core = str | Callable[[int], keras.layers.Layer]  # a built-in's name, "package.module:factory", or the factory


def check_core_name(core: Core) -> Core:
    """``core`` if it names a built-in core, looks like ``package.module:factory`` or is a factory, else ValueError."""
    if callable(core):
        return core
    if not isinstance(core, str) or (core not in BUILT_IN_CORES and ":" not in core):
        raise ValueError(f"core must be one of {list(BUILT_IN_CORES)}, 'package.module:factory' or a function "
                         f"factory(units) returning a Keras RNN cell, got {core!r}")
    return core


def import_factory(core: str) -> Callable[[int], keras.layers.Layer]:
    """The function a ``"package.module:factory"`` core names; ValueError if it cannot be imported or called."""
    return import_named(core, "core", "a function factory(units) returning a Keras RNN cell")


def make_cell(core: Core, units: int, name: str) -> keras.layers.Layer | None:
    """The Keras RNN cell of ``core`` with ``units`` units, named after the network (``name``); None for
    ``"none"`` (no memory: the head reads the features directly).

    Raises:
        ValueError: an unknown core, a factory that cannot be imported, or one that returns no RNN cell.
    """
    check_core_name(core)
    if core == FEED_FORWARD:
        return None
    if core == "lstm":
        return keras.layers.LSTMCell(units, name=f"{name}_lstm_cell")
    if core == "gru":
        return keras.layers.GRUCell(units, name=f"{name}_gru_cell")
    cell = (core if callable(core) else import_factory(core))(units)
    if not isinstance(cell, keras.layers.Layer) or not hasattr(cell, "state_size"):
        raise ValueError(f"core {core!r} returned {type(cell).__name__}, not a Keras RNN cell (a keras.layers.Layer "
                         "with state_size and call(inputs, states) -> (output, new_states))")
    return cell


def state_spec(cell: keras.layers.Layer | None, core: Core) -> tuple[StateField, ...]:
    """The recurrent state of ``cell`` (built by :func:`make_cell` for ``core``), one field per tensor; none
    for a feed-forward network (``cell`` None)."""
    if cell is None:
        return ()
    sizes = cell.state_size if isinstance(cell.state_size, (list, tuple)) else [cell.state_size]
    shapes = []
    for size in sizes:
        shape = (int(size),) if isinstance(size, (int, np.integer)) else tuple(int(n) for n in size)
        if not shape or min(shape) < 1:
            raise ValueError(f"core {core!r}: state_size {cell.state_size!r} has an empty or zero-sized entry")
        shapes.append(shape)
    built_in = _BUILT_IN_STATE_NAMES.get(core) if isinstance(core, str) else None
    names = built_in or getattr(cell, "state_names", None) or tuple(str(i) for i in range(len(shapes)))
    names = tuple(str(name) for name in names)
    if len(names) != len(shapes) or len(set(names)) != len(names):
        raise ValueError(f"core {core!r}: state_names {names} must name each of its {len(shapes)} state tensors once")
    unusable = [name for name in names if not f"state_{name}".isidentifier()]
    if unusable:
        raise ValueError(f"core {core!r}: state_names {unusable} do not make field names (state_<name>); use letters, "
                         "digits and underscores")
    return tuple(StateField(name, shape) for name, shape in zip(names, shapes, strict=True))


def q_and_state(outputs) -> tuple[Any, list[Any]]:
    """Q and the state (a list) from a call of a network's model: Keras returns a one-output model's
    output bare, which is what a network without a core (no state) has."""
    if isinstance(outputs, (list, tuple)):
        return outputs[0], list(outputs[1:])
    return outputs, []


def zero_state(spec: tuple[StateField, ...], batch: int) -> tuple[np.ndarray, ...]:
    """The state at an episode start: zeros ``[batch, *shape]`` for every field of ``spec``."""
    return tuple(np.zeros((batch,) + field.shape, dtype=field.dtype) for field in spec)


def reset_state(state: tuple[np.ndarray, ...], mask: npt.ArrayLike, num_envs: int) -> tuple[np.ndarray, ...]:
    """``state`` with the rows of every tensor ``[num_envs, ...]`` whose env is in ``mask`` (one flag per env)
    zeroed: what a policy does when those envs start a new episode. New arrays only when a row changes (a
    compiled step's outputs may be read-only views), else ``state`` itself."""
    mask = np.asarray(mask, bool)
    if mask.shape != (num_envs,):
        raise ValueError(f"reset: mask of shape {mask.shape}, expected ({num_envs},) (one flag per env)")
    if not mask.any():
        return state
    keep = ~mask
    return tuple(np.where(keep.reshape((num_envs,) + (1,) * (part.ndim - 1)), part, part.dtype.type(0))
                 for part in state)


def state_fields(spec: tuple[StateField, ...]) -> dict[str, tuple[tuple[int, ...], str]]:
    """How windows store the state of ``spec``: ``{state_<name>: (shape, dtype)}``, in the spec's order."""
    return {field.key: (field.shape, field.dtype) for field in spec}
