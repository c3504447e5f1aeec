"""Learning benchmark on CartPoleNoVel-v1: r2d2kit's R2D2 beside sb3-contrib's RecurrentPPO.

    python benchmarks/bench_r2d2_cartpole.py                    # 100k env steps each, ~20-30 min on 2 cores
    python benchmarks/bench_r2d2_cartpole.py --markdown --out curve.png
    python benchmarks/bench_r2d2_cartpole.py --without recurrent-ppo --set learner.learning_rate=5e-4
    python benchmarks/bench_r2d2_cartpole.py --quick            # smoke run: 10k steps, evals every 2.5k
    python benchmarks/bench_r2d2_cartpole.py --seeds 0,1,2 --without recurrent-ppo   # the target per seed
    python benchmarks/bench_r2d2_cartpole.py --seeds 0,1,2 --without recurrent-ppo --stop-on-miss  # a screen

CartPoleNoVel-v1 is CartPole-v1 observing only the cart position and the pole angle (velocities
must be inferred from the history; 500-step limit). Both agents are evaluated greedily every
``--eval-every`` env steps on the same episodes (``--eval-episodes``, the trainer's evaluation seeds
``seed + EVAL_SEED_OFFSET + env_steps``, each eval env contributing its first episodes). Env steps count
every step of every env (vector steps x envs), as gymnasium and SB3 do.

* **r2d2kit R2D2**: ``configs/cartpole_pomdp.yaml`` (``--config``) run by the Trainer, the loop the
  README command runs; ``--runners processes,local`` picks the actor pools (processes: the config's
  two actor processes; local: the same four envs in the learner's process).
* **RecurrentPPO** (sb3-contrib, torch; install: benchmarks/requirements.txt) with rl-baselines3-zoo's
  tuned ``CartPoleNoVel-v1`` hyper-parameters (hyperparams/ppo_lstm.yml, as shipped in rl-zoo3 2.9.2),
  VecNormalize included; evaluated with the training normalisation statistics, deterministically.
  A peer that is not installed is reported and skipped.

Wall times are training time: evaluations are excluded for both agents (their time is printed
apart). The target, per seed (a seed-robust criterion): the
first greedy 10-episode mean >= 475 comes within 30k env steps, and every later evaluation up to the
end (100k) stays >= 425. The criterion is met when it holds on every seed of ``--seeds`` (0-4).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
from peers import machine as peers_machine  # noqa: E402

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
sys.path.insert(0, str(REPO_ROOT))  # benchmark the checkout, not an installed copy

from r2d2kit.training.trainer import EVAL_SEED_OFFSET  # noqa: E402  (both agents play the same greedy episodes)

ENV_ID = "CartPoleNoVel-v1"
THRESHOLD = 475.0
TARGET_STEPS = 30_000
FLOOR = 425.0  # every evaluation after the first >= THRESHOLD must stay at or above it
PEERS = ("recurrent-ppo",)

# rl-baselines3-zoo hyperparams/ppo_lstm.yml, CartPoleNoVel-v1 (unchanged from zoo 1.x to rl-zoo3 2.9.2)
ZOO_RECURRENT_PPO = dict(normalize=True, n_envs=8, n_timesteps=100_000, policy="MlpLstmPolicy", n_steps=32,
                         batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20, ent_coef=0.0,
                         learning_rate="lin_0.001", clip_range="lin_0.2",
                         policy_kwargs="dict(ortho_init=False, activation_fn=nn.ReLU, lstm_hidden_size=64, "
                                       "enable_critic_lstm=True, net_arch=dict(pi=[64], vf=[64]))")


# ---------------------------------------------------------------------------------------------
# helpers


def curve_summary(evaluations: list[tuple[int, float, float, float]], eval_every: int,
                  threshold: float = THRESHOLD) -> dict:
    """First evaluation >= threshold, whether every later one stays at or above FLOOR, and the lowest after it.

    ``evaluations``: (env steps, mean, std, training seconds) per evaluation. An evaluation runs at the
    first count past each multiple of ``eval_every`` (actor processes report env steps in batches, PPO
    in rollouts), so ``first_due`` is the multiple it was due at: the 30k evaluation may run at 30.4k.
    """
    first = next((i for i, e in enumerate(evaluations) if e[1] >= threshold), None)
    if first is None:
        return dict(first_steps=None, first_due=None, first_seconds=None, held=False, min_after=None)
    after = [e[1] for e in evaluations[first:]]
    steps = evaluations[first][0]
    return dict(first_steps=steps, first_due=steps // eval_every * eval_every, first_seconds=evaluations[first][3],
                held=min(after) >= FLOOR, min_after=min(after))


# ---------------------------------------------------------------------------------------------
# r2d2kit


def target_missed(evaluations: list[tuple[int, float, float, float]], eval_every: int) -> bool:
    """Whether the evaluations so far (as for :func:`curve_summary`) already prove the target missed.

    Missed once there is no mean >= THRESHOLD by TARGET_STEPS, or a mean below FLOOR after the first;
    later evaluations cannot change that, so a screening run may stop there.
    """
    summary = curve_summary(evaluations, eval_every)
    if summary["first_steps"] is None:
        return bool(evaluations) and evaluations[-1][0] // eval_every * eval_every >= TARGET_STEPS
    return not target_met(summary)


def run_r2d2(config_path: Path, overrides: list[str], steps: int, seed: int, eval_every: int, eval_episodes: int,
             progress: bool, stop_on_miss: bool = False, runner: str | None = None) -> dict:
    """One run of the Trainer, the loop ``python -m r2d2kit.train`` runs, with the config's settings.

    ``runner``: ``processes`` (the config's, the README command), or ``local`` with as many envs in
    this process as the config's actors have in all (the same data per vector step).
    """
    import tempfile

    from r2d2kit.runners.callbacks import Callback
    from r2d2kit.training.config import ConfigError, load_config
    from r2d2kit.training.trainer import Trainer

    try:
        settings = load_config(config_path, overrides)  # the trainer's own validation, --set included
    except ConfigError as error:
        raise SystemExit(f"config error: {error}") from None
    if settings.env.id != ENV_ID:
        raise SystemExit(f"{config_path}: env.id must be {ENV_ID}, got {settings.env.id!r}")
    runner = runner or settings.actors.runner
    envs = settings.env.num_envs * (settings.actors.num_actors if settings.actors.runner != "local" else 1)
    run_overrides = [f"actors.runner={runner}", f"run.total_env_steps={steps}", f"run.seed={seed}",
                     f"run.eval_every={eval_every}", f"run.eval_episodes={eval_episodes}",
                     f"logging.progress={str(progress).lower()}", "logging.tensorboard=false",
                     "checkpoints.every_env_steps=0"]
    if runner == "local":
        run_overrides.append(f"env.num_envs={envs}")
    settings = load_config(config_path, overrides + run_overrides)
    seen: list[tuple[int, float, float, float]] = []  # (env steps, mean, std, training seconds) per evaluation

    class Curve(Callback):
        def on_evaluation(self, trainer, row):  # one line per evaluation, so a long run shows where it is
            seen.append((row["env_steps"], row["eval_mean"], row["eval_std"], row["seconds"]))
            print(f"  r2d2kit {row['env_steps']:>7,} env steps: "
                  f"eval {row['eval_mean']:6.1f} +- {row['eval_std']:5.1f}, "
                  f"{row['updates']:,} updates, {row['seconds']:.0f} s", flush=True)
            return not (stop_on_miss and target_missed(seen, eval_every))

    with tempfile.TemporaryDirectory() as run_dir:
        summary = Trainer(settings, Path(run_dir) / "run", callbacks=[Curve()]).fit()
    train_seconds = summary["train_seconds"]
    return dict(
        name=f"r2d2kit R2D2 ({runner})", evaluations=seen, env_steps=summary["env_steps"],
        train_seconds=train_seconds, updates=summary["updates"],
        stopped_at=summary["env_steps"] if summary["stopped_by"] != "run.total_env_steps" else None,
        updates_per_s=summary["updates"] / max(train_seconds, 1e-9),
        # peak RSS so far (cumulative): a later run's figure includes the earlier runs'
        steps_per_s=summary["env_steps"] / max(train_seconds, 1e-9), peak_rss_mb=peers_machine.peak_rss_mb(),
        config=settings.to_dict(),
    )


# ---------------------------------------------------------------------------------------------
# RecurrentPPO


def greedy_eval_ppo(model, vec_normalize, episodes: int, seed: int) -> np.ndarray:
    """Deterministic RecurrentPPO returns on the same episodes as ``r2d2kit.runners.evaluation.evaluate``."""
    import gymnasium as gym

    num_envs = min(episodes, 8)
    envs = gym.vector.SyncVectorEnv([lambda: gym.make(ENV_ID)] * num_envs)
    obs, _ = envs.reset(seed=seed)
    quota = np.full(num_envs, episodes // num_envs)
    quota[: episodes % num_envs] += 1
    returns, running = [], np.zeros(num_envs)
    state, episode_start = None, np.ones(num_envs, bool)
    in_autoreset = np.zeros(num_envs, bool)
    while len(returns) < episodes:
        action, state = model.predict(vec_normalize.normalize_obs(obs), state=state, episode_start=episode_start,
                                      deterministic=True)
        obs, reward, terminated, truncated, _ = envs.step(action)
        running += np.where(in_autoreset, 0.0, reward)
        ended = (terminated | truncated) & ~in_autoreset
        counted = ended & (quota > 0)
        returns.extend(running[counted].tolist())
        quota[counted] -= 1
        running[ended] = 0.0
        episode_start = in_autoreset  # the obs after an autoreset step is an episode's first
        in_autoreset = ended
    envs.close()
    return np.asarray(returns[:episodes])


def run_recurrent_ppo(steps: int, seed: int, eval_every: int, eval_episodes: int, torch_threads: int = 1) -> dict:
    import gymnasium as gym
    import torch
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.utils import LinearSchedule
    from stable_baselines3.common.vec_env import VecNormalize

    import r2d2kit.envs  # noqa: F401

    torch.set_num_threads(torch_threads)
    hp = ZOO_RECURRENT_PPO
    venv = VecNormalize(make_vec_env(lambda: gym.make(ENV_ID), n_envs=hp["n_envs"], seed=seed),
                        gamma=hp["gamma"])  # the zoo passes the algorithm's gamma to VecNormalize
    model = RecurrentPPO(
        hp["policy"], venv, n_steps=hp["n_steps"], batch_size=hp["batch_size"], gae_lambda=hp["gae_lambda"],
        gamma=hp["gamma"], n_epochs=hp["n_epochs"], ent_coef=hp["ent_coef"],
        learning_rate=LinearSchedule(1e-3, 0.0, 1.0), clip_range=LinearSchedule(0.2, 0.0, 1.0),
        policy_kwargs=dict(ortho_init=False, activation_fn=torch.nn.ReLU, lstm_hidden_size=64,
                           enable_critic_lstm=True, net_arch=dict(pi=[64], vf=[64])),
        seed=seed, device="cpu", verbose=0)

    class Timer(BaseCallback):
        def __init__(self):
            super().__init__()
            self.start = self.eval_seconds = 0.0
            self.evaluations, self.next_eval, self.rollouts = [], eval_every, 0

        def _on_training_start(self):
            self.start = time.perf_counter()

        def _on_rollout_end(self):
            self.rollouts += 1

        def _on_step(self):
            if eval_every and self.num_timesteps >= self.next_eval:
                began = time.perf_counter()
                train_seconds = began - self.start - self.eval_seconds
                returns = greedy_eval_ppo(self.model, venv, eval_episodes,
                                          seed + EVAL_SEED_OFFSET + self.num_timesteps)
                self.evaluations.append((self.num_timesteps, float(returns.mean()), float(returns.std()),
                                         train_seconds))
                print(f"  RecurrentPPO {self.num_timesteps:>7,} env steps: eval {returns.mean():6.1f} +- "
                      f"{returns.std():5.1f}, {train_seconds:.0f} s", flush=True)
                self.eval_seconds += time.perf_counter() - began
                self.next_eval += eval_every
            return True

    timer = Timer()
    began = time.perf_counter()
    model.learn(total_timesteps=steps, callback=timer)
    seconds = time.perf_counter() - began
    train_seconds = seconds - timer.eval_seconds
    minibatches = -(-hp["n_steps"] * hp["n_envs"] // hp["batch_size"])
    updates = timer.rollouts * hp["n_epochs"] * minibatches
    return dict(
        name="sb3-contrib RecurrentPPO", evaluations=timer.evaluations, env_steps=int(model.num_timesteps),
        train_seconds=train_seconds, updates=updates, updates_per_s=updates / max(train_seconds, 1e-9),
        # peak RSS so far (cumulative): a later run's figure includes the earlier runs'
        steps_per_s=model.num_timesteps / max(train_seconds, 1e-9), peak_rss_mb=peers_machine.peak_rss_mb(),
        config=dict(ZOO_RECURRENT_PPO, torch_threads=torch.get_num_threads()),
    )


# ---------------------------------------------------------------------------------------------
# report


def fmt_steps(value) -> str:
    return "-" if value is None else f"{value:,}"


def fmt_seconds(value) -> str:
    return "-" if value is None else f"{value:.0f} s"


def report(results: list[dict], skipped: dict[str, str], markdown: bool, steps: int) -> str:
    lines = []
    names = [r["name"] for r in results]
    # --- curves: one row per evaluation
    all_steps = sorted({e[0] for r in results for e in r["evaluations"]})
    header = ["env steps"] + [f"{n} (wall s)" for n in names]
    rows = []
    for s in all_steps:
        row = [f"{s:,}"]
        for r in results:
            match = [e for e in r["evaluations"] if e[0] == s]
            row.append(f"{match[0][1]:.1f} +- {match[0][2]:.1f} ({match[0][3]:.0f})" if match else "-")
        rows.append(row)
    lines += table(header, rows, markdown, right=range(len(header)))
    lines.append("")
    # --- summary: one row per agent
    header = ["agent", f"first eval >= {THRESHOLD:.0f} (env steps)", "wall time then", f"all later >= {FLOOR:.0f}",
              "lowest eval from then", "final eval", "training wall time", "env steps/s (training)",
              "updates/s (training)", "peak RSS (process so far)"]
    rows = []
    for r in results:
        s = r["summary"]
        rows.append([r["name"], fmt_steps(s["first_steps"]), fmt_seconds(s["first_seconds"]),
                     "yes" if s["held"] else "no", "-" if s["min_after"] is None else f"{s['min_after']:.1f}",
                     f"{r['evaluations'][-1][1]:.1f}" if r["evaluations"] else "-",
                     f"{r['train_seconds']:.0f} s", f"{r['steps_per_s']:.0f}", f"{r['updates_per_s']:.0f}",
                     f"{r.get('peak_rss_mb', 0):,.0f} MB"])
    lines += table(header, rows, markdown, right=range(1, len(header)))
    lines.append("")
    for run in results:  # every agent is judged by the target, the peers too
        s = run["summary"]
        lines.append(f"- target ({run['name']}): first >= {THRESHOLD:.0f} within {TARGET_STEPS:,} env steps: "
                     f"{'met' if target_reached(s) else 'not met'} ({fmt_steps(s['first_steps'])}); every later "
                     f"evaluation to {steps:,} steps >= {FLOOR:.0f}: {'met' if s['held'] else 'not met'} "
                     "(lowest from then: "
                     f"{'-' if s['min_after'] is None else format(s['min_after'], '.1f')})")
    for agent in dict.fromkeys(r.get("agent", r["name"]) for r in results):
        runs = [r for r in results if r.get("agent", r["name"]) == agent]
        if len(runs) > 1:
            met = sum(target_met(r["summary"]) for r in runs)
            verdict = "criterion met (every seed)" if met == len(runs) else "criterion missed"
            lines.append(f"- {agent}: target met (reached in time, floor held) on {met} of {len(runs)} seeds: "
                         f"{verdict}")
    for r in results:
        lines.append(f"- {r['name']}: {r['updates']:,} gradient updates (evaluations are excluded from the wall "
                     "times)")
        if r.get("stopped_at"):
            lines.append(f"- {r['name']}: stopped at {r['stopped_at']:,} env steps (--stop-on-miss), where the "
                         "evaluations already proved the target missed")
    for name, why in skipped.items():
        lines.append(f"- {name}: n/a ({why})")
    return "\n".join(lines)


def target_reached(summary: dict) -> bool:
    """Whether the first evaluation >= THRESHOLD was due within TARGET_STEPS env steps."""
    return summary["first_due"] is not None and summary["first_due"] <= TARGET_STEPS


def target_met(summary: dict) -> bool:
    """The per-seed target: reached within TARGET_STEPS, and no later evaluation below FLOOR."""
    return target_reached(summary) and summary["held"]


def table(header: list[str], rows: list[list[str]], markdown: bool, right=()) -> list[str]:
    right = set(right)
    if markdown:
        out = ["| " + " | ".join(header) + " |",
               "|" + "|".join("---:" if i in right else "---" for i in range(len(header))) + "|"]
        return out + ["| " + " | ".join(row) + " |" for row in rows]
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(header)]
    def line(cells):
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    return [line(header), line(["-" * w for w in widths])] + [line(row) for row in rows]


def plot(results: list[dict], path: str, steps: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for r in results:
        e = np.asarray([x[:4] for x in r["evaluations"]], dtype=float)
        if not len(e):
            continue
        for ax, x in zip(axes, (e[:, 0], e[:, 3])):
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


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=None, help="env steps per agent (default 100000; --quick: 10000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seeds", default=None,
                   help="comma-separated seeds, e.g. 0,1,2: one run of each agent per seed (overrides --seed); "
                        "the target is judged per seed")
    p.add_argument("--eval-every", type=int, default=None, help="env steps (default 5000; --quick: 2500)")
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--config", default=str(REPO_ROOT / "configs" / "cartpole_pomdp.yaml"))
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a config value (YAML), e.g. learner.learning_rate=5e-4; repeatable")
    p.add_argument("--without", default="", help=f"comma-separated peers to skip: {', '.join(PEERS)}")
    p.add_argument("--only-peers", action="store_true", help="skip r2d2kit (peers only)")
    p.add_argument("--markdown", action="store_true", help="print the tables as markdown")
    p.add_argument("--quick", action="store_true", help="smoke run: 10k steps, evaluations every 2.5k")
    p.add_argument("--out", default=None, help="optional PNG of both curves")
    p.add_argument("--json", default=None, help="optional JSON of the curves and measures")
    p.add_argument("--torch-threads", type=int, default=1,
                   help="torch CPU threads for RecurrentPPO (default 1: with 2 its OpenMP threads spin against "
                        "TensorFlow's and other work on a 2-core machine, and a run takes many times longer)")
    p.add_argument("--progress", action="store_true", help="show r2d2kit's tqdm bar")
    p.add_argument("--runners", default="processes",
                   help="comma-separated actor pools for r2d2kit: processes (the README command's), local")
    p.add_argument("--stop-on-miss", action="store_true",
                   help="stop an r2d2kit run at the first evaluation that proves the target missed (a screen of "
                        "settings: the curve up to there is the same as in a full run)")
    args = p.parse_args(argv)
    args.steps = args.steps or (10_000 if args.quick else 100_000)
    args.eval_every = args.eval_every or (2_500 if args.quick else 5_000)
    try:
        args.seeds = [int(x) for x in args.seeds.split(",") if x.strip()] if args.seeds else [args.seed]
    except ValueError:
        p.error(f"--seeds must be comma-separated integers such as 0,1,2, got {args.seeds!r}")
    if not args.seeds:
        p.error("--seeds names no seed; give e.g. --seeds 0,1,2")
    args.runners = [r.strip() for r in args.runners.split(",") if r.strip()]
    if not args.runners or set(args.runners) - {"processes", "local"}:
        p.error(f"--runners takes processes and/or local, got {args.runners}")
    args.without = {w.strip().lower() for w in args.without.split(",") if w.strip()}
    unknown = args.without - set(PEERS)
    if unknown:
        p.error(f"unknown peer(s) {sorted(unknown)}; peers: {', '.join(PEERS)}")
    return args


def machine_line() -> str:
    return peers_machine.machine_line(('numpy', 'tensorflow', 'keras', 'gymnasium', 'r2d2kit', 'torch',
                                       'stable_baselines3', 'sb3_contrib'))


def main(argv=None) -> dict:
    args = parse_args(argv)
    began = time.perf_counter()
    load_start = peers_machine.format_load()
    print(machine_line(), flush=True)
    print(f"{ENV_ID}: {args.steps:,} env steps per agent, greedy evaluation of {args.eval_episodes} episodes every "
          f"{args.eval_every:,} steps, seed(s) {', '.join(map(str, args.seeds))}; config {os.path.relpath(args.config)}"
          + (f" with {' '.join(args.set)}" if args.set else ""), flush=True)
    results, skipped = [], {}
    for seed in args.seeds:
        suffix = f" seed {seed}" if len(args.seeds) > 1 else ""
        for runner in [] if args.only_peers else args.runners:
            print(f"running r2d2kit R2D2 ({runner}){suffix} ...", flush=True)
            results.append(run_r2d2(Path(args.config), args.set, args.steps, seed, args.eval_every,
                                    args.eval_episodes, args.progress, args.stop_on_miss, runner))
            results[-1]["agent"] = results[-1]["name"]
            results[-1]["name"] += suffix
        if "recurrent-ppo" not in args.without and "sb3-contrib RecurrentPPO" not in skipped:
            print(f"running sb3-contrib RecurrentPPO{suffix} ...", flush=True)
            try:
                results.append(run_recurrent_ppo(args.steps, seed, args.eval_every, args.eval_episodes,
                                                 args.torch_threads))
                results[-1]["agent"] = results[-1]["name"]
                results[-1]["name"] += suffix
            except ImportError as error:
                skipped["sb3-contrib RecurrentPPO"] = f"not installed: {error}; see benchmarks/requirements.txt"
    for r in results:
        r["summary"] = curve_summary(r["evaluations"], args.eval_every)
    print()
    print(report(results, skipped, args.markdown, args.steps))
    print(f"- total benchmark time {time.perf_counter() - began:.0f} s; load average at start {load_start}, "
          f"at end {peers_machine.format_load()} "
          f"(on {os.cpu_count()} CPUs: a higher load means other work shared the machine)")
    if args.out and results:
        plot(results, args.out, args.steps)
        print(f"- curves written to {args.out}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(dict(machine=machine_line(), args={k: (sorted(v) if isinstance(v, set) else v)
                                                         for k, v in vars(args).items()},
                           results=results, skipped=skipped), handle, indent=1, default=str)
    return dict(results=results, skipped=skipped)


if __name__ == "__main__":
    main()
