"""From a :class:`~r2d2kit.training.config.TrainConfig` to the objects a run needs: envs, encoder, the
agent (networks, learner, policies), replay and actor pool.

:func:`build_run` is the one pass the trainer makes: one env is probed for the spaces (and, for a
goal env, kept for its reward function), then the config's agent builder
(:func:`r2d2kit.training.agents.agent_builder`) makes the agent (its learner restored from a checkpoint
when resuming), the replay (new or the checkpoint's) follows, and :meth:`RunParts.start_actors` starts
the pool. The factories are module-level functions taking the config, so
``functools.partial(make_env, config)`` pickles into spawned actor processes, which rebuild the same
env and networks there. What is agent-specific (which network, which policy) is the agent's builder's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from r2d2kit._validation import Seed
from r2d2kit.agent.seam import Agent, EnvSpaces, WindowFields, WindowLayout
from r2d2kit.replay import SequenceHerReplayBuffer, SequenceReplayBuffer
from r2d2kit.replay.protocol import RewardFn
from r2d2kit.replay.samplers import PARAMETERS as SAMPLER_PARAMETERS
from r2d2kit.training.config import ConfigError, HerConfig, TrainConfig, import_user_code

if TYPE_CHECKING:  # the heavy modules are imported where they are used
    import gymnasium as gym

    from r2d2kit.agent.seam import Learner
    from r2d2kit.runners.callbacks import CallbackList
    from r2d2kit.runners.pool import ActorPool, Incarnations
    from r2d2kit.spaces import ObservationLayout


def make_env(config: TrainConfig) -> gym.Env:
    """One env: ``gymnasium.make(env.id, **env.kwargs)`` with ``env.wrappers`` applied in order, then
    :func:`r2d2kit.spaces.wrap_spaces` (non-Box observations -> stored codes; MultiDiscrete actions -> one
    Discrete, or for an agent with continuous actions a Box -> one flat float32 vector), so actors, replay
    and evaluation all see the same spaces.

    Raises:
        ConfigError: the env's observation or action space is not supported (naming the space, the
            reason and a fix).
    """
    import gymnasium as gym

    from r2d2kit.envs import (
        ensure_registered,  # registers r2d2kit's ids, also in a fresh actor process
    )
    from r2d2kit.spaces import UnsupportedSpaceError, wrap_spaces
    from r2d2kit.training.agents import agent_builder

    ensure_registered(config.env.id)
    try:
        env = gym.make(config.env.id, **config.env.kwargs)
    except TypeError as error:  # a keyword the env's constructor does not take
        if not config.env.kwargs:
            raise
        raise ConfigError(f"env.kwargs {config.env.kwargs} do not fit env.id {config.env.id!r}: "
                          f"{str(error).splitlines()[0][:300]}; drop or rename the keys its constructor does not "
                          "take") from None
    for wrapper in config.env.wrappers:
        wrapped = import_user_code(wrapper, "env.wrappers entry")(env)
        if not isinstance(wrapped, gym.Env):
            env.close()
            raise ConfigError(f"env.wrappers entry {wrapper!r} returned a {type(wrapped).__name__}, not a gymnasium "
                              "Env: a wrapper takes the env and returns the wrapped env")
        env = wrapped
    try:
        return wrap_spaces(env, continuous_actions=agent_builder(config.agent).continuous_actions)
    except UnsupportedSpaceError as error:
        env.close()
        wrapped = f" after env.wrappers {config.env.wrappers}" if config.env.wrappers else ""
        raise ConfigError(f"env.id {config.env.id!r}{wrapped} for agent {config.agent!r}: {error}") from None


def observation_layout(config: TrainConfig) -> ObservationLayout | None:
    """The :class:`~r2d2kit.spaces.ObservationLayout` of the configured env, or ``None`` for a Box
    observation space (fed to the encoder as it is). Makes one env, so it also checks the config
    against the env's spaces without building a network.

    Raises:
        ConfigError: an unsupported observation or action space, or a ``model`` section that cannot
            read the encoded observation (a convolutional encoder, an ``input_scale`` of another length).
    """
    from r2d2kit.training.networks import check_encoder_for_codes

    layout = probe_spaces(config).layout
    if layout is not None:
        check_encoder_for_codes(config, layout)
    return layout


def spaces_of(env: gym.Env) -> EnvSpaces:
    """The :class:`~r2d2kit.agent.seam.EnvSpaces` of an env :func:`make_env` made."""
    import gymnasium as gym

    try:
        layout = env.get_wrapper_attr("observation_layout")
    except AttributeError:  # a Box observation space: no codes
        layout = None
    observation, action = env.observation_space, env.action_space
    if not isinstance(observation, gym.spaces.Box) or not isinstance(action, (gym.spaces.Discrete, gym.spaces.Box)):
        raise TypeError(f"r2d2kit.spaces.wrap_spaces left the spaces {observation} and {action}, not a Box and a "
                        "Discrete or Box (a bug: please report it)")
    return EnvSpaces(observation, action, layout)


def probe_spaces(config: TrainConfig) -> EnvSpaces:
    """The spaces of one env made and closed."""
    probe = make_env(config)
    spaces = spaces_of(probe)
    probe.close()
    return spaces


@dataclass
class GoalReward:
    """What hindsight relabelling needs from a goal env: the sizes of the network input's two parts
    (observation, then desired goal) and the env's ``compute_reward``, bound to an env kept open."""

    observation_size: int
    goal_size: int
    compute_reward: RewardFn
    compute_terminated: RewardFn | None  # None: the env has none (stored flags are kept)
    env: gym.Env  # the env compute_reward belongs to; close() it when done

    def close(self) -> None:
        """Close the env behind ``compute_reward``."""
        self.env.close()


def goal_reward(config: TrainConfig, env: gym.Env | None = None) -> GoalReward:
    """The :class:`GoalReward` of the configured env (``replay.her`` needs one), bound to ``env`` (one made
    from the config; a new one if None), which it keeps open.

    Raises:
        ConfigError: the env is not a GoalEnv (no Dict observation of ``observation``,
            ``achieved_goal``, ``desired_goal``) or has no ``compute_reward``.
    """
    env = make_env(config) if env is None else env
    try:
        observation_size = env.get_wrapper_attr("observation_size")
        goal_size = env.get_wrapper_attr("goal_size")
    except AttributeError:
        env.close()
        raise ConfigError(f"replay.her relabels goals, but env.id {config.env.id!r} is not a goal env (its "
                          f"observation space is {env.unwrapped.observation_space}, not a Dict of 'observation', "
                          "'achieved_goal' and 'desired_goal'); remove replay.her, or train a GoalEnv") from None
    compute_reward = getattr(env.unwrapped, "compute_reward", None)
    if not callable(compute_reward):
        env.close()
        raise ConfigError(f"replay.her needs env.id {config.env.id!r} to have a vectorised "
                          "compute_reward(achieved_goal, "
                          "desired_goal, info) method (the GoalEnv protocol); it has none")
    compute_terminated = getattr(env.unwrapped, "compute_terminated", None)
    return GoalReward(int(observation_size), int(goal_size), compute_reward,
                      compute_terminated if callable(compute_terminated) else None, env)


def _priority_exponent(priority_exponent: float, sampler: str) -> float | None:
    """``learner.priority_exponent`` for a sampler that uses an exponent; None for one that would refuse it."""
    return priority_exponent if "alpha" in SAMPLER_PARAMETERS[sampler] else None


def make_sequence_replay(fields: WindowFields, layout: WindowLayout, capacity: int, *,
                         priority_exponent: float = 0.9, seed: Seed = None, initial_state: str = "stored",
                         sampler: str = "proportional") -> SequenceReplayBuffer:
    """The replay an agent's learner samples from (``fields``: its networks' ``window_fields()``).

    Windows match ``layout`` (burn-in, trace, n-step, period) and carry the fields every learner reads:
    ``obs`` and ``action`` per row, the policy's state (``fields.state``, each tensor as
    ``state_<name>``) per window. ``priority_exponent`` is the proportional sampler's alpha (R2D2: 0.9).
    """
    from r2d2kit.models.cores import state_fields

    return SequenceReplayBuffer(
        capacity, {"obs": (fields.obs_shape, fields.obs_dtype), "action": (fields.action_shape, fields.action_dtype)},
        state_fields(fields.state), burn_in=layout.burn_in,
        trace_length=layout.trace_length, n_step=layout.n_step, period=layout.period,
        sampler=sampler, alpha=_priority_exponent(priority_exponent, sampler),
        initial_state=initial_state, seed=seed)


def make_sequence_her_replay(fields: WindowFields, layout: WindowLayout, capacity: int, *, observation_size: int,
                             goal_size: int, compute_reward: RewardFn, compute_terminated: RewardFn | None = None,
                             n_sampled_goal: int = 4, goal_selection_strategy: str = "future",
                             priority_exponent: float = 0.9, seed: Seed = None,
                             initial_state: str = "stored", sampler: str = "proportional") -> SequenceHerReplayBuffer:
    """:func:`make_sequence_replay` for a goal env: windows relabelled in hindsight at sample time.

    The network's input is the observation (``observation_size`` entries) then the desired goal
    (``goal_size``), as :class:`~r2d2kit.spaces.GoalObservation` makes it; windows must carry the
    rows' ``achieved_goal`` (``ActingLoop(..., extras=("achieved_goal",))``).
    """
    from r2d2kit.models.cores import state_fields

    if tuple(fields.obs_shape) != (observation_size + goal_size,):
        raise ValueError(f"the network's input {tuple(fields.obs_shape)} is not observation ({observation_size}) "
                         f"+ desired goal ({goal_size}); build it from the GoalObservation-wrapped env")
    return SequenceHerReplayBuffer(
        capacity, ((observation_size,), "float32"), ((goal_size,), "float32"),
        (fields.action_shape, fields.action_dtype), state_fields(fields.state), compute_reward=compute_reward,
        compute_terminated=compute_terminated, burn_in=layout.burn_in, trace_length=layout.trace_length,
        n_step=layout.n_step, period=layout.period,
        n_sampled_goal=n_sampled_goal, goal_selection_strategy=goal_selection_strategy,
        sampler=sampler, alpha=_priority_exponent(priority_exponent, sampler),
        initial_state=initial_state, seed=seed)


def her_config(config: TrainConfig) -> HerConfig:
    """``replay.her`` of a config that has it (a ``HerConfig`` once the config is built)."""
    her = config.replay.her
    if not isinstance(her, HerConfig):
        raise ValueError("the config has no replay.her section: it does not relabel goals")
    return her


def relabel_terminated(config: TrainConfig, goal: GoalReward) -> RewardFn | None:
    """The ``compute_terminated`` relabelled rows use: the env's with ``replay.her.terminate_on_goal``, else None
    (the stored flags are kept). A new replay and a loaded one must get the same, or the targets change."""
    return goal.compute_terminated if her_config(config).terminate_on_goal else None


def make_replay(config: TrainConfig, fields: WindowFields, goal: GoalReward | None, seed: int) -> SequenceReplayBuffer:
    """The run's replay: :func:`make_sequence_replay`, or with ``replay.her`` (``goal`` from
    :func:`goal_reward`) :func:`make_sequence_her_replay` relabelling with the env's goal functions."""
    replay = config.replay
    if goal is None:
        return make_sequence_replay(fields, replay.layout, replay.capacity,
                                    priority_exponent=config.learner.priority_exponent,
                                    initial_state=replay.initial_state, sampler=replay.sampler, seed=seed)
    her = her_config(config)
    return make_sequence_her_replay(
        fields, replay.layout, replay.capacity, observation_size=goal.observation_size,
        goal_size=goal.goal_size, compute_reward=goal.compute_reward,
        compute_terminated=relabel_terminated(config, goal),
        n_sampled_goal=her.n_sampled_goal, goal_selection_strategy=her.goal_selection_strategy,
        priority_exponent=config.learner.priority_exponent,
        initial_state=replay.initial_state, sampler=replay.sampler, seed=seed)


def row_extras(goal: GoalReward | None) -> dict[str, tuple[tuple[int, ...], str]]:
    """Per-row ``info`` entries the actors store with each observation (a goal env's achieved goals)."""
    return {} if goal is None else {"achieved_goal": ((goal.goal_size,), "float32")}


def load_replay(config: TrainConfig, goal: GoalReward | None, path: Path) -> SequenceReplayBuffer:
    """A checkpoint's replay; its kind (with or without relabelling) must be the config's.

    Raises:
        CheckpointError: the file is not a replay of the config's kind, or was saved with other
            relabelling settings (naming the file and the fix).
    """
    from r2d2kit.training.checkpoint import CheckpointError

    try:
        if goal is None:
            return SequenceReplayBuffer.load(path)
        return SequenceHerReplayBuffer.load(path, compute_reward=goal.compute_reward,
                                            compute_terminated=relabel_terminated(config, goal))
    except ValueError as error:
        if "compute_terminated" in str(error):
            saved = not her_config(config).terminate_on_goal
            raise CheckpointError(f"{path} was saved with replay.her.terminate_on_goal={str(saved).lower()}, the "
                                  f"config says {str(not saved).lower()}: the targets of relabelled windows would "
                                  f"change. Resume with the config the run was started with") from None
        if "holds a" not in str(error):
            raise CheckpointError(f"{path}: {error}") from None
        now = "with" if goal is not None else "without"
        raise CheckpointError(f"{path} holds a replay of another kind than the config's (the run continues {now} "
                              f"replay.her): {error}. Resume with the config the run was started with") from None


@dataclass
class RunParts:
    """What :func:`build_run` makes of a config: everything a run needs before its actors start."""

    config: TrainConfig
    spaces: EnvSpaces
    agent: Agent  # the networks live in its learner; its policies act and evaluate
    goal: GoalReward | None  # replay.her's goal functions (close() it when done), else None
    replay: SequenceReplayBuffer
    state: dict[str, Any]  # the checkpoint's counters when resuming, else {}

    @property
    def learner(self) -> Learner:
        """The agent's learner (restored from the checkpoint when resuming)."""
        return self.agent.learner

    def make_env(self) -> gym.Env:
        """One env of the run (what actors and evaluations step)."""
        return make_env(self.config)

    def close(self) -> None:
        """Close the goal env (``replay.her``); nothing else holds a resource."""
        if self.goal is not None:
            self.goal.close()

    def num_actors(self) -> int:
        """Actors of the configured runner (the local runner has one)."""
        return self.config.actors.num_actors if self.config.actors.runner != "local" else 1

    def start_actors(self, incarnations: Incarnations, callbacks: CallbackList, env_steps: int = 0) -> ActorPool:
        """The :class:`~r2d2kit.runners.pool.ActorPool` of ``actors.runner``, started: acting in this process with
        the learner's own networks (local), or in spawned processes / Ray actors that rebuild the env and the
        networks from the config and take published weights; the agent's policies act in all three.

        Args:
            incarnations: a :class:`~r2d2kit.runners.pool.Incarnations` (source ids and seeds).
            callbacks: a :class:`~r2d2kit.runners.callbacks.CallbackList`; actor pools in other processes get
                only the callbacks with actor hooks.
            env_steps: the run's env steps so far (a resumed run's exploration goes on from there).
        """
        import functools

        from r2d2kit.runners.restarts import RestartPolicy

        cfg, actors = self.config, self.config.actors
        env_factory = functools.partial(make_env, cfg)
        extras = row_extras(self.goal)
        layout, variables = cfg.replay.layout, self.learner.actor_variables()
        in_process = actors.runner == "local"
        make_policy = self.agent.acting_policies(in_process=in_process, num_actors=self.num_actors(),
                                                 env_steps=env_steps)
        restart_policy = RestartPolicy(actors.max_restarts, actors.restart_window_s, actors.max_consecutive_failures,
                                       actors.restart_backoff_s, actors.max_restart_backoff_s)
        if in_process:
            from r2d2kit.runners.local import LocalActors

            return LocalActors(env_factory, make_policy, layout, incarnations=incarnations, callbacks=callbacks,
                               extras=extras)
        if actors.runner == "ray":
            from r2d2kit.runners.ray_actors import RayActors

            return RayActors(env_factory, make_policy, layout, variables=variables,
                             incarnations=incarnations, callbacks=callbacks.for_actors(), extras=extras,
                             num_actors=actors.num_actors,
                             publish_every=actors.publish_every, threads=actors.threads,
                             restart_policy=restart_policy, steps_per_batch=actors.steps_per_batch,
                             address=actors.ray_address, num_cpus=actors.ray_num_cpus,
                             cpus_per_actor=actors.cpus_per_actor)
        from r2d2kit.runners.processes import ProcessActors

        return ProcessActors(env_factory, make_policy, layout, fields=self.agent.fields, variables=variables,
                             incarnations=incarnations, callbacks=callbacks.for_actors(), extras=extras,
                             num_actors=actors.num_actors,
                             publish_every=actors.publish_every, threads=actors.threads,
                             restart_policy=restart_policy, ring_capacity=actors.ring_capacity)


def build_run(config: TrainConfig, checkpoint: Path | None = None) -> RunParts:
    """Everything a config builds before training, in one pass: one env probed for the spaces (kept
    open as the goal env under ``replay.her``), the agent (networks, learner, policies) from the config's
    agent builder, and the replay. With ``checkpoint``, the learner restores itself from it, and the replay
    comes from it if it was saved; a new replay is seeded with ``run.seed`` plus the env steps already taken.

    Raises:
        ConfigError: the env's spaces, the encoder, the core or ``replay.her`` do not fit the config.
        CheckpointError: the checkpoint does not fit the networks or holds another kind of replay.
    """
    import keras

    from r2d2kit.training.agents import agent_builder
    from r2d2kit.training.checkpoint import restore_learner

    keras.utils.set_random_seed(config.run.seed)
    probe = make_env(config)
    try:
        spaces = spaces_of(probe)
        goal = goal_reward(config, probe) if config.replay.her is not None else None
    except BaseException:
        probe.close()
        raise
    if goal is None:
        probe.close()
    try:
        agent = agent_builder(config.agent).build(config, spaces)
        state = restore_learner(checkpoint, agent.learner) if checkpoint is not None else {}
        saved_replay = checkpoint / "replay.npz" if checkpoint is not None else None
        if saved_replay is not None and saved_replay.exists():
            replay = load_replay(config, goal, saved_replay)
        else:
            replay = make_replay(config, agent.fields, goal, seed=config.run.seed + int(state.get("env_steps", 0)))
    except BaseException:
        if goal is not None:
            goal.close()
        raise
    return RunParts(config, spaces, agent, goal, replay, state)
