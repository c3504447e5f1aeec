"""Learning benchmark on CartPoleNoVel-v1: r2d2kit's R2D2 beside sb3-contrib's RecurrentPPO.

    python benchmarks/bench_r2d2_cartpole.py --markdown --out curve.png   # 100k env steps each, ~20-30 min
    python benchmarks/bench_r2d2_cartpole.py --quick            # smoke run: 10k steps, evals every 2.5k
    python benchmarks/bench_r2d2_cartpole.py --seeds 0,1,2 --without recurrent-ppo --stop-on-miss  # a screen

The target, per seed: a first greedy 10-episode mean >= 475 within 30k env steps, every later one >= 425.
Method and hyper-parameters: benchmarks/README.md.
"""

import harness
import numpy as np
from harness import REPO_ROOT, fmt, table

CONFIG = REPO_ROOT / "configs" / "cartpole_pomdp.yaml"
ENV_ID = "CartPoleNoVel-v1"
THRESHOLD = 475.0
TARGET_STEPS = 30_000
FLOOR = 425.0  # every evaluation after the first >= THRESHOLD must stay at or above it
PEERS = ("recurrent-ppo",)
DISTS = ("numpy", "tensorflow", "keras", "gymnasium", "r2d2kit", "torch", "stable_baselines3", "sb3_contrib")

# rl-baselines3-zoo hyperparams/ppo_lstm.yml, CartPoleNoVel-v1 (unchanged from zoo 1.x to rl-zoo3 2.9.2)
ZOO_RECURRENT_PPO = dict(normalize=True, n_envs=8, n_timesteps=100_000, policy="MlpLstmPolicy", n_steps=32,
                         batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20, ent_coef=0.0, clip_range="lin_0.2",
                         learning_rate="lin_0.001",
                         policy_kwargs="dict(ortho_init=False, activation_fn=nn.ReLU, lstm_hidden_size=64, "
                                       "enable_critic_lstm=True, net_arch=dict(pi=[64], vf=[64]))")


def curve_summary(evaluations: list, eval_every: int) -> dict:
    """First evaluation (env steps, mean, std, training seconds) >= THRESHOLD, whether every later one stays
    >= FLOOR, the lowest after it; ``first_due``: the multiple of ``eval_every`` it was due at (it may run later)."""
    first = next((i for i, e in enumerate(evaluations) if e[1] >= THRESHOLD), None)
    if first is None:
        return dict(first_steps=None, first_due=None, first_seconds=None, held=False, min_after=None)
    after = [e[1] for e in evaluations[first:]]
    steps = evaluations[first][0]
    return dict(first_steps=steps, first_due=steps // eval_every * eval_every, first_seconds=evaluations[first][3],
                held=min(after) >= FLOOR, min_after=min(after))


def target_reached(summary: dict) -> bool:
    """Whether the first evaluation >= THRESHOLD was due within TARGET_STEPS env steps."""
    return summary["first_due"] is not None and summary["first_due"] <= TARGET_STEPS


def target_met(summary: dict) -> bool:
    """The per-seed target: reached within TARGET_STEPS, and no later evaluation below FLOOR."""
    return target_reached(summary) and summary["held"]


def target_missed(evaluations: list, eval_every: int) -> bool:
    """Whether the evaluations so far already prove the target missed (later ones cannot change that)."""
    summary = curve_summary(evaluations, eval_every)
    if summary["first_steps"] is None:
        return bool(evaluations) and evaluations[-1][0] // eval_every * eval_every >= TARGET_STEPS
    return not target_met(summary)


def run_r2d2(overrides: list[str], steps: int, seed: int, eval_every: int, eval_episodes: int,
             stop_on_miss: bool = False, runner: str = "processes") -> dict:
    """One Trainer run of the config; ``runner`` ``local``: as many envs in this process as its actors have."""
    from r2d2kit.training.config import ConfigError, load_config

    try:
        settings = load_config(CONFIG, overrides)  # the trainer's own validation, --set included
    except ConfigError as error:
        raise SystemExit(f"config error: {error}") from None
    envs = settings.env.num_envs * (settings.actors.num_actors if settings.actors.runner != "local" else 1)
    line = "  r2d2kit {steps:>7,} env steps: eval {mean:6.1f} +- {std:5.1f}, {updates:,} updates, {seconds:.0f} s"
    evaluations = harness.evaluation_callback(line, lambda rows: stop_on_miss and target_missed(rows, eval_every))
    trainer, summary, _ = harness.fit(CONFIG, overrides + [
        f"actors.runner={runner}", f"run.total_env_steps={steps}", f"run.seed={seed}", f"run.eval_every={eval_every}",
        f"run.eval_episodes={eval_episodes}"] + ([f"env.num_envs={envs}"] if runner == "local" else []), [evaluations])
    return dict(name=f"r2d2kit R2D2 ({runner})", evaluations=evaluations.rows, env_steps=summary["env_steps"],
                train_seconds=summary["train_seconds"], updates=summary["updates"], config=trainer.config.to_dict(),
                stopped_at=summary["env_steps"] if summary["stopped_by"] != "run.total_env_steps" else None)


def run_ppo(steps: int, seed: int, eval_every: int, eval_episodes: int, torch_threads: int = 1) -> dict:
    """RecurrentPPO with the zoo's settings, VecNormalize included (its statistics normalise the evaluation)."""
    import gymnasium as gym
    import torch
    from stable_baselines3.common.utils import LinearSchedule

    import r2d2kit.envs  # noqa: F401  (registers CartPoleNoVel-v1)

    hp = ZOO_RECURRENT_PPO
    kwargs = {k: hp[k] for k in ("policy", "n_steps", "batch_size", "gae_lambda", "gamma", "n_epochs", "ent_coef")}
    kwargs.update(learning_rate=LinearSchedule(1e-3, 0.0, 1.0), clip_range=LinearSchedule(0.2, 0.0, 1.0),
                  policy_kwargs=dict(ortho_init=False, activation_fn=torch.nn.ReLU, lstm_hidden_size=64,
                                     enable_critic_lstm=True, net_arch=dict(pi=[64], vf=[64])))
    # the zoo passes the algorithm's gamma to VecNormalize; learn() ends with the rollout that passes the budget
    result = harness.run_sb3("RecurrentPPO", lambda: gym.make(ENV_ID), kwargs, seed=seed, steps=steps,
                                       eval_every=eval_every, eval_episodes=eval_episodes, n_envs=hp["n_envs"],
                                       torch_threads=torch_threads, normalize_gamma=hp["gamma"], stop_at_budget=False)
    return dict(result, name="sb3-contrib RecurrentPPO",
                config=dict(ZOO_RECURRENT_PPO, torch_threads=result.pop("torch_threads")))


# --- report
def report(results: list[dict], skipped: dict[str, str], markdown: bool, steps: int) -> str:
    curves = [{e[0]: e for e in r["evaluations"]} for r in results]  # one row per evaluation's env steps
    rows = [[f"{s:,}"] + [f"{c[s][1]:.1f} +- {c[s][2]:.1f} ({c[s][3]:.0f})" if s in c else "-" for c in curves]
            for s in sorted({s for c in curves for s in c})]
    header = ["env steps"] + [f"{r['name']} (wall s)" for r in results]
    lines = [table(header, rows, markdown, left=0), ""]
    header = ["agent", f"first eval >= {THRESHOLD:.0f} (env steps)", "wall time then", f"all later >= {FLOOR:.0f}",
              "lowest eval from then", "final eval", "training wall time", "env steps/s (training)",
              "updates/s (training)", "peak RSS (process so far)"]
    rows = []
    for r in results:
        s = r["summary"]
        rows.append([r["name"], fmt(s["first_steps"], ","), "-" if s["first_seconds"] is None else
                     f"{s['first_seconds']:.0f} s", "yes" if s["held"] else "no", fmt(s["min_after"], ".1f"),
                     f"{r['evaluations'][-1][1]:.1f}" if r["evaluations"] else "-", f"{r['train_seconds']:.0f} s",
                     f"{r['steps_per_s']:.0f}", f"{r['updates_per_s']:.0f}", f"{r.get('peak_rss_mb', 0):,.0f} MB"])
    lines += [table(header, rows, markdown), ""]
    for run in results:  # every agent is judged by the target, the peers too
        s = run["summary"]
        lines.append(f"- target ({run['name']}): first >= {THRESHOLD:.0f} within {TARGET_STEPS:,} env steps: "
                     f"{'met' if target_reached(s) else 'not met'} ({fmt(s['first_steps'], ',')}); every later "
                     f"evaluation to {steps:,} steps >= {FLOOR:.0f}: {'met' if s['held'] else 'not met'} "
                     f"(lowest from then: {fmt(s['min_after'], '.1f')})")
    for agent in dict.fromkeys(r["agent"] for r in results):
        runs = [r for r in results if r["agent"] == agent]
        if len(runs) > 1:
            met = sum(target_met(r["summary"]) for r in runs)
            verdict = "criterion met (every seed)" if met == len(runs) else "criterion missed"
            lines.append(f"- {agent}: target met (reached in time, floor held) on {met} of {len(runs)} seeds: "
                         f"{verdict}")
    for r in results:
        lines.append(f"- {r['name']}: {r['updates']:,} gradient updates (evaluations are excluded from the wall times)")
        if r.get("stopped_at"):
            lines.append(f"- {r['name']}: stopped at {r['stopped_at']:,} env steps (--stop-on-miss), where the "
                         "evaluations already proved the target missed")
    lines += [f"- {name}: n/a ({why})" for name, why in skipped.items()]
    return "\n".join(lines)


def plot(results: list[dict], path: str, steps: int) -> None:
    plt = harness.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for r in results:
        e = np.asarray([x[:4] for x in r["evaluations"]], dtype=float)
        for ax, x in zip(axes, (e[:, 0], e[:, 3]) if len(e) else ()):
            ax.plot(x, e[:, 1], marker="o", ms=3, label=r["name"])
            ax.fill_between(x, e[:, 1] - e[:, 2], e[:, 1] + e[:, 2], alpha=0.15)
    for ax, label in zip(axes, ("env steps", "training wall time [s]")):
        ax.axhline(THRESHOLD, color="gray", ls="--", lw=1)
        ax.axhline(FLOOR, color="gray", ls=":", lw=1)
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    if steps > TARGET_STEPS:
        axes[0].axvline(TARGET_STEPS, color="gray", ls=":", lw=1)
    axes[0].set_ylabel("greedy eval return (mean +- std)")
    axes[0].legend(loc="lower right")
    fig.suptitle(f"{ENV_ID}: {steps:,} env steps")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def parse_args(argv=None):
    p = harness.arg_parser(__doc__, "quick", "markdown", "json", "set", "torch-threads")
    p.add_argument("--steps", type=int, default=None, help="env steps per agent (default 100000; --quick: 10000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seeds", type=harness.comma_list(cast=int), help="comma-separated seeds, e.g. 0,1,2: one run "
                   "of each agent per seed (overrides --seed); the target is judged per seed")
    p.add_argument("--eval-every", type=int, default=None, help="env steps (default 5000; --quick: 2500)")
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--without", type=harness.comma_list(PEERS, str.lower), default=[],
                   help=f"comma-separated peers to skip: {', '.join(PEERS)}")
    p.add_argument("--only-peers", action="store_true", help="skip r2d2kit (peers only)")
    p.add_argument("--out", default=None, help="optional PNG of both curves")
    p.add_argument("--runners", type=harness.comma_list(("processes", "local")), default="processes",
                   help="comma-separated actor pools for r2d2kit: processes (the README command's), local")
    p.add_argument("--stop-on-miss", action="store_true",
                   help="stop an r2d2kit run at the first evaluation that proves the target missed (a screen of "
                        "settings: the curve up to there is the same as in a full run)")
    args = p.parse_args(argv)
    args.steps = args.steps or (10_000 if args.quick else 100_000)
    args.eval_every = args.eval_every or (2_500 if args.quick else 5_000)
    args.seeds = args.seeds or [args.seed]
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    began, load_start = harness.start(DISTS)
    print(f"{ENV_ID}: {args.steps:,} env steps per agent, greedy evaluation of {args.eval_episodes} episodes every "
          f"{args.eval_every:,} steps, seed(s) {', '.join(map(str, args.seeds))}; config "
          f"{CONFIG.relative_to(REPO_ROOT)}" + (f" with {' '.join(args.set)}" if args.set else ""), flush=True)
    results, skipped = [], {}

    def add(result: dict, suffix: str) -> None:
        train_seconds = max(result["train_seconds"], 1e-9)
        # peak RSS so far (cumulative): a later run's figure includes the earlier runs'
        results.append(dict(result, agent=result["name"], name=result["name"] + suffix,
                            peak_rss_mb=harness.peak_rss_mb(), steps_per_s=result["env_steps"] / train_seconds,
                            updates_per_s=result["updates"] / train_seconds,
                            summary=curve_summary(result["evaluations"], args.eval_every)))

    for seed in args.seeds:
        suffix = f" seed {seed}" if len(args.seeds) > 1 else ""
        for runner in [] if args.only_peers else args.runners:
            print(f"running r2d2kit R2D2 ({runner}){suffix} ...", flush=True)
            add(run_r2d2(args.set, args.steps, seed, args.eval_every, args.eval_episodes, args.stop_on_miss, runner),
                suffix)
        if "recurrent-ppo" not in args.without and "sb3-contrib RecurrentPPO" not in skipped:
            print(f"running sb3-contrib RecurrentPPO{suffix} ...", flush=True)
            try:
                add(run_ppo(args.steps, seed, args.eval_every, args.eval_episodes, args.torch_threads), suffix)
            except ImportError as error:
                skipped["sb3-contrib RecurrentPPO"] = f"not installed: {error}; see benchmarks/requirements.txt"
    harness.finish(report(results, skipped, args.markdown, args.steps), began, load_start, results and args.out,
                   lambda png: plot(results, png, args.steps))
    harness.write_json(args.json, dict(machine=harness.machine_line(DISTS), args=vars(args), results=results,
                                       skipped=skipped))
    return dict(results=results, skipped=skipped)


if __name__ == "__main__":
    main()
