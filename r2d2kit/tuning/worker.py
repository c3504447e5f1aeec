"""The child side of a trial: train one config in a fresh process, reporting each greedy evaluation to the tuner.

:func:`run_trial` is what the spawned process runs. It trains with :func:`r2d2kit.train.train` (the
Trainer, exactly as ``python -m r2d2kit.train`` does, so a trial's directory is an ordinary run
directory) and a :class:`ReportEvaluations` callback, which, after every greedy evaluation, sends an
:class:`Evaluation` up the pipe and waits for the tuner's answer: prune or go on. Pruning, like a
stop request, ends the run through the Trainer's own early stop (a callback returning ``False``),
so a pruned trial still writes its final checkpoint, ``metrics.csv`` and ``summary.json``. The last
message is :class:`Finished` (the run summary) or :class:`Failed` (the error).

The child never touches the Optuna study: all it knows is its config, its run directory and one
end of a pipe. Its output (TensorFlow's included) goes to ``trial.log`` in the run directory, so the
tuner's console shows one line per trial instead of interleaved training logs.
"""

from __future__ import annotations

import os
import signal
import sys
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import TYPE_CHECKING

from r2d2kit.runners.callbacks import Callback
from r2d2kit.training.config import TrainConfig
from r2d2kit.training.run_directory import run_path

if TYPE_CHECKING:
    from r2d2kit.training.trainer import Trainer

__all__ = ["TrialJob", "Evaluation", "Finished", "Failed", "ReportEvaluations", "run_trial"]

LOG_NAME = "trial.log"  # the trial process's stdout and stderr, in its run directory
SummaryValue = int | float | str | None


@dataclass(frozen=True)
class TrialJob:
    """What a trial process needs: the trial's number, its validated config and where to write its run."""

    number: int
    config: TrainConfig
    run_dir: str
    params: dict[str, str]  # the searched values as text, for the head of trial.log


@dataclass(frozen=True)
class Evaluation:
    """One greedy evaluation, sent to the tuner; ``step`` is the evaluation's point on the schedule."""

    step: int  # the multiple of run.eval_every that triggered it: the same for every trial (the pruner compares it)
    env_steps: int  # env steps actually taken (a runner may overshoot the schedule by a few)
    eval_mean: float


@dataclass(frozen=True)
class Finished:
    """The run ended (its budget, a prune or a stop request); ``summary`` is the Trainer's summary."""

    summary: dict[str, SummaryValue]


@dataclass(frozen=True)
class Failed:
    """The run raised; ``error`` is its last line (the traceback is in ``trial.log``)."""

    error: str


Message = Evaluation | Finished | Failed


class ReportEvaluations(Callback):
    """Sends each evaluation to the tuner and stops the run when the tuner prunes it or asks every trial to stop.

    Args:
        connection: the child's end of the pipe; the tuner answers each :class:`Evaluation` with a bool (prune?).
        stop: set by the tuner on Ctrl-C: the run ends after its current step, as a prune does.
        eval_every: ``run.eval_every``, to place each evaluation on the schedule.
    """

    def __init__(self, connection: Connection, stop: Event, eval_every: int) -> None:
        self.connection = connection
        self.stop = stop
        self.eval_every = eval_every

    def on_train_begin(self, trainer: Trainer) -> bool | None:
        """Stop before acting if the tuner was interrupted while this process started."""
        return False if self.stop.is_set() else None

    def on_step(self, trainer: Trainer) -> bool | None:
        """Stop after this step once the tuner asks (Ctrl-C at the tuner's console or to the tuner alone)."""
        return False if self.stop.is_set() else None

    def on_evaluation(self, trainer: Trainer, row: Mapping[str, float]) -> bool | None:
        """Report the evaluation and wait for the tuner's verdict; ``False`` (stop) when it prunes."""
        env_steps = int(row["env_steps"])
        step = env_steps // self.eval_every * self.eval_every
        self.connection.send(Evaluation(step=step, env_steps=env_steps, eval_mean=float(row["eval_mean"])))
        prune = self.connection.recv()
        return False if prune or self.stop.is_set() else None


def run_trial(job: TrialJob, connection: Connection, stop: Event) -> None:
    """The trial process's body: train ``job.config`` into ``job.run_dir``, then send :class:`Finished` or
    :class:`Failed` and exit."""
    # Ctrl-C at a terminal reaches every process of its group: the tuner turns it into `stop`, which this
    # run obeys at its next step. (During fit the Trainer's own handler also stops it cleanly.)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _log_to(run_path(job.run_dir, LOG_NAME))
    print(f"trial {job.number}: " + " ".join(f"{key}={value}" for key, value in job.params.items()), flush=True)
    try:
        from r2d2kit.train import train

        callback = ReportEvaluations(connection, stop, job.config.run.eval_every)
        summary = train(job.config, Path(job.run_dir), callbacks=[callback])
        message: Message = Finished(summary)
    except BaseException as error:  # noqa: BLE001 - whatever ended the run, the tuner must hear of it
        traceback.print_exc()
        message = Failed(f"{type(error).__name__}: {error}".strip())
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    try:
        connection.send(message)
    except (BrokenPipeError, EOFError, OSError):
        pass  # the tuner is gone (killed): nobody is left to tell
    connection.close()


def _log_to(path: Path) -> None:
    """Point this process's stdout and stderr (file descriptors 1 and 2, so TensorFlow's C++ logs too) at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    log = open(path, "a", buffering=1)
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    sys.stdout = sys.stderr = log
