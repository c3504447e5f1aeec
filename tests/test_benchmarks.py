"""Cheap checks of benchmark arithmetic (no training): POPGym's MMER and issue 20's targets in
benchmarks/bench_popgym.py, and that its command line parses."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture(scope="module")
def bench_popgym():
    sys.path.insert(0, str(BENCH_DIR))  # the script imports its sibling package ``peers``
    try:
        spec = importlib.util.spec_from_file_location("bench_popgym", BENCH_DIR / "bench_popgym.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(BENCH_DIR))


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
