"""Memory and hindsight on PointMassGoal-v0: R2D2 + recurrent HER, R2D2 without HER, feed-forward DQN + HER.

    python benchmarks/bench_goal_pomdp.py                       # 3 agents x seeds 0 1 2, 100k env steps each
    python benchmarks/bench_goal_pomdp.py --json goal.json --png goal.png --markdown
    python benchmarks/bench_goal_pomdp.py --json goal.json --resume   # only the (agent, seed) runs not in goal.json
    python benchmarks/bench_goal_pomdp.py --quick               # smoke run: seed 0, 3k env steps, about a minute
    python benchmarks/bench_goal_pomdp.py --agents r2d2-her --seeds 1 --set replay.her.n_sampled_goal=8

The task (issue 22): ``PointMassGoal-v0`` (r2d2kit/envs/point_goal.py) pushes a point mass on a
plane to rest on a goal, observing its position only (the velocity is hidden), with a sparse -1/0
reward; an episode ends on success or after 50 steps. It needs memory (only a history tells "on the
goal and still" from "passing through") and relabelling (random play almost never stops on a goal).

Agents, each for the same number of env steps (``--steps``, default 100k: the config's own budget; at
60k, R2D2 + recurrent HER first reached 0.9 at 46k / 56k / 50k env steps on seeds 0 / 1 / 2 and seed 1
ended at 0.88, still on the rise):
  * ``r2d2-her``: ``python -m r2d2kit.train configs/point_goal_her.yaml`` (R2D2, LSTM, recurrent HER:
    trace_future, k = 4), local runner;
  * ``r2d2``: the same config with ``--set replay.her=null`` (no relabelling);
  * ``dqn-her``: ``agents/her_dqn.py --env-id PointMassGoal-v0`` with its default (BitFlip-tuned)
    settings: a feed-forward double DQN on concat(position, goal) with HerReplayBuffer (future, k = 4).

Scoring: every ``--eval-every`` env steps, the greedy success rate over ``--eval-episodes`` episodes
(``info["is_success"]`` at each episode's end) for every agent; a fresh random goal per episode.
R2D2's evaluations reset their envs with ``seed + 7919 + env_steps`` (the trainer's own), the DQN
agent's draw goals from eval envs seeded once with ``seed + 10000``: the same distribution of goals,
not the same goals. Final success is the last evaluation (at ``--steps``), best the highest.
Train wall time leaves the evaluations out for every agent (R2D2 also its actor start-up; the DQN
agent counts its model build); ``wall`` is the whole subprocess, imports and evaluations included.

Every run is its own subprocess, run one after the other with seeds interleaved, so its peak RSS
(``ru_maxrss`` from ``os.wait4``) is its own and a crash is reported in the table, not fatal. Its
output goes to ``run.log`` in its run directory (``--run-root``). On a 2-core machine shared with
other work wall times drift: the load average is printed per run; compare rows of one run.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
from peers import machine as peers_machine  # noqa: E402

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
sys.path.insert(0, str(REPO_ROOT))  # benchmark the checkout, not an installed copy

ENV_ID = "PointMassGoal-v0"
CONFIG = REPO_ROOT / "configs" / "point_goal_her.yaml"
AGENTS = {  # name -> label in tables and plots
    "r2d2-her": "R2D2 + recurrent HER",
    "r2d2": "R2D2, no HER",
    "dqn-her": "feed-forward DQN + HER",
}
TARGET = 0.9  # issue 22: R2D2 + recurrent HER reaches at least this mean final success ...
CEILING = 0.5  # ... and each of the others stays at or below this one, at the same budget
FULL = dict(steps=100_000, eval_every=2_000, eval_episodes=50, seeds=[0, 1, 2])
QUICK = dict(steps=3_000, eval_every=1_000, eval_episodes=8, seeds=[0])


# ---------------------------------------------------------------------------------------------
# one run = one subprocess


def r2d2_command(run_dir: Path, seed: int, her: bool, args: argparse.Namespace) -> list[str]:
    """``python -m r2d2kit.train`` with the benchmark's budget and evaluation; ``--set`` values go in
    before ``replay.her=null``, so no override turns relabelling back on for the ``r2d2`` agent."""
    overrides = [f"run.seed={seed}", f"run.total_env_steps={args.steps}", f"run.eval_every={args.eval_every}",
                 f"run.eval_episodes={args.eval_episodes}", "logging.progress=false", "logging.tensorboard=false",
                 "checkpoints.every_env_steps=0"] + args.set + ([] if her else ["replay.her=null"])
    command = [sys.executable, "-m", "r2d2kit.train", str(args.config), "--run-dir", str(run_dir)]
    for override in overrides:
        command += ["--set", override]
    return command


def dqn_argv(run_dir: Path, seed: int, args: argparse.Namespace) -> list[str]:
    """``agents/her_dqn.py`` flags: the benchmark's budget and evaluation, no early stop."""
    return ["--env-id", ENV_ID, "--seed", str(seed), "--total-steps", str(args.steps),
            "--eval-every", str(args.eval_every), "--eval-episodes", str(args.eval_episodes),
            "--no-stop-at-target", "--no-progress", "--out", str(run_dir / "learning_curve.png")]


def dqn_worker(argv: list[str], out: str) -> None:
    """Run ``agents/her_dqn.py``'s ``main(argv)`` in this process; write its curve and timings to ``out``."""
    spec = importlib.util.spec_from_file_location("agents_her_dqn", REPO_ROOT / "agents" / "her_dqn.py")
    agent = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(agent)
    metrics = agent.main(argv)
    metrics.pop("buffer")
    Path(out).write_text(json.dumps({key: metrics[key] for key in ("eval_curve", "train_seconds", "global_step",
                                                                   "train_steps")}))


def run_child(command: list[str], log_path: Path) -> tuple[int, float, float]:
    """Run ``command`` from the repository root, output to ``log_path``; (exit code, wall s, peak RSS MB)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO_ROOT)] + [p for p in [os.environ.get("PYTHONPATH")]
                                                                          if p]))
    start = time.perf_counter()
    with open(log_path, "w") as log:
        child = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(child.pid, 0)  # this child's own rusage (RUSAGE_CHILDREN would be the max so far)
    child.returncode = os.waitstatus_to_exitcode(status)
    return child.returncode, time.perf_counter() - start, usage.ru_maxrss / 1024  # kB on Linux


def read_r2d2_run(run_dir: Path) -> dict[str, Any]:
    """The curve (metrics.csv: env_steps, eval_success) and the summary.json of a finished trainer run."""
    with open(run_dir / "metrics.csv", newline="") as handle:
        curve = [(int(float(row["env_steps"])), float(row["eval_success"])) for row in csv.DictReader(handle)]
    summary = json.loads((run_dir / "summary.json").read_text())
    return dict(curve=curve, train_seconds=summary["train_seconds"], env_steps=summary["env_steps"],
                updates=summary["updates"])


def read_dqn_run(run_dir: Path) -> dict[str, Any]:
    result = json.loads((run_dir / "result.json").read_text())
    return dict(curve=[(int(s), float(v)) for s, v in result["eval_curve"]], train_seconds=result["train_seconds"],
                env_steps=result["global_step"], updates=result["train_steps"])


def log_tail(log_path: Path) -> str:
    lines = [line for line in log_path.read_text(errors="replace").splitlines() if line.strip()] \
        if log_path.exists() else []
    return lines[-1][:160] if lines else "no output"


def run_one(agent: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """One (agent, seed) run in a subprocess; its record (an ``error`` instead of a curve if it failed)."""
    run_dir = Path(args.run_root) / f"{agent}-seed{seed}"
    shutil.rmtree(run_dir, ignore_errors=True)  # the trainer refuses to write into an old run
    run_dir.mkdir(parents=True)
    if agent == "dqn-her":
        job = json.dumps(dict(argv=dqn_argv(run_dir, seed, args), out=str(run_dir / "result.json")))
        command = [sys.executable, str(Path(__file__).resolve()), "--worker", job]
    else:
        command = r2d2_command(run_dir, seed, agent == "r2d2-her", args)
    load_before = os.getloadavg()[0]
    code, wall, rss = run_child(command, run_dir / "run.log")
    record = dict(agent=agent, seed=seed, steps=args.steps, eval_every=args.eval_every,
                  eval_episodes=args.eval_episodes, overrides=args.set if agent != "dqn-her" else [],
                  wall_seconds=round(wall, 1), peak_rss_mb=round(rss), load_before=round(load_before, 2),
                  load_after=round(os.getloadavg()[0], 2), run_dir=str(run_dir), error=None)
    try:
        if code != 0:
            raise RuntimeError(f"exit {code}: {log_tail(run_dir / 'run.log')}")
        record.update(read_dqn_run(run_dir) if agent == "dqn-her" else read_r2d2_run(run_dir))
        if not record["curve"]:
            raise RuntimeError("no evaluation was recorded")
    except (OSError, KeyError, ValueError, RuntimeError) as error:
        record["error"] = f"{type(error).__name__}: {error}" if not isinstance(error, RuntimeError) else str(error)
    return record


# ---------------------------------------------------------------------------------------------
# measures, table, plot


def first_at(curve: list[tuple[int, float]], level: float) -> int | None:
    """Env steps of the first evaluation with success >= ``level``, or None."""
    return next((steps for steps, success in curve if success >= level), None)


def mean_std(values: list[float], digits: int = 2) -> str:
    """``mean ± std`` over seeds (sample std, ddof 1; one value: the value)."""
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{np.mean(values):.{digits}f} ± {np.std(values, ddof=1):.{digits}f}"


def fmt_steps(steps: int | None) -> str:
    return "never" if steps is None else f"{steps / 1000:g}k"


def table(header: list[str], rows: list[list[str]], markdown: bool) -> list[str]:
    if markdown:
        return (["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
                + ["| " + " | ".join(row) + " |" for row in rows])
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(header)]
    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    return [line(header), line(["-" * w for w in widths])] + [line(row) for row in rows]


def report(records: list[dict[str, Any]], agents: list[str], markdown: bool) -> list[str]:
    """The per-run table, the per-agent table (mean ± std over seeds) and the issue-22 target lines."""
    lines = ["per run:"]
    rows = []
    for r in records:
        if r["error"]:
            rows.append([AGENTS[r["agent"]], str(r["seed"]), "n/a", "n/a", "n/a", "n/a", f"{r['wall_seconds']:.0f} s",
                         f"{r['peak_rss_mb']:,} MB", f"{r['load_before']:.1f} / {r['load_after']:.1f}"])
            continue
        rows.append([AGENTS[r["agent"]], str(r["seed"]), f"{r['curve'][-1][1]:.2f}",
                     f"{max(s for _, s in r['curve']):.2f}", fmt_steps(first_at(r["curve"], TARGET)),
                     f"{r['train_seconds']:.0f} s", f"{r['wall_seconds']:.0f} s", f"{r['peak_rss_mb']:,} MB",
                     f"{r['load_before']:.1f} / {r['load_after']:.1f}"])
    lines += table(["agent", "seed", "final success", "best success", f"first >= {TARGET}", "train time", "wall",
                    "peak RSS", "load before / after"], rows, markdown)
    errors = [f"- {AGENTS[r['agent']]} seed {r['seed']} failed: {r['error']} (log: {r['run_dir']}/run.log)"
              for r in records if r["error"]]
    lines += ([""] + errors) if errors else []

    lines += ["", "per agent (mean ± std over seeds):"]
    rows, finals = [], {}
    for agent in agents:
        runs = [r for r in records if r["agent"] == agent and not r["error"]]
        if not runs:
            continue
        finals[agent] = [r["curve"][-1][1] for r in runs]
        rows.append([AGENTS[agent], " ".join(str(r["seed"]) for r in runs), mean_std(finals[agent]),
                     mean_std([max(s for _, s in r["curve"]) for r in runs]),
                     " / ".join(fmt_steps(first_at(r["curve"], TARGET)) for r in runs),
                     mean_std([r["train_seconds"] for r in runs], digits=0) + " s",
                     f"{max(r['peak_rss_mb'] for r in runs):,} MB"])
    lines += table(["agent", "seeds", "final success", "best success", f"env steps to >= {TARGET} (per seed)",
                    "train time", "peak RSS (max)"], rows, markdown)

    lines += ["", "targets (issue 22; final success, mean over seeds, at the same budget):"]
    for agent, values in finals.items():
        mean = float(np.mean(values))
        if agent == "r2d2-her":
            lines.append(f"- {AGENTS[agent]}: {mean:.2f} >= {TARGET}? {'yes' if mean >= TARGET else 'NO'} "
                         f"({len(values)} seed{'s' if len(values) > 1 else ''})")
        else:
            lines.append(f"- {AGENTS[agent]}: {mean:.2f} <= {CEILING}? {'yes' if mean <= CEILING else 'NO'} "
                         f"({len(values)} seed{'s' if len(values) > 1 else ''})")
    return lines


def plot(records: list[dict[str, Any]], agents: list[str], path: str, steps: int) -> None:
    """Success-rate curves: per agent the mean over seeds, with the band from the lowest to the highest seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for agent in agents:
        curves = [np.asarray(r["curve"], dtype=float) for r in records if r["agent"] == agent and not r["error"]]
        if not curves:
            continue
        grid = curves[0][:, 0]  # every seed evaluates at the same env steps; interp covers a stray one
        values = np.stack([np.interp(grid, c[:, 0], c[:, 1]) for c in curves])  # [seeds, evaluations]
        line, = ax.plot(grid, values.mean(axis=0), marker="o", ms=3,
                        label=f"{AGENTS[agent]} ({len(curves)} seed{'s' if len(curves) > 1 else ''})")
        ax.fill_between(grid, values.min(axis=0), values.max(axis=0), color=line.get_color(), alpha=0.2, lw=0)
    ax.axhline(TARGET, color="grey", lw=0.8, ls="--")
    ax.axhline(CEILING, color="grey", lw=0.8, ls=":")
    ax.set(xlabel="env steps", ylabel="greedy success rate", ylim=(-0.02, 1.02),
           title=f"{ENV_ID}: mean over seeds, band min-max ({steps:,} env steps)")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------
# main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)  # internal: one her_dqn run, JSON job
    p.add_argument("--agents", nargs="+", default=list(AGENTS), choices=list(AGENTS), help="agents to run")
    p.add_argument("--seeds", nargs="+", type=int, default=None, help="default: 0 1 2 (--quick: 0)")
    p.add_argument("--steps", type=int, default=None, help="env steps per run, every agent (default 100000; "
                   "--quick: 3000)")
    p.add_argument("--eval-every", type=int, default=None, help="env steps between evaluations (default 2000; "
                   "--quick: 1000); a multiple of 8 keeps R2D2's 8 envs on the same points as the DQN agent")
    p.add_argument("--eval-episodes", type=int, default=None, help="greedy episodes per evaluation, every agent "
                   "(default 50; --quick: 8)")
    p.add_argument("--config", default=str(CONFIG), help="the R2D2 agents' config")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override an R2D2 config value for both R2D2 agents, e.g. replay.her.n_sampled_goal=8")
    p.add_argument("--quick", action="store_true", help="smoke run: seed 0, 3k env steps, about a minute")
    p.add_argument("--json", default=None, help="write every run's record here, after each run")
    p.add_argument("--resume", action="store_true", help="with --json: keep its finished (agent, seed) runs "
                   "of the same budget and evaluation, run only the others")
    p.add_argument("--png", default=None, help="success-rate curves: mean over seeds, min-max band")
    p.add_argument("--markdown", action="store_true", help="print the tables as markdown")
    p.add_argument("--run-root", default=None, help="run directories go here (default: a temporary folder, "
                   "removed at the end unless a run failed)")
    args = p.parse_args(argv)
    defaults = QUICK if args.quick else FULL
    for key in ("steps", "eval_every", "eval_episodes", "seeds"):
        if getattr(args, key) is None:
            setattr(args, key, defaults[key])
    if args.resume and not args.json:
        p.error("--resume reads the runs of --json FILE; give one")
    return args


def same_setup(record: dict[str, Any], args: argparse.Namespace) -> bool:
    """Whether a stored record ran with this invocation's budget, evaluation and R2D2 overrides."""
    overrides = args.set if record["agent"] != "dqn-her" else []
    return (not record["error"] and record["steps"] == args.steps and record["eval_every"] == args.eval_every
            and record["eval_episodes"] == args.eval_episodes and record.get("overrides", []) == overrides)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    args = parse_args(argv)
    if args.worker:
        job = json.loads(args.worker)
        dqn_worker(job["argv"], job["out"])
        return []
    began = time.perf_counter()
    temporary = args.run_root is None
    args.run_root = args.run_root or tempfile.mkdtemp(prefix="bench_goal_pomdp-")
    machine = peers_machine.machine_line(("numpy", "numba", "tensorflow", "keras", "gymnasium"))
    print(machine, flush=True)
    print(f"{ENV_ID}: {args.steps:,} env steps per run; greedy success over {args.eval_episodes} episodes every "
          f"{args.eval_every:,} env steps; agents {', '.join(args.agents)}; seeds {' '.join(map(str, args.seeds))}; "
          f"R2D2 config {os.path.relpath(args.config, REPO_ROOT)}" + (f" with {' '.join(args.set)}" if args.set else "")
          + f"; runs under {args.run_root}; load average at start {os.getloadavg()[0]:.2f}", flush=True)

    records: list[dict[str, Any]] = []
    if args.resume and Path(args.json).exists():
        stored = json.loads(Path(args.json).read_text())["runs"]
        records = [r for r in stored if same_setup(r, args)]
        print(f"resuming: {len(records)} finished run(s) of this setup kept from {args.json} "
              f"({len(stored) - len(records)} other or failed run(s) dropped)", flush=True)
    done = {(r["agent"], r["seed"]) for r in records}

    def save() -> None:
        if args.json:
            payload = dict(machine=machine, env_id=ENV_ID, target=TARGET, ceiling=CEILING, runs=records)
            partial = Path(args.json).with_suffix(".tmp")
            partial.write_text(json.dumps(payload, indent=1))
            partial.replace(args.json)  # a reader never sees half a file

    for seed in args.seeds:  # seeds interleaved, so that drift in machine load hits every agent alike
        for agent in args.agents:
            if (agent, seed) in done:
                continue
            print(f"running {agent} seed {seed} ...", flush=True)
            record = run_one(agent, seed, args)
            records.append(record)
            save()
            print(f"  {agent} seed {seed}: " + (f"FAILED ({record['error']})" if record["error"] else
                  f"final success {record['curve'][-1][1]:.2f}, best {max(s for _, s in record['curve']):.2f}, "
                  f"first >= {TARGET} at {fmt_steps(first_at(record['curve'], TARGET))}; "
                  f"train {record['train_seconds']:.0f} s")
                  + f", wall {record['wall_seconds']:.0f} s, peak RSS {record['peak_rss_mb']:,} MB, "
                  f"load {record['load_before']:.1f} -> {record['load_after']:.1f}", flush=True)

    order = {(agent, seed): i for i, (seed, agent) in enumerate((s, a) for s in args.seeds for a in args.agents)}
    records = sorted((r for r in records if (r["agent"], r["seed"]) in order),
                     key=lambda r: order[(r["agent"], r["seed"])])
    print()
    print("\n".join(report(records, args.agents, args.markdown)))
    print(f"\nSuccess: greedy, {args.eval_episodes} episodes per evaluation; final = at {args.steps:,} env steps. "
          "Train time: evaluations excluded. Peak RSS: each run's own process. Load: 1-minute average on "
          f"{os.cpu_count()} CPUs before / after each run. Total {time.perf_counter() - began:.0f} s; load average "
          f"at end {os.getloadavg()[0]:.2f}.")
    if args.png:
        plot(records, args.agents, args.png, args.steps)
        print(f"curves written to {args.png}")
    if args.json and len(records) > len(done):
        print(f"records written to {args.json}")
    if temporary and not any(r["error"] for r in records):
        shutil.rmtree(args.run_root, ignore_errors=True)
    return records


if __name__ == "__main__":
    main()
