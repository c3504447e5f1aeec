"""What the benchmark scripts share: machine lines, child runs, resumable results, tables, plots, Atari windows
and Stable-Baselines3 peers. Importing it puts the checkout first on ``sys.path`` (not an installed copy)."""

import argparse
import gc
import importlib
import importlib.util
import json
import os
import platform
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
sys.path.insert(0, str(REPO_ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # before any TensorFlow import; children inherit it

EVAL_SEED_OFFSET = 7919  # r2d2kit.training.trainer.EVAL_SEED_OFFSET (benchmarks/tests check that they agree)
MAX_EVAL_ENVS = 8  # r2d2kit.runners.evaluation.MAX_EVAL_ENVS (checked the same way)


# --- the machine, its load, peak memory
def cores() -> int:
    """The cores this process may use."""
    return len(os.sched_getaffinity(0))


def machine_line(dists: Sequence[str]) -> str:
    """``machine: <cpu>, <n> cores (<arch>, <os>); python X, dist Y, ...``."""
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor() or platform.machine())
    versions = []
    for dist in dists:
        try:
            versions.append(f"{dist} {version(dist)}")
        except PackageNotFoundError:
            versions.append(f"{dist} not installed")
            continue
        if dist == "keras":
            # the backend decides the initial weights a seed draws and the update's speed: runs on two backends
            # are not one series
            versions[-1] += f" on {os.environ.get('KERAS_BACKEND', 'tensorflow')}"
    return (f"machine: {cpu}, {cores()} cores ({platform.machine()}, {platform.system()}); "
            f"python {platform.python_version()}, {', '.join(versions)}")


def load_average() -> float:
    """The 1-minute load average."""
    return os.getloadavg()[0]


def format_load() -> str:
    """The load average now, as ``"%.2f"``."""
    return f"{load_average():.2f}"


def command_line() -> str:
    """How this script was started: ``python benchmarks/<script> <arguments>``."""
    return shlex.join(["python", os.path.relpath(Path(sys.argv[0]).resolve(), REPO_ROOT), *sys.argv[1:]])


def start(dists: Sequence[str]) -> tuple[float, str]:
    """Print the command and machine lines; return the start time and the load average for :func:`load_footer`."""
    print(f"command: {command_line()}", flush=True)
    print(machine_line(dists), flush=True)
    return time.perf_counter(), format_load()


FLAGS = {  # the flags several scripts share: arg_parser(doc, *names)
    "quick": dict(action="store_true", help="smoke run: small budgets (see above)"),
    "markdown": dict(action="store_true", help="print the tables as markdown"),
    "json": dict(metavar="PATH", help="also write the results to this JSON file (a sweep: after every run)"),
    "resume": dict(action="store_true", help="keep the runs in --json made with these settings; run only the others"),
    "png": dict(metavar="PATH", help="PNG of the curves"),
    "seeds": dict(nargs="+", type=int, default=None, help="default 0 1 2 (--quick: 0)"),
    "set": dict(action="append", default=[], metavar="SECTION.KEY=VALUE",
                help="override a config value (YAML), e.g. learner.learning_rate=5e-4; repeatable"),
    "torch-threads": dict(type=int, default=1, help="torch CPU threads of the peer (default 1: with 2, its OpenMP "
                          "threads spin against other work on a 2-core machine)"),
}


def arg_parser(doc: str, *flags: str) -> argparse.ArgumentParser:
    """A parser whose ``--help`` shows ``doc`` (a script's docstring: its usage lines), with the ``FLAGS`` named."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    for flag in flags:
        parser.add_argument(f"--{flag}", **FLAGS[flag])
    return parser


def comma_list(choices: Sequence[str] | None = None, cast: Callable = str) -> Callable[[str], list]:
    """An argparse ``type``: comma-separated values, each ``cast`` and, if ``choices`` are given, one of them."""
    def parse(text: str) -> list:
        values = [cast(value.strip()) for value in text.split(",") if value.strip()]
        if not values or (choices and set(values) - set(choices)):
            raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated values"
                                             + (f" of {', '.join(choices)}" if choices else ""))
        return values

    return parse


def write_json(path: str | Path | None, data: Any) -> None:
    """``data`` as indented JSON at ``path`` (nothing for None); what JSON cannot hold is written as text."""
    if path:
        Path(path).write_text(json.dumps(data, indent=1, default=str))


def load_module(path: Path, name: str):
    """Import the script at ``path`` as a module ``name`` (``agents/`` is a folder of scripts)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_footer(began: float, load_start: str) -> str:
    """The closing line: total time since ``began`` (perf_counter) and the load average at start and now."""
    return (f"- total benchmark time {time.perf_counter() - began:.0f} s; load average at start {load_start}, at end "
            f"{format_load()} (on {cores()} cores: a higher load means other work shared the machine)")


def finish(report: str, began: float, load_start: str, png: str | None = None, plot: Callable | None = None) -> None:
    """Print a sweep's report and the load footer; with ``png``, write the curves there by ``plot(png)``."""
    print(f"\n{report}\n{load_footer(began, load_start)}")
    if png:
        plot(png)
        print(f"- curves written to {png}")


def peak_rss_mb() -> float:
    """This process's peak resident set (``ru_maxrss``) in MB (a spawned child's starts from its parent's)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def process_peak_rss_mb(pid: int | str, field: str = "VmHWM") -> float:
    """Peak (``VmHWM``; ``field="VmRSS"``: current) resident set of a live process in MB; nan if unreadable."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return float("nan")


# --- child processes
def log_tail(path: Path, lines: int = 1) -> str:
    """The last non-empty ``lines`` of a log, each cut to 200 characters."""
    text = [line for line in path.read_text(errors="replace").splitlines() if line.strip()] if path.exists() else []
    return "\n".join(line[:200] for line in text[-lines:]) or "no output"


def run_job(script: str | Path, job: dict, quiet: bool = False, env: dict[str, str] | None = None) -> dict:
    """``python script --job JSON --child-out FILE`` (its :func:`serve_job`), stderr (``quiet``: stdout too) to a log:
    FILE's JSON with ``wall_seconds`` and the child's own ``peak_rss_mb`` (``os.wait4``: RUSAGE_CHILDREN would give
    the largest of all children so far), or ``error`` and ``log_tail``."""
    path = os.pathsep.join([str(REPO_ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    with tempfile.TemporaryDirectory(prefix="bench-child-") as scratch:
        out, log = Path(scratch) / "result.json", Path(scratch) / "log.txt"
        began = time.perf_counter()
        with open(log, "w") as stream:
            child = subprocess.Popen([sys.executable, str(script), "--job", json.dumps(job), "--child-out", str(out)],
                                     cwd=REPO_ROOT, env=dict(os.environ, **(env or {}), PYTHONPATH=path),
                                     stdout=stream if quiet else None, stderr=stream)
            _, status, usage = os.wait4(child.pid, 0)
        code, wall, rss = os.waitstatus_to_exitcode(status), time.perf_counter() - began, usage.ru_maxrss / 1024
        if code == 0 and out.exists():
            return dict(json.loads(out.read_text()), wall_seconds=wall, peak_rss_mb=rss)
        reason = (f"exit status {code}" if code >= 0 else f"killed by signal {-code}"
                  + (" (the out-of-memory killer?)" if code == -9 else ""))
        return dict(error=f"{reason}: {log_tail(log)}", log_tail=log_tail(log, 20), wall_seconds=wall,
                    peak_rss_mb=rss)


def serve_job(handler: Callable[[dict], dict]) -> None:
    """In a child of :func:`run_job` (else nothing): write ``handler(job)``, with ``process_seconds``, and exit."""
    if len(sys.argv) == 5 and sys.argv[1] == "--job" and sys.argv[3] == "--child-out":
        began = time.perf_counter()
        result = handler(json.loads(sys.argv[2]))
        Path(sys.argv[4]).write_text(json.dumps(dict(result, process_seconds=time.perf_counter() - began), default=str))
        sys.exit(0)


# --- results files
class Results:
    """A sweep's runs in a JSON file ``{..header, "runs": [...]}``, rewritten atomically after every run; with
    ``resume`` its finished runs are kept (failed ones run again). A new run replaces the stored one of its key."""

    def __init__(self, path: str | None, key: Callable[[dict], tuple], resume: bool = False,
                 header: Callable[[], dict] = dict) -> None:
        if resume and not path:
            sys.exit("--resume needs --json FILE (the results to resume)")
        self.path, self.key, self.header, self.resume = path, key, header, resume
        stored = json.loads(Path(path).read_text())["runs"] if resume and path and Path(path).exists() else []
        self.stored = len(stored)
        self.runs = [r for r in stored if r.get("error") is None]

    def has(self, key: tuple, same: Callable[[dict], bool]) -> bool:
        return any(self.key(run) == key and same(run) for run in self.runs)

    def add(self, run: dict) -> None:
        self.runs = [r for r in self.runs if self.key(r) != self.key(run)] + [run]
        self.save()

    def save(self) -> None:
        if self.path:  # atomically: a partial file, then renamed
            write_json(partial := Path(self.path).with_suffix(".tmp"), dict(self.header(), runs=self.runs))
            partial.replace(self.path)


def sweep(script: str | Path, runs: list[dict], results: Results, label: Callable[[dict], str],
          same: Callable[[dict, dict], bool] | None = None, extras: dict | None = None,
          before: Callable[[dict], dict] | None = None, quiet: bool = False) -> Iterator[tuple[dict, dict]]:
    """Run each of ``runs`` that ``results`` lacks made ``same(stored, run)`` (default: all settings equal) in a
    child of ``script`` (the job: the run and ``extras``), one at a time; yield (``before(run)`` or run, result)."""
    same = same or (lambda stored, run: all(stored.get(key) == value for key, value in run.items()))
    todo = [run for run in runs if not results.has(results.key(run), lambda stored, run=run: same(stored, run))]
    print(f"{len(todo)} runs to do" + (f" ({results.stored} runs in {results.path}; those made with these settings "
                                       "are not run again)" if results.resume else ""), flush=True)
    for i, run in enumerate(todo, 1):
        print(f"[{i}/{len(todo)}] {label(run)} ...", flush=True)
        run = before(run) if before else run
        result = run_job(script, dict(run, **(extras or {})), quiet)
        if result.get("error"):
            print(f"  failed ({result['error']}); its output ends:\n{result.pop('log_tail')}", flush=True)
        yield run, result


# --- r2d2kit's Trainer
def fit(config_path: str | Path, overrides: list[str], callbacks: list,
        run_dir: str | Path | None = None, resume: bool = False) -> tuple[Any, dict, float]:
    """(trainer, summary, seconds) of the Trainer's ``fit`` in ``run_dir`` (default: a temporary one), quietly;
    ``resume``: continue from ``run_dir``'s newest checkpoint (the caller checked there is one)."""
    from r2d2kit.training.config import load_config
    from r2d2kit.training.trainer import Trainer

    config = load_config(config_path, ["logging.progress=false", "logging.tensorboard=false",
                                       "checkpoints.every_env_steps=0", *overrides])
    with tempfile.TemporaryDirectory(prefix="bench-run-") as scratch:
        trainer = Trainer(config, Path(run_dir or Path(scratch) / "run"), callbacks=callbacks, resume=resume)
        began = time.perf_counter()
        summary = trainer.fit()
    return trainer, summary, time.perf_counter() - began


def evaluation_callback(line: str, stop: Callable[[list], bool] | None = None):
    """A Trainer callback keeping rows (steps, mean, std, seconds, train return, success) printed with ``line``."""
    from r2d2kit.runners.callbacks import Callback

    class Evaluations(Callback):
        def __init__(self) -> None:
            self.rows: list[tuple] = []

        def on_evaluation(self, trainer, row: dict) -> bool:
            self.rows.append((int(row["env_steps"]), row["eval_mean"], row["eval_std"], row["seconds"],
                              row.get("train_return"), row.get("eval_success")))
            print(line.format(**dict(zip(("steps", "mean", "std", "seconds", "train_return", "success"),
                                         self.rows[-1])), updates=row["updates"]), flush=True)
            return not (stop and stop(self.rows))

    return Evaluations()


# --- timing
def timed_ns(fn: Callable[[], object]) -> int:
    start = time.perf_counter_ns()
    fn()
    return time.perf_counter_ns() - start


def median_s(call: Callable[[], object], calls: int, warmup: int = 1) -> float:
    """Median seconds of ``call()`` over ``calls`` calls after ``warmup`` untimed ones, collector off."""
    return float(np.median(interleaved({"call": lambda: timed_ns(call)}, 1, calls, warmup)["call"])) / 1e9


def interleaved(steps: dict[str, Callable[[], int]], rounds: int, reps: int, warmup: int, slow: tuple = (),
                slow_reps: int = 0, errors: dict | None = None) -> dict[str, np.ndarray]:
    """Nanoseconds of each step (a call returning those of its timed section): ``warmup`` calls, then ``rounds``
    interleaved rounds of ``reps // rounds`` (``slow_reps`` in ``slow``), collector off; failed warm-ups: ``errors``."""
    active = dict(steps)
    for name, step in steps.items():
        try:
            for _ in range(warmup):
                step()
        except Exception as error:  # noqa: BLE001
            if errors is None:
                raise
            errors[name] = f"failed: {type(error).__name__}: {error}"
            del active[name]
    times: dict[str, list[int]] = {name: [] for name in active}
    gc.collect()
    gc.disable()
    try:
        for _ in range(rounds):
            for name, step in active.items():
                for _ in range(max(1, (slow_reps if name in slow else reps) // rounds)):
                    times[name].append(step())
    finally:
        gc.enable()
    return {name: np.asarray(t, dtype=np.float64) for name, t in times.items() if t}


# --- tables and plots
def table(header: list[str], rows: list[list[str]], markdown: bool = False, left: int = 1, right=None) -> str:
    """A plain-text or markdown table; the columns in ``right`` (default: all from ``left`` on) right-aligned."""
    right = set(range(left, len(header)) if right is None else right)
    if markdown:
        rule = "|" + "|".join("---:" if i in right else "---" for i in range(len(header))) + "|"
        return "\n".join(["| " + " | ".join(header) + " |", rule] + ["| " + " | ".join(row) + " |" for row in rows])
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(row) for row in rows])


def fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def mean_std(values: list) -> tuple[float, float] | None:
    """Mean and (population) standard deviation of the values that are not None; None for none."""
    values = [v for v in values if v is not None]
    return (float(np.mean(values)), float(np.std(values))) if values else None


def fmt_mean_std(values: list, spec: str = ".2f", count: bool = True) -> str:
    """``mean +- std (n)`` of the values that are not None, in ``spec`` (the std unsigned); "-" for none."""
    pair, n = mean_std(values), sum(v is not None for v in values)
    if pair is None:
        return "-"
    return f"{pair[0]:{spec}} +- {pair[1]:{spec.replace('+', '')}}" + (f" ({n})" if count else "")


def pyplot():
    """matplotlib.pyplot on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    return importlib.import_module("matplotlib.pyplot")


def panel_plot(path: str, panels: dict[str, dict[str, list]], title: str, ylabel: str = "greedy mean return",
               guides: dict[str, list[tuple[float, str]]] | None = None, ylim: tuple | None = None,
               cols: int = 3) -> None:
    """A PNG, a panel per ``panels`` item ({title: {label: per-seed rows (x, y, ...)}}): per label the mean and
    min-max over seeds in one colour, grey lines at ``guides[title]`` ((y, style) pairs), legends where they change."""
    plt = pyplot()
    cols = min(cols, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.4 * rows), squeeze=False)
    legend: list[str] = []
    for ax, (name, series) in zip(axes.flat, panels.items()):
        for i, (label, curves) in enumerate(series.items()):
            curves = [np.asarray([row[:2] for row in c], dtype=float) for c in curves if len(c)]
            if curves:
                grid = curves[0][:min(len(c) for c in curves), 0]
                values = np.stack([np.interp(grid, c[:, 0], c[:, 1]) for c in curves])  # [seeds, evaluations]
                ax.plot(grid, values.mean(axis=0), color=f"C{i}", marker="o", ms=2.5,
                        label=f"{label} ({len(curves)} seed{'s' if len(curves) > 1 else ''})")
                ax.fill_between(grid, values.min(axis=0), values.max(axis=0), color=f"C{i}", alpha=0.2, lw=0)
        for y, style in (guides or {}).get(name, []):
            ax.axhline(y, color="gray", ls=style, lw=1)
        ax.set_title(name, fontsize=10)
        ax.set(xlabel="env steps", ylim=ylim)
        ax.grid(alpha=0.3)
        labels = ax.get_legend_handles_labels()[1]
        if labels and labels != legend:
            ax.legend(loc="best", fontsize=8)
            legend = labels
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    axes[0, 0].set_ylabel(ylabel)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- synthetic R2D2 Atari windows
ATARI_LAYOUT = dict(burn_in=40, trace_length=80, n_step=5, period=40)


def atari_windows(steps: int, envs: int = 4, units: int = 512):
    """``SequenceBuilder`` windows of ``steps`` vector steps of ``envs`` synthetic episodes of 84x84 uint8 frames."""
    from r2d2kit.replay import SequenceBuilder

    builder = SequenceBuilder(envs, *ATARI_LAYOUT.values(), state_names=("state_h", "state_c"))
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 255, size=(64, 84, 84), dtype=np.uint8)
    lengths = rng.integers(200, 2000, size=(envs, 10_000))
    time_in_episode, episode = np.zeros(envs, dtype=int), np.zeros(envs, dtype=int)
    state = (np.zeros((envs, units), np.float32), np.zeros((envs, units), np.float32))
    for step in range(steps):
        length = lengths[np.arange(envs), episode]
        done = time_in_episode == length - 1
        obs = frames[(step + np.arange(envs)) % len(frames)]
        out = builder.step(obs, rng.integers(0, 18, envs), rng.random(envs), done, np.zeros(envs, bool), state)
        ended = time_in_episode == length
        time_in_episode = np.where(ended, 0, time_in_episode + 1)
        episode += ended
        if out is not None:
            yield out


def atari_sequence_buffer(capacity: int, units: int = 512):
    """An empty ``SequenceReplayBuffer`` of 84x84 uint8 frames in R2D2's window layout (ATARI_LAYOUT)."""
    from r2d2kit.replay import SequenceReplayBuffer

    state = ((units,), "float32")
    return SequenceReplayBuffer(capacity, {"obs": ((84, 84), "uint8"), "action": ((), "int64")},
                                {"state_h": state, "state_c": state}, seed=0, **ATARI_LAYOUT)


# --- Stable-Baselines3 peers (RecurrentPPO, DQN)
def greedy_eval_sb3(model, make_env: Callable, episodes: int, seed: int, normalizer=None,
                    successes: list | None = None) -> np.ndarray:
    """Greedy returns of a Stable-Baselines3 model on the episodes (env count, seeds, quotas) the Trainer evaluates."""
    import gymnasium as gym

    num_envs = min(episodes, MAX_EVAL_ENVS)
    envs = gym.vector.SyncVectorEnv([make_env] * num_envs)
    obs, _ = envs.reset(seed=seed)
    quota = np.full(num_envs, episodes // num_envs)
    quota[: episodes % num_envs] += 1
    returns, running = [], np.zeros(num_envs)
    state, episode_start, in_autoreset = None, np.ones(num_envs, bool), np.zeros(num_envs, bool)
    while len(returns) < episodes:
        action, state = model.predict(obs if normalizer is None else normalizer.normalize_obs(obs), state=state,
                                      episode_start=episode_start, deterministic=True)
        obs, reward, terminated, truncated, info = envs.step(action)
        running += np.where(in_autoreset, 0.0, reward)
        ended = (terminated | truncated) & ~in_autoreset
        counted = ended & (quota > 0)
        returns.extend(running[counted].tolist())
        if successes is not None and "is_success" in info:  # the env reports it (e.g. SuccessOnPositiveReward)
            successes.extend(info["is_success"][counted & info["_is_success"]].tolist())
        quota[counted] -= 1
        running[ended] = 0.0
        episode_start = in_autoreset  # the obs after an autoreset step is an episode's first
        in_autoreset = ended
    envs.close()
    return np.asarray(returns[:episodes])


SB3_LINE = "  {name} {steps:>7,} env steps: eval {mean:6.1f} +- {std:5.1f}, {seconds:.0f} s"


def run_sb3(algorithm: str, make_env: Callable, model_kwargs: dict, *, seed: int, steps: int, eval_every: int,
            eval_episodes: int, n_envs: int = 8, torch_threads: int = 1, normalize_gamma: float | None = None,
            stop_at_budget: bool = True, line: str = SB3_LINE) -> dict:
    """Train ``RecurrentPPO`` or ``DQN`` on ``n_envs`` of ``make_env`` for ``steps`` env steps (``stop_at_budget``
    false: to that rollout's end), greedy evaluations timed apart, rows as :func:`evaluation_callback`'s, ``line``."""
    import torch
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    torch.set_num_threads(torch_threads)
    venv = make_vec_env(make_env, n_envs=n_envs, seed=seed)
    normalizer = None if normalize_gamma is None else VecNormalize(venv, gamma=normalize_gamma)
    if algorithm == "RecurrentPPO":
        from sb3_contrib import RecurrentPPO as Algorithm
    else:
        from stable_baselines3 import DQN as Algorithm
    model = Algorithm(env=normalizer or venv, seed=seed, device="cpu", verbose=0, **model_kwargs)

    class Evaluate(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.start = self.eval_seconds = 0.0
            self.evaluations, self.next_eval, self.rollouts = [], eval_every, 0

        def _on_training_start(self) -> None:
            self.start = time.perf_counter()

        def _on_rollout_end(self) -> None:
            self.rollouts += 1

        def _on_step(self) -> bool:
            if eval_every and self.num_timesteps >= self.next_eval:
                began = time.perf_counter()
                train_seconds = began - self.start - self.eval_seconds
                flags: list = []
                returns = greedy_eval_sb3(self.model, make_env, eval_episodes,
                                          seed + EVAL_SEED_OFFSET + self.num_timesteps, normalizer, flags)
                recent = [info["r"] for info in self.model.ep_info_buffer]  # the last 100 training episodes
                row = (int(self.num_timesteps), float(returns.mean()), float(returns.std()), train_seconds,
                       float(np.mean(recent)) if recent else float("nan"), float(np.mean(flags)) if flags else None)
                self.evaluations.append(row)
                print(line.format(name=algorithm, steps=row[0], mean=row[1], std=row[2], seconds=row[3],
                                  train_return=row[4]), flush=True)
                self.eval_seconds += time.perf_counter() - began
                self.next_eval += eval_every
            return not stop_at_budget or self.num_timesteps < steps

    timer = Evaluate()
    began = time.perf_counter()
    model.learn(total_timesteps=steps, callback=timer)
    train_seconds = time.perf_counter() - began - timer.eval_seconds
    updates = (timer.rollouts * model.n_epochs * -(-model.n_steps * n_envs // model.batch_size)
               if algorithm == "RecurrentPPO"  # DQN: gradient_steps per train_freq steps after learning_starts
               else max(0, model.num_timesteps - model.learning_starts) // model.train_freq.frequency
               * model.gradient_steps)
    return dict(evaluations=timer.evaluations, env_steps=int(model.num_timesteps), train_seconds=train_seconds,
                eval_seconds=timer.eval_seconds, updates=updates, torch_threads=torch.get_num_threads())
