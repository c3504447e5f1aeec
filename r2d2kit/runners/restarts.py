"""When an actor that died is restarted, after how long, and when the run stops instead.

One policy for every pool that restarts actors (processes, Ray), telling a crash loop from bad luck
the way the supervisors trusted with long jobs do:

* **A rate, not a lifetime count** (systemd's ``StartLimitBurst`` within ``StartLimitIntervalSec``):
  at most ``max_restarts`` restarts, over all actors, within any ``window_s`` seconds. A week of
  sporadic kills (an OOM kill a day, a preempted node) never adds up; many actors failing at once,
  faster than any one of them could loop, stops the run.
* **Failures in a row without progress** (what Kubernetes' ``CrashLoopBackOff`` waits for): an actor
  that fails ``max_consecutive_failures`` times without delivering anything in between (no env
  step reported) is in a crash loop, e.g. an env that raises on its first step; the run stops.
  Delivering anything resets the actor's count.
* **Back-off** between restarts of the same actor: ``backoff_s`` after its first failure in a row,
  doubling with each further one, at most ``max_backoff_s`` (Kubernetes: 10 s doubling to 5 min), so
  a crash loop does not spin the machine while it is being counted.

A stop is an :class:`ActorsFailed` whose message names the actor, how it died and which budget is
spent; the trainer turns it into a clean stop (final checkpoint, one error line, exit status 3).
"""

from __future__ import annotations

import signal
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass


class ActorsFailed(RuntimeError):
    """The actors cannot go on: a restart budget is spent, or they stopped delivering; the message says which."""


def describe_exit(exitcode: int | None) -> str:
    """How a process ended, in words: ``"signal SIGKILL"`` for -9, ``"exit code 1"``, ``"an unknown cause"``."""
    if exitcode is None:
        return "an unknown cause"
    if exitcode < 0:
        try:
            return f"signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit code {exitcode}"


@dataclass(frozen=True)
class Restart:
    """The policy's answer to a failure that is not a stop: restart after ``delay_s``; ``budget`` says what is left."""

    delay_s: float
    budget: str  # e.g. "restart 3 of 10 within 60 s; failure 1 in a row of 3"


class RestartPolicy:
    """Decide, for each actor failure, to restart it (after a back-off) or to stop the run.

    Args:
        max_restarts: restarts over all actors allowed within ``window_s``; the failure that would be
            one more stops the run (0: the first failure stops it).
        window_s: the sliding window of ``max_restarts``, in seconds.
        max_consecutive_failures: failures of one actor in a row, with nothing delivered in between,
            that stop the run (1: the first failure of an actor that never delivered).
        backoff_s: wait before restarting an actor after its first failure in a row; doubles with each
            further failure in a row.
        max_backoff_s: the longest wait.
        clock: seconds, monotonic (tests pass a fake one).
    """

    def __init__(self, max_restarts: int = 10, window_s: float = 60.0, max_consecutive_failures: int = 3,
                 backoff_s: float = 1.0, max_backoff_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if max_restarts < 0 or window_s <= 0 or max_consecutive_failures < 1 or backoff_s < 0 or max_backoff_s < 0:
            raise ValueError(f"RestartPolicy needs max_restarts >= 0, window_s > 0, max_consecutive_failures >= 1 "
                             f"and back-offs >= 0, got {max_restarts}, {window_s}, {max_consecutive_failures}, "
                             f"{backoff_s} and {max_backoff_s}")
        self.max_restarts, self.window_s = max_restarts, window_s
        self.max_consecutive_failures = max_consecutive_failures
        self.backoff_s, self.max_backoff_s = backoff_s, max_backoff_s
        self.clock = clock
        self.restarts = 0  # over the whole run (what summary.json and TensorBoard count)
        self._recent: deque[float] = deque()  # when each restart within the window was granted
        self._in_a_row: dict[int, int] = {}  # actor id -> failures since it last delivered

    def progress(self, actor_id: int) -> None:
        """``actor_id`` delivered (env steps, windows): its failures in a row start again from zero."""
        self._in_a_row.pop(actor_id, None)

    def failed(self, actor_id: int, how: str) -> Restart:
        """Count a failure of ``actor_id`` (``how``: how it died, e.g. ``describe_exit(code)``).

        Returns:
            When to restart it and what is left of the budgets.

        Raises:
            ActorsFailed: a budget is spent; the message names the actor, ``how``, the budget and the config
                key that sets it.
        """
        now = self.clock()
        while self._recent and now - self._recent[0] >= self.window_s:
            self._recent.popleft()
        in_a_row = self._in_a_row.get(actor_id, 0) + 1
        self._in_a_row[actor_id] = in_a_row
        if in_a_row >= self.max_consecutive_failures:
            raise ActorsFailed(
                f"actor {actor_id} died ({how}) {in_a_row} time(s) in a row without delivering an env step in "
                f"between (actors.max_consecutive_failures={self.max_consecutive_failures}): a crash loop, e.g. an "
                f"env or callback that fails at start; see the actor's traceback above")
        if len(self._recent) >= self.max_restarts:
            raise ActorsFailed(
                f"actor {actor_id} died ({how}) and the restart budget is spent: {len(self._recent)} restarts within "
                f"the last {self.window_s:g} s (actors.max_restarts={self.max_restarts} within "
                f"actors.restart_window_s={self.window_s:g}); raise them if failures this frequent are expected")
        self._recent.append(now)
        self.restarts += 1
        delay = min(self.backoff_s * 2.0 ** (in_a_row - 1), self.max_backoff_s)
        return Restart(delay, f"restart {len(self._recent)} of {self.max_restarts} within {self.window_s:g} s; "
                              f"failure {in_a_row} in a row of {self.max_consecutive_failures}")
