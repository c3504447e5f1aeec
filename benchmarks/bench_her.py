"""Learning on BitFlip: r2d2kit's DQN+HER agent with and without HER, beside Stable-Baselines3 DQN + HER.

    python benchmarks/bench_her.py                    # n_bits 15, 30, 50: about 1.5 h on 2 CPU cores
    python benchmarks/bench_her.py --quick            # smoke run: n_bits 8, small budgets, about a minute
    python benchmarks/bench_her.py --n-bits 15 30 --sb3-n-bits 15 --seeds 1 --json her.json --markdown

Each run stops at the first greedy success rate >= 0.95 or at its budget. Method: benchmarks/README.md.
"""

import statistics
import time
from dataclasses import asdict, dataclass, field

import harness
import numpy as np
from harness import REPO_ROOT, table

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


# --- the runs: r2d2kit's agents/her_dqn.py (imported by path: agents/ is a folder of scripts), SB3 DQN + HER
def run_r2d2kit(agent, n_bits: int, seed: int, her: bool, steps: int, seconds: float, eval_every: int) -> Run:
    argv = ["--config", str(CONFIG), "--n-bits", str(n_bits), "--seed", str(seed), "--total-steps", str(steps),
            "--max-seconds", str(seconds), "--eval-every", str(eval_every), "--eval-episodes", str(EVAL_EPISODES),
            "--success-target", str(TARGET), "--stop-at-target", "--her" if her else "--no-her", "--no-progress"]
    start = time.perf_counter()
    m = agent.main(argv)
    curve = [(int(s), float(v)) for s, v in m["eval_curve"]]
    return Run("r2d2kit HER" if her else "r2d2kit no HER", n_bits, seed, curve, m["steps_to_target"],
               m["seconds_to_target"], m["global_step"], m["train_seconds"], time.perf_counter() - start,
               f"{steps:,} steps / {seconds:.0f} s")


def run_sb3(agent, n_bits: int, seed: int, steps: int, seconds: float, eval_every: int, threads: int) -> Run:
    """SB3's DQN + HerReplayBuffer (a benchmark-only peer) on r2d2kit's BitFlip-v0 and evaluation goals."""
    import gymnasium as gym
    import torch
    from stable_baselines3 import DQN, HerReplayBuffer
    from stable_baselines3.common.callbacks import BaseCallback

    torch.set_num_threads(threads)
    run = Run("SB3 HER", n_bits, seed, budget=f"{steps:,} steps / {seconds:.0f} s")
    eval_envs = agent.make_eval_envs(n_bits, EVAL_EPISODES, seed + 10_000)  # the r2d2kit agent's goals

    class EvalCallback(BaseCallback):
        """Greedy evaluation every eval_every env steps, its time left out; stops at the target or budget."""

        def __init__(self, start: float) -> None:
            super().__init__()
            self.start, self.eval_seconds = start, 0.0

        def _on_step(self) -> bool:
            train_seconds = time.perf_counter() - self.start - self.eval_seconds
            out_of_time = train_seconds >= seconds
            if self.num_timesteps % eval_every and not out_of_time and self.num_timesteps < steps:
                return True
            eval_start = time.perf_counter()
            success = agent.evaluate(eval_envs, lambda obs: self.model.predict(obs, deterministic=True)[0])
            self.eval_seconds += time.perf_counter() - eval_start
            run.curve.append((self.num_timesteps, success))
            run.steps, run.train_seconds = self.num_timesteps, train_seconds
            if success >= TARGET:
                run.steps_to_target, run.seconds_to_target = self.num_timesteps, train_seconds
                return False
            return not out_of_time

    start = time.perf_counter()
    env = gym.make("BitFlip-v0", n_bits=n_bits)
    model = DQN("MultiInputPolicy", env, replay_buffer_class=HerReplayBuffer, policy_kwargs=dict(net_arch=[256, 256]),
                replay_buffer_kwargs=dict(n_sampled_goal=4, goal_selection_strategy="future"), batch_size=256,
                gamma=0.95, learning_rate=5e-4, train_freq=1, gradient_steps=1, learning_starts=100,
                target_update_interval=500, exploration_fraction=min(1.0, 2_000 / steps), exploration_final_eps=0.02,
                buffer_size=max(steps, 10_000), seed=seed, device="cpu")
    model.learn(total_timesteps=steps, callback=EvalCallback(start))
    run.wall_seconds = time.perf_counter() - start
    env.close()
    eval_envs.close()
    return run


def worker(job: dict) -> dict:
    """One run in this process (a fresh interpreter: TensorFlow and torch never share a process)."""
    agent = harness.load_module(REPO_ROOT / "agents" / "her_dqn.py", "agents_her_dqn")
    args = (agent, job["n_bits"], job["seed"])
    try:
        run = (run_sb3(*args, job["steps"], job["seconds"], job["eval_every"], job["torch_threads"])
               if job["method"] == "SB3 HER" else
               run_r2d2kit(*args, job["method"] == "r2d2kit HER", job["steps"], job["seconds"], job["eval_every"]))
    except ImportError as error:  # SB3 not installed
        run = Run(job["method"], job["n_bits"], job["seed"], error=f"{type(error).__name__}: {error}"[:110])
    return {"run": asdict(run)}


# --- table
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
    cells = [str(runs[0].n_bits), runs[0].method]
    if runs[0].error:
        return cells + ["n/a"] * (len(checkpoints) + 5)
    for c in checkpoints:
        values = [success_at(r, c) for r in runs]
        if all(v == "done" for v in values):
            cells.append("done")
        elif any(v is None for v in values):
            cells.append("")
        else:
            numbers = [1.0 if v == "done" else v for v in values]  # a seed already past the target counts 1
            cells.append(f"{np.mean(numbers):.2f}")
    reached, seeds = [r for r in runs if r.steps_to_target is not None], len(runs)
    if reached:
        steps, secs = ([r.steps_to_target for r in reached], [r.seconds_to_target for r in reached])
        cells += [fmt_steps(statistics.median(steps)) + ("" if seeds == 1 else f" ({fmt_steps(min(steps))}-"
                  f"{fmt_steps(max(steps))})") + ("" if len(reached) == seeds else f" [{len(reached)}/{seeds}]"),
                  f"{statistics.median(secs):.1f}" + ("" if seeds == 1 else f" ({min(secs):.1f}-{max(secs):.1f})")]
    else:
        cells += ["not reached", "-"]
    return cells + [f"{np.mean([r.curve[-1][1] if r.curve else 0.0 for r in runs]):.2f}",
                    f"{fmt_steps(statistics.median(r.steps for r in runs))} / "
                    f"{statistics.median(r.train_seconds for r in runs):.0f} s  "
                    f"(seeds {','.join(str(r.seed) for r in runs)})", f"{max(r.peak_rss_mb for r in runs):,.0f} MB"]


DISTS = ("numpy", "numba", "tensorflow", "keras", "gymnasium", "torch", "stable-baselines3")


def main(argv: list[str] | None = None) -> list[Run]:
    harness.serve_job(worker)
    parser = harness.arg_parser(__doc__, "quick", "markdown", "json", "torch-threads")
    parser.add_argument("--n-bits", type=int, nargs="+", default=None, help="default: 15 30 50 (--quick: 8)")
    parser.add_argument("--sb3-n-bits", type=int, nargs="*", default=None,
                        help="n_bits with an SB3 row (default: 15 30; --quick: 8); none: no SB3 rows")
    parser.add_argument("--no-her-n-bits", type=int, nargs="*", default=None,
                        help="n_bits with an r2d2kit no-HER row (default: all)")
    parser.add_argument("--seeds", type=int, default=None, help="seeds per row for every n_bits "
                        "(default: 3 at n_bits 15 and 30, 1 at 50)")
    args = parser.parse_args(argv)
    budgets = QUICK if args.quick else FULL
    n_bits_list = args.n_bits or list(budgets)
    sb3_bits = set(args.sb3_n_bits if args.sb3_n_bits is not None else ([8] if args.quick else [15, 30]))
    no_her_bits = set(args.no_her_n_bits if args.no_her_n_bits is not None else n_bits_list)

    began, load_start = harness.start(DISTS)
    print(f"load average at start: {load_start}; config {CONFIG.relative_to(REPO_ROOT)}; {EVAL_EPISODES} greedy eval "
          f"episodes per point; target {TARGET}; threads: TensorFlow default (2), torch {args.torch_threads}")
    runs: list[Run] = []
    for n_bits in n_bits_list:
        b = budgets.get(n_bits, DEFAULT_BUDGET)
        seeds = tuple(range(1, args.seeds + 1)) if args.seeds else b["seeds"]
        for seed in seeds:  # interleaved, so that drift in machine load hits every method alike
            jobs = [dict(method="r2d2kit HER", steps=b["steps"])]
            jobs += [dict(method="SB3 HER", steps=b["sb3_steps"])] if n_bits in sb3_bits else []
            if n_bits in no_her_bits and seed == seeds[0]:  # one seed: it stays near 0
                jobs.append(dict(method="r2d2kit no HER", steps=b["no_her_steps"]))
            for job in jobs:
                job.update(n_bits=n_bits, seed=seed, seconds=b["seconds"], eval_every=b["eval_every"],
                           torch_threads=args.torch_threads)
                result = harness.run_job(__file__, job, quiet=True)  # with that process's own peak RSS
                runs.append(run := Run(**dict(result["run"], peak_rss_mb=result["peak_rss_mb"])) if "run" in result
                            else Run(job["method"], n_bits, seed, error=f"worker {result['error'][:140]}"))
                reached = (f"{TARGET} at {fmt_steps(run.steps_to_target)} env steps, {run.seconds_to_target:.1f} s; "
                           if run.steps_to_target is not None else f"{TARGET} not reached; ")
                print(f"  n_bits={n_bits} {run.method} seed {seed}: " + (f"n/a ({run.error})" if run.error else reached
                      + f"ran {run.steps:,} steps, {run.train_seconds:.1f} s train, {run.wall_seconds:.1f} s wall"),
                      flush=True)

    max_steps = max((r.steps for r in runs if not r.error), default=0)
    checkpoints = [c for c in CHECKPOINTS if c <= max_steps] or [CHECKPOINTS[0]]
    order = {"r2d2kit HER": 0, "SB3 HER": 1, "r2d2kit no HER": 2}
    groups: dict[tuple[int, str], list[Run]] = {}
    for run in sorted(runs, key=lambda r: (r.n_bits, order[r.method])):
        groups.setdefault((run.n_bits, run.method), []).append(run)
    header = (["n_bits", "method"] + [f"@{fmt_steps(c)}" for c in checkpoints] + [
        f"env steps to {TARGET}", f"train s to {TARGET}", "last success", "ran (steps / train s, seeds)", "peak RSS"])
    print("\n" + table(header, [summarise(group, checkpoints) for group in groups.values()], args.markdown, left=2))
    print(f"\nCells @N: greedy success over {EVAL_EPISODES} random-goal episodes at N env steps (mean over seeds); "
          f"'done': stopped after reaching {TARGET} earlier; empty: beyond the run's budget. Steps and seconds to "
          f"{TARGET}: median over seeds (min-max); [k/n]: seeds that reached it. Seconds: training wall time, "
          f"evaluations excluded.")
    for n_bits in n_bits_list:
        ours = [r.seconds_to_target for r in groups.get((n_bits, "r2d2kit HER"), []) if r.seconds_to_target is not None]
        peer = [r.seconds_to_target for r in groups.get((n_bits, "SB3 HER"), []) if r.seconds_to_target is not None]
        if ours and peer:
            print(f"n_bits={n_bits}: SB3 / r2d2kit wall time to {TARGET} = "
                  f"{statistics.median(peer) / statistics.median(ours):.2f} (median seconds "
                  f"{statistics.median(peer):.1f} vs {statistics.median(ours):.1f})")
    print(harness.load_footer(began, load_start))
    harness.write_json(args.json, [asdict(r) for r in runs])
    return runs


if __name__ == "__main__":
    main()
