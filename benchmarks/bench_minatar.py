"""Learning benchmark on images: R2D2 on MinAtar beside SB3 DQN, and on MiniGrid-MemoryS7 beside RecurrentPPO.

    python benchmarks/bench_minatar.py --json benchmarks/results/minatar.json --png docs/img/minatar.png
    python benchmarks/bench_minatar.py --games minigrid_memory --json benchmarks/results/minigrid.json
    python benchmarks/bench_minatar.py --json out.json --resume      # skip the runs out.json already holds
    python benchmarks/bench_minatar.py --quick                       # smoke run: Breakout, seed 0, 20k steps

Each (agent, game, seed) run trains in its own subprocess for the same env-step budget, scored by the greedy
evaluation at the budget; R2D2 runs the game's config. Peers and their settings: benchmarks/README.md.
"""

from pathlib import Path

import harness
import numpy as np
import yaml
from harness import REPO_ROOT, Results, fmt, table

MINATAR = ("breakout", "space_invaders", "asterix", "freeway", "seaquest")
GAMES = {**{game: (REPO_ROOT / "configs" / "minatar" / f"{game}.yaml", "dqn") for game in MINATAR},
         "minigrid_memory": (REPO_ROOT / "configs" / "minigrid_memory.yaml", "recurrent-ppo")}
AGENT_NAMES = {"r2d2": "r2d2kit R2D2", "dqn": "SB3 DQN", "recurrent-ppo": "sb3-contrib RecurrentPPO"}
DISTS = ("numpy", "tensorflow", "keras", "gymnasium", "minatar", "minigrid", "r2d2kit", "torch", "stable_baselines3",
         "sb3_contrib")

# The MinAtar paper's DQN (Young & Tian 2019, its examples/dqn.py; benchmarks/README.md has the details)
DQN = dict(buffer_size=100_000, batch_size=32, learning_starts=5_000, train_freq=1, gradient_steps=1,
           target_update_interval=1_000, learning_rate=2.5e-4, gamma=0.99, exploration_initial_eps=1.0,
           exploration_final_eps=0.1, exploration_steps=100_000, max_grad_norm=1e10)
# rl-starter-files' PPO defaults (the MiniGrid authors' torch-ac scripts); an LSTM of R2D2's size over the same CNN
RECURRENT_PPO = dict(n_steps=128, batch_size=256, n_epochs=4, learning_rate=1e-3, gamma=0.99, gae_lambda=0.95,
                     ent_coef=0.01, clip_range=0.2, vf_coef=0.5, max_grad_norm=0.5)


def run_r2d2(job: dict) -> dict:
    line = (f"  R2D2 {job['game']} seed {job['seed']} " "{steps:>8,} env steps: eval {mean:6.2f} +- {std:5.2f}, "
            "success {success}, training episodes {train_return:6.2f}, {updates:,} updates, {seconds:.0f} s")
    evaluations = harness.evaluation_callback(line)
    run_dir = Path(job["runs_dir"]) / f"{job['game']}-seed{job['seed']}" if job["runs_dir"] else None
    trainer, summary, _ = harness.fit(GAMES[job["game"]][0], [
        f"run.total_env_steps={job['steps']}", f"run.eval_every={job['eval_every']}", f"run.seed={job['seed']}",
        f"run.eval_episodes={job['eval_episodes']}", *job["overrides"]], [evaluations], run_dir)
    return dict(evaluations=evaluations.rows, env_steps=int(summary["env_steps"]), updates=int(summary["updates"]),
                train_seconds=float(summary["train_seconds"]), config=trainer.config.to_dict())


def torch_encoder(torch, game: str):
    """The R2D2 config's encoder (MinAtarImageModel or MiniGridImageModel) in torch, as SB3's features extractor."""
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

    categories = (11, 6, 3)  # MiniGridImageModel's default: object kinds, colours, door states

    class Encoder(BaseFeaturesExtractor):
        def __init__(self, observation_space):
            height, width, channels = observation_space.shape  # MinAtar's; MiniGrid's may arrive transposed
            minigrid = game == "minigrid_memory"
            super().__init__(observation_space, features_dim=64 if minigrid else 128)
            relu = torch.nn.ReLU()
            if minigrid:
                self.net = torch.nn.Sequential(torch.nn.Conv2d(sum(categories), 16, 2), relu, torch.nn.MaxPool2d(2),
                                               torch.nn.Conv2d(16, 32, 2), relu, torch.nn.Conv2d(32, 64, 2), relu,
                                               torch.nn.Flatten())
            else:
                self.net = torch.nn.Sequential(torch.nn.Conv2d(channels, 16, 3), relu, torch.nn.Flatten(),
                                               torch.nn.Linear(16 * (height - 2) * (width - 2), 128), relu)
            self.minigrid = minigrid
            # SB3 moves the channels of a uint8 [H, W, 3] image first (VecTransposeImage): MiniGrid's index image
            self.transposed = minigrid and observation_space.shape[-1] != len(categories)

        def forward(self, obs):  # [N, H, W, C] as stored (SB3 casts it to float)
            if self.transposed:
                obs = obs.permute(0, 2, 3, 1)
            if self.minigrid:  # (object, colour, state) indices -> one-hots, as MiniGridImageModel does
                obs = torch.cat([torch.nn.functional.one_hot(obs[..., c].long(), n).float()
                                 for c, n in enumerate(categories)], dim=-1)
            return self.net(obs.permute(0, 3, 1, 2))

    return Encoder


def run_peer(job: dict) -> dict:
    import torch

    from r2d2kit.training.builders import make_env
    from r2d2kit.training.config import load_config

    game = job["game"]
    config = load_config(GAMES[game][0])
    build = lambda: make_env(config)  # noqa: E731  (the config's env and wrappers, as R2D2 gets them)
    if GAMES[game][1] == "dqn":
        hp = dict(DQN, **{k: type(DQN[k])(v) for k, v in job["peer_set"].items()})
        kwargs = {k: v for k, v in hp.items() if k != "exploration_steps"}
        kwargs.update(policy="MlpPolicy", exploration_fraction=min(1.0, hp["exploration_steps"] / job["steps"]),
                      policy_kwargs=dict(features_extractor_class=torch_encoder(torch, game), net_arch=[],
                                         optimizer_class=torch.optim.RMSprop,
                                         optimizer_kwargs=dict(alpha=0.95, eps=0.01, centered=True)))
        n_envs, algorithm = 1, "DQN"
    else:
        hp = dict(RECURRENT_PPO, **{k: type(RECURRENT_PPO[k])(v) for k, v in job["peer_set"].items()})
        units = config.model.core_units
        kwargs = dict(hp, policy="CnnLstmPolicy", policy_kwargs=dict(
            features_extractor_class=torch_encoder(torch, game), normalize_images=False, lstm_hidden_size=units,
            enable_critic_lstm=True, net_arch=dict(pi=[config.model.head_units], vf=[config.model.head_units])))
        n_envs, algorithm = config.env.num_envs * config.actors.num_actors, "RecurrentPPO"
    line = f"  {algorithm} {game} seed {job['seed']} " "{steps:>8,} env steps: eval {mean:6.2f} +- {std:5.2f}, " \
           "training episodes {train_return:6.2f}, {seconds:.0f} s"
    result = harness.run_sb3(algorithm, build, kwargs, seed=job["seed"], steps=job["steps"],
                             eval_every=job["eval_every"], eval_episodes=job["eval_episodes"], n_envs=n_envs,
                             torch_threads=job["torch_threads"], line=line)
    return dict(result, config=dict(hp, torch_threads=result.pop("torch_threads")))


def child(job: dict) -> dict:
    result = (run_r2d2 if job["agent"] == "r2d2" else run_peer)(job)
    last = result["evaluations"][-1] if result["evaluations"] else None
    return dict(result, error=None, final=last[1] if last else None,
                final_success=last[5] if last and len(last) > 5 else None)


def report(runs: list[dict], games: list[str], markdown: bool) -> str:
    rows, wins, judged = [], 0, 0
    for game in games:
        agents = ("r2d2", GAMES[game][1])
        by = {a: [r for r in runs if r["game"] == game and r["agent"] == a] for a in agents}
        finals = {a: [r["final"] for r in by[a]] for a in agents}
        scored = {a: [r["final" if r.get("final_success") is None else "final_success"] for r in by[a]] for a in agents}
        if all(finals.values()):  # success rate where the env reports one (MiniGrid), else return
            judged += 1
            wins += np.mean(scored["r2d2"]) >= np.mean(scored[agents[1]])
        for a in agents:
            done = by[a]
            rate = [r["env_steps"] / r["train_seconds"] for r in done]
            rows.append([game, AGENT_NAMES[a], fmt(done[0]["steps"] if done else None, ","),
                         harness.fmt_mean_std(finals[a]), harness.fmt_mean_std([r.get("final_success") for r in done]),
                         fmt(np.mean(rate) if rate else None, ",.0f"),
                         fmt(np.mean([r["train_seconds"] / 60 for r in done]) if done else None, ".0f"),
                         fmt(max((r["peak_rss_mb"] for r in done), default=None), ",.0f")])
    header = ["game", "agent", "env steps", "return at the budget (seeds)", "success rate", "env steps/s",
              "training min", "peak RSS MB"]
    lines = [table(header, rows, markdown, right=range(2, 8)), ""]
    per_seed = [[AGENT_NAMES[r["agent"]], r["game"], str(r["seed"]),
                 "  ".join(f"{e[1]:.1f}" if len(e) < 6 or e[5] is None else f"{e[5]:.2f}" for e in r["evaluations"])]
                for r in sorted(runs, key=lambda r: (r["game"], r["agent"], r["seed"]))]
    curve = "greedy evaluations (success rate where the env reports one, else mean return)"
    lines += [table(["agent", "game", "seed", curve], per_seed, markdown), ""]
    lines.append("- return and success rate: the greedy evaluation at the budget, mean +- std over seeds (count in "
                 "brackets); env steps/s and minutes: training only (evaluations excluded); RSS: the largest peak "
                 "of the run's processes")
    lines.append(f"- R2D2's success rate (else return) >= the peer's on {wins} of {judged} games with both agents")
    return "\n".join(lines)


def plot(runs: list[dict], games: list[str], path: str) -> None:
    panels = {yaml.safe_load(GAMES[game][0].read_text())["env"]["id"]: {
        AGENT_NAMES[a]: [r["evaluations"] for r in runs if r["game"] == game and r["agent"] == a]
        for a in ("r2d2", GAMES[game][1])} for game in games}
    harness.panel_plot(path, panels, "mean over seeds (line), min-max over seeds (band)")


def parse_args(argv=None):
    p = harness.arg_parser(__doc__, "quick", "markdown", "json", "resume", "png", "set", "seeds", "torch-threads")
    p.add_argument("--games", nargs="+", default=None, choices=list(GAMES),
                   help="default breakout space_invaders asterix")
    p.add_argument("--steps", type=int, default=None, help="env steps per run (default 500000; --quick: 20000)")
    p.add_argument("--eval-every", type=int, default=None, help="default 50000 (--quick: 10000)")
    p.add_argument("--eval-episodes", type=int, default=16)
    p.add_argument("--agents", nargs="+", default=["r2d2", "peer"], choices=["r2d2", "peer"])
    p.add_argument("--peer-set", action="append", default=[], metavar="KEY=VALUE",
                   help=f"override a peer setting (DQN: {', '.join(DQN)}; RecurrentPPO: {', '.join(RECURRENT_PPO)})")
    p.add_argument("--runs-dir", default=None, help="keep each R2D2 run (checkpoint, best weights) in DIR/GAME-seedN")
    args = p.parse_args(argv)
    args.games = args.games or (["breakout"] if args.quick else ["breakout", "space_invaders", "asterix"])
    args.seeds = args.seeds if args.seeds is not None else ([0] if args.quick else [0, 1, 2])
    args.steps = args.steps or (20_000 if args.quick else 500_000)
    args.eval_every = args.eval_every or (10_000 if args.quick else 50_000)
    pairs = [item.split("=", 1) for item in args.peer_set]
    if any(len(pair) != 2 or pair[0] not in {**DQN, **RECURRENT_PPO} for pair in pairs):
        p.error(f"--peer-set takes KEY=VALUE with KEY a DQN or RecurrentPPO setting, got {args.peer_set}")
    args.peer_set = dict(pairs)
    return args


def main(argv=None) -> dict:
    harness.serve_job(child)
    args = parse_args(argv)
    began, load_start = harness.start(DISTS)
    print(f"{', '.join(args.games)}: {args.steps:,} env steps per run, greedy evaluation of {args.eval_episodes} "
          f"episodes every {args.eval_every:,}; seeds {' '.join(map(str, args.seeds))}", flush=True)
    results = Results(args.json, lambda r: (r["agent"], r["game"], r["seed"]), args.resume, lambda: dict(
        machine=harness.machine_line(DISTS), args=vars(args), dqn=DQN, recurrent_ppo=RECURRENT_PPO))
    runs = [dict(agent="r2d2" if agent == "r2d2" else GAMES[game][1], game=game, seed=seed, steps=args.steps,
                 eval_every=args.eval_every, eval_episodes=args.eval_episodes,
                 overrides=args.set if agent == "r2d2" else [], peer_set=args.peer_set if agent != "r2d2" else {})
            for game in args.games for seed in args.seeds for agent in args.agents]
    extras = dict(torch_threads=args.torch_threads, runs_dir=args.runs_dir)
    for run, result in harness.sweep(__file__, runs, results, lambda r: f"{AGENT_NAMES[r['agent']]} {r['game']} "
                                     f"seed {r['seed']}", extras=extras):
        if not result.get("error"):
            print(f"  done: return {result['final']:.2f}, {result['env_steps'] / result['train_seconds']:,.0f} env "
                  f"steps/s, {result['train_seconds'] / 60:.0f} min, peak RSS {result['peak_rss_mb']:,.0f} MB",
                  flush=True)
            results.add(dict(result, **run))
    shown = [r for r in results.runs if r["game"] in args.games and r["seed"] in args.seeds]
    harness.finish(report(shown, args.games, args.markdown), began, load_start, shown and args.png,
                   lambda png: plot(shown, args.games, png))
    return dict(runs=results.runs)


if __name__ == "__main__":
    main()
