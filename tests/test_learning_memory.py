"""CI learning test: R2D2 solves a task that needs memory; the same network without memory cannot.

CueMemory shows a cue (+1/-1) first, then blank steps, then pays +1 for the matching action.
A policy that cannot remember earns 0 on average.
"""

import numpy as np

from r2d2kit.agent.learner import R2D2Config
from r2d2kit.envs.memory import CueMemoryEnv
from r2d2kit.models import MLPModel, QNetwork
from r2d2kit.runners import LocalRunConfig, evaluate, train_local

DELAY = 6


def make_env():
    return CueMemoryEnv(delay=DELAY)


def test_r2d2_reaches_the_optimum_on_cue_memory():
    config = R2D2Config(burn_in=2, trace_length=DELAY + 3, period=DELAY + 3, n_step=1, gamma=0.9, batch_size=32,
                        target_update_period=100, learning_rate=1e-3, adam_epsilon=1e-6)
    network = QNetwork((2,), 2, MLPModel((32,)), lstm_units=32, head_units=32)
    run = LocalRunConfig(total_env_steps=30_000, num_envs=4, replay_capacity=20_000, warmup_steps=500,
                         updates_per_env_step=0.25, eval_every=1_000, eval_episodes=40, seed=0, progress=False,
                         stop_when=lambda mean_return: mean_return >= 1.0)
    result = train_local(make_env, network, config, run)
    assert result.final_eval == 1.0, result.evaluations
    # a fresh look with other seeds: the learned policy is right every time
    returns = evaluate(network.actor(8), make_env, episodes=100, seed=123)
    assert returns.mean() == 1.0


def test_without_memory_the_task_is_a_coin_flip():
    """Reset the LSTM state before every step: the network is then feed-forward and must guess."""
    network = QNetwork((2,), 2, MLPModel((32,)), lstm_units=32, head_units=32)
    actor = network.actor(8)
    rng = np.random.default_rng(0)
    env_returns = []
    for episode in range(200):
        env = make_env()
        obs, _ = env.reset(seed=episode)
        done, total = False, 0.0
        while not done:
            actor.reset()
            q = actor.q_values(np.repeat(obs[None], 8, axis=0), np.zeros(8), np.zeros(8))[0]
            obs, reward, terminated, truncated, _ = env.step(int(np.argmax(q + 1e-6 * rng.normal(size=2))))
            total += reward
            done = terminated or truncated
        env_returns.append(total)
    assert abs(np.mean(env_returns)) < 0.5  # the final observation is identical for both cues
