"""Plot training health: ``python -m r2d2kit.health RUN_DIR [RUN_DIR ...] [--out health.png]``.

Draws each run's greedy return beside its training-health values (``health.csv``: stale-state
delta-Q, Q against the return obtained, TD errors, gradient norm, prioritisation, dead units and
saturated gates, replay ratio), one line per run, so that a run that sags and one that holds read
side by side. Works on a run that is still training. ``docs/training.md`` ("Reading a run") says
what each panel means.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    """``python -m r2d2kit.health``: draw the runs' health panels; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m r2d2kit.health", description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories (each with health.csv)")
    parser.add_argument("--out", default=None, help="PNG to write (default: RUN_DIR/health.png of the first run)")
    parser.add_argument("--labels", nargs="+", default=None, help="a legend label per run (default: directory names)")
    args = parser.parse_args(argv)
    runs = [Path(run) for run in args.runs]
    missing = [str(run) for run in runs if not (run / "health.csv").is_file()]
    if missing:
        print(f"error: no health.csv in {', '.join(missing)}: is it a run directory of a run with logging.diagnostics "
              "on (the default), past its first logging.log_every env steps?", file=sys.stderr)
        return 2
    if args.labels is not None and len(args.labels) != len(runs):
        print(f"error: --labels has {len(args.labels)} labels for {len(runs)} runs; give one per run", file=sys.stderr)
        return 2
    from r2d2kit.training.health_plot import plot_health

    path = plot_health(runs, args.out or runs[0] / "health.png", args.labels)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
