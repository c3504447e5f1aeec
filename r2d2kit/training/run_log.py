"""What a run writes while it trains: evaluation rows (CSV), TensorBoard scalars, the learning curve.

``metrics.csv`` gets one row per greedy evaluation and is appended to on ``--resume`` (after the
rows past the resumed checkpoint are dropped: that training is redone, so the curve never goes back);
``tensorboard/`` holds the scalars (``tensorboard --logdir runs``); ``learning_curve.png`` is drawn
from ``metrics.csv`` at the end, so a resumed run's curve covers the whole run.
"""

from __future__ import annotations

import csv
import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from r2d2kit.training.run_directory import run_path

# eval_min/eval_max came later: rows of older runs lack them (a resumed run keeps its file's header)
EVAL_FIELDS = ("env_steps", "updates", "seconds", "eval_mean", "eval_std", "train_return", "loss", "eval_min",
               "eval_max")
OPTIONAL_FIELDS = ("eval_success",)  # goal envs: fraction of evaluation episodes that ended in success
# health.csv: one row per log interval (docs/training.md, "Reading a run"); empty cells: not measured then
HEALTH_FIELDS = ("env_steps", "updates", "actors/env_steps_per_s", "learner/updates_per_s", "learner/loss",
                 "learner/q_mean", "learner/priority_mean", "train/episode_return", "replay/replay_ratio",
                 "actors/weight_lag", "learner/gradient_norm", "learner/clipped_share", "learner/td_p50",
                 "learner/td_p90", "learner/td_max", "replay/is_weight_min", "replay/is_weight_mean",
                 "replay/effective_batch_share",
                 "health/priority_spread", "health/delta_q_start", "health/delta_q_after_burn_in",
                 "health/context_share", "health/q_taken", "health/return_obtained", "health/overestimation",
                 "health/return_known_share", "health/action_gap", "health/greedy_disagreement",
                 "health/target_age", "health/dead_relu_share", "health/gate_saturation", "health/cost_share")


class ScalarWriter(Protocol):
    """Writes TensorBoard scalars of one run."""

    def write(self, values: Mapping[str, float], step: int) -> None:
        """Write ``values`` at ``step`` and flush."""

    def close(self) -> None:
        """Flush and close the event file."""


class TensorFlowScalars:
    """TensorBoard scalars through ``tf.summary`` (Keras on TensorFlow)."""

    def __init__(self, directory: Path) -> None:
        import tensorflow as tf

        self._tf = tf
        self._writer = tf.summary.create_file_writer(str(directory))

    def write(self, values: Mapping[str, float], step: int) -> None:
        with self._writer.as_default():
            for name, value in values.items():
                self._tf.summary.scalar(name, value, step=step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class TensorBoardXScalars:
    """TensorBoard scalars through tensorboardX, which needs no TensorFlow (Keras on JAX)."""

    def __init__(self, directory: Path) -> None:
        from tensorboardX import SummaryWriter

        self._writer = SummaryWriter(str(directory))

    def write(self, values: Mapping[str, float], step: int) -> None:
        for name, value in values.items():
            self._writer.add_scalar(name, value, global_step=step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


def open_scalar_writer(directory: Path) -> ScalarWriter | None:
    """TensorBoard's writer for Keras' backend: ``tf.summary`` on TensorFlow, tensorboardX elsewhere; without
    tensorboardX a one-line notice and None (``metrics.csv`` and ``health.csv`` are written either way)."""
    import keras

    if keras.backend.backend() == "tensorflow":
        return TensorFlowScalars(directory)
    try:
        return TensorBoardXScalars(directory)
    except ImportError:
        print(f"note: no TensorBoard scalars on Keras' {keras.backend.backend()} backend without tensorboardX "
              "(pip install 'r2d2kit[jax]' installs it; or set logging.tensorboard: false); metrics.csv and "
              "health.csv are written as always", file=sys.stderr, flush=True)
        return None


class RunLog:
    """Writes ``metrics.csv`` and TensorBoard scalars of one run directory."""

    def __init__(self, run_dir: str | Path, tensorboard: bool = True) -> None:
        self.run_dir = Path(run_dir)
        self.metrics_path = run_path(self.run_dir, "metrics.csv")
        self.health_path = run_path(self.run_dir, "health.csv")
        self._writer = open_scalar_writer(run_path(self.run_dir, "tensorboard")) if tensorboard else None

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        """Write finite ``values`` at ``step`` (env steps) to TensorBoard."""
        if self._writer is None:
            return
        self._writer.write({name: float(value) for name, value in values.items()
                            if value is not None and math.isfinite(value)}, int(step))

    def evaluation(self, row: Mapping[str, float]) -> None:
        """Append one evaluation row to ``metrics.csv`` (header written once, with ``eval_success`` if the
        row has it; an existing file keeps its own columns, so rows of a resumed run line up with the
        ones before)."""
        _append_row(self.metrics_path, EVAL_FIELDS + tuple(name for name in OPTIONAL_FIELDS if name in row), row)

    def health(self, row: Mapping[str, float]) -> None:
        """Append one log interval's training-health values to ``health.csv`` (fixed columns; a resumed
        run keeps its file's header)."""
        _append_row(self.health_path, HEALTH_FIELDS, row, blank_nan=True)

    def forget_after(self, env_steps: int) -> int:
        """Drop the ``metrics.csv`` and ``health.csv`` rows logged after ``env_steps`` (a resumed run goes on
        from a checkpoint taken before them: a learner killed after its last checkpoint); returns how many."""
        dropped = 0
        for path in (self.metrics_path, self.health_path):
            if not path.is_file():
                continue
            with open(path, newline="") as handle:
                lines = handle.read().splitlines(keepends=True)
            if not lines:
                continue
            rows = list(csv.DictReader(lines))
            kept = [line for line, row in zip(lines[1:], rows) if float(row["env_steps"]) <= env_steps]
            if len(kept) < len(rows):
                dropped += len(rows) - len(kept)
                tmp = path.with_name(f".{path.name}.tmp")
                tmp.write_text("".join(lines[:1] + kept))
                tmp.replace(path)
        return dropped

    def rows(self) -> list[dict[str, float]]:
        """Every evaluation row written so far (this run and the runs it resumed)."""
        return read_rows(self.metrics_path)

    def plot(self, title: str) -> Path | None:
        """Draw ``learning_curve.png`` from ``metrics.csv``; None if there is nothing to draw.

        The band is what was observed: the lowest and highest return among each evaluation's
        episodes (a mean +- std band would reach past the env's maximum return, e.g. 540 on a task
        capped at 500). Rows written before those columns existed get no band.
        """
        rows = self.rows()
        if not rows:
            return None
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        steps = [row["env_steps"] for row in rows]
        means = [row["eval_mean"] for row in rows]
        banded = [row for row in rows if "eval_min" in row and "eval_max" in row]
        figure, axis = plt.subplots(figsize=(6, 4))
        axis.plot(steps, means, marker="o", label="greedy evaluation (mean)")
        if banded:
            axis.fill_between([row["env_steps"] for row in banded], [row["eval_min"] for row in banded],
                              [row["eval_max"] for row in banded], alpha=0.2, label="lowest to highest episode")
        axis.set_xlabel("environment steps")
        axis.set_ylabel("return")
        axis.set_title(title)
        axis.grid(alpha=0.3)
        axis.legend()
        figure.tight_layout()
        path = run_path(self.run_dir, "learning_curve.png")
        figure.savefig(path, dpi=100)
        plt.close(figure)
        return path

    def close(self) -> None:
        """Flush and close the TensorBoard writer."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def _append_row(path: Path, fields: tuple[str, ...], row: Mapping[str, float], blank_nan: bool = False) -> None:
    """Append ``row`` to the CSV at ``path``, writing ``fields`` as the header of a new file; with
    ``blank_nan`` a value not measured (nan) is an empty cell."""
    new = not path.exists() or path.stat().st_size == 0
    if not new:
        with open(path, newline="") as handle:
            fields = tuple(next(csv.reader(handle)))
    with open(path, "a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields, extrasaction="ignore")
        if new:
            writer.writeheader()
        if blank_nan:
            row = {key: value for key, value in row.items() if not (isinstance(value, float) and math.isnan(value))}
        writer.writerow(row)


def read_rows(path: Path) -> list[dict[str, float]]:
    """Rows of a CSV this module wrote, as floats (empty cells left out)."""
    if not path.exists():
        return []
    with open(path, newline="") as handle:
        return [{key: float(value) for key, value in row.items() if value not in ("", None)}
                for row in csv.DictReader(handle)]
