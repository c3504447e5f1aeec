"""Memory and hindsight on PointMassGoal-v0: R2D2 + recurrent HER, R2D2 without HER, feed-forward DQN + HER.

    python benchmarks/bench_goal_pomdp.py --json goal.json --png goal.png --markdown  # 3 agents x seeds 0 1 2
    python benchmarks/bench_goal_pomdp.py --json goal.json --resume   # only the (agent, seed) runs not in goal.json
    python benchmarks/bench_goal_pomdp.py --quick               # smoke run: seed 0, 3k env steps, about a minute

Scores the greedy success rate every ``--eval-every`` env steps. Task, agents, method: benchmarks/README.md.
"""

import os
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
DISTS = ("numpy", "numba", "tensorflow", "keras", "gymnasium")


# --- one run = one subprocess
def child(job: dict) -> dict[str, Any]:
    """One (agent, seed) run: its curve [(env steps, success)] and costs (``replay.her=null`` after ``--set``)."""
    seed, steps, every, episodes = job["seed"], job["steps"], job["eval_every"], job["eval_episodes"]
    if job["agent"] == "dqn-her":  # its default settings, no early stop
        agent = harness.load_module(REPO_ROOT / "agents" / "her_dqn.py", "agents_her_dqn")
        m = agent.main(["--env-id", ENV_ID, "--seed", str(seed), "--total-steps", str(steps), "--eval-every",
                        str(every), "--eval-episodes", str(episodes), "--no-stop-at-target", "--no-progress"])
        return dict(curve=[(int(s), float(v)) for s, v in m["eval_curve"]], train_seconds=m["train_seconds"],
                    env_steps=m["global_step"], updates=m["train_steps"])
    evaluations = harness.evaluation_callback("  {steps:>7,} env steps: success {success:.2f}, {seconds:.0f} s")
    _, summary, _ = harness.fit(CONFIG, [
        f"run.seed={seed}", f"run.total_env_steps={steps}", f"run.eval_every={every}", f"run.eval_episodes={episodes}",
        *job["overrides"], *([] if job["agent"] == "r2d2-her" else ["replay.her=null"])], [evaluations])
    return dict(curve=[(row[0], row[5]) for row in evaluations.rows], train_seconds=summary["train_seconds"],
                env_steps=summary["env_steps"], updates=summary["updates"])


# --- measures, tables, plot
def first_at(curve: list[tuple[int, float]], level: float) -> int | None:
    """Env steps of the first evaluation with success >= ``level``, or None."""
    return next((steps for steps, success in curve if success >= level), None)


def mean_std(values: list[float], digits: int = 2) -> str:
    """``mean ± std`` over seeds (sample std, ddof 1; one value: the value)."""
    if len(values) < 2:
        return f"{values[0]:.{digits}f}" if values else "-"
    return f"{np.mean(values):.{digits}f} ± {np.std(values, ddof=1):.{digits}f}"


def fmt_steps(steps: int | None) -> str:
    return "never" if steps is None else f"{steps / 1000:g}k"


def report(records: list[dict[str, Any]], agents: list[str], markdown: bool) -> list[str]:
    """The per-run table, the per-agent table (mean ± std over seeds) and the target lines."""
    rows = []
    for r in records:
        curve = r.get("curve") or []
        cells = ["n/a"] * 4 if r["error"] else [f"{curve[-1][1]:.2f}", f"{max(s for _, s in curve):.2f}",
                                                fmt_steps(first_at(curve, TARGET)), f"{r['train_seconds']:.0f} s"]
        rows.append([AGENTS[r["agent"]], str(r["seed"]), *cells, f"{r['wall_seconds']:.0f} s",
                     f"{r['peak_rss_mb']:,} MB", f"{r['load_before']:.1f} / {r['load_after']:.1f}"])
    lines = ["per run:", table(["agent", "seed", "final success", "best success", f"first >= {TARGET}", "train time",
                                "wall", "peak RSS", "load before / after"], rows, markdown)]
    errors = [f"- {AGENTS[r['agent']]} seed {r['seed']} failed: {r['error']}" for r in records if r["error"]]
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
        test, bound, met = (">=", TARGET, mean >= TARGET) if agent == "r2d2-her" else ("<=", CEILING, mean <= CEILING)
        lines.append(f"- {AGENTS[agent]}: {mean:.2f} {test} {bound}? {'yes' if met else 'NO'} {seeds}")
    return lines


def plot(records: list[dict[str, Any]], agents: list[str], path: str, steps: int) -> None:
    """Success-rate curves: per agent the mean over seeds, with the band from the lowest to the highest seed."""
    finished = [r for r in records if not r["error"]]
    curves = {AGENTS[agent]: [r["curve"] for r in finished if r["agent"] == agent] for agent in agents}
    harness.panel_plot(path, {ENV_ID: curves}, f"mean over seeds, band min-max ({steps:,} env steps)",
                       "greedy success rate", {ENV_ID: [(TARGET, "--"), (CEILING, ":")]}, ylim=(-0.02, 1.02))


def parse_args(argv: list[str] | None = None):
    p = harness.arg_parser(__doc__, "quick", "markdown", "json", "resume", "png", "set", "seeds")
    p.add_argument("--agents", nargs="+", default=list(AGENTS), choices=list(AGENTS), help="agents to run")
    p.add_argument("--steps", type=int, default=None, help="env steps per run, every agent (default 100000; "
                   "--quick: 3000)")
    p.add_argument("--eval-every", type=int, default=None, help="env steps between evaluations (default 2000; "
                   "--quick: 1000); a multiple of 8 keeps R2D2's 8 envs on the same points as the DQN agent")
    p.add_argument("--eval-episodes", type=int, default=None, help="greedy episodes per evaluation, every agent "
                   "(default 50; --quick: 8)")
    args = p.parse_args(argv)
    for key, value in (QUICK if args.quick else FULL).items():
        setattr(args, key, value if getattr(args, key) is None else getattr(args, key))
    return args


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    harness.serve_job(child)
    args = parse_args(argv)
    began, load_start = harness.start(DISTS)
    print(f"{ENV_ID}: {args.steps:,} env steps per run; greedy success over {args.eval_episodes} episodes every "
          f"{args.eval_every:,} env steps; agents {', '.join(args.agents)}; seeds {' '.join(map(str, args.seeds))}; "
          f"R2D2 config {CONFIG.relative_to(REPO_ROOT)}" + (f" with {' '.join(args.set)}" if args.set else ""),
          flush=True)
    results = Results(args.json, lambda r: (r["agent"], r["seed"]), args.resume, lambda: dict(
        machine=harness.machine_line(DISTS), env_id=ENV_ID, target=TARGET, ceiling=CEILING))
    runs = [dict(agent=agent, seed=seed, steps=args.steps, eval_every=args.eval_every, eval_episodes=args.eval_episodes,
                 overrides=args.set if agent != "dqn-her" else [])
            for seed in args.seeds for agent in args.agents]  # seeds interleaved: drift hits all
    order, ran = [(run["agent"], run["seed"]) for run in runs], 0
    for run, result in harness.sweep(__file__, runs, results, lambda run: f"{run['agent']} seed {run['seed']}",
                                     before=lambda run: dict(run, load_before=round(harness.load_average(), 2)),
                                     quiet=True):
        ran += 1
        r = {**run, **result, "wall_seconds": round(result["wall_seconds"], 1),
             "peak_rss_mb": round(result["peak_rss_mb"]), "load_after": round(harness.load_average(), 2)}
        r["error"] = r.get("error") or (None if r["curve"] else "no evaluation was recorded")
        results.add(r)
        print(f"  {run['agent']} seed {run['seed']}: " + (f"FAILED ({r['error']})" if r["error"] else
              f"final success {r['curve'][-1][1]:.2f}, best {max(s for _, s in r['curve']):.2f}, first >= {TARGET} "
              f"at {fmt_steps(first_at(r['curve'], TARGET))}; train {r['train_seconds']:.0f} s")
              + f", wall {r['wall_seconds']:.0f} s, peak RSS {r['peak_rss_mb']:,} MB, "
              f"load {r['load_before']:.1f} -> {r['load_after']:.1f}", flush=True)
    records = sorted((r for r in results.runs if (r["agent"], r["seed"]) in order),
                     key=lambda r: order.index((r["agent"], r["seed"])))
    harness.finish("\n".join(report(records, args.agents, args.markdown)) + f"\n\nSuccess: greedy, "
                   f"{args.eval_episodes} episodes per evaluation; final = at {args.steps:,} env steps. Train time: "
                   "evaluations excluded. Peak RSS: each run's own process. Load: 1-minute average on "
                   f"{os.cpu_count()} CPUs before / after each run.", began, load_start, args.png,
                   lambda png: plot(records, args.agents, png, args.steps))
    if args.json and ran:
        print(f"records written to {args.json}")
    return records


if __name__ == "__main__":
    main()
