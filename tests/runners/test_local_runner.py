"""Local runner: evaluation counts each env's first episodes (no bias towards short ones) and the
run reports where its time went."""

import gymnasium as gym
import keras
import numpy as np

from r2d2kit.agent.learner import R2D2Config
from r2d2kit.models import MLPModel, QNetwork
from r2d2kit.runners import LocalRunConfig, evaluate, train_local


class FixedLength(gym.Env):
    """Episodes whose length is set by the reset seed: seed s gives s + 1 steps of reward 1."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.length = seed + 1
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(1, np.float32), 1.0, self.t >= self.length, False, {}


def network():
    keras.utils.set_random_seed(0)
    return QNetwork((1,), 2, MLPModel((4,)), lstm_units=4, head_units=4)


def test_evaluate_takes_each_envs_first_episodes_not_the_first_to_finish():
    # env i has episodes of i + 1 steps (seed 0 + i); 8 episodes over 4 envs: two from each env.
    # Counting episodes as they finish would take env 0's short ones (1, 1, 1, ...) first.
    returns = evaluate(network().actor(4), FixedLength, episodes=8, seed=0)
    assert sorted(returns.tolist()) == [1, 1, 2, 2, 3, 3, 4, 4]
    returns = evaluate(network().actor(4), FixedLength, episodes=6, seed=0)
    assert sorted(returns.tolist()) == [1, 1, 2, 2, 3, 4]


def test_run_result_reports_learner_and_evaluation_time():
    config = R2D2Config(burn_in=1, trace_length=4, period=2, n_step=1, gamma=0.9, batch_size=4,
                        target_update_period=10, learning_rate=1e-3)
    run = LocalRunConfig(total_env_steps=400, num_envs=2, replay_capacity=1_000, warmup_steps=50,
                         updates_per_env_step=0.1, eval_every=200, eval_episodes=2, progress=False)
    result = train_local(lambda: FixedLength(), network(), config, run)
    assert result.updates > 0 and len(result.evaluations) == 2 == len(result.eval_times)
    assert 0.0 < result.learn_seconds < result.seconds
    assert 0.0 < result.eval_seconds < result.seconds
    assert 0.0 < result.eval_times[0] < result.eval_times[1] <= result.seconds - result.eval_seconds + 1e-6
