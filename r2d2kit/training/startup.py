"""The start-up summary: what a config was built into, in a few lines (printed and kept in the run).

A config names an encoder, a core size and a runner; what a user needs to check before a long run
is what they became: the encoder class (a user's or a built-in), the weight count, the replay's
memory, how many actors and envs act, and the update ratio.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from r2d2kit.models.backend import describe_device

if TYPE_CHECKING:
    from r2d2kit.training.config import TrainConfig
    from r2d2kit.training.trainer import Trainer


def startup_summary(trainer: Trainer) -> str:
    """A few lines on the env, the network, the replay, the actors and the learning schedule."""
    cfg = trainer.config
    agent, spaces = trainer.agent, trainer.parts.spaces
    where = {"local": "in this process", "processes": "actor processes", "ray": "Ray actors"}[cfg.actors.runner]
    actors = trainer.parts.num_actors()
    replay = trainer.replay
    fields = agent.fields
    action = spaces.action_space
    actions = (f"{action.n} actions" if hasattr(action, "n") else
               f"actions {list(fields.action_shape)} in [{action.low.min():g}, {action.high.max():g}]")
    lines = [
        f"env: {cfg.env.id}, observation {fields.obs_shape} {fields.obs_dtype}, {actions}",
        f"agent {cfg.agent}: {agent.describe_networks()}",
        f"replay: {type(replay).__name__} of {cfg.replay.capacity:,} steps in {replay.nbytes / 2 ** 20:,.1f} MiB, "
        f"{replay.sampler!r}, windows of {cfg.replay.layout.length} rows ({cfg.replay.burn_in} burn-in + "
        f"{cfg.replay.trace_length} trained + {cfg.replay.n_step} n-step)",
        f"actors: {cfg.actors.runner}, {actors} x {cfg.env.num_envs} envs ({where}), "
        f"{agent.describe_exploration(actors, trainer.counters['env_steps'])}",
        f"learning: {cfg.run.updates_per_env_step:g} updates per env step of {cfg.learner.batch_size} windows after "
        f"{cfg.run.warmup_steps:,} warm-up steps, to {cfg.run.total_env_steps:,} env steps; Keras on "
        f"{describe_device()}",
    ]
    schedule = rate_schedule(cfg)
    if schedule:
        lines.append(schedule)
    return "\n".join(lines)


@runtime_checkable
class DecayingRate(Protocol):
    """A learner section whose learning rate decays linearly over a count of updates (R2D2's)."""

    learning_rate: float
    final_learning_rate: float
    learning_rate_decay_updates: int


def rate_schedule(cfg: TrainConfig) -> str:
    """One line on where a learning-rate decay ends, in env steps ("" without a decay): it is counted in updates,
    so a changed ``run.updates_per_env_step`` moves it (at 10x the updates the rate reaches its end 10x sooner)."""
    learner = cfg.learner
    if not isinstance(learner, DecayingRate) or not learner.learning_rate_decay_updates:
        return ""
    decay = learner.learning_rate_decay_updates
    end = cfg.run.warmup_steps + decay / cfg.run.updates_per_env_step
    return (f"learning rate: {learner.learning_rate:g} falling linearly to {learner.final_learning_rate:g} "
            f"over {decay:,} updates, i.e. by env step {end:,.0f} (warm-up + updates / run.updates_per_env_step)")
