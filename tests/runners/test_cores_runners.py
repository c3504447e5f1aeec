"""A user's three-state cell (tests/models/three_state_cell.py) trains through every runner and a GRU locally,
save, resume and evaluate: the windows carry each state tensor under its own field, the resumed run
restores the weights and the replay, and the best weights replay the best evaluation exactly."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from r2d2kit.evaluate import evaluate_run
from r2d2kit.training.config import load_config
from r2d2kit.training.trainer import EVAL_SEED_OFFSET, Trainer

pytestmark = pytest.mark.slow  # every test here trains, spawns processes or starts Ray

ROOT = Path(__file__).resolve().parents[2]
USER_CORE = "tests.models.three_state_cell:make"
STATE_SHAPES = {"gru": {"state_h": (16,)}, USER_CORE: {"state_a": (16,), "state_b": (2,), "state_c": (3,)}}
TINY = ["run.warmup_steps=200", "run.eval_every=300", "run.eval_episodes=8", "logging.progress=false",
        "logging.tensorboard=false", "checkpoints.every_env_steps=300", "checkpoints.save_replay=true",
        "model.core_units=16", "actors.num_actors=1", "actors.steps_per_batch=25", "actors.publish_every=5",
        "replay.period=2"]  # windows start every 2 rows: most start after their episode's first row


def config(core: str, runner: str, total: int):
    return load_config(ROOT / "configs" / "cue_memory.yaml",
                       TINY + [f"model.core={core}", f"actors.runner={runner}", f"run.total_env_steps={total}"])


# the user's cell (Keras actor step, three state tensors) through every runner; the GRU (numpy actor, as the
# LSTM every other runner test uses) in the learner's process only: its transport is the LSTM's
@pytest.mark.parametrize("core, runner", [(USER_CORE, "local"), (USER_CORE, "processes"), (USER_CORE, "ray"),
                                          ("gru", "local")])
def test_a_core_trains_through_every_runner_and_saves_resumes_and_evaluates(core, runner, tmp_path, request):
    if runner == "ray":
        request.getfixturevalue("ray_instance")
    run_dir = tmp_path / "run"
    first = Trainer(config(core, runner, 600), run_dir)
    summary = first.fit()
    assert summary["env_steps"] >= 600 and summary["updates"] > 0 and summary["runner"] == runner
    batch = first.replay.sample(64)
    for key, shape in STATE_SHAPES[core].items():
        assert batch[key].shape == (64,) + shape and np.abs(batch[key]).max() > 0  # stored, not zeros only
    weights = [variable.numpy() for variable in first.learner.online.variables]

    budget = summary["env_steps"] + 300  # actor processes may run past the first budget before they stop
    resumed = Trainer(config(core, runner, budget), run_dir, resume=True)
    for mine, theirs in zip(resumed.learner.online.variables, weights, strict=True):
        np.testing.assert_array_equal(mine.numpy(), theirs)
    assert len(resumed.replay) == len(first.replay)
    second = resumed.fit()
    assert second["env_steps"] >= budget and second["updates"] > summary["updates"]

    rows = list(csv.DictReader(open(run_dir / "metrics.csv")))
    best = max(rows, key=lambda row: float(row["eval_mean"]))
    seed = resumed.config.run.seed + EVAL_SEED_OFFSET + int(best["env_steps"])  # the trainer's evaluation episodes
    replayed = evaluate_run(run_dir, episodes=8, best=True, seed=seed)
    assert replayed["mean"] == pytest.approx(float(best["eval_mean"]))
