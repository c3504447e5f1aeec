"""Memory and hindsight on PointMassGoal-v0: R2D2 + recurrent HER, R2D2 without HER, feed-forward DQN + HER.

    python benchmarks/bench_goal_pomdp.py --json goal.json --png goal.png --markdown  # 3 agents x seeds 0 1 2
    python benchmarks/bench_goal_pomdp.py --json goal.json --resume   # only the (agent, seed) runs not in goal.json
    python benchmarks/bench_goal_pomdp.py --quick               # smoke run: seed 0, 3k env steps, about a minute

Scores the greedy success rate every ``--eval-every`` env steps; every run is its own subprocess, its
output in ``run.log`` of its run directory. The task, the agents and the method: benchmarks/README.md.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import harness
import numpy as np
from harness import REPO_ROOT, Results, table

ENV_ID = "PointMassGoal-v0"
CONFIG = REPO_ROOT / "configs" / "point_goal_her.yaml"
AGENTS = {"r2d2-her": "R2D2 + recurrent HER", "r2d2": "R2D2, no HER", "dqn-her": "feed-forward DQN + HER"}
TARGET = 0.9  # R2D2 + recurrent HER reaches at least this mean final success ...
CEILING = 0.5  # ... and each of the others stays at or below this one, at the same budget
FULL = dict(steps=100_000, eval_every=2_000, eval_episodes=50, seeds=[0, 1, 2])
QUICK = dict(steps=3_000, eval_every=1_000, eval_episodes=8, seeds=[0])


# ---------------------------------------------------------------------------------------------
# one run = one subprocess


def r2d2_command(run_dir: Path, seed: int, her: bool, args) -> list[str]:
    """``python -m r2d2kit.train`` with the benchmark's budget and evaluation; ``--set`` values go in
    before ``replay.her=null``, so no override turns relabelling back on for the ``r2d2`` agent."""
    overrides = [f"run.seed={seed}", f"run.total_env_steps={args.steps}", f"run.eval_every={args.eval_every}",
                 f"run.eval_episodes={args.eval_episodes}", "logging.progress=false", "logging.tensorboard=false",
                 "checkpoints.every_env_steps=0"] + args.set + ([] if her else ["replay.her=null"])
    return [sys.executable, "-m", "r2d2kit.train", str(CONFIG), "--run-dir", str(run_dir)] + [
        part for override in overrides for part in ("--set", override)]


def dqn_argv(run_dir: Path, seed: int, args) -> list[str]:
    """``agents/her_dqn.py`` flags: the benchmark's budget and evaluation, no early stop."""
    return ["--env-id", ENV_ID, "--seed", str(seed), "--total-steps", str(args.steps),
            "--eval-every", str(args.eval_every), "--eval-episodes", str(args.eval_episodes),
            "--no-stop-at-target", "--no-progress", "--out", str(run_dir / "learning_curve.png")]


def dqn_worker(argv: list[str]) -> dict:
    """``agents/her_dqn.py``'s ``main(argv)`` in this process: its curve and timings."""
    metrics = harness.load_module(REPO_ROOT / "agents" / "her_dqn.py", "agents_her_dqn").main(argv)
    return {key: metrics[key] for key in ("eval_curve", "train_seconds", "global_step", "train_steps")}


def read_run(agent: str, run_dir: Path) -> dict[str, Any]:
    """The curve [(env steps, success)], training seconds, env steps and updates of a finished run."""
    if agent == "dqn-her":
        result = json.loads((run_dir / "result.json").read_text())
        return dict(curve=[(int(s), float(v)) for s, v in result["eval_curve"]],
                    train_seconds=result["train_seconds"], env_steps=result["global_step"],
                    updates=result["train_steps"])
    with open(run_dir / "metrics.csv", newline="") as handle:  # a trainer run: metrics.csv and summary.json
        curve = [(int(float(row["env_steps"])), float(row["eval_success"])) for row in csv.DictReader(handle)]
    summary = json.loads((run_dir / "summary.json").read_text())
    return dict(curve=curve, train_seconds=summary["train_seconds"], env_steps=summary["env_steps"],
                updates=summary["updates"])


def run_one(agent: str, seed: int, args) -> dict[str, Any]:
    """One (agent, seed) run in a subprocess; its record (an ``error`` instead of a curve if it failed)."""
    run_dir = Path(args.run_root) / f"{agent}-seed{seed}"
    shutil.rmtree(run_dir, ignore_errors=True)  # the trainer refuses to write into an old run
    run_dir.mkdir(parents=True)
    if agent == "dqn-her":  # harness.serve_job runs dqn_worker in the child
        command = [sys.executable, str(Path(__file__).resolve()), "--job", json.dumps(dqn_argv(run_dir, seed, args)),
                   "--child-out", str(run_dir / "result.json")]
    else:
        command = r2d2_command(run_dir, seed, agent == "r2d2-her", args)
    load_before = os.getloadavg()[0]
    code, wall, rss = harness.run_child(command, run_dir / "run.log")
    record = dict(agent=agent, seed=seed, steps=args.steps, eval_every=args.eval_every,
                  eval_episodes=args.eval_episodes, overrides=args.set if agent != "dqn-her" else [],
                  wall_seconds=round(wall, 1), peak_rss_mb=round(rss), load_before=round(load_before, 2),
                  load_after=round(os.getloadavg()[0], 2), run_dir=str(run_dir), error=None)
    try:
        if code != 0:
            raise RuntimeError(f"exit {code}: {harness.log_tail(run_dir / 'run.log', width=160)}")
        record.update(read_run(agent, run_dir))
        if not record["curve"]:
            raise RuntimeError("no evaluation was recorded")
    except (OSError, KeyError, ValueError, RuntimeError) as error:
        record["error"] = f"{type(error).__name__}: {error}" if not isinstance(error, RuntimeError) else str(error)
    return record


def same_setup(record: dict[str, Any], args) -> bool:
    """Whether a stored record ran with this invocation's budget, evaluation and R2D2 overrides."""
    overrides = args.set if record["agent"] != "dqn-her" else []
    return (not record["error"] and record["steps"] == args.steps and record["eval_every"] == args.eval_every
            and record["eval_episodes"] == args.eval_episodes and record.get("overrides", []) == overrides)


# ---------------------------------------------------------------------------------------------
# measures, tables, plot


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


def report(records: list[dict[str, Any]], agents: list[str], markdown: bool) -> list[str]:
    """The per-run table, the per-agent table (mean ± std over seeds) and the target lines."""
    rows = []
    for r in records:
        load = f"{r['load_before']:.1f} / {r['load_after']:.1f}"
        if r["error"]:
            rows.append([AGENTS[r["agent"]], str(r["seed"]), "n/a", "n/a", "n/a", "n/a", f"{r['wall_seconds']:.0f} s",
                         f"{r['peak_rss_mb']:,} MB", load])
            continue
        rows.append([AGENTS[r["agent"]], str(r["seed"]), f"{r['curve'][-1][1]:.2f}",
                     f"{max(s for _, s in r['curve']):.2f}", fmt_steps(first_at(r["curve"], TARGET)),
                     f"{r['train_seconds']:.0f} s", f"{r['wall_seconds']:.0f} s", f"{r['peak_rss_mb']:,} MB", load])
    lines = ["per run:", table(["agent", "seed", "final success", "best success", f"first >= {TARGET}", "train time",
                                "wall", "peak RSS", "load before / after"], rows, markdown)]
    errors = [f"- {AGENTS[r['agent']]} seed {r['seed']} failed: {r['error']} (log: {r['run_dir']}/run.log)"
              for r in records if r["error"]]
    lines += ([""] + errors) if errors else []
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
    lines += ["", "per agent (mean ± std over seeds):",
              table(["agent", "seeds", "final success", "best success", f"env steps to >= {TARGET} (per seed)",
                     "train time", "peak RSS (max)"], rows, markdown),
              "", "targets (final success, mean over seeds, at the same budget):"]
    for agent, values in finals.items():
        mean, seeds = float(np.mean(values)), f"({len(values)} seed{'s' if len(values) > 1 else ''})"
        if agent == "r2d2-her":
            lines.append(f"- {AGENTS[agent]}: {mean:.2f} >= {TARGET}? {'yes' if mean >= TARGET else 'NO'} {seeds}")
        else:
            lines.append(f"- {AGENTS[agent]}: {mean:.2f} <= {CEILING}? {'yes' if mean <= CEILING else 'NO'} {seeds}")
    return lines


def plot(records: list[dict[str, Any]], agents: list[str], path: str, steps: int) -> None:
    """Success-rate curves: per agent the mean over seeds, with the band from the lowest to the highest seed."""
    plt = harness.pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for agent in agents:
        harness.seed_band(ax, [r["curve"] for r in records if r["agent"] == agent and not r["error"]], AGENTS[agent])
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


def parse_args(argv: list[str] | None = None):
    p = harness.arg_parser(__doc__, "quick", "markdown")
    p.add_argument("--agents", nargs="+", default=list(AGENTS), choices=list(AGENTS), help="agents to run")
    p.add_argument("--seeds", nargs="+", type=int, default=None, help="default: 0 1 2 (--quick: 0)")
    p.add_argument("--steps", type=int, default=None, help="env steps per run, every agent (default 100000; "
                   "--quick: 3000)")
    p.add_argument("--eval-every", type=int, default=None, help="env steps between evaluations (default 2000; "
                   "--quick: 1000); a multiple of 8 keeps R2D2's 8 envs on the same points as the DQN agent")
    p.add_argument("--eval-episodes", type=int, default=None, help="greedy episodes per evaluation, every agent "
                   "(default 50; --quick: 8)")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override an R2D2 config value for both R2D2 agents, e.g. replay.her.n_sampled_goal=8")
    p.add_argument("--json", default=None, help="write every run's record here, after each run")
    p.add_argument("--resume", action="store_true", help="with --json: keep its finished (agent, seed) runs "
                   "of the same budget and evaluation, run only the others")
    p.add_argument("--png", default=None, help="success-rate curves: mean over seeds, min-max band")
    args = p.parse_args(argv)
    for key, value in (QUICK if args.quick else FULL).items():
        setattr(args, key, value if getattr(args, key) is None else getattr(args, key))
    if args.resume and not args.json:
        p.error("--resume reads the runs of --json FILE; give one")
    return args


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    harness.serve_job(dqn_worker)
    args = parse_args(argv)
    began, load_start = harness.start(("numpy", "numba", "tensorflow", "keras", "gymnasium"))
    args.run_root = tempfile.mkdtemp(prefix="bench_goal_pomdp-")  # removed at the end unless a run failed
    print(f"{ENV_ID}: {args.steps:,} env steps per run; greedy success over {args.eval_episodes} episodes every "
          f"{args.eval_every:,} env steps; agents {', '.join(args.agents)}; seeds {' '.join(map(str, args.seeds))}; "
          f"R2D2 config {CONFIG.relative_to(REPO_ROOT)}" + (f" with {' '.join(args.set)}" if args.set else "")
          + f"; runs under {args.run_root}", flush=True)
    results = Results(args.json, lambda r: (r["agent"], r["seed"]), args.resume, lambda: dict(
        machine=harness.machine_line(("numpy", "numba", "tensorflow", "keras", "gymnasium")), env_id=ENV_ID,
        target=TARGET, ceiling=CEILING))
    if args.resume:
        kept = sum(same_setup(r, args) for r in results.runs)
        print(f"resuming: {kept} finished run(s) of this setup in {args.json} ({results.stored - kept} other or "
              "failed run(s) are not)", flush=True)
    order = [(agent, seed) for seed in args.seeds for agent in args.agents]  # seeds interleaved: drift hits all
    todo = [key for key in order if not results.has(key, lambda r: same_setup(r, args))]
    for agent, seed in todo:
        print(f"running {agent} seed {seed} ...", flush=True)
        record = run_one(agent, seed, args)
        results.add(record)
        print(f"  {agent} seed {seed}: " + (f"FAILED ({record['error']})" if record["error"] else
              f"final success {record['curve'][-1][1]:.2f}, best {max(s for _, s in record['curve']):.2f}, "
              f"first >= {TARGET} at {fmt_steps(first_at(record['curve'], TARGET))}; "
              f"train {record['train_seconds']:.0f} s")
              + f", wall {record['wall_seconds']:.0f} s, peak RSS {record['peak_rss_mb']:,} MB, "
              f"load {record['load_before']:.1f} -> {record['load_after']:.1f}", flush=True)
    records = sorted((r for r in results.runs if (r["agent"], r["seed"]) in order),
                     key=lambda r: order.index((r["agent"], r["seed"])))
    print()
    print("\n".join(report(records, args.agents, args.markdown)))
    print(f"\nSuccess: greedy, {args.eval_episodes} episodes per evaluation; final = at {args.steps:,} env steps. "
          "Train time: evaluations excluded. Peak RSS: each run's own process. Load: 1-minute average on "
          f"{os.cpu_count()} CPUs before / after each run.")
    print(harness.load_footer(began, load_start))
    if args.png:
        plot(records, args.agents, args.png, args.steps)
        print(f"curves written to {args.png}")
    if args.json and todo:
        print(f"records written to {args.json}")
    if not any(r["error"] for r in records):
        shutil.rmtree(args.run_root, ignore_errors=True)
    return records


if __name__ == "__main__":
    main()
