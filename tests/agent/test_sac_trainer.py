"""Recurrent SAC as users run it (``agent: sac``): through every runner (saved, resumed and evaluated on the
local and processes runners), filmed; the config refuses an agent that cannot act in the env's action space."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from r2d2kit.evaluate import evaluate_run
from r2d2kit.training.config import ConfigError, load_config
from r2d2kit.training.trainer import EVAL_SEED_OFFSET, Trainer

pytestmark = pytest.mark.slow  # every test here trains, spawns processes or starts Ray

CONFIG = "sac/pendulum_novel"
TINY = ["env.id=ContinuousCue-v0", "env.kwargs={length: 12}", "model.core_units=16", "model.hidden=[16]",
        "learner.hidden_units=[16]",
        "learner.batch_size=8", "replay.burn_in=2", "replay.trace_length=4", "replay.period=2", "replay.n_step=2",
        "run.warmup_steps=100", "run.eval_every=200", "run.eval_episodes=8", "logging.progress=false",
        "logging.tensorboard=false", "checkpoints.every_env_steps=200", "checkpoints.save_replay=true",
        "actors.num_actors=1", "actors.steps_per_batch=25", "actors.publish_every=5", "env.num_envs=2"]


def config(runner: str, total: int, *extra: str):
    return load_config(CONFIG, [*TINY, f"actors.runner={runner}", f"run.total_env_steps={total}", *extra])


def policy_weights(trainer: Trainer) -> list[np.ndarray]:
    return [np.asarray(variable.numpy()) for variable in trainer.learner.actor_variables()]


@pytest.mark.parametrize("runner", ["local", "processes", "ray"])
def test_sac_trains_through_every_runner_and_saves_resumes_and_evaluates(runner, tmp_path, request):
    if runner == "ray":
        request.getfixturevalue("ray_instance")
    run_dir = tmp_path / "run"
    first = Trainer(config(runner, 400), run_dir)
    summary = first.fit()
    assert summary["env_steps"] >= 400 and summary["updates"] > 0 and summary["runner"] == runner
    batch = first.replay.sample(16)
    assert batch["action"].dtype == np.float32 and batch["action"].shape[-1] == 1  # the Box's vector, as played
    played = batch["action"][batch["mask"]]
    assert np.all(np.abs(played) <= 1.0) and np.unique(played).size > 4  # sampled inside the bounds
    assert np.abs(batch["state_actor_h"]).max() > 0 and np.abs(batch["state_critic_h"]).max() > 0  # both cores'
    weights = policy_weights(first)
    if runner == "ray":  # resuming is the runners' common code (local and processes check it); a Ray start is slow
        return

    budget = summary["env_steps"] + 200  # actor processes may run past the first budget before they stop
    resumed = Trainer(config(runner, budget), run_dir, resume=True)
    for mine, theirs in zip(policy_weights(resumed), weights, strict=True):
        np.testing.assert_array_equal(mine, theirs)
    assert resumed.learner.updates == summary["updates"] and len(resumed.replay) == len(first.replay)
    second = resumed.fit()
    assert second["env_steps"] >= budget and second["updates"] > summary["updates"]

    rows = list(csv.DictReader(open(run_dir / "metrics.csv")))
    best = max(rows, key=lambda row: float(row["eval_mean"]))
    seed = resumed.config.run.seed + EVAL_SEED_OFFSET + int(best["env_steps"])  # the trainer's evaluation episodes
    replayed = evaluate_run(run_dir, episodes=8, best=True, seed=seed)
    assert replayed["mean"] == pytest.approx(float(best["eval_mean"]))  # deterministic: the same episodes again
    newest = evaluate_run(run_dir, episodes=8, seed=seed)  # the newest checkpoint's policy file
    assert np.isfinite(newest["mean"]) and newest["weights"].endswith("sac_policy.weights.h5")


def test_a_sac_run_on_pendulum_novel_is_filmed(tmp_path):
    run_dir = tmp_path / "run"
    Trainer(load_config(CONFIG, ["run.total_env_steps=300", "run.warmup_steps=100", "run.eval_every=300",
                                 "run.eval_episodes=2", "logging.progress=false", "logging.tensorboard=false",
                                 "learner.batch_size=4", "model.core_units=8"]), run_dir).fit()
    result = evaluate_run(run_dir, episodes=1, video=str(tmp_path / "swing.gif"))
    assert (tmp_path / "swing.gif").stat().st_size > 0 and result["video_frames"] == 201  # reset + 200 steps


@pytest.mark.parametrize("name, env_id, named", [
    (CONFIG, "CartPoleNoVel-v1", r"agent 'sac'.*Box"),
    ("cue_memory", "PendulumNoVel-v1", r"agent 'r2d2'.*Box"),
])
def test_an_agent_that_cannot_act_in_the_action_space_is_a_config_error(name, env_id, named, tmp_path):
    config = load_config(name, [f"env.id={env_id}", "env.kwargs={}", "logging.progress=false"])
    with pytest.raises(ConfigError, match=named):
        Trainer(config, tmp_path / "run")


def test_a_learner_key_of_another_agent_names_the_agent():
    with pytest.raises(ConfigError, match="learner.hidden_units is not a key of agent 'r2d2'.*set agent: sac"):
        load_config(CONFIG, ["agent=r2d2", "env.id=CartPoleNoVel-v1"])
