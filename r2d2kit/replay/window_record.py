"""The R2D2 window record: every field a window carries, described once.

SequenceBuilder writes windows in this form, the shared-memory record carries it, SequenceReplayBuffer
stores and samples it, and the learner reads it. A window of ``length`` rows (burn-in + trace +
n-step) is a dict of arrays::

    per row, [length, ...]:  obs, action, prev_action      the user's spaces (prev_action: the action's)
                             extras                        the user's (a goal env's achieved_goal)
                             reward, prev_reward           float32          (ROW_FLAGS: stored per row
                             terminated, truncated, mask   bool              by the buffer)
                             obs_mask                      bool (the row holds an observation; ROW_MASK)
    per window:              env, episode, start           int64 (WINDOW_IDS: where the window comes from)
                             state_<name>                  the core's state (models/cores.py), STATE_PREFIX

The recurrent state's fields come from the network's state spec (``models/cores.py``): an LSTM's
``state_h`` and ``state_c``, a GRU's ``state_h``, a user's cell's own names.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

__all__ = ["window_fields", "record_names"]

STEP_FIELDS = ("obs", "action")  # given with every step (their spaces are the user's); prev_action follows action
# one row as SequenceBuilder keeps it until its windows are cut (mask and obs_mask are computed then)
EPISODE_ROW = ("obs", "action", "reward", "prev_action", "prev_reward", "terminated", "truncated")
ROW_FLAGS: dict[str, tuple[tuple[int, ...], str]] = {
    "reward": ((), "float32"), "prev_reward": ((), "float32"), "terminated": ((), "bool"), "truncated": ((), "bool"),
    "mask": ((), "bool")}
ROW_MASK = "obs_mask"
WINDOW_IDS: dict[str, str] = {"env": "int64", "episode": "int64", "start": "int64"}
STATE_PREFIX = "state_"
# the rows the network reads, in its sequence model's input order (then the state), and those the learner trains on
NETWORK_ROWS = ("obs", "prev_action", "prev_reward", ROW_MASK)
LEARNER_ROWS = (*NETWORK_ROWS, "action", "reward", "terminated", "mask")


def record_names() -> frozenset[str]:
    """Every name the record itself uses (extras and state fields may not take one)."""
    return frozenset(STEP_FIELDS) | {"prev_action"} | set(ROW_FLAGS) | {ROW_MASK} | set(WINDOW_IDS)


FieldLayout = tuple[tuple[int, ...], npt.DTypeLike]  # (shape, dtype) of one field


def window_fields(length: int, obs: FieldLayout, action: FieldLayout, state: Mapping[str, FieldLayout] | None = None,
                  extras: Mapping[str, FieldLayout] | None = None
                  ) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Shape and dtype of every field of one window of ``length`` rows.

    Args:
        obs, action: ``(shape, dtype)`` of one row's observation and action.
        state: the window's recurrent state, ``{state_<name>: (shape, dtype)}`` (``models.cores.state_fields``).
        extras: more per-row fields, ``{name: (row shape, dtype)}``.
    """
    rows: dict[str, FieldLayout] = {"obs": obs, "action": action, "prev_action": action, **ROW_FLAGS,
                                    ROW_MASK: ((), "bool")}
    fields = {name: ((length,) + tuple(shape), np.dtype(dtype)) for name, (shape, dtype) in rows.items()}
    fields.update({name: ((), np.dtype(dtype)) for name, dtype in WINDOW_IDS.items()})
    for name, (shape, dtype) in (state or {}).items():
        if not name.startswith(STATE_PREFIX) or name in fields:
            raise ValueError(f"state field {name!r} must be named {STATE_PREFIX}<name> and not clash with the record")
        fields[name] = (tuple(shape), np.dtype(dtype))
    for name, (shape, dtype) in (extras or {}).items():
        if name in fields or name.startswith(STATE_PREFIX):
            raise ValueError(f"extra row field {name!r} clashes with a window field of that name")
        fields[name] = ((length,) + tuple(shape), np.dtype(dtype))
    return fields
