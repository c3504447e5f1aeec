"""Tune a training config with Optuna: ``python -m r2d2kit.tune configs/cue_memory.yaml --trials 20``.

    python -m r2d2kit.tune CONFIG [--space SPACE.yaml] [--trials N] [--set section.key=value ...]
                          [--out DIR] [--storage URL] [--study-name NAME] [--resume] [--seed S] [--last K]
                          [--startup-trials N] [--prune-after-trials N] [--prune-after-steps STEPS]

Each trial trains CONFIG (with the ``--set`` overrides, e.g. a smaller ``run.total_env_steps``, and
the values the TPE sampler picked from the search space) in a process of its own, into
``OUT/trials/NNNN`` (an ordinary run directory with its ``metrics.csv``). Its objective is the mean
greedy return of its last K evaluations (``--last``, default 3), not its peak: R2D2's greedy returns
swing, and a setting should be rewarded for where it ends up. Every evaluation is reported to a
median pruner, which stops a trial that is worse than the median of the finished trials at the same
point. The study is kept in ``OUT/study.db`` (SQLite), or any Optuna storage URL (``--storage``):
workers started with ``--resume`` and the same arguments, on one machine or several, share it.

At the end (also after Ctrl-C, which ends the running trial after its current step and marks it
failed) it prints the table of the study's trials and writes ``OUT/trials.csv``, ``OUT/trials.png``
and ``OUT/best.yaml``, the config of the best trial, ready for ``python -m r2d2kit.train``. A bad
config, search space, storage or argument exits with status 2 and a message naming the fix.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from r2d2kit.training.agents import agent_builder
from r2d2kit.training.config import ConfigError, TrainConfig, build_config, load_config
from r2d2kit.training.run_directory import RunDirectoryError, check_run_directory
from r2d2kit.tuning.space import SearchSpace, SpaceError, default_space, load_space, with_values

if TYPE_CHECKING:
    import optuna
    from tqdm import tqdm

    from r2d2kit.tuning.trial_process import TrialProcess
    from r2d2kit.tuning.worker import Evaluation

INTERRUPTED = 130  # exit status after a second Ctrl-C (the running trial killed), as a shell reports SIGINT
STOP_SIGNALS: dict[int, str] = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}


@dataclass
class Tuning:
    """One worker's job, checked: the study and what every trial shares."""

    study: optuna.Study
    url: str  # where the study is stored
    space: SearchSpace
    base: dict  # the config after --set, as TrainConfig.to_dict() writes it
    config: TrainConfig
    out: Path
    trials: int  # this worker's trials
    last: int


def main(argv: list[str] | None = None) -> int:
    """``python -m r2d2kit.tune``: check everything, run this worker's trials, write the outputs; the exit status."""
    args = _parser().parse_args(argv)
    try:
        import optuna
    except ImportError:
        print("error: python -m r2d2kit.tune needs Optuna: pip install 'r2d2kit[tune]'", file=sys.stderr)
        return 2
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # this module prints what happens, once
    try:
        tuning = prepare(args)
    except ConfigError as error:
        kind = "search space" if isinstance(error, SpaceError) else "config"
        print(f"{kind} error: {error}", file=sys.stderr)
        return 2
    except RunDirectoryError as error:
        print(f"output folder error: {error}", file=sys.stderr)
        return 2
    return tune(tuning)


def prepare(args: argparse.Namespace) -> Tuning:
    """Load and check the config, the space, the output folder and the study, before any trial starts."""
    from r2d2kit.tuning.study import open_study, storage_url

    config = load_config(args.config, args.overrides)
    run = config.run
    if run.eval_every == 0 or run.total_env_steps // run.eval_every < args.last:
        evaluations = run.total_env_steps // run.eval_every if run.eval_every else 0
        raise ConfigError(f"{args.config}: each trial's objective is the mean of its last --last {args.last} greedy "
                          f"evaluations, but run.total_env_steps={run.total_env_steps} with run.eval_every="
                          f"{run.eval_every} gives {evaluations}; set e.g. --set run.eval_every="
                          f"{max(1, run.total_env_steps // (args.last + 1))}, or a smaller --last")
    base = config.to_dict()
    if args.space:
        space = load_space(args.space, base)
    else:
        space = default_space(config, agent_builder(config.agent).search_dimensions(config))
    stem = Path(args.config).stem
    out = Path(args.out or Path("tune") / stem)
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    url = storage_url(out, args.storage)
    name = args.study_name or stem
    prune_after_steps = run.total_env_steps // 3 if args.prune_after_steps is None else args.prune_after_steps
    settings = {"base": base, "space": space.to_dict(), "last": args.last}
    try:
        check_run_directory(out)
        study = open_study(url, name, args.resume, settings, trials_dir=out / "trials", seed=args.seed,
                           startup_trials=args.startup_trials, prune_after_trials=args.prune_after_trials,
                           prune_after_steps=prune_after_steps)
    except (ConfigError, RunDirectoryError):
        if created and not any(out.iterdir()):
            out.rmdir()  # nothing was written: leave no empty folder behind (a mistyped --storage, say)
        raise
    print(f"study {name!r} in {url}: " + (f"{len(study.trials)} trials so far" if study.trials else "new"))
    print(f"objective: mean eval_mean of the last {args.last} greedy evaluations of each trial "
          f"({run.total_env_steps // run.eval_every} per trial: run.eval_every={run.eval_every}, "
          f"run.total_env_steps={run.total_env_steps})")
    print(f"sampler: TPE, seed {args.seed}, random for the study's first {args.startup_trials} trials; pruner: median, "
          f"after {args.prune_after_trials} finished trials and {prune_after_steps} env steps of a trial")
    print(space.describe(base), flush=True)
    return Tuning(study=study, url=url, space=space, base=base, config=config, out=out, trials=args.trials,
                  last=args.last)


def tune(tuning: Tuning) -> int:
    """Run this worker's trials one after another, then write and print the outputs; the exit status."""
    from tqdm.auto import tqdm

    from r2d2kit.tuning.outputs import write_outputs

    state = _Stop()
    main_thread = threading.current_thread() is threading.main_thread()
    previous = {number: signal.signal(number, state.request) for number in (STOP_SIGNALS if main_thread else ())}
    bar = tqdm(total=tuning.trials, unit="trial", disable=not tuning.config.logging.progress, dynamic_ncols=True)
    outcomes: list[str] = []
    status = 0
    try:
        while len(outcomes) < tuning.trials and not state.requested:
            outcomes.append(_one_trial(tuning, state, bar))
            bar.update(1)
    except KeyboardInterrupt:
        status = INTERRUPTED
    finally:
        bar.close()
        for number, handler in previous.items():
            signal.signal(number, handler)
        print(write_outputs(tuning.study, tuning.space, tuning.out, tuning.last))
    if state.requested and status == 0:
        ran = f"{len(outcomes)} trial" + ("" if len(outcomes) == 1 else "s")
        print(f"stopped on {state.requested} after {ran} of this worker; continue the study with the same command and "
              "--resume")
    if outcomes and all(outcome == "fail" for outcome in outcomes) and not state.requested:
        print("every trial of this worker failed: see the errors above and each trial's trial.log", file=sys.stderr)
        return 1
    return status


class _Stop:
    """The tuner's SIGINT/SIGTERM handler: the first stops the running trial after its current step and starts no
    other; a second raises ``KeyboardInterrupt`` (the running trial is killed)."""

    def __init__(self) -> None:
        self.requested: str | None = None
        self.process: TrialProcess | None = None

    def request(self, signum: int, _frame: FrameType | None) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = STOP_SIGNALS.get(signum, "Ctrl-C")
        print(f"\nstopping on {self.requested}: the running trial ends after its current step and is marked failed; "
              "the outputs are written then (a second signal kills the trial)", file=sys.stderr, flush=True)
        if self.process is not None:
            self.process.stop()


def _one_trial(tuning: Tuning, state: _Stop, bar: tqdm) -> str:
    """Ask the study for a trial, run it and tell the study how it ended; its state's name. A trial is never left
    running in the study: whatever escapes (a second Ctrl-C, a bug) marks it failed on the way out."""
    from r2d2kit.tuning.study import ask

    trial = ask(tuning.study, tuning.url)
    try:
        return _run(tuning, trial, state, bar)
    except BaseException as error:
        from optuna.trial import TrialState

        running = tuning.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        if any(other.number == trial.number for other in running):
            reason = (f"killed by a second {state.requested or 'Ctrl-C'}" if isinstance(error, KeyboardInterrupt)
                      else f"the tuner failed: {type(error).__name__}: {error}")
            _fail(tuning.study, trial, reason, bar)
        raise


def _run(tuning: Tuning, trial: optuna.Trial, state: _Stop, bar: tqdm) -> str:
    from optuna.trial import TrialState

    from r2d2kit.tuning.trial_process import TrialProcess
    from r2d2kit.tuning.worker import LOG_NAME, TrialJob

    values = tuning.space.suggest(trial)
    shown = " ".join(f"{key}={_short(value)}" for key, value in values.items())
    run_dir = tuning.out / "trials" / f"{trial.number:04d}"
    trial.set_user_attr("run_dir", str(run_dir))
    _write(bar, f"trial {trial.number}: {shown}")
    try:  # values that clash with each other (each alone was checked at start) fail this trial only
        config = build_config(with_values(tuning.base, {**values, "logging.progress": False}),
                              source=f"trial {trial.number} ({shown})")
    except ConfigError as error:
        return _fail(tuning.study, trial, str(error), bar)
    run_dir.mkdir(parents=True, exist_ok=True)
    process = TrialProcess(TrialJob(trial.number, config, str(run_dir), {k: _short(v) for k, v in values.items()}))
    started = time.perf_counter()
    state.process = process
    if state.requested:
        process.stop()  # the signal came while this trial was being set up: it stops at once
    try:
        process.start()
        outcome = process.follow(trial, on_evaluation=lambda e, pruned: _show_progress(bar, trial.number, e, pruned,
                                                                                      config.run.total_env_steps))
    finally:
        state.process = None
    seconds = time.perf_counter() - started
    evaluations = " ".join(f"{e.eval_mean:.3g}" for e in outcome.evaluations)
    stopped_by = outcome.summary.get("stopped_by") if outcome.summary else None
    if outcome.error is not None:
        return _fail(tuning.study, trial, f"{outcome.error} (see {run_dir / LOG_NAME})", bar)
    if outcome.pruned:
        tuning.study.tell(trial, state=TrialState.PRUNED)
        _write(bar, f"trial {trial.number} pruned at {outcome.evaluations[-1].step:,} env steps after {seconds:.0f} s "
                    f"(evaluations {evaluations})")
        return "pruned"
    if stopped_by != "run.total_env_steps":
        reason = f"interrupted by {state.requested}" if state.requested else f"stopped by {stopped_by}"
        return _fail(tuning.study, trial, f"{reason} before its budget (evaluations {evaluations})", bar)
    value = outcome.objective(tuning.last)
    if value is None:
        return _fail(tuning.study, trial, "no greedy evaluation was reported", bar)
    tuning.study.tell(trial, value)
    best = tuning.study.best_trial
    _write(bar, f"trial {trial.number} complete: value {value:.4g} in {seconds:.0f} s (evaluations {evaluations}); "
                f"best so far: trial {best.number}, {best.value:.4g}")
    return "complete"


def _fail(study: optuna.Study, trial: optuna.Trial, error: str, bar: tqdm) -> str:
    from optuna.trial import TrialState

    trial.set_user_attr("error", error)
    study.tell(trial, state=TrialState.FAIL)
    _write(bar, f"trial {trial.number} failed: {error}")
    return "fail"


def _show_progress(bar: tqdm, number: int, evaluation: Evaluation, pruned: bool, total: int) -> None:
    verdict = ", pruned" if pruned else ""
    bar.set_postfix_str(f"trial {number}: {evaluation.env_steps:,}/{total:,} steps, eval {evaluation.eval_mean:.3g}"
                        f"{verdict}")


def _write(bar: tqdm, line: str) -> None:
    """A line above the progress bar (or plain, when the bar is off)."""
    bar.write(line)
    sys.stdout.flush()


def _short(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m r2d2kit.tune", description=__doc__.splitlines()[0])
    parser.add_argument("config", help="the YAML config every trial starts from (see configs/)")
    parser.add_argument("--space", metavar="SPACE.yaml",
                        help="search space: section.key -> {low, high[, log, step]} or {choices: [...]} (default: "
                             "learning rate, Adam epsilon, target update period, n-step, update ratio, sampler)")
    parser.add_argument("--trials", type=_at_least(0), default=20, metavar="N",
                        help="trials this worker runs (default 20; 0: only rewrite the outputs from the study)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override a config value in every trial, e.g. --set run.total_env_steps=3000")
    parser.add_argument("--out", metavar="DIR", help="output folder (default tune/<config name>)")
    parser.add_argument("--storage", metavar="URL",
                        help="Optuna storage URL shared by workers (default sqlite:///OUT/study.db)")
    parser.add_argument("--study-name", metavar="NAME", help="study name in the storage (default: the config name)")
    parser.add_argument("--resume", action="store_true",
                        help="add trials to an existing study of this name (created if missing): how workers join")
    parser.add_argument("--seed", type=int, default=0, help="seed of the TPE sampler (default 0; give each worker "
                                                            "sharing a study its own)")
    parser.add_argument("--last", type=_at_least(1), default=3, metavar="K",
                        help="objective: mean of each trial's last K greedy evaluations (default 3)")
    parser.add_argument("--startup-trials", type=_at_least(0), default=5, metavar="N",
                        help="the study's first N trials sample at random before TPE models (default 5)")
    parser.add_argument("--prune-after-trials", type=_at_least(0), default=5, metavar="N",
                        help="prune only once N trials have finished (default 5)")
    parser.add_argument("--prune-after-steps", type=_at_least(0), default=None, metavar="STEPS",
                        help="prune a trial only after this many env steps (default: a third of run.total_env_steps)")
    return parser


def _at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is below {minimum}")
        return value

    return parse


if __name__ == "__main__":
    from r2d2kit.console import quiet_native_logs

    quiet_native_logs()  # before TensorFlow loads; the tests call main() without it (it takes over stderr)
    sys.exit(main())
