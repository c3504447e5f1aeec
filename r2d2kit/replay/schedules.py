"""Annealing schedules, e.g. PER's importance-sampling exponent beta rising to 1."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from r2d2kit._validation import check_float, check_positive_int

# PER's importance-sampling exponent: fixed, or a schedule called with the number of draws so far
Beta = float | Callable[[int], float]


@dataclass(frozen=True)
class LinearSchedule:
    """``start`` at step 0, moving linearly to ``end`` at ``steps``, then staying there.

    PER anneals beta from ~0.4 to 1 over training: the bias that prioritisation introduces
    matters most near convergence. Call it with a step count: ``beta = schedule(step)``.
    """

    start: float
    end: float
    steps: int

    def __post_init__(self) -> None:
        check_float("start", self.start)
        check_float("end", self.end)
        check_positive_int("steps", self.steps)

    def __call__(self, step: int) -> float:
        if step >= self.steps:
            return self.end
        fraction = max(step, 0) / self.steps
        return self.start + fraction * (self.end - self.start)
