"""Cheap checks of benchmark arithmetic (no training): POPGym's MMER and issue 20's targets in
benchmarks/bench_popgym.py, that its command line parses, and the shared load and peak-memory
helpers in benchmarks/peers/machine.py."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from script_loading import load_script

BENCH_DIR = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture(scope="module")
def bench_popgym():
    sys.path.insert(0, str(BENCH_DIR))  # the script imports its sibling package ``peers``
    try:
        yield load_script("bench_popgym", BENCH_DIR / "bench_popgym.py")
    finally:
        sys.path.remove(str(BENCH_DIR))


@pytest.fixture(scope="module")
def machine():
    # loaded by path so that the test sees this checkout's file, not a ``peers`` on sys.path
    return load_script("peers_machine", BENCH_DIR / "peers" / "machine.py")


def test_mmer_is_the_best_evaluation_mean_not_the_best_episode(bench_popgym):
    # (env steps, mean, std, training seconds): the highest mean counts, not mean + std or the last one
    curve = [(10_000, -0.5, 0.1, 1.0), (20_000, 0.4, 0.5, 2.0), (30_000, 0.25, 0.0, 3.0)]
    assert bench_popgym.mmer(curve) == 0.4
    assert bench_popgym.final_mean(curve) == 0.25
    assert bench_popgym.mmer([]) is None and bench_popgym.final_mean([]) is None


@pytest.mark.parametrize("env, value, met", [
    ("RepeatFirstEasy", 0.95, True),         # >= 0.95
    ("RepeatFirstEasy", 0.949, False),
    ("CountRecallEasy", 0.51, True),         # >= 0.51
    ("RepeatPreviousMedium", -0.32, False),  # strictly above -0.32
    ("RepeatPreviousMedium", -0.31, True),
    ("RepeatPreviousEasy", None, None),      # no runs: not judged
])
def test_targets(bench_popgym, env, value, met):
    assert bench_popgym.target_met(env, value) is met


def test_mean_and_spread_over_seeds(bench_popgym):
    assert bench_popgym.mean_std([0.2, 0.4]) == pytest.approx((0.3, 0.1))
    assert bench_popgym.mean_std([]) is None


def test_help_runs_without_training():
    result = subprocess.run([sys.executable, str(BENCH_DIR / "bench_popgym.py"), "--help"], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "--resume" in result.stdout and "--without" in result.stdout


def test_ppo_is_evaluated_on_the_trainers_evaluation_episodes(bench_popgym):
    from r2d2kit.training.trainer import EVAL_SEED_OFFSET

    assert bench_popgym.EVAL_SEED_OFFSET == EVAL_SEED_OFFSET


def test_resume_reruns_a_run_whose_config_changed_but_not_for_comments_or_budget(bench_popgym, tmp_path,
                                                                                  monkeypatch):
    (tmp_path / "RepeatFirstEasy.yaml").write_text(
        "# a comment\nmodel:\n  lstm_units: 64\n  head_units: 64\nlearner:\n  gamma: 0.99\n"
        "run:\n  total_env_steps: 200000\n")
    monkeypatch.setattr(bench_popgym, "CONFIG_DIR", tmp_path)
    args = bench_popgym.parse_args(["--envs", "RepeatFirstEasy"])
    runs = {agent: dict(agent=agent, env="RepeatFirstEasy", seed=0, steps=100_000, eval_every=args.eval_every,
                        eval_episodes=args.eval_episodes, overrides=[], ppo_prev_action=True, error=None,
                        config_digest=bench_popgym.config_digest("RepeatFirstEasy", agent))
            for agent in bench_popgym.AGENTS}

    def kept() -> dict:
        return {agent: bench_popgym.same_settings(run, 100_000, args) for agent, run in runs.items()}

    assert kept() == {"r2d2": True, "recurrent-ppo": True}
    # a new comment and another total_env_steps (the budget comes from --steps): both runs still count
    (tmp_path / "RepeatFirstEasy.yaml").write_text(
        "# another comment\nmodel:\n  lstm_units: 64\n  head_units: 64\nlearner:\n  gamma: 0.99\n"
        "run:\n  total_env_steps: 100000\n")
    assert kept() == {"r2d2": True, "recurrent-ppo": True}
    # an R2D2-only setting: only R2D2's run is stale; a model size or the discount (RecurrentPPO takes both
    # from the config): both are
    (tmp_path / "RepeatFirstEasy.yaml").write_text(
        "model:\n  lstm_units: 64\n  head_units: 64\nlearner:\n  gamma: 0.99\n  learning_rate: 0.002\n")
    assert kept() == {"r2d2": False, "recurrent-ppo": True}
    for changed in ("model:\n  lstm_units: 128\n  head_units: 64\nlearner:\n  gamma: 0.99\n",
                    "model:\n  lstm_units: 64\n  head_units: 64\nlearner:\n  gamma: 0.5\n"):
        (tmp_path / "RepeatFirstEasy.yaml").write_text(changed)
        assert kept() == {"r2d2": False, "recurrent-ppo": False}
    assert not bench_popgym.same_settings(dict(runs["r2d2"], config_digest=None), 100_000, args)  # made before


def test_ppo_takes_the_r2d2_configs_discount_unless_overridden(bench_popgym, tmp_path, monkeypatch):
    import yaml

    for env in bench_popgym.ENVS:  # the shipped configs
        gamma = yaml.safe_load(bench_popgym.config_path(env).read_text())["learner"]["gamma"]
        assert bench_popgym.ppo_hyperparameters(env)["gamma"] == gamma
    hp = bench_popgym.ppo_hyperparameters("CountRecallEasy", {"gamma": 0.99, "n_epochs": 4})
    assert (hp["gamma"], hp["n_epochs"], hp["batch_size"]) == (0.99, 4, bench_popgym.RECURRENT_PPO["batch_size"])
    (tmp_path / "RepeatFirstEasy.yaml").write_text("model:\n  lstm_units: 64\n  head_units: 64\n")  # no learner.gamma
    monkeypatch.setattr(bench_popgym, "CONFIG_DIR", tmp_path)
    with pytest.raises(ValueError, match="learner.gamma"):
        bench_popgym.ppo_hyperparameters("RepeatFirstEasy")
    assert bench_popgym.ppo_hyperparameters("RepeatFirstEasy", {"gamma": 0.9})["gamma"] == 0.9


def test_ppo_overrides_are_typed_checked_and_part_of_a_runs_settings(bench_popgym):
    assert bench_popgym.parse_ppo_overrides(["gamma=0.5", "n_epochs=4"]) == {"gamma": 0.5, "n_epochs": 4}
    for bad, named in [("gama=0.5", "gama"), ("n_epochs=x", "integer"), ("n_envs=4", "n_envs"), ("gamma", "gamma")]:
        with pytest.raises(ValueError, match=named):
            bench_popgym.parse_ppo_overrides([bad])
    args = bench_popgym.parse_args(["--envs", "RepeatFirstEasy", "--ppo-set", "gamma=0.5"])
    run = dict(agent="recurrent-ppo", env="RepeatFirstEasy", seed=0, steps=100_000, eval_every=args.eval_every,
               eval_episodes=args.eval_episodes, ppo_prev_action=True, error=None,
               config_digest=bench_popgym.config_digest("RepeatFirstEasy", "recurrent-ppo"))
    assert not bench_popgym.same_settings(dict(run, ppo_overrides=[]), 100_000, args)
    assert bench_popgym.same_settings(dict(run, ppo_overrides=["gamma=0.5"]), 100_000, args)


def test_load_average_is_a_load_or_nan(machine):
    load = machine.load_average()
    assert isinstance(load, float) and (math.isnan(load) or load >= 0)
    assert machine.format_load(float("nan")) == "n/a" and machine.format_load(1.234) == "1.23"


def current_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS in /proc/self/status")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc (Linux)")
def test_peak_rss_follows_an_allocation_and_agrees_with_vmhwm(machine):
    before = machine.peak_rss_mb()
    # the high-water mark moves only once RSS passes it: allocate 64 MB beyond what is free below it
    headroom = before - current_rss_mb()
    if headroom > 2048:
        pytest.skip(f"peak RSS {before:.0f} MB is {headroom:.0f} MB above the current RSS")
    array = np.ones(int((max(headroom, 0.0) + 64) * 2**20) // 8)  # np.ones writes, so every page is resident
    after = machine.peak_rss_mb()
    own = machine.process_peak_rss_mb(os.getpid())
    del array
    assert after - before >= 40
    # ru_maxrss and VmHWM agree once this process's own peak is above any inherited from its parent
    assert own == pytest.approx(after, rel=0.1)


def test_process_peak_rss_of_no_process_is_nan(machine):
    assert math.isnan(machine.process_peak_rss_mb(2**31 - 1))  # above Linux's highest pid (2**22)
