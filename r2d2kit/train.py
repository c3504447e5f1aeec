"""Train an agent from a YAML config (``agent: r2d2``, the default, or ``sac``): ``python -m r2d2kit.train CONFIG``.

    python -m r2d2kit.train CONFIG [--set section.key=value ...] [--run-dir DIR] [--name NAME]
    python -m r2d2kit.train --resume RUN_DIR [--set run.total_env_steps=200000]
    python -m r2d2kit.train --list          # the shipped configs; train one by name: ... train minatar/breakout

Writes a run directory with the resolved config (``config.yaml``), evaluation metrics
(``metrics.csv``), TensorBoard scalars (``tensorboard/``), checkpoints (``checkpoints/``), a learning
curve (``learning_curve.png``), the final network weights (``weights.weights.h5``) and
``summary.json``. ``actors.runner: processes`` acts in spawned processes on shared memory. Ctrl-C
stops cleanly with a final checkpoint (exit 0); ``best.weights.h5`` holds the weights of the best
greedy evaluation; ``--resume RUN_DIR`` continues from the newest
checkpoint with the run's own config (``--set`` may change it, e.g. a longer budget). A bad config
or an unusable checkpoint exits with status 2 and a message naming the file, the key and the fix.
A failure mid-run stops cleanly (actors closed, a final checkpoint when the state is sound) and
prints one line saying what failed, what was saved and how to resume; the exit status names the
failure (``--debug`` or ``R2D2KIT_DEBUG=1`` adds the traceback).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

from r2d2kit.training.config import ConfigError, TrainConfig, load_config


def describe(config: TrainConfig) -> str:
    """The agent's hyper-parameters (the learner section) with its defaults marked, so overrides stand out."""
    paper = type(config.learner)()
    name = {"r2d2": "R2D2", "sac": "SAC"}.get(config.agent, config.agent)
    lines = [f"{name} hyper-parameters (paper default in brackets where overridden):"]
    fields = dataclasses.fields(config.learner)
    width = max(len(f.name) for f in fields)  # one column of values, however long the longest name
    for f in fields:
        value, default = getattr(config.learner, f.name), getattr(paper, f.name)
        lines.append(f"  {f.name:{width}s} {value}" + ("" if value == default else f"   [{default}]"))
    return "\n".join(lines)


# The R2D2 paper's network and window sizes: fine on a GPU, a few env steps per second on a small CPU.
PAPER_CORE_UNITS = 512
PAPER_WINDOW_ROWS = 125  # burn_in 40 + trace_length 80 + n_step 5


def size_warning(config: TrainConfig, gpu: bool) -> str | None:
    """A warning when a run without a GPU uses the paper's network or window sizes, naming the keys to
    override; ``None`` otherwise. (Without window keys in ``replay:`` a config gets the paper's sizes.)"""
    big_core = config.model.core_units >= PAPER_CORE_UNITS
    long_windows = config.replay.layout.length >= PAPER_WINDOW_ROWS
    if gpu or not (big_core or long_windows):
        return None
    sizes = []
    if big_core:
        sizes.append(f"model.core_units={config.model.core_units}")
    if long_windows:
        rc = config.replay
        sizes.append(f"{rc.layout.length}-row windows (replay.burn_in={rc.burn_in} + trace_length={rc.trace_length} + "
                     f"n_step={rc.n_step})")
    return (f"{' and '.join(sizes)} are the R2D2 paper's sizes, made for a GPU; no GPU is visible, and on a CPU "
            "they train at a few env steps per second. For a small task override them, e.g. --set "
            "model.core_units=64 --set model.head_units=64 --set replay.burn_in=10 --set replay.trace_length=20 "
            "--set replay.period=10 (configs/cartpole_pomdp.yaml's sizes)")


def run_directory_path(config: TrainConfig, override: str | None, name: str | None) -> Path:
    """The run's folder: ``--run-dir`` as given, else ``logging.run_dir/<name>`` (default: env id and time)."""
    if override:
        return Path(override)
    label = name or config.logging.name or f"{config.env.id}-{time.strftime('%Y%m%d-%H%M%S')}"
    return Path(config.logging.run_dir) / label


def train(config: TrainConfig, run_dir: Path, resume: bool = False, callbacks=()) -> dict:
    """Train with the configured runner, writing ``run_dir``; return the summary."""
    from r2d2kit.models.backend import has_accelerator
    from r2d2kit.training.run_directory import run_path
    from r2d2kit.training.startup import startup_summary
    from r2d2kit.training.trainer import Trainer

    trainer = Trainer(config, run_dir, callbacks=callbacks, resume=resume)
    print(describe(config))
    layout = trainer.parts.spaces.layout
    if layout is not None:  # the networks read coded observations: say how
        print(layout.describe())
    warning = size_warning(config, gpu=has_accelerator())
    if warning:
        print(f"warning: {warning}", file=sys.stderr, flush=True)
    summary_lines = startup_summary(trainer)
    print(summary_lines)
    run_path(run_dir, "startup.txt").write_text(f"{summary_lines}\n{describe(config)}\n")
    resumed_from = trainer.resumed_from  # set whenever resume is (Trainer refuses a run without a checkpoint)
    print(f"run directory: {run_dir}" + (f" (resuming from {resumed_from.name} at "
                                         f"{trainer.counters['env_steps']:,} env steps)"
                                         if resume and resumed_from is not None else ""))
    summary = trainer.fit()
    print(f"stopped by {summary['stopped_by']}: {summary}")
    return summary


def print_shipped_configs() -> None:
    """``--list``: every shipped config's name, what it is and what it measured."""
    from r2d2kit.training.shipped import config_directory, shipped_configs

    configs = shipped_configs()
    width = max(len(name) for name in configs)
    print(f"shipped configs ({config_directory()}); train one with: python -m r2d2kit.train NAME")
    for name, config in configs.items():
        print(f"  {name:<{width}}  {config.summary}")
        print(f"  {'':<{width}}  result: {config.result}")


EXIT_STATUSES = """exit status:
  0  the run ended: its budget, Ctrl-C or SIGTERM (final checkpoint written), a callback
  1  an unexpected error (a bug: the traceback is printed)
  2  a bad config, checkpoint or run directory, before training started
  3  the actors failed: a crash loop (actors.max_consecutive_failures), restarts too fast
     (actors.max_restarts within actors.restart_window_s), or actors that stopped delivering
  4  the learner failed: an update, replay, a ring, an evaluation or a callback raised
  5  a write failed (a full disk): no final checkpoint; the newest complete one is what --resume picks
on 3 and 4 a final checkpoint is written when the state is sound; every failure prints one line
saying what failed, what was saved and how to resume (--debug or R2D2KIT_DEBUG=1: also the traceback)"""


def main(argv: list[str] | None = None) -> int:
    """``python -m r2d2kit.train``: load, override and check the config, then train; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m r2d2kit.train", description=__doc__.splitlines()[0],
                                     epilog=EXIT_STATUSES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", nargs="?", help="YAML config file, or a shipped config's name (see --list)")
    parser.add_argument("--list", action="store_true", help="list the shipped configs with what each measured")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override a config value, e.g. --set learner.batch_size=32 (repeatable)")
    parser.add_argument("--run-dir", help="write the run here instead of logging.run_dir/<name>")
    parser.add_argument("--name", help="run name under logging.run_dir")
    parser.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its newest checkpoint")
    parser.add_argument("--debug", action="store_true",
                        help="on a failure, print the traceback before the error line (also: R2D2KIT_DEBUG=1)")
    args = parser.parse_args(argv)
    if args.list:
        print_shipped_configs()
        return 0
    from r2d2kit.training.checkpoint import CheckpointError, latest_checkpoint
    from r2d2kit.training.failures import TrainingFailed
    from r2d2kit.training.run_directory import RunDirectoryError, check_run_directory, existing_run_message, holds_run

    run_dir: Path | None = None
    created = False
    try:
        if args.resume:
            if args.config or args.run_dir or args.name:
                raise ConfigError("--resume RUN_DIR uses RUN_DIR/config.yaml and writes into RUN_DIR; drop the "
                                  "CONFIG, --run-dir and --name arguments (change values with --set)")
            run_dir = Path(args.resume)
            if not run_dir.is_dir():
                raise ConfigError(f"--resume {run_dir}: no such directory; give the run directory a run was written "
                                  "to (runs/<env>-<time> by default)")
            if not (run_dir / "config.yaml").is_file():
                raise ConfigError(f"--resume {run_dir}: no config.yaml there; is it a run directory?")
            config = load_config(run_dir / "config.yaml", args.overrides)
            check_run_directory(run_dir)
            if latest_checkpoint(run_dir) is None:  # refused here, before TensorFlow loads (seconds), as Trainer would
                raise CheckpointError(f"--resume {run_dir}: no checkpoint under {run_dir / 'checkpoints'}; start the "
                                      "run without --resume")
        elif args.config:
            config = load_config(args.config, args.overrides)
            run_dir = run_directory_path(config, args.run_dir, args.name)
            if holds_run(run_dir):  # refused before TensorFlow loads, as Trainer would refuse it
                raise ConfigError(existing_run_message(run_dir))
            created = not run_dir.exists()
            run_dir.mkdir(parents=True, exist_ok=True)
        else:
            parser.error("give a CONFIG file, or --resume RUN_DIR")
        train(config, run_dir, resume=bool(args.resume))
    except (ConfigError, CheckpointError, RunDirectoryError) as error:
        if created and run_dir is not None and run_dir.is_dir() and not any(run_dir.iterdir()):
            run_dir.rmdir()  # the config did not fit the env (the trainer builds before it writes): leave no empty run
        kind = ("config" if isinstance(error, ConfigError) else "checkpoint" if isinstance(error, CheckpointError)
                else "run directory")
        print(f"{kind} error: {error}", file=sys.stderr)
        return 2
    except TrainingFailed as failure:
        import os

        if args.debug or os.environ.get("R2D2KIT_DEBUG", "") not in ("", "0"):
            import traceback

            traceback.print_exception(failure, file=sys.stderr)  # the cause's, then this one's
        print(f"error: {failure}", file=sys.stderr, flush=True)
        return failure.exit_code
    return 0


if __name__ == "__main__":
    from r2d2kit.console import exit_without_teardown, quiet_native_logs

    quiet_native_logs()  # before TensorFlow loads; the tests call main() without it (it takes over stderr)
    exit_without_teardown(main())  # TensorFlow's teardown took seconds between the last line and the exit
