"""From a :class:`~r2d2kit.training.config.TrainConfig` to the objects a run needs: envs, encoder,
Q-network, learner, replay and actor pool.

:func:`build_run` is the one pass the trainer makes: one env is probed for the spaces (and, for a
goal env, kept for its reward function), then the network, the learner (restored from a checkpoint
when resuming), the replay (new or the checkpoint's) follow, and :meth:`RunParts.start_actors`
starts the pool. The factories are module-level functions taking the config, so
``functools.partial(make_env, config)`` pickles into spawned actor processes, which rebuild the same
env and network there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from r2d2kit._validation import Seed, import_named
from r2d2kit.agent.seam import WindowLayout
from r2d2kit.replay import SequenceHerReplayBuffer, SequenceReplayBuffer
from r2d2kit.replay.protocol import RewardFn
from r2d2kit.replay.samplers import PARAMETERS as SAMPLER_PARAMETERS
from r2d2kit.training.config import ConfigError, HerConfig, TrainConfig

if TYPE_CHECKING:  # the heavy modules are imported where they are used
    import gymnasium as gym

    from r2d2kit.agent.learner import R2D2Learner
    from r2d2kit.agent.policies import EpsilonSchedule
    from r2d2kit.models.encoders import ImageModel
    from r2d2kit.models.qnetwork import QNetwork
    from r2d2kit.runners.callbacks import CallbackList
    from r2d2kit.runners.pool import ActorPool, Incarnations
    from r2d2kit.spaces import ObservationLayout


def _import(spec: str, what: str) -> Callable[..., object]:
    try:
        return import_named(spec, what, "a class or function")
    except ValueError as error:
        raise ConfigError(str(error)) from None


def make_env(config: TrainConfig) -> gym.Env:
    """One env: ``gymnasium.make(env.id, **env.kwargs)`` with ``env.wrappers`` applied in order, then
    :func:`r2d2kit.spaces.wrap_spaces` (non-Box observations -> stored codes, MultiDiscrete actions
    -> one Discrete), so actors, replay and evaluation all see the same spaces.

    Raises:
        ConfigError: the env's observation or action space is not supported (naming the space, the
            reason and a fix).
    """
    import gymnasium as gym

    from r2d2kit.envs import (
        ensure_registered,  # registers r2d2kit's ids, also in a fresh actor process
    )
    from r2d2kit.spaces import UnsupportedSpaceError, wrap_spaces

    ensure_registered(config.env.id)
    env = gym.make(config.env.id, **config.env.kwargs)
    for wrapper in config.env.wrappers:
        wrapped = _import(wrapper, "env.wrappers entry")(env)
        if not isinstance(wrapped, gym.Env):
            env.close()
            raise ConfigError(f"env.wrappers entry {wrapper!r} returned a {type(wrapped).__name__}, not a gymnasium "
                              "Env: a wrapper takes the env and returns the wrapped env")
        env = wrapped
    try:
        return wrap_spaces(env)
    except UnsupportedSpaceError as error:
        env.close()
        wrapped = f" after env.wrappers {config.env.wrappers}" if config.env.wrappers else ""
        raise ConfigError(f"env.id {config.env.id!r}{wrapped}: {error}") from None


def build_encoder(config: TrainConfig) -> ImageModel:
    """The encoder named by ``model.encoder``: mlp, dqn, r2d3, minatar, minigrid, or ``package.module:Class``."""
    from r2d2kit.models import (
        DQNImageModel,
        ImageModel,
        MinAtarImageModel,
        MiniGridImageModel,
        MLPModel,
        R2D3ImageModel,
    )

    name = config.model.encoder
    scale = config.model.input_scale
    input_scale = tuple(scale) if isinstance(scale, list) else scale
    builtins: dict[str, Callable[[], ImageModel]] = {
        "mlp": lambda: MLPModel(tuple(config.model.hidden), input_scale=input_scale), "dqn": DQNImageModel,
        "r2d3": R2D3ImageModel, "minatar": MinAtarImageModel, "minigrid": MiniGridImageModel}
    if name in builtins:
        return builtins[name]()
    if ":" not in name:
        raise ConfigError(f"model.encoder {name!r} must be one of {sorted(builtins)} or 'package.module:Class'")
    cls = _import(name, "model.encoder")
    if not (isinstance(cls, type) and issubclass(cls, ImageModel)):
        raise ConfigError(f"model.encoder {name!r} is not an r2d2kit.models.ImageModel subclass")
    try:
        return cls()
    except TypeError as error:
        raise ConfigError(f"model.encoder {name!r} cannot be built without arguments ({error}); the config builds "
                          "it as Class(): give every constructor argument a default") from None


def observation_layout(config: TrainConfig) -> ObservationLayout | None:
    """The :class:`~r2d2kit.spaces.ObservationLayout` of the configured env, or ``None`` for a Box
    observation space (fed to the encoder as it is). Makes one env, so it also checks the config
    against the env's spaces without building a network.

    Raises:
        ConfigError: an unsupported observation or action space, or a ``model`` section that cannot
            read the encoded observation (a convolutional encoder, an ``input_scale`` of another length).
    """
    layout = _probe(config).layout
    if layout is not None:
        _check_encoder_for_codes(config, layout)
    return layout


@dataclass(frozen=True)
class EnvSpaces:
    """What the network and the replay need to know of the env, read once from a probe env."""

    observation_space: gym.spaces.Box  # what the network reads: the env's Box, or the codes of another space
    action_space: gym.spaces.Discrete  # wrap_spaces makes every supported action space one Discrete
    layout: ObservationLayout | None  # a non-Box observation space's (stored as codes), else None


def _spaces_of(env: gym.Env) -> EnvSpaces:
    import gymnasium as gym

    try:
        layout = env.get_wrapper_attr("observation_layout")
    except AttributeError:  # a Box observation space: no codes
        layout = None
    observation, action = env.observation_space, env.action_space
    if not isinstance(observation, gym.spaces.Box) or not isinstance(action, gym.spaces.Discrete):
        raise TypeError(f"r2d2kit.spaces.wrap_spaces left the spaces {observation} and {action}, not a Box and a "
                        "Discrete (a bug: please report it)")
    return EnvSpaces(observation, action, layout)


def _probe(config: TrainConfig) -> EnvSpaces:
    """The spaces of one env made and closed."""
    probe = make_env(config)
    spaces = _spaces_of(probe)
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


def build_network(config: TrainConfig, spaces: EnvSpaces | None = None) -> QNetwork:
    """The online :class:`~r2d2kit.models.QNetwork` for the configured env (its ``spaces``; probed from a new
    env if None) and model; for a non-Box observation space the encoder is wrapped in
    :class:`~r2d2kit.models.code_encoding.CodeEncoder`."""
    from r2d2kit.models import QNetwork
    from r2d2kit.models.cores import import_factory

    spaces = spaces or _probe(config)
    obs_space, action_space, layout = spaces.observation_space, spaces.action_space, spaces.layout
    encoder = build_encoder(config)
    if layout is not None:
        from r2d2kit.models.code_encoding import CodeEncoder

        _check_encoder_for_codes(config, layout)
        encoder = CodeEncoder(layout, encoder)
    if ":" in config.model.core:
        try:
            import_factory(config.model.core)
        except ValueError as error:
            raise ConfigError(f"model.{error}") from None
    try:
        return QNetwork(obs_space.shape, int(action_space.n), encoder, obs_dtype=str(obs_space.dtype),
                        core=config.model.core, core_units=config.model.core_units, dueling=config.model.dueling,
                        head_units=config.model.head_units, prev_action_reward=config.model.prev_action_reward,
                        layer_norm=config.model.layer_norm)
    except Exception as error:  # noqa: BLE001  (a user's encoder or core can fail in any way Keras can)
        users = [f"model.{key} {getattr(config.model, key)!r}" for key in ("encoder", "core")
                 if ":" in getattr(config.model, key)]
        if not users:
            raise  # a built-in encoder or core failing is r2d2kit's bug: keep the traceback
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise ConfigError(f"{' or '.join(users)} failed on env.id {config.env.id!r}'s observations "
                          f"(shape {tuple(obs_space.shape)}, {obs_space.dtype}): {type(error).__name__}: "
                          f"{first_line[:300]}; check that an encoder's layers fit that input (a convolution needs "
                          "an image) and that a core's cell takes [batch, features] inputs with the states its "
                          "state_size declares") from None


CONV_ENCODERS = ("dqn", "r2d3", "minatar", "minigrid")  # built-ins that convolve images


def _check_encoder_for_codes(config: TrainConfig, layout: ObservationLayout) -> None:
    """The encoder of a non-Box observation gets a flat vector of ``layout.encoded_size`` entries."""
    where = (f"env.id {config.env.id!r} observes {layout.space}, which the network gets as a vector of "
             f"{layout.encoded_size} entries (one-hots and values, see r2d2kit.spaces)")
    if config.model.encoder in CONV_ENCODERS:
        raise ConfigError(f"model.encoder {config.model.encoder!r} is a convolutional encoder for images, but {where};"
                          " use model.encoder: mlp (or an ImageModel of your own for vectors)")
    scale = config.model.input_scale
    if isinstance(scale, list) and len(scale) not in (1, layout.encoded_size):
        raise ConfigError(f"model.input_scale has {len(scale)} entries, but {where}; give one number, or "
                          f"{layout.encoded_size} (one per network input, in the order layout.describe() prints)")


def _priority_exponent(priority_exponent: float, sampler: str) -> float | None:
    """``learner.priority_exponent`` for a sampler that uses an exponent; None for one that would refuse it."""
    return priority_exponent if "alpha" in SAMPLER_PARAMETERS[sampler] else None


def make_sequence_replay(network: QNetwork, layout: WindowLayout, capacity: int, *, priority_exponent: float = 0.9,
                         seed: Seed = None, initial_state: str = "stored",
                         sampler: str = "proportional") -> SequenceReplayBuffer:
    """The replay an :class:`R2D2Learner` of ``network`` samples from.

    Windows match ``layout`` (burn-in, trace, n-step, period) and carry the fields
    :meth:`R2D2Learner.train` reads: ``obs`` and ``action`` per row, the core's state
    (``network.state_spec()``, each tensor as ``state_<name>``) per window. ``priority_exponent``
    is the proportional sampler's alpha (R2D2: 0.9).
    """
    from r2d2kit.models.cores import state_fields

    return SequenceReplayBuffer(
        capacity, {"obs": (network.obs_shape, network.obs_dtype), "action": ((), "int64")},
        state_fields(network.state_spec()), burn_in=layout.burn_in,
        trace_length=layout.trace_length, n_step=layout.n_step, period=layout.period,
        sampler=sampler, alpha=_priority_exponent(priority_exponent, sampler),
        initial_state=initial_state, seed=seed)


def make_sequence_her_replay(network: QNetwork, layout: WindowLayout, capacity: int, *, observation_size: int,
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

    if tuple(network.obs_shape) != (observation_size + goal_size,):
        raise ValueError(f"the network's input {tuple(network.obs_shape)} is not observation ({observation_size}) "
                         f"+ desired goal ({goal_size}); build it from the GoalObservation-wrapped env")
    return SequenceHerReplayBuffer(
        capacity, ((observation_size,), "float32"), ((goal_size,), "float32"), ((), "int64"),
        state_fields(network.state_spec()), compute_reward=compute_reward,
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


def make_replay(config: TrainConfig, network: QNetwork, goal: GoalReward | None, seed: int) -> SequenceReplayBuffer:
    """The run's replay: :func:`make_sequence_replay`, or with ``replay.her`` (``goal`` from
    :func:`goal_reward`) :func:`make_sequence_her_replay` relabelling with the env's goal functions."""
    replay = config.replay
    if goal is None:
        return make_sequence_replay(network, replay.layout, replay.capacity,
                                    priority_exponent=config.learner.priority_exponent,
                                    initial_state=replay.initial_state, sampler=replay.sampler, seed=seed)
    her = her_config(config)
    return make_sequence_her_replay(
        network, replay.layout, replay.capacity, observation_size=goal.observation_size,
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
    network: QNetwork  # the online network; the learner owns it and its target
    learner: R2D2Learner  # restored from the checkpoint when resuming
    goal: GoalReward | None  # replay.her's goal functions (close() it when done), else None
    replay: SequenceReplayBuffer
    state: dict[str, Any]  # the checkpoint's counters when resuming, else {}

    def make_env(self) -> gym.Env:
        """One env of the run (what actors and evaluations step)."""
        return make_env(self.config)

    def close(self) -> None:
        """Close the goal env (``replay.her``); nothing else holds a resource."""
        if self.goal is not None:
            self.goal.close()

    def start_actors(self, epsilons: EpsilonSchedule, incarnations: Incarnations, callbacks: CallbackList) -> ActorPool:
        """The :class:`~r2d2kit.runners.pool.ActorPool` of ``actors.runner``, started: acting in this process with
        the run's network (local), or in spawned processes / Ray actors that rebuild the env and the network
        from the config and take published weights.

        Args:
            epsilons: the exploration rate of each env, over all actors' envs, actor-major.
            incarnations: a :class:`~r2d2kit.runners.pool.Incarnations` (source ids and seeds).
            callbacks: a :class:`~r2d2kit.runners.callbacks.CallbackList`; actor pools in other processes get
                only the callbacks with actor hooks.
        """
        import functools

        from r2d2kit.agent.policies import EpsilonGreedyFactory
        from r2d2kit.agent.seam import WindowFields
        from r2d2kit.runners.restarts import RestartPolicy

        cfg, actors = self.config, self.config.actors
        env_factory = functools.partial(make_env, cfg)
        network_factory = functools.partial(build_network, cfg)
        extras = row_extras(self.goal)
        layout, variables = cfg.replay.layout, self.learner.actor_variables()
        restart_policy = RestartPolicy(actors.max_restarts, actors.restart_window_s, actors.max_consecutive_failures,
                                       actors.restart_backoff_s, actors.max_restart_backoff_s)
        if actors.runner == "local":
            from r2d2kit.runners.local import LocalActors

            network = self.network  # the learner's own: the local actor shares its weights
            local_policy = EpsilonGreedyFactory(lambda: network, epsilons, cfg.env.num_envs)
            return LocalActors(env_factory, local_policy, layout, incarnations=incarnations, callbacks=callbacks,
                               extras=extras)
        make_policy = EpsilonGreedyFactory(network_factory, epsilons, cfg.env.num_envs)
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

        network = self.network
        fields = WindowFields(tuple(network.obs_shape), network.obs_dtype, (), "int64", network.state_spec())
        return ProcessActors(env_factory, make_policy, layout, fields=fields, variables=variables,
                             incarnations=incarnations, callbacks=callbacks.for_actors(), extras=extras,
                             num_actors=actors.num_actors,
                             publish_every=actors.publish_every, threads=actors.threads,
                             restart_policy=restart_policy, ring_capacity=actors.ring_capacity)


def build_run(config: TrainConfig, checkpoint: Path | None = None) -> RunParts:
    """Everything a config builds before training, in one pass: one env probed for the spaces (kept
    open as the goal env under ``replay.her``), the network, the learner, and the replay. With
    ``checkpoint``, the learner's weights and optimizer come from it, and so does the replay if it
    was saved; a new replay is seeded with ``run.seed`` plus the env steps already taken.

    Raises:
        ConfigError: the env's spaces, the encoder, the core or ``replay.her`` do not fit the config.
        CheckpointError: the checkpoint does not fit the network or holds another kind of replay.
    """
    import keras

    from r2d2kit.agent.learner import R2D2Learner
    from r2d2kit.training.checkpoint import restore_learner

    keras.utils.set_random_seed(config.run.seed)
    probe = make_env(config)
    try:
        spaces = _spaces_of(probe)
        goal = goal_reward(config, probe) if config.replay.her is not None else None
    except BaseException:
        probe.close()
        raise
    if goal is None:
        probe.close()
    try:
        network = build_network(config, spaces)
        learner = R2D2Learner(network, config.learner, config.replay.layout)
        state = restore_learner(checkpoint, learner) if checkpoint is not None else {}
        saved_replay = checkpoint / "replay.npz" if checkpoint is not None else None
        if saved_replay is not None and saved_replay.exists():
            replay = load_replay(config, goal, saved_replay)
        else:
            replay = make_replay(config, network, goal, seed=config.run.seed + int(state.get("env_steps", 0)))
    except BaseException:
        if goal is not None:
            goal.close()
        raise
    return RunParts(config, spaces, network, learner, goal, replay, state)
