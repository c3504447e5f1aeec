"""Evaluation episodes of an agent's evaluation policy (R2D2's greedy one, SAC's deterministic one), used
by the trainer, ``python -m r2d2kit.evaluate`` and the agents."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from r2d2kit.runners.episodes import EpisodeTracker

if TYPE_CHECKING:
    import gymnasium as gym

    from r2d2kit.agent.seam import Policy

# evaluations run min(episodes, MAX_EVAL_ENVS) envs side by side: the trainer's and `python -m r2d2kit.evaluate`'s
# episodes are the same ones (and benchmarks play their peers on them)
MAX_EVAL_ENVS = 8


@dataclass
class Evaluation:
    """Greedy episodes: their returns and, for envs that report ``info["is_success"]`` (goal envs), successes."""

    returns: np.ndarray  # [episodes]
    successes: np.ndarray | None  # [episodes] bool, None if the env reports no is_success

    @property
    def success_rate(self) -> float | None:
        """Fraction of episodes whose last step reported ``is_success`` (None without it)."""
        return None if self.successes is None else float(np.mean(self.successes))


def evaluate(policy: Policy, make_env: Callable[[], gym.Env], episodes: int, seed: int, *,
             frames: list[Any] | None = None, max_frames: int = 2000) -> Evaluation:
    """Episodes of an evaluation ``policy`` (e.g. :class:`~r2d2kit.agent.r2d2.policies.GreedyPolicy`),
    ``policy.num_envs`` at a time (its state is reset), reading ``info["is_success"]`` at each episode's
    last step.

    Each env contributes a fixed quota of its first episodes (``episodes`` split evenly over the
    envs), so that short episodes, which end first, are not over-represented.

    Args:
        frames: a list to record the first episode of env 0 into, one ``render()`` after its reset
            and one after each of its steps (``1 + length`` frames, at most ``max_frames``); the
            envs must be made with ``render_mode="rgb_array"``. None: nothing is rendered. (Typed
            ``list[Any]``: gymnasium types ``render()`` as any of its render modes' results.)
        max_frames: the most frames recorded.
    """
    import gymnasium as gym

    with policy.fixed_weights():  # the weights do not change during an evaluation: read them once
        envs = gym.vector.SyncVectorEnv([make_env] * policy.num_envs)
        obs, _ = envs.reset(seed=seed)
        recording = frames is not None
        if frames is not None:
            frames.append(envs.envs[0].render())
        policy.reset()
        quota = np.full(policy.num_envs, episodes // policy.num_envs)
        quota[: episodes % policy.num_envs] += 1
        returns: list[float] = []
        successes: list[bool] = []
        reports_success = False
        tracker = EpisodeTracker.for_space(policy.num_envs, envs.single_action_space)
        while len(returns) < episodes:
            action = policy.act(obs, tracker.prev_action, tracker.prev_reward)
            obs, reward, terminated, truncated, info = envs.step(action)
            ended, ended_returns, _, restart = tracker.record(action, reward, terminated, truncated)
            if frames is not None and recording:  # the frame after env 0's last step shows how its episode ended
                if len(frames) < max_frames:
                    frames.append(envs.envs[0].render())
                recording = not ended[0]
            counted = quota[ended] > 0
            returns.extend(ended_returns[counted].tolist())
            if "is_success" in info:
                reports_success = True
                successes.extend(np.asarray(info["is_success"], bool)[ended][counted].tolist())
            else:
                successes.extend([False] * int(counted.sum()))
            quota[np.flatnonzero(ended)[counted]] -= 1
            policy.reset(restart)
        envs.close()
    return Evaluation(np.asarray(returns[:episodes]), np.asarray(successes[:episodes]) if reports_success else None)
