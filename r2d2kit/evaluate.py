"""Evaluate a trained run: ``python -m r2d2kit.evaluate RUN_DIR``.

    python -m r2d2kit.evaluate RUN_DIR [--episodes 20] [--seed 123] [--checkpoint ckpt-000100000 | --best]
                               [--video episode.gif]

Rebuilds the agent's networks from ``RUN_DIR/config.yaml`` (its agent builder's evaluation policy: R2D2's
greedy one, SAC's deterministic one), loads the newest checkpoint's policy weights (verified against its
manifest; ``weights.weights.h5`` if the run has no checkpoint), or with ``--best`` the weights of the run's
best evaluation (``best.weights.h5``: greedy R2D2 policies swing between evaluations, so the last weights need
not be the best), and plays greedy (deterministic) episodes. Prints the mean and standard deviation of the
returns. ``--video`` records the first of these episodes as an animated GIF when the env renders ``rgb_array``
frames (Pillow writes it, pygame-ce draws classic-control envs such as CartPole: ``pip install
'r2d2kit[video]'``); an env that cannot render is an error naming it and the fix, raised before anything is
played.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from r2d2kit.training.checkpoint import (
    CheckpointError,
    latest_checkpoint,
    verify_checkpoint,
)
from r2d2kit.training.config import ConfigError, TrainConfig, load_config
from r2d2kit.training.run_directory import RunDirectoryError, check_run_directory, run_path

MAX_VIDEO_FRAMES = 2000  # --video stops recording there (a GIF of 2000 160x160 frames: a few MB)


def weights_file(run_dir: Path, policy_file: str, checkpoint: str | None = None, best: bool = False) -> Path:
    """The policy weights to evaluate: the best evaluation's, a named or the newest checkpoint's (its
    ``policy_file``, the agent builder's), else the final ones."""
    path: Path | None
    if best:
        path = run_path(run_dir, "best.weights.h5")
        if not path.is_file():
            raise CheckpointError(f"{run_dir} has no best.weights.h5 (written at the run's first greedy evaluation; "
                                  "run.eval_every 0 disables them); evaluate a checkpoint instead")
        return path
    if checkpoint is not None:
        path = Path(checkpoint) if Path(checkpoint).is_dir() else run_path(run_dir, "checkpoints", checkpoint)
        if not path.is_dir():
            raise CheckpointError(f"no checkpoint {checkpoint!r} in {run_dir / 'checkpoints'}")
    else:
        path = latest_checkpoint(run_dir)
    if path is not None:
        fix = (f"evaluate another checkpoint (--checkpoint NAME, one of {run_dir / 'checkpoints'}) or the best "
               "evaluation's weights (--best)")
        verify_checkpoint(path, only=(policy_file,), fix=fix)  # playing needs no replay, target or optimizer
        return path / policy_file
    final = run_path(run_dir, "weights.weights.h5")
    if not final.is_file():
        raise CheckpointError(f"{run_dir} holds neither checkpoints nor weights.weights.h5; is it a run directory?")
    return final


VIDEO_EXTRA = "pip install 'r2d2kit[video]'"  # Pillow writes the GIF, pygame-ce draws classic-control frames


def video_env_factory(config: TrainConfig) -> tuple[Callable[[], Any], float]:
    """``(make_env, fps)``: ``make_env`` of ``config`` with ``render_mode="rgb_array"``, checked on one env
    that renders a frame, and the env's ``render_fps`` (20 if it names none).

    Raises:
        ConfigError: naming the env id, what is missing (the render mode, a package) and the fix.
    """
    import gymnasium as gym
    import numpy as np

    from r2d2kit.training.builders import make_env

    # frames drawn off screen need no display: without this, pygame probes Wayland on a headless machine and
    # prints "XDG_RUNTIME_DIR is invalid" (gymnasium's classic-control envs, e.g. Pendulum); a user's choice stays
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    env_id = config.env.id
    render_config = dataclasses.replace(config, env=dataclasses.replace(
        config.env, kwargs={**config.env.kwargs, "render_mode": "rgb_array"}))
    cannot = f"--video: env.id {env_id!r} cannot render rgb_array frames"
    fix = ("evaluate it without --video, or give the env rgb_array rendering ('rgb_array' in "
           "metadata['render_modes'] and a render() returning [height, width, 3] pixels)")
    try:
        env = make_env(render_config)
    except (TypeError, ValueError, gym.error.Error) as error:
        raise ConfigError(f"{cannot}: making it with render_mode='rgb_array' failed ({error}); {fix}") from None
    try:
        modes = list(env.metadata.get("render_modes", []))
        if "rgb_array" not in modes:
            raise ConfigError(f"{cannot}: its render modes are {modes}; {fix}")
        env.reset(seed=0)
        try:
            frame = env.render()
        except gym.error.DependencyNotInstalled as error:
            raise ConfigError(f"{cannot}: a package it draws with is missing ({error}); {VIDEO_EXTRA} installs "
                              "pygame-ce, which gymnasium's classic-control envs (CartPole) draw with") from None
        except NotImplementedError:
            raise ConfigError(f"{cannot}: its render() is not implemented; {fix}") from None
        if not isinstance(frame, np.ndarray) or frame.ndim != 3 or frame.shape[-1] not in (3, 4):
            returned = f"an array of shape {frame.shape}" if isinstance(frame, np.ndarray) else repr(frame)[:80]
            raise ConfigError(f"{cannot}: render() returned {returned}, not [height, width, 3] pixels; {fix}")
        fps = float(env.metadata.get("render_fps") or 20.0)
    finally:
        env.close()
    return functools.partial(make_env, render_config), fps


def _require_pillow() -> None:
    try:
        import PIL  # noqa: F401
    except ImportError:
        raise ConfigError(f"--video writes GIFs with Pillow, which is not installed: {VIDEO_EXTRA}") from None


def _image(frame: Any, min_side: int) -> Any:
    """An RGB frame as a Pillow image: floats in [0, 1] (MinAtar's palette) scaled to bytes, small
    frames (MinAtar's 10x10) enlarged by a whole factor with sharp cells."""
    import numpy as np
    from PIL import Image

    frame = np.asarray(frame)[..., :3]  # [H, W, 3]
    if frame.dtype.kind in "fb":  # floats (or bools) in [0, 1]
        frame = np.clip(np.rint(frame.astype(np.float64) * 255.0), 0, 255)
    image = Image.fromarray(np.asarray(frame, dtype=np.uint8))
    factor = -(-min_side // min(image.size))  # ceil
    if factor > 1:
        image = image.resize((image.width * factor, image.height * factor), Image.Resampling.NEAREST)
    return image


def write_gif(frames: list, path: str | os.PathLike, fps: float = 20.0, min_side: int = 160) -> None:
    """Save rgb_array frames (``[height, width, 3]``, bytes or floats in [0, 1]) as a looping animated GIF.

    Frames smaller than ``min_side`` pixels on a side are enlarged by a whole factor (nearest
    neighbour). Pillow merges identical consecutive frames, adding up their durations.

    Raises:
        ConfigError: Pillow is not installed (the message names the extra).
    """
    _require_pillow()
    images = [_image(frame, min_side) for frame in frames]
    duration = max(20, round(1000.0 / fps))  # ms; browsers slow down GIF frames shorter than 20 ms
    images[0].save(path, save_all=True, append_images=images[1:], duration=duration, loop=0)


def check_inputs(run_dir: Path, video: str | None) -> None:
    """Refuse a path that is no run directory and a ``--video`` name that is no GIF, before anything loads.

    Raises:
        ConfigError: naming the path and the fix.
    """
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: no such directory; give the run directory python -m r2d2kit.train wrote "
                          "(runs/<env>-<time> by default; its path is printed at the start of training)")
    check_run_directory(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise ConfigError(f"{run_dir}: no config.yaml there; is it a run directory?")
    if video:
        if Path(video).suffix.lower() != ".gif":
            raise ConfigError(f"--video {video!r}: it writes an animated GIF; name the file *.gif")
        _require_pillow()


def evaluate_run(run_dir: str | os.PathLike, episodes: int = 20, seed: int = 12345, checkpoint: str | None = None,
                 video: str | None = None, best: bool = False) -> dict:
    """Greedy returns of a run's network; returns ``mean``, ``std``, ``returns``, ``weights`` and
    ``success_rate`` (the fraction of episodes ending with ``info["is_success"]``; None for envs
    that do not report it).

    ``video``: a ``.gif`` path; the first of these episodes (env 0's) is rendered into it (at most
    ``MAX_VIDEO_FRAMES`` frames), and ``video_frames`` says how many frames it holds. Whether the env
    renders is checked before the weights are loaded.
    """
    run_dir = Path(run_dir)
    check_inputs(run_dir, video)  # before TensorFlow loads (seconds): a mistyped path fails at once
    config = load_config(run_dir / "config.yaml")
    env_factory, fps = video_env_factory(config) if video else (None, 0.0)  # a film that cannot be made: say so first
    from r2d2kit.training.agents import agent_builder

    builder = agent_builder(config.agent)
    weights = weights_file(run_dir, builder.policy_weights_file, checkpoint, best)

    import numpy as np

    from r2d2kit.models.process_setup import setup_process
    from r2d2kit.runners.evaluation import MAX_EVAL_ENVS, evaluate
    from r2d2kit.training.builders import make_env, probe_spaces

    env_factory = env_factory or functools.partial(make_env, config)
    setup_process()
    try:
        policy = builder.evaluation_policy(config, probe_spaces(config), min(episodes, MAX_EVAL_ENVS), weights)
    except CheckpointError as error:
        raise CheckpointError(f"{error} (config {run_dir / 'config.yaml'})") from None
    frames: list[np.ndarray] | None = [] if video else None
    evaluation = evaluate(policy, env_factory, episodes, seed=seed, frames=frames, max_frames=MAX_VIDEO_FRAMES)
    returns = evaluation.returns
    result = {"mean": float(np.mean(returns)), "std": float(np.std(returns)), "returns": returns.tolist(),
              "weights": str(weights), "success_rate": evaluation.success_rate}
    if video and frames is not None:  # (frames is a list exactly when video is given)
        write_gif(frames, video, fps=fps)
        result["video_frames"] = len(frames)
        result["video"] = video
    return result


def main(argv: list[str] | None = None) -> int:
    """``python -m r2d2kit.evaluate``: greedy episodes of a checkpoint, optionally filmed; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m r2d2kit.evaluate", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", help="a run directory written by python -m r2d2kit.train")
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--seed", type=int, default=12345)
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--checkpoint", help="checkpoint name (e.g. ckpt-000050000) or path; default: newest")
    which.add_argument("--best", action="store_true", help="the weights of the run's best greedy evaluation")
    parser.add_argument("--video", metavar="PATH.gif",
                        help=f"record the first greedy episode as an animated GIF (at most {MAX_VIDEO_FRAMES} frames; "
                             "the env must render rgb_array frames; pip install 'r2d2kit[video]')")
    args = parser.parse_args(argv)
    if args.episodes < 1:
        parser.error(f"--episodes must be >= 1, got {args.episodes}")
    try:
        result = evaluate_run(args.run_dir, args.episodes, args.seed, args.checkpoint, args.video, args.best)
    except (ConfigError, CheckpointError, RunDirectoryError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"weights: {result['weights']}")
    print(f"greedy return over {args.episodes} episodes: {result['mean']:.2f} +- {result['std']:.2f} "
          f"(min {min(result['returns']):.1f}, max {max(result['returns']):.1f})")
    if result["success_rate"] is not None:
        print(f"greedy success rate: {result['success_rate']:.2f}")
    if args.video:
        print(f"video: {result['video']} ({result['video_frames']} frames)")
    return 0


if __name__ == "__main__":
    from r2d2kit.console import quiet_native_logs

    quiet_native_logs()  # before TensorFlow loads; the tests call main() without it (it takes over stderr)
    sys.exit(main())
