"""The tuner's side of a trial: start its process, relay its evaluations to Optuna, and prune it.

Why one spawned process per trial, talking through a pipe:

* **Nothing leaks between trials.** TensorFlow keeps graphs, traced functions, thread pools and the
  Keras seed in process-wide state; a fresh ``spawn`` process starts every trial from nothing, and
  its memory goes back to the system when it ends.
* **Only the tuner talks to the study.** The child gets its config and one end of a pipe; the tuner
  calls ``trial.report`` and ``trial.should_prune`` and sends the verdict back. The child could
  instead open the study itself (SQLite allows several writers), but then it would need the storage
  URL, an Optuna import and a database connection of its own, would not work with in-memory
  storage, and a child killed mid-write could leave the trial half-told. With the pipe, the one
  process that asked for the trial is the one that tells its end, whatever happened to the child.
* **The pipe is a request and an answer.** After each evaluation the child waits for the verdict
  (microseconds, a few times per run), so a pruned trial stops right at the evaluation that
  condemned it. A stop request (Ctrl-C) is an :class:`multiprocessing.Event` the child checks after
  every step of its loop, since it may come at any time.

The process is not a daemon, because a trial with ``actors.runner: processes`` starts actor
processes of its own and daemons may not have children; :meth:`TrialProcess.follow` therefore joins
or kills it on every way out.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from r2d2kit.tuning.worker import LOG_NAME, Evaluation, Failed, Finished, SummaryValue, TrialJob, run_trial

if TYPE_CHECKING:
    import optuna

__all__ = ["TrialOutcome", "TrialProcess"]

POLL_SECONDS = 0.2  # how often the tuner looks whether a silent child is still alive
JOIN_SECONDS = 60.0  # a child that said its last word gets this long to exit before it is killed


@dataclass
class TrialOutcome:
    """How a trial process ended, as the tuner saw it."""

    evaluations: list[Evaluation] = field(default_factory=list)
    pruned: bool = False  # the tuner answered an evaluation with "prune"
    summary: dict[str, SummaryValue] | None = None  # the Trainer's summary, when the run ended normally
    error: str | None = None  # why the run failed (its traceback is in trial.log)

    def objective(self, last: int) -> float | None:
        """The mean ``eval_mean`` of the last ``last`` evaluations (``None`` without any)."""
        recent = [evaluation.eval_mean for evaluation in self.evaluations[-last:]]
        return sum(recent) / len(recent) if recent else None


class TrialProcess:
    """One trial's spawned process. ``start``, then ``follow`` until it ends; ``stop`` may come in between."""

    def __init__(self, job: TrialJob) -> None:
        context = multiprocessing.get_context("spawn")
        self.job = job
        self._stop = context.Event()
        self._connection, child_end = context.Pipe(duplex=True)
        self._child_end = child_end
        self._process = context.Process(target=run_trial, args=(job, child_end, self._stop),
                                        name=f"r2d2kit-trial-{job.number}")

    def start(self) -> None:
        """Spawn the process (it imports TensorFlow and builds the network: seconds)."""
        self._process.start()
        self._child_end.close()  # the child holds its own copy; without ours, its death reads as EOF here

    def stop(self) -> None:
        """Ask the run to end after its current step; it still writes its files and reports :class:`Finished`."""
        self._stop.set()

    def follow(self, trial: optuna.Trial,
               on_evaluation: Callable[[Evaluation, bool], None] | None = None) -> TrialOutcome:
        """Relay evaluations until the child's last message: each is reported to ``trial`` at its scheduled step,
        and answered with ``trial.should_prune()``; ``on_evaluation(evaluation, pruned)`` sees each one too.

        A ``KeyboardInterrupt`` raised meanwhile (a second Ctrl-C) kills the child and propagates.
        """
        outcome = TrialOutcome()
        try:
            while True:
                message = self._receive()
                if message is None:  # the child is gone without its last word (killed, out of memory)
                    self._process.join(JOIN_SECONDS)
                    outcome.error = (f"the trial process exited with code {self._process.exitcode} before "
                                     f"reporting; see {Path(self.job.run_dir) / LOG_NAME}")
                    break
                if isinstance(message, Evaluation):
                    self._answer(trial, message, outcome)
                    if on_evaluation is not None:
                        on_evaluation(message, outcome.pruned)
                    continue
                if isinstance(message, Finished):
                    outcome.summary = message.summary
                elif isinstance(message, Failed):
                    outcome.error = message.error
                break
            self._process.join(JOIN_SECONDS)
        finally:
            if self._process.is_alive():
                self._process.kill()  # a second Ctrl-C, or a child that would not exit: it must not outlive us
                self._process.join()
            self._connection.close()
        return outcome

    def _receive(self) -> Evaluation | Finished | Failed | None:
        """The child's next message, or ``None`` once it has died (its end of the pipe closes with it)."""
        while not self._connection.poll(POLL_SECONDS):
            if not self._process.is_alive() and not self._connection.poll(0):
                return None
        try:
            return self._connection.recv()
        except EOFError:
            return None

    def _answer(self, trial: optuna.Trial, evaluation: Evaluation, outcome: TrialOutcome) -> None:
        outcome.evaluations.append(evaluation)
        trial.report(evaluation.eval_mean, step=evaluation.step)
        outcome.pruned = outcome.pruned or trial.should_prune()
        try:
            self._connection.send(outcome.pruned)
        except (BrokenPipeError, OSError):
            pass  # the child died after sending: the loop finds it dead
