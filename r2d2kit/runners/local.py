"""Single-process R2D2: vector env -> stateful actor -> SequenceBuilder -> replay -> learner.

The actor and the learner share one set of weights in memory, so the actor always acts with the
newest parameters. Per-env Ape-X epsilons give a spread of exploration within one vector env.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import gymnasium as gym
import numpy as np
from tqdm.auto import tqdm

from r2d2kit.agent.learner import R2D2Config, R2D2Learner, make_sequence_replay
from r2d2kit.agent.policies import apex_epsilons, greedy
from r2d2kit.models.qnetwork import QNetwork, StatefulActor
from r2d2kit.replay import SequenceBuilder
from r2d2kit.runners.episodes import EpisodeTracker
from r2d2kit.runners.experience import ActingLoop


@dataclass
class LocalRunConfig:
    """How long and how fast to run, independent of the R2D2 hyper-parameters."""

    total_env_steps: int = 100_000
    num_envs: int = 4
    replay_capacity: int = 100_000  # steps
    warmup_steps: int = 2_000  # env steps stored before the first update
    updates_per_env_step: float = 0.25  # update-to-data ratio
    epsilon: float = 0.4  # Ape-X: eps_i = epsilon ** (1 + alpha * i / (N - 1))
    epsilon_alpha: float = 7.0
    eval_every: int = 5_000  # env steps; 0 disables periodic evaluation
    eval_episodes: int = 10
    seed: int = 0
    progress: bool = True
    stop_when: Callable[[float], bool] | None = None  # e.g. lambda mean_return: mean_return >= 475


@dataclass
class RunResult:
    """What a run measured: evaluation curve, counters and timings."""

    env_steps: int = 0
    updates: int = 0
    seconds: float = 0.0
    evaluations: list[tuple[int, float, float]] = field(default_factory=list)  # (env steps, mean, std)
    episode_returns: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    eval_times: list[float] = field(default_factory=list)  # training seconds (evaluations excluded) per evaluation
    learn_seconds: float = 0.0  # in sample + train + update_priorities
    eval_seconds: float = 0.0  # in periodic evaluations (part of ``seconds``)

    @property
    def final_eval(self) -> float:
        """Mean greedy return of the last evaluation (nan if none ran)."""
        return self.evaluations[-1][1] if self.evaluations else float("nan")


def evaluate(actor: StatefulActor, make_env: Callable[[], gym.Env], episodes: int, seed: int) -> np.ndarray:
    """Greedy returns of ``episodes`` episodes, ``actor.num_envs`` at a time (the actor's state is reset).

    Each env contributes a fixed quota of its first episodes (``episodes`` split evenly over the
    envs), so that short episodes, which end first, are not over-represented.
    """
    return evaluate_episodes(actor, make_env, episodes, seed).returns


@dataclass
class Evaluation:
    """Greedy episodes: their returns and, for envs that report ``info["is_success"]`` (goal envs), successes."""

    returns: np.ndarray  # [episodes]
    successes: np.ndarray | None  # [episodes] bool, None if the env reports no is_success

    @property
    def success_rate(self) -> float | None:
        """Fraction of episodes whose last step reported ``is_success`` (None without it)."""
        return None if self.successes is None else float(np.mean(self.successes))


def evaluate_episodes(actor: StatefulActor, make_env: Callable[[], gym.Env], episodes: int, seed: int) -> Evaluation:
    """:func:`evaluate` that also reads ``info["is_success"]`` at each episode's last step."""
    with actor.fixed_weights():  # the weights do not change during an evaluation: read them once
        return _greedy_episodes(actor, make_env, episodes, seed)


def _greedy_episodes(actor: StatefulActor, make_env: Callable[[], gym.Env], episodes: int, seed: int) -> Evaluation:
    envs = gym.vector.SyncVectorEnv([make_env] * actor.num_envs)
    obs, _ = envs.reset(seed=seed)
    actor.reset()
    quota = np.full(actor.num_envs, episodes // actor.num_envs)
    quota[: episodes % actor.num_envs] += 1
    returns: list[float] = []
    successes: list[bool] = []
    reports_success = False
    tracker = EpisodeTracker(actor.num_envs)
    while len(returns) < episodes:
        action = greedy(actor.q_values(obs, tracker.prev_action, tracker.prev_reward))
        obs, reward, terminated, truncated, info = envs.step(action)
        ended, ended_returns, _, restart = tracker.record(action, reward, terminated, truncated)
        counted = quota[ended] > 0
        returns.extend(ended_returns[counted].tolist())
        if "is_success" in info:
            reports_success = True
            successes.extend(np.asarray(info["is_success"], bool)[ended][counted].tolist())
        else:
            successes.extend([False] * int(counted.sum()))
        quota[np.flatnonzero(ended)[counted]] -= 1
        actor.reset(restart)
    envs.close()
    return Evaluation(np.asarray(returns[:episodes]), np.asarray(successes[:episodes]) if reports_success else None)


def train_local(make_env: Callable[[], gym.Env], network: QNetwork, config: R2D2Config,
                run: LocalRunConfig | None = None,
                on_evaluation: Callable[[dict], None] | None = None) -> RunResult:
    """Train R2D2 in this process and return the measured curve.

    Args:
        make_env: builds one environment (a gymnasium vector env of ``run.num_envs`` is made from it).
        network: the online Q-network; its observation shape and actions must match the env.
        config: R2D2 hyper-parameters.
        run: budget, exploration, evaluation and seed.
        on_evaluation: called after each evaluation with ``env_steps``, ``updates``, ``seconds``,
            ``eval_mean``, ``eval_std``, ``train_return`` (mean of the last 20 episodes) and ``loss``.
    """
    run = run or LocalRunConfig()
    envs = gym.vector.SyncVectorEnv([make_env] * run.num_envs)
    learner = R2D2Learner(network, config)
    actor = network.actor(run.num_envs, follow_weights=False)  # told after each round of updates (below)
    eval_actor = network.actor(min(run.eval_episodes, 8)) if run.eval_every else None
    builder = SequenceBuilder(run.num_envs, config.burn_in, config.trace_length, config.n_step, config.period)
    buffer = make_sequence_replay(network, config, run.replay_capacity, seed=run.seed)
    epsilons = apex_epsilons(run.num_envs, run.epsilon, run.epsilon_alpha)

    result = RunResult()
    loop = ActingLoop(envs, actor, builder, epsilons, run.seed)
    update_credit = 0.0
    next_eval = run.eval_every
    start = time.perf_counter()
    bar = tqdm(total=run.total_env_steps, disable=not run.progress, unit="step", dynamic_ncols=True)
    while result.env_steps < run.total_env_steps:
        # --- act
        windows, returns, _ = loop.step()
        if windows is not None:
            buffer.add_sequences(windows)
        result.episode_returns.extend(returns.tolist())
        new_steps = run.num_envs  # vector steps x envs, as gymnasium and SB3 count them
        result.env_steps += new_steps
        bar.update(new_steps)

        # --- learn
        if buffer.steps_stored >= run.warmup_steps and len(buffer):
            update_credit += run.updates_per_env_step * new_steps
            learn_start = time.perf_counter()
            while update_credit >= 1.0:
                out = learner.train_from(buffer)
                result.losses.append(float(out["loss"]))
                update_credit -= 1.0
                actor.refresh_weights()
            result.updates = learner.updates
            result.learn_seconds += time.perf_counter() - learn_start

        # --- evaluate
        if eval_actor is not None and result.env_steps >= next_eval:
            eval_start = time.perf_counter()
            result.eval_times.append(eval_start - start - result.eval_seconds)
            returns = evaluate(eval_actor, make_env, run.eval_episodes, seed=run.seed + result.env_steps)
            result.eval_seconds += time.perf_counter() - eval_start
            result.evaluations.append((result.env_steps, float(returns.mean()), float(returns.std())))
            if on_evaluation is not None:
                on_evaluation({
                    "env_steps": result.env_steps, "updates": learner.updates,
                    "seconds": round(time.perf_counter() - start, 2),
                    "eval_mean": float(returns.mean()), "eval_std": float(returns.std()),
                    "eval_min": float(returns.min()), "eval_max": float(returns.max()),
                    "train_return": float(np.mean(result.episode_returns[-20:])) if result.episode_returns else float("nan"),
                    "loss": float(np.mean(result.losses[-100:])) if result.losses else float("nan"),
                })
            next_eval += run.eval_every
            bar.set_postfix(eval=f"{returns.mean():.1f}", updates=learner.updates)
            if run.stop_when is not None and run.stop_when(float(returns.mean())):
                break
        elif result.episode_returns and result.env_steps % (50 * run.num_envs) == 0:
            bar.set_postfix(ret=f"{np.mean(result.episode_returns[-20:]):.1f}", updates=learner.updates)
    bar.close()
    envs.close()
    result.seconds = time.perf_counter() - start
    return result
