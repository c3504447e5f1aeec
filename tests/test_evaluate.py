"""``python -m r2d2kit.evaluate RUN_DIR``: the checkpoint's network, greedy returns, a GIF, clear errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from r2d2kit.evaluate import evaluate_run, main
from r2d2kit.runners.evaluation import evaluate
from r2d2kit.training.config import load_config
from r2d2kit.training.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("cartpole")
    config = load_config(ROOT / "configs" / "cartpole_pomdp.yaml", [
        "run.total_env_steps=600", "run.warmup_steps=200", "run.eval_every=0", "logging.progress=false",
        "logging.tensorboard=false", "actors.runner=local"])
    trainer = Trainer(config, run_dir)
    trainer.fit()
    return run_dir, trainer


@pytest.mark.slow
def test_evaluate_plays_the_checkpointed_network(cartpole_run):
    run_dir, trainer = cartpole_run
    result = evaluate_run(run_dir, episodes=6, seed=5)
    assert result["weights"].endswith("ckpt-000000600/online.weights.h5")
    # the same greedy episodes played by the trainer's own network in memory
    expected = evaluate(trainer.network.actor(6), trainer.make_env, 6, seed=5).returns
    np.testing.assert_array_equal(result["returns"], expected)
    assert result["mean"] == pytest.approx(expected.mean()) and result["std"] == pytest.approx(expected.std())


def test_video_is_an_animated_gif_of_one_episode(tmp_path, capsys):
    run_dir = tmp_path / "cue"
    config = load_config(ROOT / "configs" / "cue_memory.yaml", [
        "run.total_env_steps=100", "run.warmup_steps=1000", "run.eval_every=0", "logging.progress=false",
        "logging.tensorboard=false", "env.kwargs={delay: 3}"])
    Trainer(config, run_dir).fit()
    gif = tmp_path / "episode.gif"
    assert main([str(run_dir), "--episodes", "2", "--video", str(gif)]) == 0
    out = capsys.readouterr().out
    assert "greedy return over 2 episodes" in out and f"video: {gif} (6 frames)" in out  # reset + delay 3 + 2 steps
    with Image.open(gif) as image:
        assert image.size == (64, 32)
        frames = []
        for index in range(image.n_frames):  # GIF merges repeated frames: cue, blank x3, now x2 -> 3
            image.seek(index)
            frames.append(np.asarray(image.convert("RGB"))[0, [0, 40]].tolist())
    assert frames[0][0] in ([0, 200, 0], [200, 0, 0]) and frames[0][1] == [0, 0, 0]  # the cue
    assert frames[1:] == [[[0, 0, 0], [0, 0, 0]], [[0, 0, 0], [255, 255, 255]]]  # blank, then "now"


def test_errors_name_the_problem(cartpole_run, tmp_path, capsys):
    run_dir, _ = cartpole_run
    assert main([str(tmp_path)]) == 2
    assert "no config.yaml there" in capsys.readouterr().err
    assert main([str(run_dir), "--checkpoint", "ckpt-000000001"]) == 2
    assert "no checkpoint 'ckpt-000000001'" in capsys.readouterr().err
    cue_run = tmp_path / "cue"
    cue_run.mkdir()
    (cue_run / "config.yaml").write_text((ROOT / "configs" / "cue_memory.yaml").read_text())
    assert main([str(cue_run)]) == 2
    assert "neither checkpoints nor weights.weights.h5" in capsys.readouterr().err


@pytest.mark.slow
def test_a_goal_run_reports_its_success_rate(tmp_path, capsys):
    """TraceGoal-v0 succeeds exactly on even episode ids: the CLI's rate is that of the episodes it played."""
    from tests.runners.goal_trace_env import TraceGoalEnv
    from tests.runners.test_her_runners import trace_config

    Trainer(trace_config(tmp_path), tmp_path / "run").fit()
    result = evaluate_run(tmp_path / "run", episodes=6, seed=5)
    expected = []
    for i in range(6):  # one episode per env of a vector env reset with seed 5: env i seeded 5 + i
        env = TraceGoalEnv()
        env.reset(seed=5 + i)
        expected.append(int(env.uid) % 2 == 0)
    assert result["success_rate"] == pytest.approx(np.mean(expected))
    assert main([str(tmp_path / "run"), "--episodes", "6", "--seed", "5"]) == 0
    assert f"greedy success rate: {np.mean(expected):.2f}" in capsys.readouterr().out
