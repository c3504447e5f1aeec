"""What a run writes while it trains: evaluation rows (CSV), TensorBoard scalars, the learning curve.

``metrics.csv`` gets one row per greedy evaluation and is appended to on ``--resume``;
``tensorboard/`` holds the scalars (``tensorboard --logdir runs``); ``learning_curve.png`` is drawn
from ``metrics.csv`` at the end, so a resumed run's curve covers the whole run.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Mapping

# eval_min/eval_max came later: rows of older runs lack them (a resumed run keeps its file's header)
EVAL_FIELDS = ("env_steps", "updates", "seconds", "eval_mean", "eval_std", "train_return", "loss", "eval_min",
               "eval_max")
OPTIONAL_FIELDS = ("eval_success",)  # goal envs: fraction of evaluation episodes that ended in success


class RunLog:
    """Writes ``metrics.csv`` and TensorBoard scalars of one run directory."""

    def __init__(self, run_dir: str | Path, tensorboard: bool = True) -> None:
        self.run_dir = Path(run_dir)
        self.metrics_path = self.run_dir / "metrics.csv"
        self._writer = None
        if tensorboard:
            import tensorflow as tf

            self._writer = tf.summary.create_file_writer(str(self.run_dir / "tensorboard"))

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        """Write finite ``values`` at ``step`` (env steps) to TensorBoard."""
        if self._writer is None:
            return
        import tensorflow as tf

        with self._writer.as_default():
            for name, value in values.items():
                if value is not None and math.isfinite(value):
                    tf.summary.scalar(name, float(value), step=int(step))
        self._writer.flush()

    def evaluation(self, row: Mapping[str, float]) -> None:
        """Append one evaluation row to ``metrics.csv`` (header written once, with ``eval_success`` if the
        row has it; an existing file keeps its own columns, so rows of a resumed run line up with the
        ones before)."""
        new = not self.metrics_path.exists() or self.metrics_path.stat().st_size == 0
        fields = EVAL_FIELDS + tuple(name for name in OPTIONAL_FIELDS if name in row)
        if not new:
            with open(self.metrics_path, newline="") as handle:
                fields = next(csv.reader(handle))
        with open(self.metrics_path, "a", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=fields, extrasaction="ignore")
            if new:
                writer.writeheader()
            writer.writerow(row)

    def rows(self) -> list[dict[str, float]]:
        """Every evaluation row written so far (this run and the runs it resumed)."""
        if not self.metrics_path.exists():
            return []
        with open(self.metrics_path, newline="") as handle:
            return [{key: float(value) for key, value in row.items() if value not in ("", None)}
                    for row in csv.DictReader(handle)]

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
        path = self.run_dir / "learning_curve.png"
        figure.savefig(path, dpi=100)
        plt.close(figure)
        return path

    def close(self) -> None:
        """Flush and close the TensorBoard writer."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
