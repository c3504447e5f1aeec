"""Learning on BitFlip: r2d2kit's DQN+HER agent with and without HER, beside Stable-Baselines3 DQN + HER.

    python benchmarks/bench_her.py                    # n_bits 15, 30, 50: about 1.5 h on 2 CPU cores
    python benchmarks/bench_her.py --n-bits 15 30 --no-her-n-bits 15 --markdown    # 15/30 with SB3: ~30 min
    python benchmarks/bench_her.py --quick            # smoke run: n_bits 8, small budgets, about a minute
    python benchmarks/bench_her.py --n-bits 15 30 --sb3-n-bits 15 --seeds 1 --json her.json

Every run (a fresh subprocess each) is scored by the greedy success rate over 100 random-goal
episodes every ``eval_every`` env steps and stops at the first evaluation >= 0.95 or at its budget
of env steps or training seconds. Rows, settings and method: benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import harness
import numpy as np
from harness import REPO_ROOT, load_footer, load_module, run_script, start, table
from peers import PeerUnavailable

CONFIG = REPO_ROOT / "agents" / "her_dqn.yaml"
TARGET = 0.95
EVAL_EPISODES = 100

# per n_bits: evaluation period, budgets (env steps, training seconds) and seeds
FULL = {
    15: dict(eval_every=500, steps=30_000, seconds=120, no_her_steps=30_000, sb3_steps=30_000, seeds=(1, 2, 3)),
    30: dict(eval_every=1_000, steps=100_000, seconds=400, no_her_steps=50_000, sb3_steps=100_000, seeds=(1, 2, 3)),
    # the bound: 0.95 within 1M env steps and 45 minutes of training
    50: dict(eval_every=10_000, steps=1_000_000, seconds=2_700, no_her_steps=50_000, sb3_steps=200_000, seeds=(1,)),
}
QUICK = {8: dict(eval_every=250, steps=5_000, seconds=60, no_her_steps=2_000, sb3_steps=5_000, seeds=(1,))}
DEFAULT_BUDGET = dict(eval_every=2_500, steps=200_000, seconds=600, no_her_steps=50_000, sb3_steps=100_000,
                      seeds=(1,))
CHECKPOINTS = (1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 200_000, 400_000)


@dataclass
class Run:
    method: str
    n_bits: int
    seed: int
    curve: list[tuple[int, float]] = field(default_factory=list)  # [(env steps, greedy success)]
    steps_to_target: int | None = None
    seconds_to_target: float | None = None
    steps: int = 0  # env steps run
    train_seconds: float = 0.0  # evaluations left out
    wall_seconds: float = 0.0  # evaluations included
    budget: str = ""
    error: str | None = None
    peak_rss_mb: float = 0.0  # the worker process's own peak RSS (ru_maxrss)


# ---------------------------------------------------------------------------------------------
# r2d2kit: agents/her_dqn.py, imported by path (agents/ is a folder of scripts)


def run_r2d2kit(agent, n_bits: int, seed: int, her: bool, steps: int, seconds: float, eval_every: int) -> Run:
    method = "r2d2kit HER" if her else "r2d2kit no HER"
    argv = ["--config", str(CONFIG), "--n-bits", str(n_bits), "--seed", str(seed), "--total-steps", str(steps),
            "--max-seconds", str(seconds), "--eval-every", str(eval_every), "--eval-episodes", str(EVAL_EPISODES),
            "--success-target", str(TARGET), "--stop-at-target", "--her" if her else "--no-her", "--no-progress"]
    start = time.perf_counter()
    m = agent.main(argv)
    wall = time.perf_counter() - start
    m.pop("buffer", None)
    return Run(method, n_bits, seed, [(int(s), float(v)) for s, v in m["eval_curve"]], m["steps_to_target"],
               m["seconds_to_target"], m["global_step"], m["train_seconds"], wall, f"{steps:,} steps / {seconds:.0f} s")


# ---------------------------------------------------------------------------------------------
# Stable-Baselines3 DQN + HerReplayBuffer (benchmark-only peer)


def load_sb3():
    try:
        import stable_baselines3
        import torch  # noqa: F401
        from stable_baselines3 import DQN, HerReplayBuffer
        from stable_baselines3.common.callbacks import BaseCallback
    except Exception as error:  # noqa: BLE001 - any import failure makes the peer unavailable
        raise PeerUnavailable(f"{type(error).__name__}: {error}".splitlines()[0][:110]) from error
    return stable_baselines3, DQN, HerReplayBuffer, BaseCallback


def run_sb3(agent, n_bits: int, seed: int, steps: int, seconds: float, eval_every: int, threads: int) -> Run:
    import gymnasium as gym
    import torch

    _, DQN, HerReplayBuffer, BaseCallback = load_sb3()
    torch.set_num_threads(threads)
    run = Run("SB3 HER", n_bits, seed, budget=f"{steps:,} steps / {seconds:.0f} s")
    eval_envs = agent.make_eval_envs(n_bits, EVAL_EPISODES, seed + 10_000)  # the r2d2kit agent's goals

    class EvalCallback(BaseCallback):
        """Greedy evaluation every eval_every env steps, its time left out; stops at the target or budget."""

        def __init__(self, start: float) -> None:
            super().__init__()
            self.start, self.eval_seconds = start, 0.0

        def _policy(self, obs: dict[str, np.ndarray]) -> np.ndarray:
            return self.model.predict(obs, deterministic=True)[0]

        def _on_step(self) -> bool:
            train_seconds = time.perf_counter() - self.start - self.eval_seconds
            out_of_time = train_seconds >= seconds
            if self.num_timesteps % eval_every and not out_of_time and self.num_timesteps < steps:
                return True
            eval_start = time.perf_counter()
            success = agent.evaluate(eval_envs, self._policy)
            self.eval_seconds += time.perf_counter() - eval_start
            run.curve.append((self.num_timesteps, success))
            run.steps, run.train_seconds = self.num_timesteps, train_seconds
            if success >= TARGET:
                run.steps_to_target, run.seconds_to_target = self.num_timesteps, train_seconds
                return False
            return not out_of_time

    start = time.perf_counter()
    env = gym.make("BitFlip-v0", n_bits=n_bits)
    model = DQN("MultiInputPolicy", env, replay_buffer_class=HerReplayBuffer,
                replay_buffer_kwargs=dict(n_sampled_goal=4, goal_selection_strategy="future"),
                policy_kwargs=dict(net_arch=[256, 256]), batch_size=256, gamma=0.95, learning_rate=5e-4,
                train_freq=1, gradient_steps=1, learning_starts=100, target_update_interval=500,
                exploration_fraction=min(1.0, 2_000 / steps), exploration_final_eps=0.02,
                buffer_size=max(steps, 10_000), seed=seed, device="cpu")
    model.learn(total_timesteps=steps, callback=EvalCallback(start))
    run.wall_seconds = time.perf_counter() - start
    env.close()
    eval_envs.close()
    return run


# ---------------------------------------------------------------------------------------------
# table


def fmt_steps(steps: float | None) -> str:
    if steps is None:
        return "not reached"
    return f"{steps / 1000:.1f}k" if steps < 100_000 else f"{steps / 1000:.0f}k"


def success_at(run: Run, checkpoint: int) -> float | str | None:
    """Greedy success of the last evaluation at or before ``checkpoint``; 'done' after a stop at the target."""
    if run.steps_to_target is not None and checkpoint > run.steps_to_target:
        return "done"
    if checkpoint > run.steps:
        return None
    values = [v for s, v in run.curve if s <= checkpoint]
    return values[-1] if values else 0.0


def summarise(runs: list[Run], checkpoints: list[int]) -> list[str]:
    """One table row for the seeds of one (n_bits, method): means of successes, medians of steps and times."""
    first = runs[0]
    if first.error:
        return [str(first.n_bits), first.method] + ["n/a"] * (len(checkpoints) + 4)
    cells = [str(first.n_bits), first.method]
    for c in checkpoints:
        values = [success_at(r, c) for r in runs]
        if all(v == "done" for v in values):
            cells.append("done")
        elif any(v is None for v in values):
            cells.append("")
        else:
            numbers = [1.0 if v == "done" else v for v in values]  # a seed already past the target counts 1
            cells.append(f"{np.mean(numbers):.2f}")
    reached = [r for r in runs if r.steps_to_target is not None]
    seeds = len(runs)
    if reached:
        steps = statistics.median(r.steps_to_target for r in reached)
        secs = statistics.median(r.seconds_to_target for r in reached)
        spread = "" if seeds == 1 else (f" ({fmt_steps(min(r.steps_to_target for r in reached))}-"
                                        f"{fmt_steps(max(r.steps_to_target for r in reached))})")
        cells.append(fmt_steps(steps) + spread + ("" if len(reached) == seeds else f" [{len(reached)}/{seeds}]"))
        tspread = "" if seeds == 1 else (f" ({min(r.seconds_to_target for r in reached):.1f}-"
                                         f"{max(r.seconds_to_target for r in reached):.1f})")
        cells.append(f"{secs:.1f}{tspread}")
    else:
        cells += ["not reached", "-"]
    final = [r.curve[-1][1] if r.curve else 0.0 for r in runs]
    cells.append(f"{np.mean(final):.2f}")
    cells.append(f"{fmt_steps(statistics.median(r.steps for r in runs))} / "
                 f"{statistics.median(r.train_seconds for r in runs):.0f} s  "
                 f"(seeds {','.join(str(r.seed) for r in runs)})")
    cells.append(f"{max(r.peak_rss_mb for r in runs):,.0f} MB")
    return cells


def her_table(rows: list[list[str]], checkpoints: list[int], markdown: bool) -> str:
    header = (["n_bits", "method"] + [f"@{fmt_steps(c)}" for c in checkpoints]
              + [f"env steps to {TARGET}", f"train s to {TARGET}", "last success", "ran (steps / train s, seeds)",
                 "peak RSS"])
    return table(header, rows, markdown, left=2)


def run_job(job: dict[str, Any]) -> Run:
    """One run in a fresh interpreter (``--worker``): TensorFlow and torch never share a process."""
    result = run_script(__file__, ["--worker", json.dumps(job)], quiet=True)
    if "run" not in result:
        return Run(job["method"], job["n_bits"], job["seed"], error=f"worker {result['error'][:140]}")
    return Run(**dict(result["run"], peak_rss_mb=result["peak_rss_mb"]))  # the worker's own peak RSS


def worker(job: dict[str, Any], out: str) -> None:
    """Run one job in this process and write its result to ``out``."""
    agent = load_module(REPO_ROOT / "agents" / "her_dqn.py", "agents_her_dqn")
    if job["method"] == "SB3 HER":
        try:
            run = run_sb3(agent, job["n_bits"], job["seed"], job["steps"], job["seconds"], job["eval_every"],
                          job["torch_threads"])
        except PeerUnavailable as error:
            run = Run(job["method"], job["n_bits"], job["seed"], error=str(error))
    else:
        run = run_r2d2kit(agent, job["n_bits"], job["seed"], job["method"] == "r2d2kit HER", job["steps"],
                          job["seconds"], job["eval_every"])
    harness.write_child_result(out, {"run": asdict(run)})


DISTS = ("numpy", "numba", "tensorflow", "keras", "gymnasium", "torch", "stable-baselines3")


def main(argv: list[str] | None = None) -> list[Run]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)  # internal: one run, JSON in and out
    parser.add_argument("--child-out", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="smoke run: n_bits 8, small budgets")
    parser.add_argument("--markdown", action="store_true", help="print the table as markdown")
    parser.add_argument("--n-bits", type=int, nargs="+", default=None, help="default: 15 30 50 (--quick: 8)")
    parser.add_argument("--sb3-n-bits", type=int, nargs="*", default=None,
                        help="n_bits with an SB3 row (default: 15 30; --quick: 8); none: no SB3 rows")
    parser.add_argument("--no-her-n-bits", type=int, nargs="*", default=None,
                        help="n_bits with an r2d2kit no-HER row (default: all)")
    parser.add_argument("--seeds", type=int, default=None, help="seeds per row for every n_bits "
                        "(default: 3 at n_bits 15 and 30, 1 at 50)")
    parser.add_argument("--budget-scale", type=float, default=1.0, help="multiply every step and time budget")
    parser.add_argument("--torch-threads", type=int, default=1,
                        help="torch intra-op threads for SB3 (2 collapsed under this machine's background load)")
    parser.add_argument("--json", default=None, help="also write every run's curve and timings here")
    args = parser.parse_args(argv)
    if args.worker:
        worker(json.loads(args.worker), args.child_out)
        return []
    budgets = QUICK if args.quick else FULL
    n_bits_list = args.n_bits or list(budgets)
    sb3_bits = set(args.sb3_n_bits if args.sb3_n_bits is not None else ([8] if args.quick else [15, 30]))
    no_her_bits = set(args.no_her_n_bits if args.no_her_n_bits is not None else n_bits_list)

    began, load_start = start(DISTS)
    print(f"load average at start: {load_start}; config {CONFIG.relative_to(REPO_ROOT)}; "
          f"{EVAL_EPISODES} greedy eval episodes per point; target {TARGET}; threads: TensorFlow default (2), "
          f"torch {args.torch_threads}")
    sb3_note = None if importlib.util.find_spec("stable_baselines3") else "stable-baselines3 is not installed"

    runs: list[Run] = []
    groups: dict[tuple[int, str], list[Run]] = {}
    for n_bits in n_bits_list:
        b = dict(budgets.get(n_bits, DEFAULT_BUDGET))
        seeds = tuple(range(1, args.seeds + 1)) if args.seeds else b["seeds"]
        scale = args.budget_scale
        steps, seconds = int(b["steps"] * scale), b["seconds"] * scale
        for seed in seeds:  # interleaved, so that drift in machine load hits every method alike
            jobs = [dict(method="r2d2kit HER", steps=steps)]
            if n_bits in sb3_bits:
                jobs.append(dict(method="SB3 HER", steps=int(b["sb3_steps"] * scale)))
            if n_bits in no_her_bits and seed == seeds[0]:  # one seed: it stays near 0
                jobs.append(dict(method="r2d2kit no HER", steps=int(b["no_her_steps"] * scale)))
            for job in jobs:
                job.update(n_bits=n_bits, seed=seed, seconds=seconds, eval_every=b["eval_every"],
                           torch_threads=args.torch_threads)
                if job["method"] == "SB3 HER" and sb3_note:
                    run = Run(job["method"], n_bits, seed, error=sb3_note)
                else:
                    run = run_job(job)
                runs.append(run)
                groups.setdefault((n_bits, run.method), []).append(run)
                print(f"  n_bits={n_bits} {run.method} seed {seed}: "
                      + (f"n/a ({run.error})" if run.error else
                         (f"{TARGET} at {fmt_steps(run.steps_to_target)} env steps, {run.seconds_to_target:.1f} s; "
                          if run.steps_to_target is not None else f"{TARGET} not reached; ")
                         + f"ran {run.steps:,} steps, {run.train_seconds:.1f} s train, {run.wall_seconds:.1f} s wall"),
                      flush=True)

    max_steps = max((r.steps for r in runs if not r.error), default=0)
    checkpoints = [c for c in CHECKPOINTS if c <= max_steps] or [CHECKPOINTS[0]]
    order = {"r2d2kit HER": 0, "SB3 HER": 1, "r2d2kit no HER": 2}
    rows = [summarise(group, checkpoints) for _, group in sorted(groups.items(), key=lambda kv: (kv[0][0],
                                                                                                order[kv[0][1]]))]
    print()
    print(her_table(rows, checkpoints, args.markdown))
    print(f"\nCells @N: greedy success over {EVAL_EPISODES} random-goal episodes at N env steps (mean over seeds); "
          f"'done': stopped after reaching {TARGET} earlier; empty: beyond the run's budget. Steps and seconds to "
          f"{TARGET}: median over seeds (min-max); [k/n]: seeds that reached it. Seconds: training wall time, "
          f"evaluations excluded.")
    for n_bits in n_bits_list:
        ours = groups.get((n_bits, "r2d2kit HER"), [])
        peer = groups.get((n_bits, "SB3 HER"), [])
        if ours and peer and not peer[0].error:
            a = [r.seconds_to_target for r in ours if r.seconds_to_target is not None]
            p = [r.seconds_to_target for r in peer if r.seconds_to_target is not None]
            if a and p:
                print(f"n_bits={n_bits}: SB3 / r2d2kit wall time to {TARGET} = "
                      f"{statistics.median(p) / statistics.median(a):.2f} (median seconds {statistics.median(p):.1f} "
                      f"vs {statistics.median(a):.1f})")
    if sb3_note:
        print(f"note: SB3 rows n/a: {sb3_note}")
    print(load_footer(began, load_start))
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in runs], indent=1))
    return runs


if __name__ == "__main__":
    main()
