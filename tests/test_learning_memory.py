"""CI learning test: R2D2 solves a task that needs memory; the same network without memory cannot.

CueMemory shows a cue (+1/-1) first, then blank steps, then pays +1 for the matching action.
A policy that cannot remember earns 0 on average.
"""

from pathlib import Path

import numpy as np
import pytest

from r2d2kit.agent.r2d2 import QNetwork
from r2d2kit.agent.r2d2.policies import GreedyPolicy
from r2d2kit.envs.memory import CueMemoryEnv
from r2d2kit.models import MLPModel
from r2d2kit.runners.callbacks import Callback
from r2d2kit.runners.evaluation import evaluate
from r2d2kit.training.config import load_config
from r2d2kit.training.trainer import Trainer

DELAY = 6
CONFIG = Path(__file__).resolve().parent.parent / "configs" / "cue_memory.yaml"  # delay 6, the settings here


def make_env():
    return CueMemoryEnv(delay=DELAY)


class StopWhenSolved(Callback):
    def on_evaluation(self, trainer, row):
        return row["eval_mean"] < 1.0  # False (stop) once every greedy episode is right


@pytest.mark.slow
def test_r2d2_reaches_the_optimum_on_cue_memory(tmp_path):
    config = load_config(CONFIG, ["run.total_env_steps=30000", "logging.progress=false", "logging.tensorboard=false",
                                  "checkpoints.every_env_steps=0"])
    assert config.env.kwargs == {"delay": DELAY}
    trainer = Trainer(config, tmp_path / "run", callbacks=[StopWhenSolved()])
    summary = trainer.fit()
    assert summary["final_eval"] == 1.0, summary
    assert summary["stopped_by"] == "callback StopWhenSolved.on_evaluation"
    # a fresh look with other seeds: the learned policy is right every time
    returns = evaluate(GreedyPolicy(trainer.agent.network.actor(8)), make_env, episodes=100, seed=123).returns
    assert returns.mean() == 1.0


def test_without_memory_the_task_is_a_coin_flip():
    """Reset the LSTM state before every step: the network is then feed-forward and must guess."""
    network = QNetwork((2,), 2, MLPModel((32,)), core_units=32, head_units=32)
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
