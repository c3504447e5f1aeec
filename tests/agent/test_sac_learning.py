"""Recurrent SAC learns a continuous memory task, fed by SequenceBuilder and SequenceReplayBuffer in a
hand-written acting loop (no trainer): ContinuousCue-v0 shows a cue in [-1, 1] at the first of 4 steps and
pays -(a - cue)^2 on every step, so a policy without memory earns at best -1 per episode."""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
import pytest

from r2d2kit.agent.sac.config import SACConfig
from r2d2kit.agent.sac.learner import SACLearner
from r2d2kit.agent.sac.networks import make_sac_networks
from r2d2kit.agent.sac.policy import SACPolicy
from r2d2kit.agent.seam import WindowLayout
from r2d2kit.envs.memory import ContinuousCueEnv
from r2d2kit.models.cores import state_fields
from r2d2kit.replay.sequence import SequenceReplayBuffer
from r2d2kit.replay.sequence_builder import SequenceBuilder
from r2d2kit.runners.episodes import EpisodeTracker

ENVS, LENGTH, UPDATES = 8, 4, 1500
MEMORYLESS_BEST = -(LENGTH - 1) / 3  # the first step answered exactly, the later ones with the cue's mean 0


def play(act, episodes: int, seed: int) -> float:
    """Mean return of ``act(obs, prev_action, prev_reward, restart)`` over ``episodes`` fresh episodes."""
    envs = gym.vector.SyncVectorEnv([lambda: ContinuousCueEnv(LENGTH)] * ENVS)
    obs, _ = envs.reset(seed=seed)
    tracker = EpisodeTracker(ENVS, (1,), np.float32)
    returns: list[float] = []
    restart = np.zeros(ENVS, bool)
    while len(returns) < episodes:
        action = act(obs, tracker.prev_action, tracker.prev_reward, restart)
        obs, reward, terminated, truncated, _ = envs.step(action)
        _, ended, _, restart = tracker.record(action, reward, terminated, truncated)
        returns.extend(ended.tolist())
    envs.close()
    return float(np.mean(returns[:episodes]))


@pytest.mark.slow
def test_recurrent_sac_learns_to_answer_a_cue_it_saw_steps_ago() -> None:
    started = time.process_time()
    layout = WindowLayout(burn_in=0, trace_length=LENGTH, period=LENGTH, n_step=1)
    networks = make_sac_networks((2,), [-1.0], [1.0], core="lstm", core_units=32, hidden_units=(64,))
    config = SACConfig(batch_size=32, actor_learning_rate=1e-3, critic_learning_rate=1e-3, alpha_learning_rate=1e-3,
                       gamma=0.9, tau=0.02)
    learner = SACLearner(networks, config, layout, seed=0)
    fields = state_fields(networks.state_spec())
    replay = SequenceReplayBuffer(20_000, {"obs": ((2,), "float32"), "action": ((1,), "float32")}, fields,
                                  burn_in=layout.burn_in, trace_length=layout.trace_length, n_step=layout.n_step,
                                  period=layout.period, sampler="uniform", seed=0)
    builder = SequenceBuilder(ENVS, layout.burn_in, layout.trace_length, layout.n_step, layout.period,
                              state_names=tuple(fields))
    policy = SACPolicy(networks, ENVS, seed=0)
    envs = gym.vector.SyncVectorEnv([lambda: ContinuousCueEnv(LENGTH)] * ENVS)
    obs, _ = envs.reset(seed=0)
    tracker = EpisodeTracker(ENVS, (1,), np.float32)
    while learner.updates < UPDATES:
        state = policy.get_state()
        action = policy.act(obs, tracker.prev_action, tracker.prev_reward)
        next_obs, reward, terminated, truncated, _ = envs.step(action)
        windows = builder.step(obs, action, reward, terminated, truncated, state)
        if windows is not None:
            replay.add_sequences(windows)
        _, _, _, restart = tracker.record(action, reward, terminated, truncated)
        policy.reset(restart)
        obs = next_obs
        if len(replay) >= config.batch_size:
            for _ in range(2):
                out = learner.train_from(replay)
    envs.close()
    assert np.isfinite(out["loss"]) and learner.is_finite()

    evaluation = SACPolicy(networks, ENVS, deterministic=True)

    def learned(obs, prev_action, prev_reward, restart):
        evaluation.reset(restart)
        return evaluation.act(obs, prev_action, prev_reward)

    rng = np.random.default_rng(1)
    learned_return = play(learned, 48, seed=100)
    random_return = play(lambda *_: rng.uniform(-1.0, 1.0, (ENVS, 1)).astype(np.float32), 48, seed=100)
    cpu = time.process_time() - started
    print(f"learned {learned_return:.3f}, random {random_return:.3f}, memoryless best {MEMORYLESS_BEST:.3f}, "
          f"alpha {learner.alpha:.3f}, {cpu:.0f} s CPU")
    assert random_return < -2.0  # uniform actions: -2/3 a step
    assert learned_return > MEMORYLESS_BEST + 0.25, (learned_return, random_return)  # it remembers the cue
    assert learned_return > random_return + 1.5
