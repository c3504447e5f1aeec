"""``python -m r2d2kit.evaluate RUN_DIR``: the checkpoint's network, greedy returns, a GIF, clear errors."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from r2d2kit.agent.r2d2.policies import GreedyPolicy
from r2d2kit.evaluate import evaluate_run, main, video_env_factory, write_gif
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
    expected = evaluate(GreedyPolicy(trainer.agent.network.actor(6)), trainer.make_env, 6, seed=5).returns
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
        assert image.size == (320, 160)  # 64x32 frames enlarged 5x: the shorter side reaches 160 pixels
        frames = []
        for index in range(image.n_frames):  # GIF merges repeated frames: cue, blank x3, now x2 -> 3
            image.seek(index)
            frames.append(np.asarray(image.convert("RGB"))[0, [0, 200]].tolist())
    assert frames[0][0] in ([0, 200, 0], [200, 0, 0]) and frames[0][1] == [0, 0, 0]  # the cue
    assert frames[1:] == [[[0, 0, 0], [0, 0, 0]], [[0, 0, 0], [255, 255, 255]]]  # blank, then "now"


def gif_frames(path) -> tuple[tuple[int, int], int, int]:
    """(size, stored frames, total duration in ms) of an animated GIF."""
    with Image.open(path) as image:
        durations = []
        for index in range(image.n_frames):
            image.seek(index)
            durations.append(image.info["duration"])
        return image.size, image.n_frames, sum(durations)


@pytest.mark.slow
def test_video_of_a_cartpole_run_has_a_frame_per_step_of_the_first_episode(tmp_path):
    """CartPole (drawn by pygame-ce) pays 1 a step: the first episode's return is its length, so the GIF
    holds 1 + return frames (the reset, then one per step), each 1/50 s (CartPole's render_fps)."""
    run_dir = tmp_path / "cartpole"
    Trainer(load_config(ROOT / "configs" / "cartpole_pomdp.yaml", [  # untrained: weights only, no update
        "run.total_env_steps=8", "run.warmup_steps=1000", "run.eval_every=0", "logging.progress=false",
        "logging.tensorboard=false", "actors.runner=local"]), run_dir).fit()
    gif = tmp_path / "cartpole.gif"
    alone = evaluate_run(run_dir, episodes=1, seed=4, video=str(gif))  # one env: the return is the filmed episode's
    assert alone["video_frames"] == 1 + int(alone["returns"][0]) > 2
    size, stored, total_ms = gif_frames(gif)
    assert size == (600, 400) and total_ms == 20 * alone["video_frames"] and 1 < stored <= alone["video_frames"]
    # with 3 envs the GIF still films env 0 (seeded 4 by the vector env), and rendering changes no return
    result = evaluate_run(run_dir, episodes=3, seed=4, video=str(tmp_path / "three.gif"))
    assert result["video_frames"] == alone["video_frames"]
    assert result["returns"] == evaluate_run(run_dir, episodes=3, seed=4)["returns"]


def test_an_env_that_cannot_render_is_a_named_error_before_anything_is_played(tmp_path, capsys):
    """BitFlip-v0 renders only 'ansi' text; the run holds no weights, so the error comes before they are read."""
    run_dir = tmp_path / "bitflip"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("env: {id: BitFlip-v0}\n")
    assert main([str(run_dir), "--video", str(tmp_path / "bits.gif")]) == 2
    err = capsys.readouterr().err
    assert "--video: env.id 'BitFlip-v0' cannot render rgb_array frames: making it with render_mode='rgb_array' " \
           "failed" in err and "evaluate it without --video" in err
    assert not (tmp_path / "bits.gif").exists()
    assert main([str(run_dir), "--video", str(tmp_path / "bits.mp4")]) == 2
    assert "it writes an animated GIF; name the file *.gif" in capsys.readouterr().err


def test_minatar_frames_are_enlarged_with_their_colours_kept(tmp_path):
    """MinAtar draws 10x10 frames of floats in [0, 1]: the GIF shows them as bytes, 16x larger, sharp cells."""
    pytest.importorskip("minatar")
    make_env, fps = video_env_factory(load_config(ROOT / "configs" / "minatar" / "breakout.yaml"))
    env = make_env()
    env.reset(seed=0)
    frame = env.render()  # [10, 10, 3] float64
    env.close()
    assert frame.shape == (10, 10, 3) and frame.dtype.kind == "f" and fps == 20.0
    gif = tmp_path / "breakout.gif"
    write_gif([frame, np.zeros_like(frame)], gif, fps=fps)
    with Image.open(gif) as image:
        assert image.size == (160, 160) and image.n_frames == 2 and image.info["duration"] == 50
        pixels = np.asarray(image.convert("RGB"))  # [160, 160, 3]
    expected = np.rint(frame * 255).astype(np.uint8).repeat(16, axis=0).repeat(16, axis=1)
    np.testing.assert_allclose(pixels, expected, atol=8)  # a GIF palette may round a colour slightly


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


@pytest.mark.slow
def test_a_damaged_file_playing_does_not_read_is_no_obstacle_and_damaged_weights_name_the_ways_out(
        cartpole_run, tmp_path, capsys):
    run_dir, _ = cartpole_run
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    newest = copy / "checkpoints" / "ckpt-000000600"
    (newest / "target.weights.h5").write_bytes(b"damaged")  # like a damaged replay.npz: playing needs neither
    assert evaluate_run(copy, episodes=2)["weights"].endswith("ckpt-000000600/online.weights.h5")
    (newest / "online.weights.h5").write_bytes(b"damaged")
    assert main([str(copy), "--episodes", "2"]) == 2
    error = capsys.readouterr().err
    assert "online.weights.h5 is corrupted" in error and "--checkpoint NAME" in error and "--best" in error


def test_frames_drawn_off_screen_print_no_display_noise():
    """pygame (classic-control frames) probes a display unless told not to; on a headless machine it printed
    "XDG_RUNTIME_DIR is invalid" into every ``--video`` run."""
    pytest.importorskip("pygame")
    code = ("from r2d2kit.evaluate import video_env_factory\n"
            "from r2d2kit.training.config import load_config\n"
            "make_env, fps = video_env_factory(load_config('sac/pendulum_novel'))\n"
            "env = make_env()\n"
            "env.reset(seed=0)\n"
            "print(env.render().shape)\n")
    env = {key: value for key, value in os.environ.items() if key not in ("SDL_VIDEODRIVER", "XDG_RUNTIME_DIR",
                                                                         "DISPLAY", "WAYLAND_DISPLAY")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("(500, 500, 3)")
    assert "XDG_RUNTIME_DIR" not in done.stderr, done.stderr
