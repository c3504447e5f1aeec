"""End to end: ``python -m r2d2kit.train`` with a tiny budget writes a complete run directory."""

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_train(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "r2d2kit.train", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.slow
def test_train_cue_memory_tiny_budget(tmp_path):
    result = run_train("configs/cue_memory.yaml", "--set", "run.total_env_steps=3000",
                       "--set", "logging.progress=false",
                       "--run-dir", str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr[-2000:]
    run = tmp_path / "run"
    for name in ("config.yaml", "metrics.csv", "learning_curve.png", "weights.weights.h5", "summary.json"):
        assert (run / name).is_file(), name
    rows = list(csv.DictReader(open(run / "metrics.csv")))
    assert [int(row["env_steps"]) for row in rows] == [1000, 2000, 3000]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["env_steps"] == 3000 and summary["updates"] > 0
    assert summary["best_eval"] >= 0.9, rows  # CueMemory is solved within a few thousand steps
    # overrides are shown beside the paper's, values in one column after the longest name
    assert f"  {'learning_rate':{len('learning_rate_decay_updates')}s} 0.001   [0.0001]\n" in result.stdout


def test_bad_config_exits_2_with_the_message(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("learner: {batch_sise: 3}\n")
    result = run_train(str(bad))
    assert result.returncode == 2
    assert "unknown key learner.batch_sise; did you mean 'batch_size'" in result.stderr


@pytest.mark.slow
def test_readme_main_config_runs_a_tiny_budget_with_actor_processes(tmp_path):
    """The README's main command (configs/cartpole_pomdp.yaml: two actor processes), on a CI budget."""
    result = run_train("configs/cartpole_pomdp.yaml", "--set", "run.total_env_steps=2000", "--set",
                       "run.warmup_steps=500", "--set", "run.eval_every=1000", "--set", "run.eval_episodes=4",
                       "--set", "logging.progress=false", "--run-dir", str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr[-2000:]
    startup = (tmp_path / "run" / "startup.txt").read_text()
    assert "actors: processes, 2 x 2 envs (actor processes), epsilons 0.000655 ... 0.4" in result.stdout  # 0.4 ** 8
    assert "replay: SequenceReplayBuffer of 100,000 steps in " in startup
    assert "windows of 38 rows (10 burn-in + 20 trained + 8 n-step)" in startup
    assert "env: CartPoleNoVel-v1, observation (2,) float32, 2 actions" in startup
    assert "learning: 0.25 updates per env step of 64 windows after 500 warm-up steps, to 2,000 env steps" in startup
    # the decay is counted in updates: 500 warm-up steps + 9,750 updates / 0.25 updates per env step
    assert ("learning rate: 0.001 falling linearly to 0.0001 over 9,750 updates, i.e. by env step 39,500"
            in startup)
    assert all(line in result.stdout for line in startup.splitlines()[:5])  # printed as saved
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["runner"] == "processes" and summary["env_steps"] >= 2000 and summary["updates"] > 0
    assert summary["actor_restarts"] == 0 and summary["stopped_by"] == "run.total_env_steps"
    rows = list(csv.DictReader(open(tmp_path / "run" / "metrics.csv")))
    assert len(rows) >= 1 and all(1 <= float(row["eval_mean"]) <= 500 for row in rows)
