"""Learning benchmark on MinAtar: r2d2kit's R2D2 beside Stable-Baselines3 DQN with the same conv encoder.

    python benchmarks/bench_minatar.py --json benchmarks/results/minatar.json --png docs/images/minatar.png
    python benchmarks/bench_minatar.py --json out.json --resume      # skip the runs out.json already holds
    python benchmarks/bench_minatar.py --quick                       # smoke run: Breakout, seed 0, 20k steps

Each (agent, game, seed) run trains in its own subprocess (peak RSS per run) for the same env-step budget,
evaluated greedily on the same episodes on the same schedule; the score is the mean return of the evaluation
at the budget. R2D2 runs the game's ``configs/minatar/<game>.yaml`` (actor processes, the README command's
runner); DQN runs the MinAtar paper's settings (Young & Tian 2019) with its network as SB3's features extractor.
"""

from __future__ import annotations

import math
import time

import harness
import numpy as np
import yaml
from harness import REPO_ROOT, Results, fmt, table

GAMES = ("breakout", "space_invaders", "asterix", "freeway", "seaquest")
AGENTS = ("r2d2", "dqn")
AGENT_NAMES = {"r2d2": "r2d2kit R2D2", "dqn": "SB3 DQN"}
DISTS = ("numpy", "tensorflow", "keras", "gymnasium", "minatar", "r2d2kit", "torch", "stable_baselines3")
MAX_EPISODE_STEPS = 10_000  # the configs' env.kwargs: MinAtar sets no limit

# The MinAtar paper's DQN (its examples/dqn.py): replay 100k, batch 32, one update per step after 5k steps,
# target copied every 1k steps, RMSprop(lr 2.5e-4, squared-gradient momentum 0.95, eps 0.01, centered), Huber
# loss, no gradient clipping, epsilon 1 -> 0.1 over the first 100k steps, discount 0.99.
DQN = dict(buffer_size=100_000, batch_size=32, learning_starts=5_000, train_freq=1, gradient_steps=1,
           target_update_interval=1_000, learning_rate=2.5e-4, gamma=0.99, exploration_initial_eps=1.0,
           exploration_final_eps=0.1, exploration_steps=100_000, max_grad_norm=1e10)



def config_path(game: str):
    return REPO_ROOT / "configs" / "minatar" / f"{game}.yaml"


def env_id(game: str) -> str:
    return yaml.safe_load(config_path(game).read_text())["env"]["id"]


def run_r2d2(job: dict) -> dict:
    line = (f"  R2D2 {job['game']} seed {job['seed']} " "{steps:>8,} env steps: eval {mean:6.2f} +- {std:5.2f}, "
            "training episodes {train_return:6.2f}, {updates:,} updates, {seconds:.0f} s")
    evaluations = harness.evaluation_callback(line)
    trainer, summary, fit_seconds = harness.fit(config_path(job["game"]), [
        f"run.total_env_steps={job['steps']}", f"run.eval_every={job['eval_every']}", f"run.seed={job['seed']}",
        f"run.eval_episodes={job['eval_episodes']}", *job["overrides"]], [evaluations])
    return dict(evaluations=evaluations.rows, env_steps=int(summary["env_steps"]),
                train_seconds=float(summary["train_seconds"]), updates=int(summary["updates"]),
                config=trainer.config.to_dict())


def minatar_features(torch):
    """The MinAtar paper's network below DQN's output layer: conv 16 3x3 stride 1 + ReLU, dense 128 + ReLU."""
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

    class MinAtarFeatures(BaseFeaturesExtractor):
        def __init__(self, observation_space):
            super().__init__(observation_space, features_dim=128)
            height, width, channels = observation_space.shape
            self.conv = torch.nn.Conv2d(channels, 16, kernel_size=3, stride=1)
            self.dense = torch.nn.Linear(16 * (height - 2) * (width - 2), 128)

        def forward(self, obs):  # [N, H, W, C] 0/1 floats, channels last as MinAtar gives them
            x = torch.relu(self.conv(obs.permute(0, 3, 1, 2)))
            return torch.relu(self.dense(x.flatten(1)))

    return MinAtarFeatures


def run_dqn(job: dict) -> dict:
    import gymnasium as gym
    import torch

    from r2d2kit.envs import ensure_registered

    game_id = env_id(job["game"])
    ensure_registered(game_id)
    hp = dict(DQN, **{k: type(DQN[k])(v) for k, v in job["dqn_set"].items()})
    kwargs = {k: v for k, v in hp.items() if k != "exploration_steps"}
    kwargs.update(policy="MlpPolicy", exploration_fraction=min(1.0, hp["exploration_steps"] / job["steps"]),
                  policy_kwargs=dict(features_extractor_class=minatar_features(torch), net_arch=[],
                                     optimizer_class=torch.optim.RMSprop,
                                     optimizer_kwargs=dict(alpha=0.95, eps=0.01, centered=True)))
    line = f"  DQN {job['game']} seed {job['seed']} " "{steps:>8,} env steps: eval {mean:6.2f} +- {std:5.2f}, " \
           "training episodes {train_return:6.2f}, {seconds:.0f} s"
    result = harness.run_sb3("DQN", lambda: gym.make(game_id, max_episode_steps=MAX_EPISODE_STEPS), kwargs,
                             seed=job["seed"], steps=job["steps"], eval_every=job["eval_every"],
                             eval_episodes=job["eval_episodes"], n_envs=1, torch_threads=job["torch_threads"],
                             line=line)
    return dict(result, config=dict(hp, torch_threads=result.pop("torch_threads")))


def child(job: dict) -> dict:
    began = time.perf_counter()
    result = (run_r2d2 if job["agent"] == "r2d2" else run_dqn)(job)
    evaluations = result["evaluations"]
    return dict(result, process_seconds=time.perf_counter() - began, error=None,
                final=evaluations[-1][1] if evaluations else None)


def run_key(run: dict) -> tuple:
    return (run["agent"], run["game"], run["seed"])


def settings(args, agent: str, game: str, seed: int) -> dict:
    return dict(agent=agent, game=game, seed=seed, steps=args.steps, eval_every=args.eval_every,
                eval_episodes=args.eval_episodes, overrides=args.set if agent == "r2d2" else [],
                dqn_set=args.dqn_set if agent == "dqn" else {})


# ---------------------------------------------------------------------------------------------
# report


def mean_std(values: list) -> str:
    values = [v for v in values if v is not None]
    return "-" if not values else f"{np.mean(values):.2f} +- {np.std(values):.2f} ({len(values)})"


def report(runs: list[dict], games: list[str], markdown: bool) -> str:
    rows, wins, judged = [], 0, 0
    for game in games:
        by = {a: [r for r in runs if r["game"] == game and r["agent"] == a] for a in AGENTS}
        finals = {a: [r["final"] for r in by[a]] for a in AGENTS}
        if all(finals.values()):
            judged += 1
            wins += np.mean(finals["r2d2"]) >= np.mean(finals["dqn"])
        cells = []
        for a in AGENTS:
            done = by[a]
            rate = [r["env_steps"] / r["train_seconds"] for r in done]
            cells += [mean_std(finals[a]), fmt(np.mean(rate) if rate else None, ",.0f"),
                      fmt(np.mean([r["train_seconds"] / 60 for r in done]) if done else None, ".0f"),
                      fmt(max((r["peak_rss_mb"] for r in done), default=None), ",.0f")]
        rows.append([game, fmt(runs[0]["steps"] if runs else None, ",")] + cells)
    header = ["game", "env steps", "R2D2 return (seeds)", "R2D2 steps/s", "R2D2 min", "R2D2 RSS MB",
              "DQN return (seeds)", "DQN steps/s", "DQN min", "DQN RSS MB"]
    lines = [table(header, rows, markdown, right=range(1, 10)), ""]
    per_seed = [[AGENT_NAMES[r["agent"]], r["game"], str(r["seed"]),
                 "  ".join(f"{e[1]:.1f}" for e in r["evaluations"])] for r in runs]
    lines += [table(["agent", "game", "seed", "greedy evaluations (mean return)"], per_seed, markdown), ""]
    lines.append("- return: mean of the greedy evaluation at the budget, mean +- std over seeds (count in brackets); "
                 "steps/s and minutes: training only (evaluations excluded); RSS: peak of the run's processes "
                 "(for R2D2, the largest of its learner and actor processes)")
    lines.append(f"- R2D2's return >= DQN's on {wins} of {judged} games with both agents")
    return "\n".join(lines)


def plot(runs: list[dict], games: list[str], path: str) -> None:
    plt = harness.pyplot()
    fig, axes = plt.subplots(1, len(games), figsize=(4.4 * len(games), 3.4), squeeze=False)
    for ax, game in zip(axes[0], games):
        for agent, color in zip(AGENTS, ("tab:blue", "tab:orange")):
            harness.seed_band(ax, [r["evaluations"] for r in runs if r["game"] == game and r["agent"] == agent],
                              AGENT_NAMES[agent], color, ms=2.5)
        ax.set(title=env_id(game), xlabel="env steps")
        ax.grid(alpha=0.3)
    axes[0, 0].set_ylabel("greedy mean return")
    axes[0, 0].legend(loc="upper left", fontsize=8)
    fig.suptitle("MinAtar: mean over seeds (line), min-max over seeds (band)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def parse_args(argv=None):
    p = harness.arg_parser(__doc__, "quick", "markdown")
    p.add_argument("--games", nargs="+", default=None, choices=GAMES, help="default breakout space_invaders asterix")
    p.add_argument("--seeds", nargs="+", type=int, default=None, help="default 0 1 2 (--quick: 0)")
    p.add_argument("--steps", type=int, default=None, help="env steps per run (default 500000; --quick: 20000)")
    p.add_argument("--eval-every", type=int, default=None, help="default 50000 (--quick: 10000)")
    p.add_argument("--eval-episodes", type=int, default=16)
    p.add_argument("--agents", nargs="+", default=list(AGENTS), choices=AGENTS)
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a value of the R2D2 configs, e.g. learner.learning_rate=1e-4 (repeatable)")
    p.add_argument("--dqn-set", action="append", default=[], metavar="KEY=VALUE",
                   help=f"override a DQN setting (repeatable; keys: {', '.join(DQN)})")
    p.add_argument("--json", default=None, help="results JSON, rewritten after every run")
    p.add_argument("--resume", action="store_true", help="keep the runs in --json made with these settings")
    p.add_argument("--png", default=None, help="PNG of the curves, one panel per game")
    p.add_argument("--torch-threads", type=int, default=1, help="torch CPU threads for DQN (default 1)")
    args = p.parse_args(argv)
    args.games = args.games or (["breakout"] if args.quick else ["breakout", "space_invaders", "asterix"])
    args.seeds = args.seeds if args.seeds is not None else ([0] if args.quick else [0, 1, 2])
    args.steps = args.steps or (20_000 if args.quick else 500_000)
    args.eval_every = args.eval_every or (10_000 if args.quick else 50_000)
    pairs = [item.split("=", 1) for item in args.dqn_set]
    if any(len(pair) != 2 or pair[0] not in DQN for pair in pairs):
        p.error(f"--dqn-set takes KEY=VALUE with KEY one of {', '.join(DQN)}, got {args.dqn_set}")
    args.dqn_set = dict(pairs)
    if args.resume and not args.json:
        p.error("--resume needs --json FILE (the results to resume)")
    return args


def main(argv=None) -> dict:
    harness.serve_job(child)
    args = parse_args(argv)
    began, load_start = harness.start(DISTS)
    print(f"MinAtar {', '.join(args.games)}: {args.steps:,} env steps per run, greedy evaluation of "
          f"{args.eval_episodes} episodes every {args.eval_every:,}; seeds {' '.join(map(str, args.seeds))}",
          flush=True)
    results = Results(args.json, run_key, args.resume, lambda: dict(machine=harness.machine_line(DISTS),
                                                                     args=vars(args), dqn=DQN))
    todo = [(a, g, s) for g in args.games for s in args.seeds for a in args.agents
            if not results.has((a, g, s), lambda r, a=a, g=g, s=s: all(
                r.get(k) == v for k, v in settings(args, a, g, s).items()))]
    for i, (agent, game, seed) in enumerate(todo, 1):
        print(f"[{i}/{len(todo)}] {AGENT_NAMES[agent]} {game} seed {seed} ...", flush=True)
        job = settings(args, agent, game, seed)
        result = harness.run_job(__file__, dict(job, torch_threads=args.torch_threads))
        if result.get("error"):
            print(f"  failed ({result['error']}):\n{result.pop('log_tail')}", flush=True)
            continue
        print(f"  done: return {result['final']:.2f}, {result['env_steps'] / result['train_seconds']:,.0f} env "
              f"steps/s, {result['train_seconds'] / 60:.0f} min, peak RSS {result['peak_rss_mb']:,.0f} MB", flush=True)
        results.add(dict(result, **job))
    shown = [r for r in results.runs if r["game"] in args.games and r["seed"] in args.seeds
             and r["agent"] in args.agents and not math.isnan(r["train_seconds"])]
    print()
    print(report(shown, args.games, args.markdown))
    print(harness.load_footer(began, load_start))
    if args.png and shown:
        plot(shown, args.games, args.png)
        print(f"- curves written to {args.png}")
    return dict(runs=results.runs)


if __name__ == "__main__":
    main()
