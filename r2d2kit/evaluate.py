"""Evaluate a trained run: ``python -m r2d2kit.evaluate RUN_DIR``.

    python -m r2d2kit.evaluate RUN_DIR [--episodes 20] [--seed 123] [--checkpoint ckpt-000100000 | --best]
                               [--video episode.gif]

Rebuilds the network from ``RUN_DIR/config.yaml``, loads the newest checkpoint's online weights
(verified against its manifest; ``weights.weights.h5`` if the run has no checkpoint), or with
``--best`` the weights of the run's best greedy evaluation (``best.weights.h5``: greedy R2D2
policies swing between evaluations, so the last weights need not be the best), and plays
greedy episodes. Prints the mean and standard deviation of the returns. ``--video`` records the
first episode as an animated GIF when the env can render ``rgb_array`` frames.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from r2d2kit.training.checkpoint import (  # noqa: E402
    CheckpointError,
    latest_checkpoint,
    verify_checkpoint,
)
from r2d2kit.training.config import ConfigError, TrainConfig, load_config  # noqa: E402


def weights_file(run_dir: Path, checkpoint: str | None = None, best: bool = False) -> Path:
    """The online weights to evaluate: the best evaluation's, a named or the newest checkpoint's, else the final."""
    if best:
        path = run_dir / "best.weights.h5"
        if not path.is_file():
            raise CheckpointError(f"{run_dir} has no best.weights.h5 (written at the run's first greedy evaluation; "
                                  "run.eval_every 0 disables them); evaluate a checkpoint instead")
        return path
    if checkpoint is not None:
        path = Path(checkpoint) if Path(checkpoint).is_dir() else run_dir / "checkpoints" / checkpoint
        if not path.is_dir():
            raise CheckpointError(f"no checkpoint {checkpoint!r} in {run_dir / 'checkpoints'}")
    else:
        path = latest_checkpoint(run_dir)
    if path is not None:
        verify_checkpoint(path)
        return path / "online.weights.h5"
    final = run_dir / "weights.weights.h5"
    if not final.is_file():
        raise CheckpointError(f"{run_dir} holds neither checkpoints nor weights.weights.h5; is it a run directory?")
    return final


def record_gif(config: TrainConfig, network, path: Path, seed: int, max_frames: int = 2000) -> int:
    """Play one greedy episode with ``render_mode="rgb_array"`` and save it as a GIF; return its frames."""
    import gymnasium as gym
    import numpy as np
    from PIL import Image

    from r2d2kit.agent.policies import greedy
    from r2d2kit.training.builders import make_env

    render_config = dataclasses.replace(config, env=dataclasses.replace(
        config.env, kwargs={**config.env.kwargs, "render_mode": "rgb_array"}))
    try:
        env = make_env(render_config)
    except TypeError as error:
        raise ConfigError(f"env.id {config.env.id!r} cannot render rgb_array frames ({error}); drop --video") from None
    actor = network.actor(1)
    obs, _ = env.reset(seed=seed)
    prev_action, prev_reward = np.zeros(1, np.int32), np.zeros(1, np.float32)
    try:
        frames = [env.render()]
    except gym.error.DependencyNotInstalled as error:
        raise ConfigError(f"env.id {config.env.id!r} needs a missing package to render: {error}") from None
    if frames[0] is None:
        raise ConfigError(f"env.id {config.env.id!r} returned no rgb_array frame; drop --video")
    done = False
    while not done and len(frames) < max_frames:
        action = greedy(actor.q_values(np.asarray(obs)[None], prev_action, prev_reward))
        obs, reward, terminated, truncated, _ = env.step(int(action[0]))
        prev_action, prev_reward = action.astype(np.int32), np.asarray([reward], np.float32)
        frames.append(env.render())
        done = terminated or truncated
    env.close()
    images = [Image.fromarray(np.asarray(frame, dtype=np.uint8)) for frame in frames]
    images[0].save(path, save_all=True, append_images=images[1:], duration=33, loop=0)
    return len(frames)


def evaluate_run(run_dir: str | os.PathLike, episodes: int = 20, seed: int = 12345, checkpoint: str | None = None,
                 video: str | None = None, best: bool = False) -> dict:
    """Greedy returns of a run's network; returns ``mean``, ``std``, ``returns``, ``weights`` and
    ``success_rate`` (the fraction of episodes ending with ``info["is_success"]``; None for envs
    that do not report it)."""
    import numpy as np

    from r2d2kit.models.tf_setup import setup_tensorflow
    from r2d2kit.runners.evaluation import evaluate
    from r2d2kit.training.builders import build_network, make_env

    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise ConfigError(f"{run_dir}: no config.yaml there; is it a run directory?")
    setup_tensorflow()
    config = load_config(run_dir / "config.yaml")
    weights = weights_file(run_dir, checkpoint, best)
    network = build_network(config)
    network.model.load_weights(str(weights))
    evaluation = evaluate(network.actor(min(episodes, 8)), lambda: make_env(config), episodes, seed=seed)
    returns = evaluation.returns
    result = {"mean": float(np.mean(returns)), "std": float(np.std(returns)), "returns": returns.tolist(),
              "weights": str(weights), "success_rate": evaluation.success_rate}
    if video:
        result["video_frames"] = record_gif(config, network, Path(video), seed)
        result["video"] = video
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m r2d2kit.evaluate", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", help="a run directory written by python -m r2d2kit.train")
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--seed", type=int, default=12345)
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--checkpoint", help="checkpoint name (e.g. ckpt-000050000) or path; default: newest")
    which.add_argument("--best", action="store_true", help="the weights of the run's best greedy evaluation")
    parser.add_argument("--video", metavar="PATH.gif", help="record the first greedy episode as a GIF")
    args = parser.parse_args(argv)
    if args.episodes < 1:
        parser.error(f"--episodes must be >= 1, got {args.episodes}")
    try:
        result = evaluate_run(args.run_dir, args.episodes, args.seed, args.checkpoint, args.video, args.best)
    except (ConfigError, CheckpointError) as error:
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
    sys.exit(main())
