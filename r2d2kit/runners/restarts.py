"""When an actor that died is restarted, after how long, and when the run stops instead.

One policy for every pool that restarts actors (processes, Ray), telling a crash loop from bad luck
the way the supervisors trusted with long jobs do:

* **A rate, not a lifetime count** (systemd's ``StartLimitBurst`` within ``StartLimitIntervalSec``):
  at most ``max_restarts`` restarts, over all actors, within any ``window_s`` seconds. A week of
  sporadic kills (an OOM kill a day, a preempted node) never adds up; many actors failing at once,
  faster than any one of them could loop, stops the run.
* **Crashes in a row without progress**: an actor whose own code fails (an exception, a crash
  signal such as SIGSEGV) ``max_consecutive_failures`` times without delivering anything in between
  (no env step reported) is in a crash loop, e.g. an env that raises on its first step; the run
  stops. Delivering anything resets the actor's count. A SIGKILL comes from outside (the OOM killer,
  an operator, a preemption) and says nothing about the actor's code: it counts against the rate
  budget and grows the back-off, but is never taken for a crash loop (Kubernetes retries such a
  container with a growing back-off for as long as it takes).
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


def killed_from_outside(exitcode: int | None) -> bool:
    """Whether a process ended by SIGKILL (the OOM killer, an operator, a preemption), not by its own code."""
    return exitcode == -signal.SIGKILL


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
    budget: str  # e.g. "restart 3 of 10 within 60 s; crash 1 in a row of 3"


class RestartPolicy:
    """Decide, for each actor failure, to restart it (after a back-off) or to stop the run.

    Args:
        max_restarts: restarts over all actors allowed within ``window_s``; the failure that would be
            one more stops the run (0: the first failure stops it).
        window_s: the sliding window of ``max_restarts``, in seconds.
        max_consecutive_failures: crashes of one actor in a row (failures of its own code, not
            SIGKILLs), with nothing delivered in between, that stop the run (1: the first crash of an
            actor that never delivered).
        backoff_s: wait before restarting an actor after its first failure in a row (crash or kill);
            doubles with each further failure in a row.
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
        self._in_a_row: dict[int, int] = {}  # actor id -> failures (crashes and kills) since it last delivered
        self._crashes_in_a_row: dict[int, int] = {}  # actor id -> crashes since it last delivered

    def progress(self, actor_id: int) -> None:
        """``actor_id`` delivered (env steps, windows): its failures in a row start again from zero."""
        self._in_a_row.pop(actor_id, None)
        self._crashes_in_a_row.pop(actor_id, None)

    def failed(self, actor_id: int, how: str, crashed: bool = True) -> Restart:
        """Count a failure of ``actor_id`` (``how``: how it died, e.g. ``describe_exit(code)``).

        ``crashed``: its own code failed (an exception, a crash signal); False for a kill from outside
        (SIGKILL), which never counts towards a crash loop (:func:`killed_from_outside`).

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
        crashes = self._crashes_in_a_row.get(actor_id, 0) + int(crashed)
        self._crashes_in_a_row[actor_id] = crashes
        if crashes >= self.max_consecutive_failures:
            raise ActorsFailed(
                f"actor {actor_id} crashed ({how}) {crashes} time(s) in a row without delivering an env step in "
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
                              f"crash {crashes} in a row of {self.max_consecutive_failures}")
