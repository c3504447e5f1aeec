"""What both hindsight buffers share: the goal-selection strategy and the checked goal functions.

:class:`~r2d2kit.replay.HerReplayBuffer` (transitions) and
:class:`~r2d2kit.replay.SequenceHerReplayBuffer` (R2D2 windows) relabel with the same strategies, call
``compute_reward`` / ``compute_terminated`` through the same checks, and save and check on load
whether a ``compute_terminated`` was in use (it changes the targets of relabelled samples).
"""

from __future__ import annotations

import os
from enum import Enum
from typing import TypeVar

import numpy as np

from r2d2kit.replay.core import DEFAULT_MAX_BYTES, BufferCore
from r2d2kit.replay.persistence import Metadata, meta_field
from r2d2kit.replay.protocol import RewardFn

__all__ = ["DEFAULT_STRATEGY", "GoalSelectionStrategy", "RewardFn", "as_strategy", "call_goal_function",
           "check_goal_functions", "HindsightBase"]

_Hindsight = TypeVar("_Hindsight", bound="HindsightBase")


class GoalSelectionStrategy(Enum):
    """Where a relabelled goal comes from (HER paper, section 4.5); strings are accepted case-insensitively.

    The goal is the achieved goal of an observation ``o_tau`` of the same episode (``RANDOM``: of any
    stored one). For a sample whose first trained step is ``t`` and last is ``s`` (a transition:
    ``t = s``) in an episode of ``T`` steps:

    * ``TRACE_FUTURE`` (the default): ``tau`` uniform over ``t + 1 .. T``. On a transition this is
      the HER paper's 'future'; on a window its rows often see the goal reached (with ``FUTURE``
      only the window's last transition can): recurrent HER on PointMassGoal-v0 (seed 0) reached a
      greedy success of 1.0 at 50k env steps with it, and 0 at 60k with ``FUTURE``.
    * ``FUTURE``: ``tau`` uniform over ``s + 1 .. T``, after the sample's last step.
    * ``FINAL``: ``tau = T``.
    * ``EPISODE`` (transitions only): ``tau`` uniform over the whole episode.
    * ``RANDOM`` (transitions only): any sampleable transition's outcome in the buffer.
      Windows offer neither: the rows before a window may already be overwritten.

    Example:
        >>> GoalSelectionStrategy("Future") is GoalSelectionStrategy.FUTURE
        True
    """

    TRACE_FUTURE = "trace_future"
    FUTURE = "future"
    FINAL = "final"
    EPISODE = "episode"
    RANDOM = "random"

    @classmethod
    def _missing_(cls, value: object) -> GoalSelectionStrategy | None:
        if isinstance(value, str):
            key = value.strip().lower()
            for member in cls:
                if member.value == key:
                    return member
        return None

    @property
    def code(self) -> int:
        """The strategy's code in the relabelling kernels (``r2d2kit.kernels.her`` / ``sequence_her``)."""
        return _CODES[self]


_CODES = {GoalSelectionStrategy.FUTURE: 0, GoalSelectionStrategy.FINAL: 1, GoalSelectionStrategy.EPISODE: 2,
          GoalSelectionStrategy.RANDOM: 3, GoalSelectionStrategy.TRACE_FUTURE: 4}
DEFAULT_STRATEGY = GoalSelectionStrategy.TRACE_FUTURE


def as_strategy(value: object, allowed: tuple[GoalSelectionStrategy, ...], why: str = "") -> GoalSelectionStrategy:
    """``value`` (a member or its name) as a strategy among ``allowed``; a ``ValueError`` names the options."""
    try:
        strategy = GoalSelectionStrategy(value.value if isinstance(value, GoalSelectionStrategy) else value)
    except (ValueError, TypeError):
        strategy = None
    if strategy not in allowed:
        options = ", ".join(repr(member.value) for member in allowed)
        raise ValueError(f"goal_selection_strategy must be one of {options} (or a GoalSelectionStrategy){why}, "
                         f"got {value!r}")
    return strategy


def check_goal_functions(compute_reward: object, compute_terminated: object) -> None:
    """Refuse a ``compute_reward`` that is not callable, or a ``compute_terminated`` neither callable nor None."""
    if not callable(compute_reward):
        raise TypeError(f"compute_reward must be callable like env.unwrapped.compute_reward, "
                        f"got {compute_reward!r}")
    if compute_terminated is not None and not callable(compute_terminated):
        raise TypeError(f"compute_terminated must be callable (like env.unwrapped.compute_terminated) or None, "
                        f"got {compute_terminated!r}")


class HindsightBase(BufferCore):
    """What both HER buffers share beyond ``BufferCore`` (a mixin before it): the relabel probability
    and ``load``, where the goal functions come again, since functions are not saved, and
    ``compute_terminated`` exactly when the saved buffer had one, or the targets would change. A buffer
    sets ``n_sampled_goal`` and defines ``_construct(meta, **functions)``."""

    n_sampled_goal: int

    @property
    def relabel_probability(self) -> float:
        """``k / (k + 1)``: the chance that an eligible sample (a finished episode's) is relabelled."""
        return self.n_sampled_goal / (self.n_sampled_goal + 1.0)

    @classmethod
    def load(  # type: ignore[override]  # the goal functions are required here: they are not saved
            cls: type[_Hindsight], path: str | os.PathLike[str], *, compute_reward: RewardFn,
            compute_terminated: RewardFn | None = None, max_bytes: int = DEFAULT_MAX_BYTES) -> _Hindsight:
        """Read a buffer written by ``save``; a missing, truncated, foreign or corrupt file raises, naming it.

        Args:
            path: the file ``save`` wrote.
            compute_reward: the reward function.
            compute_terminated: required exactly when the saved buffer had one.
            max_bytes: the most the buffer may preallocate at its saved capacity (see ``BufferCore.load``).
        """
        if not callable(compute_reward):
            raise TypeError(f"load() needs compute_reward (functions are not saved), got {compute_reward!r}")
        return super().load(path, max_bytes=max_bytes, compute_reward=compute_reward,
                            compute_terminated=compute_terminated)

    @classmethod
    def _from_meta(cls: type[_Hindsight], path: str, meta: Metadata, **functions: RewardFn | None) -> _Hindsight:
        saved = meta_field(path, meta, "has_compute_terminated")
        if not isinstance(saved, bool):
            raise ValueError(f"{path!r}: malformed metadata: field 'has_compute_terminated' = {saved!r:.80} must be "
                             "true or false; the file is corrupt")
        if saved != (functions["compute_terminated"] is not None):
            raise ValueError(f"{path!r} was saved from a buffer {'with' if saved else 'without'} compute_terminated; "
                             "pass the same to load() so that sampling continues identically")
        return cls._construct(path, meta, **functions)

    @classmethod
    def _construct(cls: type[_Hindsight], path: str, meta: Metadata, **functions: RewardFn | None) -> _Hindsight:
        """A fresh buffer with the saved constructor arguments and the goal functions given to ``load``."""
        raise NotImplementedError


def call_goal_function(name: str, function: RewardFn, achieved: np.ndarray, goals: np.ndarray) -> np.ndarray:
    """``function(achieved, goals, {})`` checked against the GoalEnv contract: shape ``[M]``, real, finite."""
    count = achieved.shape[0]
    result = np.asarray(function(achieved, goals, {}))
    if result.shape != (count,):
        raise ValueError(f"{name} returned shape {result.shape} for {count} (achieved_goal, desired_goal) pairs; "
                         f"it must be vectorised over the leading batch axis and return shape ({count},)")
    if result.dtype.kind not in "biuf":
        raise TypeError(f"{name} must return real numbers or booleans, got dtype {result.dtype}")
    if result.dtype.kind == "f" and not np.isfinite(result).all():
        bad = int(np.flatnonzero(~np.isfinite(result))[0])
        raise ValueError(f"{name} returned {result[bad]!r} at position {bad}; it must return finite values")
    return result
