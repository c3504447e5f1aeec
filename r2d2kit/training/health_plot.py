"""One figure of a run's training health beside its greedy return, or several runs side by side.

Each panel is one question a sagging run raises (``docs/training.md``, "Reading a run"); each run is
one line in every panel, so a run that holds and one that sags read against each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from r2d2kit.training.run_log import read_rows

# (title, [(health.csv column, line label)]): the greedy return panel comes first, from metrics.csv
PANELS = (
    ("stale recurrent state: delta-Q / max |Q|", [("health/delta_q_after_burn_in", "after burn-in"),
                                                  ("health/delta_q_start", "at the stored state")]),
    ("Q of taken actions - discounted return obtained", [("health/overestimation", "")]),
    ("greedy action: online vs target network", [("health/greedy_disagreement", "share of rows that differ"),
                                                  ("health/action_gap", "action gap (best - second Q)")]),
    ("|TD| of trained rows", [("learner/td_p90", "90th percentile"), ("learner/td_p50", "median")]),
    ("gradient norm before clipping", [("learner/gradient_norm", "")]),
    ("prioritisation", [("health/priority_spread", "largest / mean probability"),
                        ("replay/is_weight_mean", "mean IS weight (x10)"),
                        ("replay/is_weight_min", "smallest IS weight (x10)")]),
    ("dead ReLU units, saturated core gates (share)", [("health/dead_relu_share", "dead ReLU"),
                                                        ("health/gate_saturation", "saturated gates")]),
    ("trained rows per inserted row", [("replay/replay_ratio", "")]),
)
SCALED = {"replay/is_weight_min": 10.0, "replay/is_weight_mean": 10.0}  # drawn x10 to share its panel's axis


def plot_health(run_dirs: Sequence[str | Path], path: str | Path, labels: Sequence[str] | None = None) -> Path:
    """Draw the health panels of ``run_dirs`` (one line per run) into the PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_paths = [Path(run_dir) for run_dir in run_dirs]
    labels = list(labels) if labels else [run_path.name for run_path in run_paths]
    figure, axes = plt.subplots(3, 3, figsize=(16, 11), sharex=True)
    axes = axes.ravel()
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    styles = ("-", "--", ":")
    for run_index, (run_dir, label) in enumerate(zip(run_paths, labels)):
        colour = colours[run_index % len(colours)]
        evaluations = read_rows(run_dir / "metrics.csv")
        axes[0].plot([row["env_steps"] for row in evaluations], [row["eval_mean"] for row in evaluations],
                     color=colour, marker="o", markersize=3, label=label)
        health = read_rows(run_dir / "health.csv")
        for axis, (_, lines) in zip(axes[1:], PANELS):
            for line_index, (column, line_label) in enumerate(lines):
                points = [(row["env_steps"], row[column] * SCALED.get(column, 1.0)) for row in health if column in row]
                if not points:
                    continue
                steps, values = zip(*points)
                name = f"{label}: {line_label}" if line_label else label
                axis.plot(steps, values, color=colour, linestyle=styles[line_index % len(styles)], label=name)
    axes[0].set_title("greedy evaluation return")
    for axis, (title, _) in zip(axes[1:], PANELS):
        axis.set_title(title)
    for axis in axes:
        axis.grid(alpha=0.3)
        if axis.get_legend_handles_labels()[0]:
            axis.legend(fontsize=7)
    for axis in axes[-3:]:
        axis.set_xlabel("environment steps")
    figure.tight_layout()
    path = Path(path)
    figure.savefig(path, dpi=80)
    plt.close(figure)
    return path
