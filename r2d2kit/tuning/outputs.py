"""What ``python -m r2d2kit.tune`` leaves behind: the trial table (printed and ``trials.csv``), the plot
``trials.png`` and the best trial as a ready config, ``best.yaml``.

All three are drawn from the study, not from this worker's memory, so they cover every worker's
trials; any worker (or ``--trials 0``) rewrites them. Each file is written beside its final name and
moved into place, so a worker rewriting them never leaves another a half-written one.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import yaml

from r2d2kit.training.run_directory import run_path
from r2d2kit.tuning.space import ConfigValue, SearchSpace, with_values
from r2d2kit.tuning.study import SETTINGS_ATTR

if TYPE_CHECKING:
    import optuna

__all__ = ["TrialRow", "trial_rows", "format_table", "write_csv", "plot_trials", "write_best", "write_outputs"]

TABLE = "trials.csv"
PLOT = "trials.png"
BEST = "best.yaml"


@dataclass(frozen=True)
class TrialRow:
    """One trial as the table shows it."""

    number: int
    state: str  # complete | pruned | fail | running | waiting (Optuna's states)
    value: float | None  # the objective; a pruned trial's is its last evaluation (Optuna's rule)
    last_step: int | None  # the last evaluation's step
    seconds: float | None  # wall time, start to end
    params: dict[str, ConfigValue]  # as the study stores them
    error: str = ""  # why a failed trial failed


def trial_rows(study: optuna.Study) -> list[TrialRow]:
    """Every trial of the study, by number."""
    rows = []
    for trial in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        steps = sorted(trial.intermediate_values)
        seconds = trial.duration.total_seconds() if trial.duration is not None else None
        rows.append(TrialRow(number=trial.number, state=trial.state.name.lower(), value=trial.value,
                             last_step=steps[-1] if steps else None, seconds=seconds, params=dict(trial.params),
                             error=str(trial.user_attrs.get("error", ""))))
    return rows


def format_table(rows: Sequence[TrialRow], keys: Sequence[str], last: int) -> str:
    """The table ``python -m r2d2kit.tune`` prints at the end: one line per trial, one column per searched key."""
    header = ["trial", "state", "value", "steps", "seconds", *keys]
    lines = [[str(row.number), row.state, _text(row.value), _text(row.last_step), _text(row.seconds),
              *(_text(row.params.get(key)) for key in keys)] for row in rows]
    widths = [max(len(cell) for cell in column) for column in zip(header, *lines)]
    text = [_line(header, widths)] + [_line(line, widths) for line in lines]
    text.append(f"value: mean eval_mean of the last {last} greedy evaluations (a pruned trial: its last evaluation); "
                "steps: env steps at the last evaluation")
    return "\n".join(text)


def write_csv(rows: Sequence[TrialRow], keys: Sequence[str], path: Path) -> None:
    """``trials.csv``: the table's columns (full precision) and each failed trial's error."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["number", "state", "value", "last_step", "seconds", *keys, "error"])
    for row in rows:
        writer.writerow([row.number, row.state, _raw(row.value), _raw(row.last_step), _raw(row.seconds),
                         *(_raw(row.params.get(key)) for key in keys), row.error])
    _replace(path, lambda handle: handle.write(buffer.getvalue()))


def plot_trials(rows: Sequence[TrialRow], path: Path, title: str, last: int) -> None:
    """``trials.png``: each complete trial's objective, the best so far, and pruned trials (x, at their last
    evaluation); failed trials have no value and are only counted in the title."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    complete = [row for row in rows if row.state == "complete" and row.value is not None]
    pruned = [row for row in rows if row.state == "pruned" and row.value is not None]
    failed = sum(row.state == "fail" for row in rows)
    figure = Figure(figsize=(6.5, 4))
    axis = figure.subplots()
    complete_values = [r.value for r in complete if r.value is not None]  # (all of them: the filter types them)
    axis.plot([r.number for r in complete], complete_values, "o", label="complete trial")
    if pruned:
        pruned_values = [r.value for r in pruned if r.value is not None]  # (all of them, typed)
        axis.plot([r.number for r in pruned], pruned_values, "x", color="tab:red", markersize=8,
                  label="pruned (last evaluation)")
    best, numbers, bests = float("-inf"), [], []
    for row, value in zip(complete, complete_values):
        best = max(best, value)
        numbers.append(row.number)
        bests.append(best)
    if complete:
        axis.step(numbers + [rows[-1].number], bests + bests[-1:], where="post", color="tab:green",
                  label="best so far")
    axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    axis.set_xlabel("trial")
    axis.set_ylabel(f"mean of the last {last} greedy evaluations")
    axis.set_title(f"{title}: {len(complete)} complete, {len(pruned)} pruned, {failed} failed", fontsize=10)
    axis.grid(alpha=0.3)
    if complete or pruned:
        axis.legend(fontsize=8)
    figure.tight_layout()
    _replace(path, lambda handle: figure.savefig(handle, format="png", dpi=100), binary=True)


def write_best(study: optuna.Study, space: SearchSpace, path: Path, last: int) -> optuna.trial.FrozenTrial | None:
    """``best.yaml``: the study's base config with the best complete trial's values, loadable by
    ``python -m r2d2kit.train``; ``None`` (nothing written) while no trial has completed."""
    from optuna.trial import TrialState

    if not study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        return None
    best = study.best_trial
    values = space.values(best.params)
    data = with_values(study.user_attrs[SETTINGS_ATTR]["base"], values)
    header = [f"Best trial of the r2d2kit.tune study {study.study_name!r}: trial {best.number}, value {best.value:.4g} "
              f"(mean of its last {last} greedy evaluations).",
              "Tuned: " + ", ".join(f"{key}={_text(value)}" for key, value in values.items()),
              f"Everything else is the tuned config after --set (so run.total_env_steps is the tuning budget: "
              f"{data['run']['total_env_steps']}).",
              f"Train it: python -m r2d2kit.train {path} [--set run.total_env_steps=...]"]
    text = "".join(f"# {line}\n" for line in header) + yaml.safe_dump(data, sort_keys=False)
    _replace(path, lambda handle: handle.write(text))
    return best


def write_outputs(study: optuna.Study, space: SearchSpace, out: Path, last: int) -> str:
    """Write ``trials.csv``, ``trials.png`` and ``best.yaml`` into ``out``; return the table to print."""
    rows = trial_rows(study)
    keys = [dimension.key for dimension in space.dimensions]
    write_csv(rows, keys, run_path(out, TABLE))
    plot_trials(rows, run_path(out, PLOT), title=study.study_name, last=last)
    best = write_best(study, space, run_path(out, BEST), last)
    table = format_table(rows, keys, last)
    if best is None:
        return f"{table}\nno trial has completed yet, so there is no {out / BEST}"
    return f"{table}\nbest: trial {best.number}, value {best.value:.4g}; its config: {out / BEST}"


def _replace(path: Path, write: Callable[[IO[Any]], object], binary: bool = False) -> None:
    """Write ``path`` through a temporary file in its folder, then move it into place in one step."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(temporary, "wb" if binary else "w", newline=None if binary else "") as handle:
        write(handle)
    os.replace(temporary, path)


def _line(cells: Sequence[str], widths: Sequence[int]) -> str:
    return "  ".join(cell.rjust(width) if index in (0, 2, 3, 4) else cell.ljust(width)
                     for index, (cell, width) in enumerate(zip(cells, widths))).rstrip()


def _text(value: ConfigValue) -> str:
    """A cell: numbers to 4 significant digits, steps with thousands separators, nothing for None."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}" if abs(value) >= 10_000 else str(value)
    return str(value)


def _raw(value: ConfigValue) -> str:
    return "" if value is None else str(value)
