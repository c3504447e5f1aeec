"""Actor throughput of the processes runner and the Ray runner, side by side, with the learner idle.

    python benchmarks/bench_runners.py --quick         # smoke run (full: 2 actors x 2 envs, 20k env steps, 2 rounds)
    python benchmarks/bench_runners.py --markdown --actors 1 2

The same acting code in both pools: the table compares transports. Method: benchmarks/README.md.
"""

import resource
import statistics

import harness
from bench_actors import run_actors
from harness import table

ENVS_PER_ACTOR = 2


def main(argv: list[str] | None = None) -> list[dict]:
    parser = harness.arg_parser(__doc__, "quick", "markdown")
    parser.add_argument("--actors", type=int, nargs="+", default=[2], help="actor counts (default: 2)")
    parser.add_argument("--steps", type=int, default=20_000, help="env steps per run")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.rounds = 3_000, 1
    began, load_start = harness.start(("numpy", "tensorflow", "keras", "gymnasium", "ray", "r2d2kit"))
    print(f"load average at start {load_start}; {args.steps:,} env steps per run (timed from the first report), "
          f"{ENVS_PER_ACTOR} envs per actor, learner idle")
    rows = []
    for num_actors in args.actors:
        for round_index in range(args.rounds):
            for runner in ("processes", "ray") if round_index % 2 == 0 else ("ray", "processes"):
                rows.append(dict(run_actors(num_actors, ENVS_PER_ACTOR, args.steps, runner), round=round_index + 1))
                print(f"  {runner:9s} {num_actors} actors round {round_index + 1}: {rows[-1]['steps_per_s']:,.0f} env "
                      f"steps/s (start-up {rows[-1]['startup_s']:.1f} s)", flush=True)
    body = []
    for num_actors in args.actors:
        mine = [r for r in rows if r["actors"] == num_actors]
        rate, startup = ({runner: statistics.median(r[key] for r in mine if r["runner"] == runner)
                          for runner in ("processes", "ray")} for key in ("steps_per_s", "startup_s"))
        body.append([str(num_actors), str(mine[0]["envs"]), *(f"{rate[r]:,.0f}" for r in ("processes", "ray")),
                     f"{rate['ray'] / rate['processes']:.2f}x", *(f"{startup[r]:.1f} s" for r in ("processes", "ray"))])
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
