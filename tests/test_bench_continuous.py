"""``benchmarks/bench_continuous.py --runs-dir``: a run a killed sweep left unfinished goes on from its checkpoint
when the sweep starts again, and only a run of the same config does; a finished or different run is kept."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from script_loading import load_script

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))  # the script imports its harness module by name
bench = load_script("bench_continuous_under_test", ROOT / "benchmarks" / "bench_continuous.py")

CONFIG = {"agent": "sac", "run": {"seed": 0, "total_env_steps": 1000}, "learner": {"batch_size": 64},
          "logging": {"run_dir": "runs"}, "checkpoints": {"every_env_steps": 500}}
JOB = {"task": "pendulum_novel", "series": "sac", "seed": 0}


def write_run(run_dir: Path, config: dict, checkpoint: bool = True, stopped_by: str | None = None) -> Path:
    """A run directory as the Trainer leaves it: config.yaml, metrics.csv, a checkpoint, a summary if it ended."""
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    (run_dir / "metrics.csv").write_text("env_steps,eval_mean\n500,-1000\n")
    if checkpoint:
        (run_dir / "checkpoints" / "ckpt-000000500").mkdir(parents=True)
    if stopped_by is not None:
        (run_dir / "summary.json").write_text(json.dumps({"stopped_by": stopped_by}))
    return run_dir


@pytest.mark.parametrize("stopped_by", [None, "SIGTERM", "Ctrl-C"])  # None: killed before any summary
def test_an_unfinished_run_of_the_same_config_goes_on_in_its_own_directory(tmp_path, stopped_by):
    run_dir = write_run(tmp_path / "pendulum_novel-sac-seed0", CONFIG, stopped_by=stopped_by)
    moved = dict(CONFIG, logging={"run_dir": "elsewhere"}, checkpoints={"every_env_steps": 100})  # learning alike
    assert bench.run_path(tmp_path, JOB, moved) == (run_dir, True)


@pytest.mark.parametrize("case", ["finished", "no checkpoint", "other learner", "other budget"])
def test_any_other_run_there_is_kept_and_the_new_run_gets_its_own_directory(tmp_path, case):
    stored = dict(CONFIG, learner={"batch_size": 32}) if case == "other learner" else CONFIG
    stored = dict(stored, run={"seed": 0, "total_env_steps": 500}) if case == "other budget" else stored
    run_dir = write_run(tmp_path / "pendulum_novel-sac-seed0", stored, checkpoint=case != "no checkpoint",
                        stopped_by="run.total_env_steps" if case == "finished" else "SIGTERM")
    path, resume = bench.run_path(tmp_path, JOB, CONFIG)
    assert not resume and path != run_dir and path.name.startswith("pendulum_novel-sac-seed0-")
    assert not path.exists() and (run_dir / "config.yaml").is_file()


def test_an_empty_place_starts_a_new_run(tmp_path):
    assert bench.run_path(tmp_path, JOB, CONFIG) == (tmp_path / "pendulum_novel-sac-seed0", False)
