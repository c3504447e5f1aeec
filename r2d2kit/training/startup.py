"""The start-up summary: what a config was built into, in a few lines (printed and kept in the run).

A config names an encoder, a core size and a runner; what a user needs to check before a long run
is what they became: the encoder class (a user's or a built-in), the weight count, the replay's
memory, how many actors and envs act, and the update ratio.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from r2d2kit.training.trainer import Trainer


def startup_summary(trainer: Trainer) -> str:
    """A few lines on the env, the network, the replay, the actors and the learning schedule."""
    from r2d2kit.models.cores import BUILT_IN_CORES  # the network is built: Keras is loaded already

    cfg = trainer.config
    network = trainer.network
    encoder = network.config["encoder"]
    where = {"local": "in this process", "processes": "actor processes", "ray": "Ray actors"}[cfg.actors.runner]
    actors = len(trainer.epsilons) // cfg.env.num_envs  # one rate per env of every actor
    replay = trainer.replay
    core = network.core.upper() if network.core in BUILT_IN_CORES else cfg.model.core
    state = ", ".join(f"{field.name}{list(field.shape)}" for field in network.state_spec())
    memory = (f"{core} {network.core_units} (state {state})" if network.cell is not None else
              "no core (feed-forward)")
    return "\n".join([
        f"env: {cfg.env.id}, observation {network.obs_shape} {network.obs_dtype}, {network.num_actions} actions",
        f"network: {type(encoder).__module__}.{type(encoder).__qualname__} encoder, {memory}, "
        f"{'dueling ' if cfg.model.dueling else ''}head {cfg.model.head_units}: "
        f"{network.model.count_params():,} weights (online; the target network holds as many)",
        f"replay: {type(replay).__name__} of {cfg.replay.capacity:,} steps in {replay.nbytes / 2 ** 20:,.1f} MiB, "
        f"{replay.sampler!r}, windows of {cfg.replay.layout.length} rows ({cfg.replay.burn_in} burn-in + "
        f"{cfg.replay.trace_length} trained + {cfg.replay.n_step} n-step)",
        f"actors: {cfg.actors.runner}, {actors} x {cfg.env.num_envs} envs ({where}), {trainer.epsilons.describe()}",
        f"learning: {cfg.run.updates_per_env_step:g} updates per env step of {cfg.learner.batch_size} windows after "
        f"{cfg.run.warmup_steps:,} warm-up steps, to {cfg.run.total_env_steps:,} env steps",
    ])
