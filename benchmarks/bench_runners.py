"""Actor throughput of the processes runner and the Ray runner, side by side, with the learner idle.

    python benchmarks/bench_runners.py --quick         # smoke run (full: 2 actors x 2 envs, 20k env steps, 2 rounds)
    python benchmarks/bench_runners.py --markdown --actors 1 2

Both pools run the same acting code and hand windows to a Trainer that only adds them to replay, so
the table compares transports; env steps/s count from the first experience that arrives, and rounds
alternate the runners (ABBA). Method: benchmarks/README.md.
"""

from __future__ import annotations

import os
import resource
import statistics
import time

import harness
from harness import REPO_ROOT, table

CONFIG = REPO_ROOT / "configs" / "cartpole_pomdp.yaml"
ENVS_PER_ACTOR = 2


def run_pool(runner: str, num_actors: int, steps: int) -> dict:
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

    _, windows = harness.idle_learner_run(CONFIG, [
        f"actors.runner={runner}", f"actors.num_actors={num_actors}", f"env.num_envs={ENVS_PER_ACTOR}",
        f"actors.ray_num_cpus={os.cpu_count()}", "run.total_env_steps=1000000000"], Measure())
    startup = marks["first"] - marks["start"]
    total, seconds = marks["end_steps"] - marks["first_steps"], marks["end"] - marks["first"]
    return {"runner": runner, "actors": num_actors, "envs": num_actors * ENVS_PER_ACTOR, "startup": startup,
            "steps_per_s": total / seconds, "windows": windows}


def main(argv: list[str] | None = None) -> list[dict]:
    parser = harness.arg_parser(__doc__, "quick", "markdown")
    parser.add_argument("--actors", type=int, nargs="+", default=[2], help="actor counts (default: 2)")
    parser.add_argument("--steps", type=int, default=20_000, help="env steps per run after start-up")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.rounds = 3_000, 1
    began, load_start = harness.start(("numpy", "tensorflow", "keras", "gymnasium", "ray", "r2d2kit"))
    print(f"load average at start {load_start}; {args.steps:,} env steps per run after start-up, "
          f"{ENVS_PER_ACTOR} envs per actor, learner idle")
    rows = []
    for num_actors in args.actors:
        for round_index in range(args.rounds):
            for runner in ("processes", "ray") if round_index % 2 == 0 else ("ray", "processes"):
                rows.append(dict(run_pool(runner, num_actors, args.steps), round=round_index + 1))
                print(f"  {runner:9s} {num_actors} actors round {round_index + 1}: {rows[-1]['steps_per_s']:,.0f} env "
                      f"steps/s (start-up {rows[-1]['startup']:.1f} s)", flush=True)
    body = []
    for num_actors in args.actors:
        mine = [r for r in rows if r["actors"] == num_actors]
        rate, startup = ({runner: statistics.median(r[key] for r in mine if r["runner"] == runner)
                          for runner in ("processes", "ray")} for key in ("steps_per_s", "startup"))
        body.append([str(num_actors), str(mine[0]["envs"]), f"{rate['processes']:,.0f}", f"{rate['ray']:,.0f}",
                     f"{rate['ray'] / rate['processes']:.2f}x", f"{startup['processes']:.1f} s",
                     f"{startup['ray']:.1f} s"])
    print(table(["actors", "envs", "processes: env steps/s", "ray: env steps/s", "ray / processes",
                 "start-up processes", "start-up ray"], body, args.markdown, left=0))
    print(f"(medians over {args.rounds} round(s))")
    own, child = harness.peak_rss_mb(), resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"peak RSS: this process (the draining learner side) {own:,.0f} MB; the largest actor process it "
          f"reaped {child:,.0f} MB (Ray's workers are not its children and are not counted)")
    print(harness.load_footer(began, load_start))
    return rows


if __name__ == "__main__":
    main()
