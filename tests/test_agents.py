"""Smoke tests of the single-file agents in ``agents/``: a few hundred steps, then real checks."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from script_loading import load_script

pytestmark = pytest.mark.tensorflow  # agents/dqn_per.py is written on TensorFlow (tf.function)

AGENTS_DIR = Path(__file__).resolve().parent.parent / "agents"


def load_agent(name: str):
    """Import ``agents/<name>.py`` by path (``agents/`` is a folder of scripts, not a package)."""
    return load_script(f"agents_{name}", AGENTS_DIR / f"{name}.py")


@pytest.fixture(scope="module")
def dqn_per_run(tmp_path_factory):
    agent = load_agent("dqn_per")
    out = tmp_path_factory.mktemp("dqn_per") / "curve.png"
    argv = ["--total-steps", "400", "--num-envs", "2", "--learning-starts", "100", "--batch-size", "32",
            "--n-step", "3", "--gamma", "0.9", "--target-period", "20", "--eval-episodes", "2",
            "--no-progress", "--out", str(out)]
    return agent.main(argv), out


def test_dqn_per_trains_and_evaluates(dqn_per_run):
    metrics, out = dqn_per_run
    assert metrics["global_step"] == 400
    # one gradient step per vector step once 100 env steps are in: global_step = 100, 102, ..., 400
    assert metrics["train_steps"] == 151
    assert math.isfinite(metrics["loss"]) and metrics["loss"] >= 0.0
    assert metrics["episodes"] > 0
    assert 1.0 <= metrics["eval_mean_return"] <= 500.0
    assert out.stat().st_size > 0  # the learning curve was written


def test_dqn_per_buffer_got_every_transition(dqn_per_run):
    metrics, _ = dqn_per_run
    buffer, num_envs = metrics["buffer"], 2
    # every env step is a transition except the one after each episode end (NEXT_STEP autoreset);
    # episodes that ended on the very last step have not had that step yet
    stored = len(buffer) + metrics["pending"]
    skipped_at_least = metrics["episodes"] - num_envs
    assert metrics["global_step"] - metrics["episodes"] <= stored <= metrics["global_step"] - skipped_at_least

    # CartPole pays 1 per step: an n-step reward is sum_{k<h} gamma^k and the discount gamma^h,
    # or 0 where the episode terminated
    gamma, n_step = 0.9, 3
    batch = buffer.sample(2000, beta=1.0)  # the public way to read items
    discount = batch["discount"].astype(np.float64)
    horizons = {round(gamma ** h, 6): h for h in range(1, n_step + 1)}
    bootstrapped = discount > 0
    assert set(np.round(discount[bootstrapped], 6)) <= set(horizons)
    h = np.array([horizons[round(d, 6)] for d in discount[bootstrapped]])
    np.testing.assert_allclose(batch["reward"][bootstrapped], (1 - gamma ** h) / (1 - gamma), rtol=1e-6)
    assert np.all(np.isin(batch["action"], [0, 1]))
    assert np.any(~bootstrapped)  # some episodes terminated within 400 random-ish steps


def test_dqn_per_priorities_were_updated(dqn_per_run):
    metrics, _ = dqn_per_run
    buffer = metrics["buffer"]
    tree_values = buffer.sampler.tree.leaves()[:len(buffer)]
    # new items get the running max priority, 1.0 at first; |TD| updates change it per item
    assert buffer.max_priority > 1.0
    assert np.unique(tree_values).size > 50
    assert np.all(np.isfinite(tree_values)) and np.all(tree_values > 0)
    assert buffer.sampler.tree.total() == pytest.approx(math.fsum(tree_values), rel=1e-12)
