"""Actor throughput of the processes runner and the Ray runner, side by side, with the learner idle.

    python benchmarks/bench_runners.py                 # 2 actors x 2 envs, 20k env steps per run, 2 rounds
    python benchmarks/bench_runners.py --quick         # smoke run
    python benchmarks/bench_runners.py --markdown --actors 1 2

Both pools run the same acting code and hand windows to a Trainer that only adds them to replay, so
the table compares transports. Env steps/s count from the first experience that arrives; rounds
alternate the runners (ABBA). Method: benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from pathlib import Path

from harness import REPO_ROOT, idle_learner_run, load_footer, peak_rss_mb, start, table

CONFIG = REPO_ROOT / "configs" / "cartpole_pomdp.yaml"


def run_pool(runner: str, num_actors: int, envs_per_actor: int, steps: int, ray_cpus: int) -> dict:
    """One Trainer run (the loop users run) with an idle learner until ``steps`` env steps arrived after
    the first; return start-up seconds and env steps/s."""
    from r2d2kit.runners.callbacks import Callback

    marks: dict[str, float] = {}  # wall clock and env steps at the first arrival and at the end

    class Measure(Callback):
        def on_train_begin(self, trainer):
            marks["start"] = time.perf_counter()

        def on_step(self, trainer):
            env_steps = trainer.counters["env_steps"]
            if env_steps and "first" not in marks:
                marks.update(first=time.perf_counter(), first_steps=env_steps)
            if "first" in marks and env_steps - marks["first_steps"] >= steps:
                marks.update(end=time.perf_counter(), end_steps=env_steps)
                return False
            return None

    _, windows = idle_learner_run(CONFIG, [f"actors.runner={runner}", f"actors.num_actors={num_actors}",
                                           f"env.num_envs={envs_per_actor}", f"actors.ray_num_cpus={ray_cpus}",
                                           "run.total_env_steps=1000000000"], Measure())
    startup = marks["first"] - marks["start"]
    total, seconds = marks["end_steps"] - marks["first_steps"], marks["end"] - marks["first"]
    return {"runner": runner, "actors": num_actors, "envs": num_actors * envs_per_actor, "startup": startup,
            "steps_per_s": total / seconds, "windows": windows}


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actors", type=int, nargs="+", default=[2])
    parser.add_argument("--envs-per-actor", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--ray-cpus", type=int, default=os.cpu_count())
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.rounds = 3_000, 1
    print(f"command: python benchmarks/{Path(__file__).name} {' '.join(argv if argv is not None else sys.argv[1:])}")
    began, load_start = start(("numpy", "tensorflow", "keras", "gymnasium", "ray", "r2d2kit"))
    print(f"load average at start {load_start}; {args.steps:,} env steps per run after start-up, "
          f"{args.envs_per_actor} envs per actor, learner idle")
    rows = []
    for num_actors in args.actors:
        for round_index in range(args.rounds):
            order = ("processes", "ray") if round_index % 2 == 0 else ("ray", "processes")
            for runner in order:
                row = run_pool(runner, num_actors, args.envs_per_actor, args.steps, args.ray_cpus)
                row["round"] = round_index + 1
                rows.append(row)
                print(f"  {runner:9s} {num_actors} actors round {round_index + 1}: "
                      f"{row['steps_per_s']:,.0f} env steps/s "
                      f"(start-up {row['startup']:.1f} s)", flush=True)
    header = ["actors", "envs", "processes: env steps/s", "ray: env steps/s", "ray / processes",
              "start-up processes", "start-up ray"]
    body = []
    for num_actors in args.actors:
        mine = [r for r in rows if r["actors"] == num_actors]
        proc = statistics.median(r["steps_per_s"] for r in mine if r["runner"] == "processes")
        ray_ = statistics.median(r["steps_per_s"] for r in mine if r["runner"] == "ray")
        body.append([str(num_actors), str(mine[0]["envs"]), f"{proc:,.0f}", f"{ray_:,.0f}", f"{ray_ / proc:.2f}x",
                     f"{statistics.median(r['startup'] for r in mine if r['runner'] == 'processes'):.1f} s",
                     f"{statistics.median(r['startup'] for r in mine if r['runner'] == 'ray'):.1f} s"])
    print(table(header, body, args.markdown, left=0))
    print(f"(medians over {args.rounds} round(s))")
    own, child = peak_rss_mb(), resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"peak RSS: this process (the draining learner side) {own:,.0f} MB; the largest actor process it "
          f"reaped {child:,.0f} MB (Ray's workers are not its children and are not counted)")
    print(load_footer(began, load_start))
    return rows


if __name__ == "__main__":
    main()
