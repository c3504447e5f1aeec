"""How many of a trained run's encoder units still fire: per ReLU layer, on one fixed random-policy rollout.

    python benchmarks/unit_activity.py runs/ladder/asterix-dqn-seed10 runs/ladder/asterix-r2d2-seed10

``health/dead_relu_share`` counts the units never active on one training batch (a few dozen rows), so a unit
that fires on 3% of inputs reads as dead there. This reads each run's final weights (``weights.weights.h5``) on
the same observations (a uniform-random policy's rollout of the first run's env, seed 0) and prints, per ReLU
layer of the encoder, the units never active on any of them and the median unit's share of observations on which
it is active. A conv filter counts as one unit (active at some position).
"""

import argparse
from pathlib import Path

import harness  # noqa: F401  (puts the checkout first on sys.path)
import numpy as np


def rollout(config, steps: int) -> np.ndarray:
    """``steps`` observations of a uniform-random policy on the config's env (seed 0)."""
    from r2d2kit.training.builders import make_env

    env = make_env(config)
    rng = np.random.default_rng(0)
    observation, _ = env.reset(seed=0)
    rows = []
    for _ in range(steps):
        rows.append(np.asarray(observation))
        observation, _, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
        if terminated or truncated:
            observation, _ = env.reset()
    env.close()
    return np.stack(rows)


def layer_activity(run_dir: Path, observations: np.ndarray | None, steps: int) -> tuple[list[str], np.ndarray]:
    """One line per ReLU layer of the run's encoder, and the observations used (drawn for the first run)."""
    import keras

    from r2d2kit.agent.r2d2.builder import build_q_network
    from r2d2kit.agent.r2d2.diagnostics import is_relu  # the health check's own test of a ReLU layer
    from r2d2kit.training.builders import probe_spaces
    from r2d2kit.training.checkpoint import load_policy_weights
    from r2d2kit.training.config import load_config

    config = load_config(run_dir / "config.yaml")
    if observations is None:
        observations = rollout(config, steps)
    network = build_q_network(config, probe_spaces(config))
    load_policy_weights(network.model, run_dir / "weights.weights.h5")
    encoder = network.encoder
    relus = [layer for layer in encoder.layers if is_relu(layer)]
    probe = keras.Model(encoder.inputs, [layer.output for layer in relus])
    outputs = probe(observations.astype(np.float32)[:, None])  # [N, T=1, ...]: each observation a one-row window
    outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
    lines = []
    for index, output in enumerate(outputs):
        output = np.asarray(output)
        active = output.reshape(len(observations), -1, output.shape[-1]) > 0  # [N, positions, units]
        per_observation = active.any(axis=1)  # [N, units]
        never = int((~per_observation.any(axis=0)).sum())
        lines.append(f"ReLU layer {index} ({output.shape[-1]} units): {never} never active, median unit active on "
                     f"{np.median(per_observation.mean(axis=0)):.1%} of observations")
    return lines, observations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run directories (config.yaml and weights.weights.h5)")
    parser.add_argument("--steps", type=int, default=3000, help="observations in the rollout (default 3000)")
    args = parser.parse_args()
    missing = [str(run) for run in args.runs if not (run / "weights.weights.h5").is_file()]
    if missing:
        parser.error(f"no weights.weights.h5 in {', '.join(missing)}: pass finished run directories")
    observations = None
    for run in args.runs:
        lines, observations = layer_activity(run, observations, args.steps)
        print(f"{run.name}: " + "; ".join(lines), flush=True)


if __name__ == "__main__":
    main()
