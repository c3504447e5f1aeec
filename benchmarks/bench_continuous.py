"""Learning benchmark for continuous control with hidden velocities: r2d2kit's recurrent SAC beside
Stable-Baselines3's SAC (full and masked observations) and sb3-contrib's RecurrentPPO, on PendulumNoVel-v1
and HalfCheetah-P-v5.

    python benchmarks/bench_continuous.py --json benchmarks/results/continuous.json --markdown
    python benchmarks/bench_continuous.py --json out.json --resume            # skip the runs out.json already holds
    python benchmarks/bench_continuous.py --tasks halfcheetah_p --series sac sac_zero_state --seeds 10 11
    python benchmarks/bench_continuous.py --tasks halfcheetah_p --series sac --runs-dir runs/bench --resume  # goes on
    python benchmarks/bench_continuous.py --series sac --config pendulum_novel=my.yaml --set learner.tau=0.01
    python benchmarks/bench_continuous.py --quick --tasks pendulum_novel      # smoke run: every series, seed 0

Series (each (series, task, seed) run is a child process of this script, appended to --json as it ends):

  sac             r2d2kit's recurrent SAC, the task's config (--config TASK=PATH) through load_config + Trainer.fit
  sac_zero_state  the same with replay.initial_state=zero, replay.burn_in=0 (zero start state, no burn-in)
  sb3_sac_full    SB3 SAC on the full-state env (Pendulum-v1, HalfCheetah-v5): the bound a memory should approach
  sb3_sac_masked  the same SB3 SAC on the masked env (PendulumNoVel-v1, HalfCheetah-P-v5): no memory
  recurrent_ppo   sb3-contrib RecurrentPPO on the masked env

Peers (comparison only, never dependencies) use rl-baselines3-zoo's hyper-parameters, hyperparams/sac.yml and
hyperparams/ppo_lstm.yml at commit c94924e5 (identical in rl-zoo3 2.x): see SB3_SAC and RECURRENT_PPO below.

Evaluation, the same for every series: every --eval-every env steps, --eval-episodes deterministic episodes on
min(episodes, 8) envs of a SyncVectorEnv reset with seed run.seed + 7919 + env steps (env i: that seed + i), each
env contributing a fixed quota of its first episodes; r2d2kit's Trainer does this itself
(r2d2kit.runners.evaluation.evaluate), the peers through harness.greedy_eval_sb3 (predict(deterministic=True),
RecurrentPPO's observations normalised by its training VecNormalize statistics). The episodes are the same when
the series evaluate at the same env steps: the peers step 1 or 4 envs (--eval-every must be a multiple of 4);
an r2d2kit run whose evaluations fall off the multiples (more envs per collect) is named under the table.

Scores: final = the last evaluation's mean return; best = the highest evaluation mean of a run's curve; both as
mean +- std over seeds (n). Checks (bound beside value, ok / MISSED): PendulumNoVel: sac's final within 10% of
sb3_sac_full's (returns are negative costs: -165 against -150 is inside; better passes too) and ahead of
sb3_sac_masked and recurrent_ppo; HalfCheetah-P: sac ahead of sb3_sac_masked (sb3_sac_full, recurrent_ppo beside),
and sac against sac_zero_state.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import hashlib
import json
import resource
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import harness
import numpy as np
import yaml
from harness import EVAL_SEED_OFFSET, REPO_ROOT, Results, fmt, table


@dataclass(frozen=True)
class Task:
    """One benchmark task: the masked env r2d2kit and the memory-less peers play, its full-state twin, the r2d2kit
    config and the default budget and evaluation period."""

    label: str
    masked_id: str
    full_id: str
    config: str  # relative to the repository root
    steps: int
    eval_every: int


TASKS = {
    "pendulum_novel": Task("PendulumNoVel", "PendulumNoVel-v1", "Pendulum-v1", "configs/sac/pendulum_novel.yaml",
                           20_000, 2_000),
    "halfcheetah_p": Task("HalfCheetah-P", "HalfCheetah-P-v5", "HalfCheetah-v5", "configs/sac/halfcheetah_p.yaml",
                          100_000, 5_000),
}
SERIES = ("sac", "sac_zero_state", "sb3_sac_full", "sb3_sac_masked", "recurrent_ppo")
SAC_SERIES = ("sac", "sac_zero_state")
SERIES_NAMES = {"sac": "r2d2kit SAC", "sac_zero_state": "r2d2kit SAC, zero state",
                "sb3_sac_full": "SB3 SAC, full state", "sb3_sac_masked": "SB3 SAC, masked",
                "recurrent_ppo": "sb3-contrib RecurrentPPO"}
ZERO_STATE = ("replay.initial_state=zero", "replay.burn_in=0")  # pomdp-baselines' variant: no stored state
DISTS = ("numpy", "tensorflow", "keras", "gymnasium", "mujoco", "r2d2kit", "torch", "stable_baselines3", "sb3_contrib")

ZOO = "rl-baselines3-zoo hyperparams/{file} (commit c94924e5)"
# SAC: Pendulum-v1 sets learning_rate 1e-3 (n_timesteps 20000); HalfCheetah-v3 (&mujoco-defaults) learning_starts
# 10000 (n_timesteps 1e6); everything else is SB3's default (buffer 1e6, batch 256, tau 0.005, gamma 0.99, one
# gradient step per env step, ent_coef auto, net_arch [256, 256], learning_starts 100), one env, no normalisation.
SB3_SAC = {"pendulum_novel": dict(learning_rate=1e-3), "halfcheetah_p": dict(learning_starts=10_000)}
SB3_SAC_SOURCE = {"pendulum_novel": ZOO.format(file="sac.yml") + ": Pendulum-v1",
                  "halfcheetah_p": ZOO.format(file="sac.yml") + ": HalfCheetah-v3 (mujoco defaults)"}
# RecurrentPPO: PendulumNoVel-v1 ("# Tuned"); the zoo has no HalfCheetah-P entry, so its HalfCheetah-v3 one (tuned
# on the full state). normalize: VecNormalize of observations and rewards with the discount gamma, as the zoo does.
RECURRENT_PPO = {
    "pendulum_novel": dict(normalize=True, n_envs=4, n_steps=1024, gae_lambda=0.95, gamma=0.9, n_epochs=10,
                           ent_coef=0.0, learning_rate=1e-3, clip_range=0.2, use_sde=True, sde_sample_freq=4,
                           policy_kwargs=dict(ortho_init=False, activation_fn="ReLU", lstm_hidden_size=64,
                                              enable_critic_lstm=True, net_arch=dict(pi=[64], vf=[64]))),
    "halfcheetah_p": dict(normalize=True, n_envs=1, batch_size=64, n_steps=512, gamma=0.98, learning_rate=2.0633e-05,
                          ent_coef=0.000401762, clip_range=0.1, n_epochs=20, gae_lambda=0.92, max_grad_norm=0.8,
                          vf_coef=0.58096, policy_kwargs=dict(log_std_init=-2, ortho_init=False, activation_fn="ReLU",
                                                              net_arch=dict(pi=[256, 256], vf=[256, 256]))),
}
RECURRENT_PPO_SOURCE = {"pendulum_novel": ZOO.format(file="ppo_lstm.yml") + ": PendulumNoVel-v1",
                        "halfcheetah_p": ZOO.format(file="ppo_lstm.yml") + ": HalfCheetah-v3 (no -P entry)"}
QUICK = dict(steps=1_500, eval_every=500, eval_episodes=4, warmup=500, rollout=512)  # --quick: a smoke run
WITHIN = 0.10  # PendulumNoVel: sac's final within 10% of sb3_sac_full's
CHECKS = {  # (kind, series, other): within / ahead are judged; beside and versus are printed
    "pendulum_novel": [("within", "sac", "sb3_sac_full"), ("ahead", "sac", "sb3_sac_masked"),
                       ("ahead", "sac", "recurrent_ppo")],
    "halfcheetah_p": [("ahead", "sac", "sb3_sac_masked"), ("beside", "sb3_sac_full", None),
                      ("beside", "recurrent_ppo", None), ("versus", "sac", "sac_zero_state")],
}


# --- settings
def peer_settings(series: str, task: str, quick: bool = False) -> dict:
    """What a peer run is (JSON): algorithm, policy, env id, envs, normalisation and the model's keyword arguments.
    ``quick`` caps SAC's learning_starts and PPO's rollout (n_envs x n_steps) so that a smoke run updates."""
    spec = TASKS[task]
    if series.startswith("sb3_sac"):
        kwargs = dict(SB3_SAC[task])
        if quick:
            kwargs["learning_starts"] = min(kwargs.get("learning_starts", 100), QUICK["warmup"])
        env_id = spec.full_id if series == "sb3_sac_full" else spec.masked_id
        return dict(algorithm="SAC", policy="MlpPolicy", env_id=env_id, n_envs=1, normalize_gamma=None, kwargs=kwargs,
                    source=SB3_SAC_SOURCE[task])
    if series != "recurrent_ppo":
        raise ValueError(f"{series!r} is not a peer series (peers: sb3_sac_full, sb3_sac_masked, recurrent_ppo)")
    kwargs = {k: v for k, v in RECURRENT_PPO[task].items() if k not in ("normalize", "n_envs")}
    n_envs = RECURRENT_PPO[task]["n_envs"]
    if quick:
        kwargs["n_steps"] = min(kwargs["n_steps"], QUICK["rollout"] // n_envs)
    gamma = kwargs.get("gamma", 0.99)
    return dict(algorithm="RecurrentPPO", policy="MlpLstmPolicy", env_id=spec.masked_id, n_envs=n_envs,
                normalize_gamma=gamma if RECURRENT_PPO[task]["normalize"] else None, kwargs=kwargs,
                source=RECURRENT_PPO_SOURCE[task])


def digest(value: Any) -> str:
    """A short digest of a JSON value (``--resume`` runs again what was made with other settings)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def config_digest(path: str | Path) -> str:
    """A digest of what an r2d2kit config decides for a run: its parsed settings but the ones this benchmark sets
    (budget, seed, evaluation) and those that do not change learning (logging, checkpoints); comments do not count."""
    config = yaml.safe_load(Path(path).read_text()) or {}
    run = config.get("run") or {}
    for key in ("total_env_steps", "seed", "eval_every", "eval_episodes"):
        run.pop(key, None)
    config.pop("logging", None)
    config.pop("checkpoints", None)
    return digest(config)


def resolve_config(path: str) -> Path | None:
    """An r2d2kit config file: ``path`` as given, else under the repository root; None if neither exists."""
    for candidate in (Path(path), REPO_ROOT / path):
        if candidate.is_file():
            return candidate.resolve()
    return None


def sac_overrides(job: dict, runs_dir: Path) -> list[str]:
    """The ``--set`` overrides of an r2d2kit run: budget, seed, evaluation, quiet logging, checkpoints (with
    ``--runs-dir`` every ``--checkpoint-every`` env steps, replay included, so that a killed sweep goes on; else one
    at the end), the user's ``--set``, then the series' own (last, so that sac_zero_state stays what it says)."""
    every = job["checkpoint_every"] if job["runs_dir"] else 0
    return [f"run.seed={job['seed']}", f"run.total_env_steps={job['steps']}", f"run.eval_every={job['eval_every']}",
            f"run.eval_episodes={job['eval_episodes']}", "logging.progress=false", "logging.tensorboard=false",
            f"logging.run_dir={runs_dir}", f"checkpoints.every_env_steps={every}", "checkpoints.keep=1",
            f"checkpoints.save_replay={'true' if every else 'false'}",
            *job["overrides"], *(ZERO_STATE if job["series"] == "sac_zero_state" else ())]


def learning_settings(config: dict) -> dict:
    """A run's config as ``config.yaml`` holds it, less what does not change learning (logging, checkpoints)."""
    return {section: values for section, values in config.items() if section not in ("logging", "checkpoints")}


def unfinished_run(run_dir: Path, config: dict) -> bool:
    """Whether ``run_dir`` holds a run of this very ``config`` (``to_dict()``) that stopped before its budget and
    left a checkpoint: a sweep killed mid-run (Ctrl-C, SIGTERM, the machine going away) goes on from there."""
    if not any((run_dir / "checkpoints").glob("ckpt-*")) or not (run_dir / "config.yaml").is_file():
        return False
    summary = run_dir / "summary.json"
    if summary.is_file() and json.loads(summary.read_text()).get("stopped_by") == "run.total_env_steps":
        return False
    stored = yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
    return learning_settings(stored) == learning_settings(config)


def per_task(items: list[str] | None, cast: Callable[[str], Any], defaults: dict[str, Any], flag: str,
             need_task: bool = False) -> dict[str, Any]:
    """``--flag VALUE`` (every task) and ``--flag TASK=VALUE`` (one task) over per-task ``defaults``; ValueError
    naming the flag for an unknown task or a value ``cast`` refuses."""
    values = dict(defaults)
    for item in items or []:
        task, sep, text = item.partition("=")
        if not sep and need_task:
            raise ValueError(f"{flag} {item!r}: expected TASK=VALUE, TASK one of {', '.join(TASKS)}")
        if sep and task not in TASKS:
            raise ValueError(f"{flag} {item!r}: unknown task {task!r}; tasks: {', '.join(TASKS)}")
        try:
            value = cast(text if sep else item)
        except ValueError:
            raise ValueError(f"{flag} {item!r}: {text if sep else item!r} is not a valid value") from None
        values.update({task: value} if sep else dict.fromkeys(values, value))
    return values


def positive_int(text: str) -> int:
    """An integer >= 1 (argparse-style ValueError otherwise)."""
    value = int(text)
    if value < 1:
        raise ValueError(f"{value} < 1")
    return value


# --- curves and scores
def read_curve(path: Path) -> list[tuple[int, float, float]]:
    """``(env_steps, eval_mean, eval_std)`` rows of an r2d2kit run's ``metrics.csv`` (empty if it has none)."""
    if not path.is_file():
        return []
    with open(path, newline="") as handle:
        return [(int(float(row["env_steps"])), float(row["eval_mean"]), float(row["eval_std"]))
                for row in csv.DictReader(handle)]


def final_mean(curve: list) -> float | None:
    """The last evaluation's mean return; None without any."""
    return float(curve[-1][1]) if curve else None


def best_mean(curve: list) -> float | None:
    """The highest evaluation mean of a curve; None without any."""
    return max(float(row[1]) for row in curve) if curve else None


def off_grid(curve: list, eval_every: int) -> list[int]:
    """Evaluation steps that are not multiples of ``eval_every``: there the episodes differ from the peers'."""
    return [int(row[0]) for row in curve if int(row[0]) % eval_every]


def lower_bound(reference: float, fraction: float) -> float:
    """The lowest return within ``fraction`` of ``reference`` (higher is better): -150 -> -165, 1000 -> 900."""
    return reference - fraction * abs(reference)


def verdict(ok: bool) -> str:
    """A judged check's word, as the other benchmarks print it beside its bound."""
    return "ok" if ok else "MISSED"


def check_line(kind: str, series: str, other: str | None, finals: dict[str, float | None]) -> str:
    """One check on the means over seeds of the final returns: ``within`` (>= other's minus WITHIN of its size) and
    ``ahead`` (> other's) print bound, value and ok / MISSED; ``beside`` prints a value; ``versus`` who wins by how
    much. A series without runs: not judged."""
    mine = finals.get(series)
    theirs = finals.get(other) if other else None
    if mine is None or (other and theirs is None):
        missing = " and ".join(s for s in (series, other) if s and finals.get(s) is None)
        return f"{kind} {series}" + (f" / {other}" if other else "") + f": not judged (no runs of {missing})"
    if kind == "within":
        bound = lower_bound(theirs, WITHIN)
        return (f"{series} final {mine:.1f} >= {bound:.1f} ({other} final {theirs:.1f} less {WITHIN:.0%} of its "
                f"size): {verdict(mine >= bound)}")
    if kind == "ahead":
        return f"{series} final {mine:.1f} > {other} final {theirs:.1f}: {verdict(mine > theirs)}"
    if kind == "beside":
        return f"beside: {series} final {mine:.1f}"
    winner, loser = (series, other) if mine >= theirs else (other, series)
    margin = abs(mine - theirs)
    share = f" ({margin / abs(finals[loser]):.0%} of {loser}'s size)" if finals[loser] else ""
    return f"{series} final {mine:.1f} vs {other} final {theirs:.1f}: {winner} wins by {margin:.1f}{share}"


def mean_curve(curves: list[list]) -> dict[int, float]:
    """Mean over seeds of the evaluation means at each env step the curves share."""
    steps = set.intersection(*(set(int(row[0]) for row in curve) for curve in curves)) if curves else set()
    return {step: float(np.mean([row[1] for curve in curves for row in curve if int(row[0]) == step]))
            for step in sorted(steps)}


# --- one run (child process)
@contextlib.contextmanager
def run_directory(job: dict) -> Iterator[Path]:
    """The r2d2kit runs' parent directory: ``--runs-dir``, else a temporary one, deleted once the run's
    ``metrics.csv`` and ``summary.json`` were read."""
    if job["runs_dir"]:
        yield Path(job["runs_dir"])
        return
    with tempfile.TemporaryDirectory(prefix="bench-continuous-") as scratch:
        yield Path(scratch)


def run_path(runs_dir: Path, job: dict, config: dict) -> tuple[Path, bool]:
    """``runs_dir``/TASK-SERIES-seedN and whether the run resumes there: an unfinished run of the same config goes
    on; any other run there is kept and this one gets a new suffix."""
    from r2d2kit.training.run_directory import holds_run

    run_dir = runs_dir / f"{job['task']}-{job['series']}-seed{job['seed']}"
    if not holds_run(run_dir):
        return run_dir, False
    if unfinished_run(run_dir, config):
        return run_dir, True
    return run_dir.with_name(f"{run_dir.name}-{time.strftime('%Y%m%d-%H%M%S')}"), False


def run_sac(job: dict) -> dict:
    """r2d2kit's SAC as ``python -m r2d2kit.train CONFIG --set ...`` runs it: load_config, Trainer, fit; the curve
    from the run directory's metrics.csv, the counts from its summary.json. ``eval_seconds`` is fit's time outside
    training: evaluations, and the actors' start-up and the final checkpoint, which the Trainer leaves out too."""
    from r2d2kit.training.config import load_config
    from r2d2kit.training.trainer import Trainer

    line = (f"  {job['series']} {job['task']} seed {job['seed']} " "{steps:>7,} env steps: eval {mean:8.1f} +- "
            "{std:6.1f}, training episodes {train_return:8.1f}, {updates:,} updates, {seconds:.0f} s")
    with run_directory(job) as runs_dir:
        config = load_config(job["config"], sac_overrides(job, runs_dir))
        run_dir, resume = run_path(runs_dir, job, config.to_dict())
        began = time.perf_counter()
        trainer = Trainer(config, run_dir, callbacks=[harness.evaluation_callback(line)], resume=resume)
        trained_before = float(trainer.counters["train_seconds"])  # a resumed run's training before this segment
        if resume:
            print(f"  resuming {run_dir} from {trainer.resumed_from.name} ({trainer.counters['env_steps']:,} env "
                  "steps)", flush=True)
        trainer.fit()
        fit_seconds = time.perf_counter() - began
        curve = read_curve(run_dir / "metrics.csv")
        summary = json.loads((run_dir / "summary.json").read_text())
        kept = str(run_dir) if job["runs_dir"] else None
    train_seconds = float(summary["train_seconds"])
    return dict(curve=curve, env_steps=int(summary["env_steps"]), updates=int(summary["updates"]),
                train_seconds=train_seconds, eval_seconds=fit_seconds - (train_seconds - trained_before),
                run_dir=kept, resumed=resume, stopped_by=summary.get("stopped_by"),
                config=dict(config.to_dict(), path=job["config"]))


def make_env(env_id: str):
    """``gymnasium.make(env_id)`` with r2d2kit's ids registered (what an r2d2kit config without kwargs or wrappers
    makes)."""
    import gymnasium as gym

    import r2d2kit.envs  # noqa: F401  (registers PendulumNoVel-v1 and HalfCheetah-P-v5)

    return gym.make(env_id)


def model_kwargs(settings: dict) -> dict:
    """The peer's keyword arguments with the activation's name turned into torch's class."""
    import torch

    kwargs = json.loads(json.dumps(settings["kwargs"]))
    policy = kwargs.get("policy_kwargs")
    if policy and "activation_fn" in policy:
        policy["activation_fn"] = getattr(torch.nn, policy["activation_fn"])
    return kwargs


def peer_evaluation(job: dict, make: Callable, normalizer, started: Callable[[], float]):
    """An SB3 callback: a greedy evaluation (harness.greedy_eval_sb3: the Trainer's envs, seeds and quotas) at each
    multiple of ``eval_every`` env steps, timed apart; it stops the run at the budget exactly."""
    from stable_baselines3.common.callbacks import BaseCallback

    name = f"{job['series']} {job['task']} seed {job['seed']}"

    class Evaluate(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.curve: list[tuple[int, float, float]] = []
            self.eval_seconds = 0.0
            self.next_eval = job["eval_every"]

        def _on_step(self) -> bool:
            while self.num_timesteps >= self.next_eval:
                now = time.perf_counter()
                returns = harness.greedy_eval_sb3(self.model, make, job["eval_episodes"],
                                                  job["seed"] + EVAL_SEED_OFFSET + self.num_timesteps, normalizer)
                self.curve.append((int(self.num_timesteps), float(returns.mean()), float(returns.std())))
                recent = [info["r"] for info in self.model.ep_info_buffer]
                train = float(np.mean(recent)) if recent else float("nan")
                seconds = now - started() - self.eval_seconds
                print(f"  {name} {self.num_timesteps:>7,} env steps: eval {returns.mean():8.1f} +- "
                      f"{returns.std():6.1f}, training episodes {train:8.1f}, {seconds:.0f} s", flush=True)
                self.eval_seconds += time.perf_counter() - now
                self.next_eval += job["eval_every"]
            return self.num_timesteps < job["steps"]

    return Evaluate()


def run_peer(job: dict) -> dict:
    """SB3 SAC or sb3-contrib RecurrentPPO for ``steps`` env steps (PPO: its partial last rollout is not trained on),
    ``torch_threads`` torch threads."""
    import torch
    from sb3_contrib import RecurrentPPO
    from stable_baselines3 import SAC
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    settings = job["peer"]
    torch.set_num_threads(job["torch_threads"])
    make = functools.partial(make_env, settings["env_id"])
    venv = make_vec_env(make, n_envs=settings["n_envs"], seed=job["seed"])
    gamma = settings["normalize_gamma"]
    normalizer = None if gamma is None else VecNormalize(venv, gamma=gamma)
    algorithm = SAC if settings["algorithm"] == "SAC" else RecurrentPPO
    model = algorithm(settings["policy"], normalizer or venv, seed=job["seed"], device="cpu", verbose=0,
                      **model_kwargs(settings))
    began = time.perf_counter()
    evaluate = peer_evaluation(job, make, normalizer, lambda: began)
    model.learn(total_timesteps=job["steps"], callback=evaluate)
    train_seconds = time.perf_counter() - began - evaluate.eval_seconds
    return dict(curve=evaluate.curve, env_steps=int(model.num_timesteps), updates=gradient_steps(model),
                train_seconds=train_seconds, eval_seconds=evaluate.eval_seconds,
                config=dict(settings, torch_threads=torch.get_num_threads()))


def gradient_steps(model) -> int:
    """Gradient steps taken, from the schedule (SB3 keeps the count private): SAC takes ``gradient_steps`` every
    ``train_freq`` env steps after ``learning_starts``; RecurrentPPO ``n_epochs`` epochs per rollout, each of
    ceil(rollout / batch_size) minibatches."""
    steps = int(model.num_timesteps)
    if not hasattr(model, "n_epochs"):
        return max(0, steps - int(model.learning_starts)) // int(model.train_freq.frequency) * int(model.gradient_steps)
    rollout = int(model.n_steps) * int(model.n_envs)
    return steps // rollout * int(model.n_epochs) * -(-rollout // int(model.batch_size))


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and its reaped children (the actors of a processes runner)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def child(job: dict) -> dict:
    """One (series, task, seed) run in this process."""
    result = (run_sac if job["series"] in SAC_SERIES else run_peer)(job)
    curve = result["curve"]
    return dict(result, final=final_mean(curve), best=best_mean(curve), cpu_seconds=cpu_seconds(), error=None)


# --- report
def series_stats(runs: list[dict], task: str, series: str) -> dict:
    """The finished and failed runs of a series on a task, and the means over seeds of their finals."""
    mine = [r for r in runs if r["task"] == task and r["series"] == series]
    done = [r for r in mine if r.get("error") is None]
    final = harness.mean_std([r["final"] for r in done])
    return dict(done=done, failed=len(mine) - len(done), final=final[0] if final else None)


def mean_of(runs: list[dict], key: str) -> str:
    """The mean of a key over runs, as a whole number ("-" for no runs)."""
    return f"{np.mean([r[key] for r in runs]):,.0f}" if runs else "-"


def task_table(runs: list[dict], task: str, series: list[str], markdown: bool) -> str:
    """Per series: seeds, final and best-of-curve returns (mean +- std), training, process and CPU seconds, RSS."""
    rows = []
    for name in series:
        s = series_stats(runs, task, name)
        done = s["done"]
        if not done and not s["failed"]:
            continue
        rows.append([SERIES_NAMES[name], str(len(done)), harness.fmt_mean_std([r["final"] for r in done], ".1f", False),
                     harness.fmt_mean_std([r["best"] for r in done], ".1f", False),
                     fmt(max((r["env_steps"] for r in done), default=None), ","), mean_of(done, "train_seconds"),
                     mean_of(done, "wall_seconds"), mean_of(done, "cpu_seconds"),
                     f"{max(r['peak_rss_mb'] for r in done):,.0f} MB" if done else "-", str(s["failed"])])
    header = ["series", "n", "final (mean +- std)", "best of curve (mean +- std)", "env steps", "training s",
              "process wall s", "CPU s", "peak RSS (max)", "failed"]
    return table(header, rows, markdown, right=range(1, 10)) if rows else "(no runs)"


def curve_table(runs: list[dict], task: str, series: list[str], markdown: bool) -> str:
    """The greedy curves: mean over seeds of each evaluation, a column per series."""
    curves = {name: mean_curve([r["curve"] for r in series_stats(runs, task, name)["done"]]) for name in series}
    curves = {name: curve for name, curve in curves.items() if curve}
    steps = sorted(set().union(*curves.values())) if curves else []
    rows = [[f"{step:,}", *(fmt(curve.get(step), ".1f") for curve in curves.values())] for step in steps]
    return table(["env steps", *(SERIES_NAMES[name] for name in curves)], rows, markdown) if rows else ""


def report(runs: list[dict], tasks: list[str], series: list[str], markdown: bool) -> str:
    """Per task: the series table, the checks (bound beside value), the greedy curves; notes once at the end."""
    lines = []
    for task in tasks:
        spec = TASKS[task]
        finals = {name: series_stats(runs, task, name)["final"] for name in SERIES}
        lines += [f"## {spec.label} ({spec.masked_id}; full state {spec.full_id})", "",
                  task_table(runs, task, series, markdown), ""]
        lines += [f"- check ({task}): {check_line(kind, mine, other, finals)}" for kind, mine, other in CHECKS[task]]
        lines += ["", curve_table(runs, task, series, markdown), ""]
        for r in runs:
            steps = off_grid(r.get("curve", []), r["eval_every"]) if r["task"] == task else []
            if steps:
                lines.append(f"- note: {r['series']} seed {r['seed']} evaluated at {steps[:3]} env steps, off the "
                             f"multiples of {r['eval_every']:,}: other episodes than the other series played")
    lines += ["- evaluation: every series the same way: deterministic episodes on min(episodes, 8) envs of a "
              "SyncVectorEnv reset with seed run.seed + 7919 + env steps (env i: + i), each env a fixed quota of its "
              "first episodes (r2d2kit's Trainer; the peers through harness.greedy_eval_sb3).",
              "- final: the last greedy evaluation's mean return; best of curve: the highest evaluation mean of a run; "
              "mean +- std over seeds, n seeds. Checks compare means over seeds of the finals. Training s excludes "
              "evaluations; process wall s, CPU s (user + system, with child processes) and peak RSS (ru_maxrss) "
              "are the run's child process, imports and evaluations included.",
              "- RecurrentPPO trains whole rollouts only (the zoo's PendulumNoVel: 4 x 1024 env steps) and the zoo's "
              "budgets are 100k (PendulumNoVel) and 1M (HalfCheetah) env steps: at these budgets it is under-trained "
              "by its own schedule. SB3 SAC's zoo budgets are 20k (Pendulum) and 1M (HalfCheetah)."]
    return "\n".join(lines)


def plot(runs: list[dict], tasks: list[str], series: list[str], path: str) -> None:
    panels = {TASKS[task].label: {SERIES_NAMES[name]: [r["curve"] for r in series_stats(runs, task, name)["done"]]
                                  for name in series} for task in tasks}
    harness.panel_plot(path, panels, "Hidden velocities: mean over seeds (line), min-max over seeds (band)", cols=2)


# --- the command line
def parse_args(argv: list[str] | None = None):
    p = harness.arg_parser(__doc__, "quick", "markdown", "json", "resume", "png", "set", "seeds", "torch-threads")
    p.add_argument("--tasks", nargs="+", choices=list(TASKS), default=list(TASKS), help="default both")
    p.add_argument("--series", nargs="+", choices=SERIES, default=list(SERIES), help="default all five")
    p.add_argument("--steps", nargs="+", metavar="[TASK=]N", help="env-step budget of every series (default "
                   + ", ".join(f"{t} {s.steps:,}" for t, s in TASKS.items()) + f"; --quick {QUICK['steps']:,})")
    every = ", ".join(f"{t} {s.eval_every:,}" for t, s in TASKS.items())
    p.add_argument("--eval-every", nargs="+", metavar="[TASK=]N", help="env steps between evaluations, a multiple of "
                   f"4 (RecurrentPPO steps 4 envs) (default {every}; --quick {QUICK['eval_every']})")
    p.add_argument("--eval-episodes", type=int, default=None, help=f"greedy episodes per evaluation (default 10; "
                   f"--quick {QUICK['eval_episodes']})")
    p.add_argument("--config", nargs="+", metavar="TASK=PATH", help="r2d2kit config of the sac series (default "
                   + ", ".join(f"{t}={s.config}" for t, s in TASKS.items()) + ")")
    p.add_argument("--runs-dir", default=None, help="keep each r2d2kit run directory in DIR/TASK-SERIES-seedN; a run "
                   "stopped there before its budget (same config) goes on from its newest checkpoint")
    p.add_argument("--checkpoint-every", type=positive_int, default=10_000, metavar="N",
                   help="with --runs-dir, env steps between an r2d2kit run's checkpoints (replay included; default "
                        "10,000): what a killed sweep loses at most")
    args = p.parse_args(argv)
    try:
        check_args(args)
    except ValueError as error:
        p.error(str(error))
    return args


def check_args(args) -> None:
    """Fill the defaults (per task, --quick) and check them; ValueError naming the flag."""
    quick = args.quick
    args.seeds = args.seeds if args.seeds is not None else ([0] if quick else [0, 1, 2])
    args.tasks = list(dict.fromkeys(args.tasks))
    args.series = [name for name in SERIES if name in args.series]
    args.steps = per_task(args.steps, positive_int, {t: QUICK["steps"] if quick else s.steps for t, s in
                                                     TASKS.items()}, "--steps")
    args.eval_every = per_task(args.eval_every, positive_int, {t: QUICK["eval_every"] if quick else s.eval_every
                                                               for t, s in TASKS.items()}, "--eval-every")
    if args.eval_episodes is None:
        args.eval_episodes = QUICK["eval_episodes"] if quick else 10
    if args.eval_episodes < 1:
        raise ValueError(f"--eval-episodes must be >= 1, got {args.eval_episodes}")
    if quick:
        args.set = [f"run.warmup_steps={QUICK['warmup']}", *args.set]
    configs = per_task(args.config, str, {t: s.config for t, s in TASKS.items()}, "--config", need_task=True)
    for task in args.tasks:
        if args.eval_every[task] % 4 or args.eval_every[task] > args.steps[task]:
            raise ValueError(f"--eval-every {args.eval_every[task]:,} for {task}: must be a multiple of 4 "
                             "(RecurrentPPO steps 4 envs; only then do all series evaluate at the same env steps, so "
                             f"on the same episodes) and at most the budget {args.steps[task]:,}")
        if set(args.series) & set(SAC_SERIES):
            found = resolve_config(configs[task])
            if found is None:
                raise ValueError(f"no r2d2kit config for {task} at {configs[task]!r}; give one with --config "
                                 f"{task}=PATH, or leave out the sac series (--series sb3_sac_full ...)")
            configs[task] = str(found)
    args.config = configs


def plan(args) -> list[dict]:
    """Every run of the sweep, seeds outermost, so that a partial sweep compares like with like."""
    runs = []
    for task in args.tasks:
        for seed in args.seeds:
            for series in args.series:
                run = dict(series=series, task=task, seed=seed, steps=args.steps[task],
                           eval_every=args.eval_every[task], eval_episodes=args.eval_episodes)
                if series in SAC_SERIES:
                    run["overrides"] = list(args.set)
                runs.append(dict(run, settings=settings_digest(run, args)))
    return runs


def settings_digest(run: dict, args) -> str:
    """A digest of what else decides a run: the r2d2kit config and ``--set``, or the peer's settings. Taken again
    just before each run: others may edit a config while a sweep runs."""
    if run["series"] in SAC_SERIES:
        return digest([config_digest(args.config[run["task"]]), list(args.set)])
    return digest(peer_settings(run["series"], run["task"], args.quick))


# job_extras' keys: not stored with the run
EXTRA_KEYS = ("torch_threads", "runs_dir", "checkpoint_every", "config", "peer")


def job_extras(run: dict, args) -> dict:
    """What the child needs beyond the run's identity: the config, or the peer's settings, and the machine's."""
    extras = dict(torch_threads=args.torch_threads, runs_dir=args.runs_dir, checkpoint_every=args.checkpoint_every)
    if run["series"] in SAC_SERIES:
        return dict(extras, config=args.config[run["task"]])
    return dict(extras, peer=peer_settings(run["series"], run["task"], args.quick))


def header(args) -> dict:
    return dict(machine=harness.machine_line(DISTS), args=vars(args), eval_seed_offset=EVAL_SEED_OFFSET,
                sb3_sac=SB3_SAC, sb3_sac_source=SB3_SAC_SOURCE, recurrent_ppo=RECURRENT_PPO,
                recurrent_ppo_source=RECURRENT_PPO_SOURCE)


def main(argv: list[str] | None = None) -> dict:
    harness.serve_job(child)
    args = parse_args(argv)
    began, load_start = harness.start(DISTS)
    tasks = ", ".join(f"{t} {args.steps[t]:,} env steps, eval every {args.eval_every[t]:,}" for t in args.tasks)
    overrides = f"; r2d2kit overrides {' '.join(args.set)}" if args.set else ""
    print(f"tasks: {tasks}; {args.eval_episodes} greedy episodes per evaluation; seeds "
          f"{' '.join(map(str, args.seeds))}; series {' '.join(args.series)}{overrides}", flush=True)
    results = Results(args.json, lambda run: (run["series"], run["task"], run["seed"]), args.resume,
                      lambda: header(args))
    for run, result in sweep(args, results):
        results.add(dict(result, **run))
    shown = [r for r in results.runs if r["task"] in args.tasks and r["seed"] in args.seeds
             and r["series"] in args.series]
    harness.finish(report(shown, args.tasks, args.series, args.markdown), began, load_start, args.png,
                   lambda png: plot(shown, args.tasks, args.series, png))
    if args.json:
        results.save()
        print(f"- results written to {args.json}")
    return dict(runs=results.runs)


def sweep(args, results: Results) -> Iterator[tuple[dict, dict]]:
    """The runs ``results`` lacks, one child each (its job: the run and :func:`job_extras`); yields each run as
    planned and its result (a failed run: its error and an empty curve)."""
    label = lambda r: f"{r['series']} {r['task']} seed {r['seed']} ({r['steps']:,} env steps)"  # noqa: E731
    for job, result in harness.sweep(__file__, plan(args), results, label,
                                     before=lambda run: dict(run, settings=settings_digest(run, args),
                                                             **job_extras(run, args))):
        run = {key: value for key, value in job.items() if key not in EXTRA_KEYS}
        if result.get("error"):
            result.update(curve=[], final=None, best=None)
        else:
            print(f"  done: final {result['final']:.1f}, best {result['best']:.1f}, training "
                  f"{result['train_seconds']:.0f} s, process {result['wall_seconds']:.0f} s, CPU "
                  f"{result['cpu_seconds']:.0f} s, peak RSS {result['peak_rss_mb']:,.0f} MB", flush=True)
        yield run, result

if __name__ == "__main__":
    main()
