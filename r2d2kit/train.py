"""Train R2D2 from a YAML config: ``python -m r2d2kit.train configs/cartpole_pomdp.yaml``.

    python -m r2d2kit.train CONFIG [--set section.key=value ...] [--run-dir DIR] [--name NAME]

Writes a run directory with the resolved config (``config.yaml``), evaluation metrics
(``metrics.csv``), a learning curve (``learning_curve.png``), the final network weights
(``weights.weights.h5``) and ``summary.json``. A bad config exits with status 2 and a message naming
the file, the key and the fix. Multi-process actors, TensorBoard and checkpoints/resume are
not here yet (the single-process runner is used).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import importlib
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from r2d2kit.config import ConfigError, TrainConfig, load_config, save_config  # noqa: E402


def build_encoder(config: TrainConfig):
    """The encoder named by ``model.encoder``: mlp, dqn, r2d3, or ``package.module:Class``."""
    from r2d2kit.models import DQNImageModel, ImageModel, MLPModel, R2D3ImageModel

    name = config.model.encoder
    builtins = {"mlp": lambda: MLPModel(tuple(config.model.hidden)), "dqn": DQNImageModel, "r2d3": R2D3ImageModel}
    if name in builtins:
        return builtins[name]()
    if ":" not in name:
        raise ConfigError(f"model.encoder {name!r} must be one of {sorted(builtins)} or 'package.module:Class'")
    module_name, class_name = name.split(":", 1)
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as error:
        raise ConfigError(f"model.encoder {name!r} cannot be imported: {error}") from None
    if not (isinstance(cls, type) and issubclass(cls, ImageModel)):
        raise ConfigError(f"model.encoder {name!r} is not an ImageModel subclass")
    return cls()


def describe(config: TrainConfig) -> str:
    """The R2D2 hyper-parameters with the paper's defaults marked, so overrides stand out."""
    from r2d2kit.learner import R2D2Config

    paper = R2D2Config()
    lines = ["R2D2 hyper-parameters (paper default in brackets where overridden):"]
    for f in dataclasses.fields(config.learner):
        value, default = getattr(config.learner, f.name), getattr(paper, f.name)
        lines.append(f"  {f.name:22s} {value}" + ("" if value == default else f"   [{default}]"))
    return "\n".join(lines)


def run_directory(config: TrainConfig, override: str | None, name: str | None) -> Path:
    if override:
        path = Path(override)
    else:
        label = name or config.logging.name or f"{config.env.id}-{time.strftime('%Y%m%d-%H%M%S')}"
        path = Path(config.logging.run_dir) / label
    path.mkdir(parents=True, exist_ok=True)
    return path


def plot_curve(rows: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6, 4))
    steps = [row["env_steps"] for row in rows]
    means = [row["eval_mean"] for row in rows]
    stds = [row["eval_std"] for row in rows]
    axis.plot(steps, means, marker="o", label="greedy evaluation")
    axis.fill_between(steps, [m - s for m, s in zip(means, stds)], [m + s for m, s in zip(means, stds)], alpha=0.2)
    axis.set_xlabel("environment steps")
    axis.set_ylabel("return")
    axis.set_title(title)
    axis.grid(alpha=0.3)
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def train(config: TrainConfig, run_dir: Path) -> dict:
    """Train with the configured runner and write the run directory; return the summary."""
    import gymnasium as gym
    import keras

    import r2d2kit.envs  # noqa: F401  (registers r2d2kit's environments)
    from r2d2kit.models import QNetwork
    from r2d2kit.runners import LocalRunConfig, train_local
    from r2d2kit.tf_setup import setup_tensorflow

    setup_tensorflow()
    keras.utils.set_random_seed(config.run.seed)
    make_env = lambda: gym.make(config.env.id, **config.env.kwargs)  # noqa: E731
    probe = make_env()
    obs_space, action_space = probe.observation_space, probe.action_space
    probe.close()
    if not isinstance(action_space, gym.spaces.Discrete):
        raise ConfigError(f"env.id {config.env.id!r} has action space {action_space}; R2D2 needs Discrete actions")
    network = QNetwork(obs_space.shape, int(action_space.n), build_encoder(config), obs_dtype=str(obs_space.dtype),
                       lstm_units=config.model.lstm_units, dueling=config.model.dueling,
                       head_units=config.model.head_units, prev_action_reward=config.model.prev_action_reward)
    save_config(config, run_dir / "config.yaml")
    print(describe(config))
    print(f"run directory: {run_dir}")

    rows: list[dict] = []
    metrics_path = run_dir / "metrics.csv"

    def record(row: dict) -> None:
        rows.append(row)
        with open(metrics_path, "a", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(row))
            if handle.tell() == 0:
                writer.writeheader()
            writer.writerow(row)

    run = LocalRunConfig(
        total_env_steps=config.run.total_env_steps, num_envs=config.env.num_envs,
        replay_capacity=config.replay.capacity, warmup_steps=config.run.warmup_steps,
        updates_per_env_step=config.run.updates_per_env_step, epsilon=config.run.epsilon,
        epsilon_alpha=config.run.epsilon_alpha, eval_every=config.run.eval_every,
        eval_episodes=config.run.eval_episodes, seed=config.run.seed, progress=config.logging.progress)
    result = train_local(make_env, network, config.learner, run, on_evaluation=record)
    network.model.save_weights(str(run_dir / "weights.weights.h5"))
    if rows:
        plot_curve(rows, run_dir / "learning_curve.png", config.env.id)
    summary = {"env_steps": result.env_steps, "updates": result.updates, "seconds": round(result.seconds, 1),
               "final_eval": result.final_eval, "best_eval": max((row["eval_mean"] for row in rows), default=None),
               "episodes": len(result.episode_returns)}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    print(f"done: {summary}")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m r2d2kit.train", description=__doc__.splitlines()[0])
    parser.add_argument("config", help="YAML config file (see configs/)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override a config value, e.g. --set learner.batch_size=32 (repeatable)")
    parser.add_argument("--run-dir", help="write the run here instead of logging.run_dir/<name>")
    parser.add_argument("--name", help="run name under logging.run_dir")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config, args.overrides)
        train(config, run_directory(config, args.run_dir, args.name))
    except ConfigError as error:
        print(f"config error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
