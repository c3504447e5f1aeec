"""Training configuration: typed sections read from YAML, validated with messages that say how to fix them.

A config file is nested by component, after the agent it trains::

    agent:       r2d2                                    # r2d2 (the default) | sac (continuous actions)
    env:         {id: CartPoleNoVel-v1, num_envs: 4}     # num_envs: envs per actor
    model:       {encoder: mlp, hidden: [64], core: lstm, core_units: 64, head_units: 64}
    replay:      {capacity: 100000, sampler: proportional, burn_in: 10, trace_length: 20, period: 10, n_step: 3}
    learner:     {gamma: 0.99, batch_size: 32, ...}   # the agent's own (R2D2Config, SACConfig); omitted keys
                                                     # keep its defaults
    actors:      {runner: processes, num_actors: 2, epsilon: 0.4}
    run:         {total_env_steps: 100000, warmup_steps: 1000, updates_per_env_step: 0.25, ...}
    logging:     {run_dir: runs, tensorboard: true}
    checkpoints: {every_env_steps: 25000, keep: 2, save_replay: false}

Every key is optional, but a file must hold at least one section (an empty file is refused). An
unknown section or key, a value of the wrong type, an out-of-range value or an unknown environment
id is a :class:`ConfigError` naming the file, the key and a fix (the nearest valid key, the expected
type, the registered ids); an env whose observation or action space r2d2kit cannot handle is one
too, raised when the env is first made (:func:`r2d2kit.training.builders.make_env`). Command-line
overrides use the same names: ``--set learner.batch_size=32`` (values are parsed as YAML, so
``[64, 64]`` is a list).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
import types
import typing
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from r2d2kit._validation import import_named
from r2d2kit.agent.seam import LearnerSection, WindowLayout
from r2d2kit.replay.protocol import SAMPLERS


class ConfigError(ValueError):
    """A configuration problem; the message names the file, the key and the fix."""


@dataclass(frozen=True)
class AgentEntry:
    """Where an agent lives: its ``learner:`` section's dataclass (no TensorFlow import) and its builder
    (a :class:`~r2d2kit.training.agents.AgentBuilder`), both as ``package.module:name``."""

    learner_section: str
    builder: str


# the config's ``agent`` key: each agent's package is imported only when a config names it
AGENTS: dict[str, AgentEntry] = {
    "r2d2": AgentEntry("r2d2kit.agent.r2d2.config:R2D2Config", "r2d2kit.agent.r2d2.builder:R2D2Builder"),
    "sac": AgentEntry("r2d2kit.agent.sac.config:SACConfig", "r2d2kit.agent.sac.builder:SACBuilder"),
}
DEFAULT_AGENT = "r2d2"


def import_user_code(spec: str, what: str) -> Callable[..., object]:
    """The class or function a config value ``"package.module:name"`` names (``what``: the key, for the message).

    Raises:
        ConfigError: it cannot be imported or is not callable.
    """
    try:
        return import_named(spec, what, "a class or function")
    except ValueError as error:
        raise ConfigError(str(error)) from None


def learner_section_class(agent: str) -> type[LearnerSection]:
    """The dataclass of ``agent``'s ``learner:`` section (R2D2Config for r2d2, SACConfig for sac)."""
    if agent not in AGENTS:
        raise ValueError(f"agent must be one of {sorted(AGENTS)}, got {agent!r}")
    cls = import_named(AGENTS[agent].learner_section, "agent", "a class")
    if not isinstance(cls, type):
        raise TypeError(f"{AGENTS[agent].learner_section} is not a class")
    return cls


def _default_learner() -> LearnerSection:
    return learner_section_class(DEFAULT_AGENT)()


@dataclass
class EnvConfig:
    """The gymnasium environment (``import r2d2kit.envs`` registers r2d2kit's own ids first)."""

    id: str = "CartPoleNoVel-v1"  # gymnasium id (ALE/..., MiniGrid-..., popgym-... ids need their extra)
    num_envs: int = 4  # per actor (the local runner has one actor)
    kwargs: dict = field(default_factory=dict)  # passed to gymnasium.make
    wrappers: list = field(default_factory=list)  # "package.module:callable" applied in order: env = f(env)

    def __post_init__(self) -> None:
        if self.num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {self.num_envs}")
        for wrapper in self.wrappers:
            if not isinstance(wrapper, str) or ":" not in wrapper:
                raise ValueError(f"wrappers entries must be 'package.module:callable' strings, got {wrapper!r}")


@dataclass
class ModelConfig:
    """The recurrent Q-network (see ``r2d2kit.agent.r2d2.QNetwork``)."""

    encoder: str = "mlp"  # mlp | dqn | r2d3 | minatar | minigrid | "package.module:ImageModelSubclass"
    hidden: list = field(default_factory=lambda: [64])  # MLP encoder widths
    input_scale: float | list | None = None  # MLP: observation times this (one number or one per (encoded) input)
    core: str = "lstm"  # memory core: lstm (R2D2's) | gru | none (feed-forward, DQN's) | "package.module:factory"
    # (factory(units) -> Keras cell)
    core_units: int = 512  # the core's width (R2D2: 512; unused with core none)
    dueling: bool = True  # dueling head: Q = V + A - mean(A)
    head_units: int = 512  # hidden units of each head stream (0: a linear head)
    prev_action_reward: bool = True  # feed the previous action (one-hot) and reward to the core, as R2D2 does
    layer_norm: bool = False  # layer-normalise the core's output and the head's hidden layers (not in R2D2)

    def __post_init__(self) -> None:
        if self.core not in ("lstm", "gru", "none") and ":" not in self.core:
            raise ValueError(f"core must be lstm, gru, none (a feed-forward network) or 'package.module:factory' (a "
                             f"function factory(units) returning a Keras RNN cell), got {self.core!r}")
        if self.core_units < 1:
            raise ValueError(f"core_units must be >= 1, got {self.core_units}")


@dataclass
class HerConfig:
    """Hindsight relabelling of whole windows (:class:`~r2d2kit.replay.SequenceHerReplayBuffer`) for a GoalEnv.

    Only windows of finished episodes are relabelled (their 'final' and 'future' goals exist); the
    windows of a running episode are sampled with the goal they were played with. 'trace_future'
    (the default here) puts most goals inside the window, so its rows see the goal reached; with
    'future' only a window's last transition can reach it (PointMassGoal-v0, seed 0: greedy success
    1.0 at 50k env steps with 'trace_future', 0 at 60k with 'future').
    """

    goal_selection_strategy: str = "trace_future"  # trace_future | future (after the window) | final (its last goal)
    n_sampled_goal: int = 4  # HER's k: a sampled window is relabelled with probability k / (k + 1)
    terminate_on_goal: bool = True  # relabelled rows end where the env's compute_terminated says (if it has one)

    def __post_init__(self) -> None:
        if self.goal_selection_strategy not in ("future", "final", "trace_future"):
            raise ValueError(f"her.goal_selection_strategy must be 'future', 'final' or 'trace_future' (a window "
                             f"takes one goal from its episode's later rows), got {self.goal_selection_strategy!r}")
        if not isinstance(self.terminate_on_goal, bool):
            raise ValueError(f"her.terminate_on_goal must be true or false, got {self.terminate_on_goal!r}")
        if isinstance(self.n_sampled_goal, bool) or not isinstance(self.n_sampled_goal, int) or self.n_sampled_goal < 0:
            raise ValueError(f"her.n_sampled_goal must be an integer >= 0 (HER's k; 4 relabels 80% of the sampled "
                             f"windows), got {self.n_sampled_goal!r}")


MAX_CAPACITY = 2 ** 31  # steps: more than any machine's memory holds with a window index per step


@dataclass
class ReplayConfig:
    """The sequence replay buffer and the layout of its windows (priority exponents live in ``learner``).

    Every agent's windows are cut the same way: ``burn_in`` rows that only warm up the core from the
    stored state, ``trace_length`` trained rows, ``n_step`` rows the last targets bootstrap from, a
    new window every ``period`` rows (:class:`~r2d2kit.agent.seam.WindowLayout`; the defaults are R2D2's).

    ``her`` (a mapping, e.g. ``her: {goal_selection_strategy: final, n_sampled_goal: 8}``, or
    ``her: true`` for :class:`HerConfig`'s defaults) relabels windows in hindsight; it needs a GoalEnv.
    """

    capacity: int = 100_000  # steps
    sampler: str = "proportional"  # how windows are drawn: proportional (R2D2's) | uniform | rank
    initial_state: str = "stored"  # a window's first core state: stored (R2D2's) | zero
    burn_in: int = 40  # rows per window that only warm up the core from the stored state (no gradient)
    trace_length: int = 80  # rows per window trained on
    period: int = 40  # rows between the starts of consecutive windows of an episode (<= trace_length)
    n_step: int = 5  # rewards summed per target before bootstrapping; the window's extra rows
    her: bool | dict | HerConfig | None = None  # goal envs: hindsight relabelling (replay.her.* keys; true: defaults)

    def __post_init__(self) -> None:
        if self.initial_state not in ("stored", "zero"):
            raise ValueError(f"initial_state must be 'stored' or 'zero', got {self.initial_state!r}")
        if not 1 <= self.capacity <= MAX_CAPACITY:
            raise ValueError(f"capacity must be in [1, {MAX_CAPACITY}] steps (2**31; the MinAtar configs keep 100000), "
                             f"got {self.capacity}")
        if self.sampler not in SAMPLERS:
            raise ValueError(f"sampler must be one of {', '.join(SAMPLERS)}, got {self.sampler!r}")
        self.layout  # noqa: B018  (validates the window keys, naming them)
        if isinstance(self.her, bool):
            self.her = HerConfig() if self.her else None
        if isinstance(self.her, Mapping):
            keys = [f.name for f in dataclasses.fields(HerConfig)]
            for key in self.her:
                if key not in keys:
                    raise ValueError(f"unknown key her.{key}; {_nearest(str(key), keys)}valid keys in 'her' are "
                                     f"{keys}")
            self.her = HerConfig(**self.her)

    @property
    def layout(self) -> WindowLayout:
        """The windows' rows: burn-in, trained rows, n-step rows and the period between window starts."""
        return WindowLayout(self.burn_in, self.trace_length, self.period, self.n_step)


RUNNERS = ("local", "processes", "ray")
EXPLORATIONS = ("apex", "linear")


@dataclass
class ActorsConfig:
    """Who acts: where (``runner``), how many, how their restarts are bounded, and how R2D2's actors explore
    (Ape-X's fixed per-env epsilons, or one epsilon decaying linearly with the run's env steps as DQN's does;
    SAC's actors sample from their policy and read no epsilon)."""

    runner: str = "local"  # local: one process | processes: spawned processes on shared memory | ray: Ray actors
    num_actors: int = 2  # processes and ray runners
    exploration: str = "apex"  # apex: fixed per-env epsilons (R2D2's) | linear: one decaying epsilon (DQN's)
    epsilon: float = 0.4  # apex: env i of N: epsilon ** (1 + epsilon_alpha * i / (N - 1)); linear: the final rate
    epsilon_alpha: float = 7.0  # apex: the spread of the per-env epsilons (formula at epsilon)
    epsilon_start: float = 1.0  # linear: every env's rate at env step 0; it falls to epsilon by epsilon_decay_steps
    epsilon_decay_steps: int = 100_000  # linear: env steps of the run (all actors) over which the rate falls
    publish_every: int = 10  # learner updates between weight broadcasts
    ring_capacity: int = 64  # windows per actor ring; a full ring makes its actor wait
    threads: int = 1  # TensorFlow/BLAS threads per actor process
    ray_address: str | None = None  # ray: cluster to join ("auto", "ray://head:10001"); None: RAY_ADDRESS or local
    ray_num_cpus: int | None = None  # ray: CPUs of a local instance (None: all)
    cpus_per_actor: float = 1.0  # ray: CPU resources reserved per actor (placement)
    steps_per_batch: int = 50  # ray: vector steps per batch an actor sends back
    # --- restarts: when a dead actor is restarted, and when the run stops instead
    max_restarts: int = 10  # restarts over all actors allowed within restart_window_s; one more stops the run
    restart_window_s: float = 60.0  # the sliding window of max_restarts, seconds (systemd: StartLimitIntervalSec)
    max_consecutive_failures: int = 3  # an actor's code failing this often in a row, no env step between: stop
    restart_backoff_s: float = 1.0  # wait before an actor's restart; doubles with each failure (or kill) in a row
    max_restart_backoff_s: float = 30.0  # the longest wait before a restart

    def __post_init__(self) -> None:
        if self.runner not in RUNNERS:
            raise ValueError(f"runner must be one of {list(RUNNERS)}, got {self.runner!r}")
        if self.cpus_per_actor < 0 or (self.ray_num_cpus is not None and self.ray_num_cpus < 1):
            raise ValueError(f"cpus_per_actor must be >= 0 and ray_num_cpus >= 1, got {self.cpus_per_actor} and "
                             f"{self.ray_num_cpus}")
        for name in ("num_actors", "publish_every", "ring_capacity", "threads", "steps_per_batch"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_restarts < 0 or self.max_consecutive_failures < 1:
            raise ValueError(f"max_restarts must be >= 0 and max_consecutive_failures >= 1, got {self.max_restarts} "
                             f"and {self.max_consecutive_failures}")
        if not (0 < self.restart_window_s < math.inf and 0 <= self.restart_backoff_s <= self.max_restart_backoff_s
                < math.inf):
            raise ValueError(f"restart_window_s must be > 0 and 0 <= restart_backoff_s <= max_restart_backoff_s, all "
                             f"finite, got {self.restart_window_s}, {self.restart_backoff_s} and "
                             f"{self.max_restart_backoff_s}")
        if self.exploration not in EXPLORATIONS:
            raise ValueError(f"exploration must be one of {list(EXPLORATIONS)} (apex: Ape-X's fixed per-env "
                             "epsilons; linear: epsilon_start down to epsilon over epsilon_decay_steps), got "
                             f"{self.exploration!r}")
        for name in ("epsilon", "epsilon_start"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if self.epsilon_decay_steps < 0:
            raise ValueError(f"epsilon_decay_steps must be >= 0 (0: epsilon from the start), got "
                             f"{self.epsilon_decay_steps}")


@dataclass
class RunConfig:
    """Budget, update-to-data ratio and evaluation."""

    total_env_steps: int = 100_000  # env steps over all envs and actors; the run ends there
    warmup_steps: int = 2_000  # env steps stored before the first update
    updates_per_env_step: float = 0.25  # the learner waits for data beyond this ratio
    eval_every: int = 5_000  # env steps; 0: no periodic evaluation
    eval_episodes: int = 10  # greedy episodes per evaluation
    seed: int = 0  # seeds network init, envs, exploration and replay sampling

    def __post_init__(self) -> None:
        if self.total_env_steps < 1:
            raise ValueError(f"total_env_steps must be >= 1, got {self.total_env_steps}")
        if not 0 <= self.updates_per_env_step < math.inf:
            raise ValueError(f"updates_per_env_step must be a finite number >= 0, got {self.updates_per_env_step}")
        if self.eval_every < 0 or self.eval_episodes < 1 or self.warmup_steps < 0:
            raise ValueError("eval_every and warmup_steps must be >= 0 and eval_episodes >= 1, got "
                             f"{self.eval_every}, {self.warmup_steps} and {self.eval_episodes}")


@dataclass
class LoggingConfig:
    """Where runs are written and what is logged."""

    run_dir: str = "runs"  # runs are written to <run_dir>/<name>
    name: str = ""  # default: <env id>-<timestamp>
    progress: bool = True  # tqdm bar on the console
    tensorboard: bool = True  # scalars under <run>/tensorboard
    log_every: int = 1_000  # env steps between TensorBoard scalar writes (and health.csv rows)
    diagnostics: bool = True  # training-health values every log_every (health.csv, TensorBoard; docs/training.md)

    def __post_init__(self) -> None:
        if self.log_every < 1:
            raise ValueError(f"log_every must be >= 1, got {self.log_every}")


@dataclass
class CheckpointConfig:
    """Checkpoints (weights, optimizer, counters; optionally replay) under ``<run>/checkpoints``."""

    every_env_steps: int = 25_000  # 0: only the final one (also written on Ctrl-C)
    keep: int = 2  # newest checkpoints kept
    save_replay: bool = False  # also the replay buffer, so --resume does not warm up again

    def __post_init__(self) -> None:
        if self.every_env_steps < 0 or self.keep < 1:
            raise ValueError(f"every_env_steps must be >= 0 and keep >= 1, got {self.every_env_steps} and "
                             f"{self.keep}")


@dataclass
class TrainConfig:
    """The whole configuration of ``python -m r2d2kit.train``: the agent, then its sections.

    ``learner`` is the agent's own section (:func:`learner_section_class`); left at its default, it becomes
    the default of the named agent's class, so ``TrainConfig(agent="sac")`` is a SAC config.
    """

    agent: str = DEFAULT_AGENT
    env: EnvConfig = field(default_factory=EnvConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    learner: LearnerSection = field(default_factory=_default_learner)
    actors: ActorsConfig = field(default_factory=ActorsConfig)
    run: RunConfig = field(default_factory=RunConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    checkpoints: CheckpointConfig = field(default_factory=CheckpointConfig)

    def __post_init__(self) -> None:
        expected = learner_section_class(self.agent)
        if isinstance(self.learner, expected):
            return
        if self.learner == _default_learner():  # left at the default agent's default
            self.learner = expected()
            return
        raise ValueError(f"agent {self.agent!r} takes a {expected.__name__} learner section, got a "
                         f"{type(self.learner).__name__}")

    def to_dict(self) -> dict:
        """Plain nested dict (what ``save_config`` writes)."""
        return dataclasses.asdict(self)


# each section's name and dataclass (the field's type: its default_factory builds one); ``learner``'s is the
# agent's (section_class), ``agent`` is a top-level value, not a section
SECTIONS: dict[str, type] = {name: cls for name, cls in typing.get_type_hints(TrainConfig).items() if name != "agent"}


def section_class(section: str, agent: str = DEFAULT_AGENT) -> type:
    """The dataclass of ``section`` in a config of ``agent`` (the learner section is the agent's own)."""
    return learner_section_class(agent) if section == "learner" else SECTIONS[section]


def _section_keys(section: str) -> list[str]:
    """The keys ``section`` may hold under some agent (the learner's: every agent's, checked again per agent)."""
    classes = [learner_section_class(agent) for agent in AGENTS] if section == "learner" else [SECTIONS[section]]
    return sorted({f.name for cls in classes for f in dataclasses.fields(cls)})


def _nearest(name: str, options: Sequence[str], cutoff: float = 0.5) -> str:
    close = difflib.get_close_matches(name, list(options), n=1, cutoff=cutoff)
    return f"did you mean {close[0]!r}? " if close else ""


# PyYAML reads YAML 1.1, where ``1e-3`` (no dot) is a string, not a float; accept it for float fields.
_EXPONENT_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def _check_type(where: str, value: Any, annotation: Any) -> Any:
    """Return ``value`` if it matches the field's annotation (ints and ``1e-3`` strings are accepted for floats)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(annotation)
        if value is None and type(None) in options:
            return value
        errors = []
        for option in (option for option in options if option is not type(None)):
            try:
                return _check_type(where, value, option)
            except ConfigError as error:
                errors.append(error)
        names = " or ".join((typing.get_origin(o) or o).__name__ for o in options)
        raise ConfigError(f"{where} must be {names}, got {value!r} ({type(value).__name__})")
    expected = origin or annotation
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value) if abs(value) < 2 ** 1023 else math.inf
    if expected is float and isinstance(value, str) and _EXPONENT_FLOAT.fullmatch(value.strip()):
        value = float(value)
    if expected is float and isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigError(f"{where} must be a finite number, got {value!r}")
        return value
    if expected is int and isinstance(value, bool):
        raise ConfigError(f"{where} must be an integer, got {value!r}")
    if expected is int and isinstance(value, (str, float)):
        return _exact_integer(where, value)
    if expected in (list, tuple) and isinstance(value, (str, int, float)) and not isinstance(value, bool):
        items = str(value).replace(" ", "")
        raise ConfigError(f"{where} must be a list, got {value!r} ({type(value).__name__}); write it as a YAML list, "
                          f"e.g. [{items}] (in a shell, quote it: --set '{where.rpartition(' ')[2]}=[{items}]')")
    if not isinstance(value, expected):
        raise ConfigError(f"{where} must be {expected.__name__}, got {value!r} ({type(value).__name__})")
    return value


def _exact_integer(where: str, value: str | float) -> int:
    """``1e4`` (a string to PyYAML) or ``10000.0`` for an int field: the integer when it is exact, else the fix."""
    number = float(value) if isinstance(value, float) or _EXPONENT_FLOAT.fullmatch(value.strip()) else None
    if number is not None and number.is_integer():
        return int(number)
    if number is not None:
        raise ConfigError(f"{where} must be an integer, got {value!r} (= {number:g}, not a whole number)")
    raise ConfigError(f"{where} must be int, got {value!r} ({type(value).__name__})")


def build_config(data: Mapping[str, Any] | None, source: str = "<config>",
                 overridden: Collection[str] = ()) -> TrainConfig:
    """Validate a nested mapping into a :class:`TrainConfig`; raise :class:`ConfigError` naming ``source``
    (or ``--set`` for the ``section.key`` names in ``overridden``)."""
    data = {} if data is None else data
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: the top level must be a mapping of sections {list(SECTIONS)}, got "
                          f"{type(data).__name__}")
    agent = data.get("agent", DEFAULT_AGENT)
    if not isinstance(agent, str) or agent not in AGENTS:
        where = "--set" if "agent" in overridden else source
        raise ConfigError(f"{where}: agent must be one of {sorted(AGENTS)} (r2d2: discrete actions; sac: continuous "
                          f"actions), got {agent!r}")
    sections: dict[str, Any] = {}
    for section, values in data.items():
        if section == "agent":
            continue
        _check_name(source, section)
        values = {} if values is None else values
        if not isinstance(values, Mapping):
            raise ConfigError(f"{source}: section {section!r} must be a mapping of keys, got {values!r}")
        cls = section_class(section, agent)
        hints = typing.get_type_hints(cls)
        checked = {}
        for key, value in values.items():
            _check_name(source, section, key)
            where = "--set" if f"{section}.{key}" in overridden else source
            if key not in hints:
                raise ConfigError(f"{where}: learner.{key} is not a key of agent {agent!r}'s learner section "
                                  f"({cls.__name__}: {sorted(hints)}); {_other_agents(key, agent)}")
            checked[key] = _check_type(f"{where}: {section}.{key}", value, hints[key])
        try:
            sections[section] = cls(**checked)
        except ValueError as error:
            blamed = sorted(name for name in overridden if name.split(".")[0] == section)
            origin = f"{source} (with --set {', '.join(blamed)})" if blamed else source
            raise ConfigError(f"{origin}: section {section!r}: {error}") from None
    config = TrainConfig(agent=agent, **sections)
    if config.model.core == "none" and config.replay.burn_in:
        raise ConfigError(f"{source}: model.core none keeps no recurrent state, so replay.burn_in "
                          f"{config.replay.burn_in} would warm up nothing; set replay.burn_in: 0")
    _check_env_id(config.env.id, source)
    return config


def _other_agents(key: str, agent: str) -> str:
    """The fix for a learner key of another agent: name the agents that have it."""
    owners = [name for name in sorted(AGENTS) if name != agent
              and key in {f.name for f in dataclasses.fields(learner_section_class(name))}]
    if owners:
        return f"it is a key of agent {owners[0]!r}: set agent: {owners[0]}, or drop learner.{key}"
    return "drop it"


def _check_env_id(env_id: str, source: str) -> None:
    import gymnasium

    from r2d2kit.envs import (
        ensure_registered,  # (importing r2d2kit.envs registers r2d2kit's ids)
    )

    try:
        ensure_registered(env_id)
    except ImportError as error:
        raise ConfigError(f"{source}: env.id {env_id!r}: {error}") from None
    registered_id = env_id.rpartition(":")[2]  # "module:EnvId" names the module that registers EnvId
    if registered_id not in gymnasium.envs.registry:
        raise ConfigError(f"{source}: env.id {env_id!r} is not a registered gymnasium id; "
                          f"{_nearest(env_id, list(gymnasium.envs.registry), cutoff=0.75)}"
                          "write it as 'package.module:EnvId' so that "
                          "the module registering it is imported (also in actor processes), or pick a registered id")


MAX_CONFIG_BYTES = 1 << 20
MAX_YAML_VALUES = 10_000  # scalars, lists and mappings in one config after aliases are expanded
MAX_YAML_DEPTH = 32  # nesting levels (a config uses four)


def parse_yaml(text: Any, where: str) -> Any:
    """``yaml.safe_load`` of a config text or stream, refused by name if it is not YAML or too large.

    An alias bomb (a few hundred bytes naming an alias of an alias ...) parses into a small shared
    structure that expands to millions of values when saved or printed; a deeply nested one exhausts
    the parser's recursion. Both are refused here, before anything reads the values.
    """
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ConfigError(f"{where}: not valid YAML: {error}") from None
    except RecursionError:
        raise ConfigError(f"{where}: nested too deeply to read (a config nests {MAX_YAML_DEPTH} levels at "
                          "most)") from None
    _check_yaml_size(data, where)
    return data


def _check_yaml_size(data: Any, where: str) -> None:
    budget = MAX_YAML_VALUES
    pending = [(data, 1)]
    while pending:
        value, depth = pending.pop()
        budget -= 1
        if budget < 0:
            raise ConfigError(f"{where}: holds more than {MAX_YAML_VALUES} values once its aliases are expanded "
                              "(a YAML alias bomb?); a config needs a few hundred: write the values out")
        if depth > MAX_YAML_DEPTH:
            raise ConfigError(f"{where}: nested deeper than {MAX_YAML_DEPTH} levels (a config uses four)")
        if isinstance(value, Mapping):
            pending.extend((item, depth + 1) for pair in value.items() for item in pair)
        elif isinstance(value, (list, tuple)):
            pending.extend((item, depth + 1) for item in value)


def apply_overrides(data: Mapping[str, Any], overrides: Sequence[str], source: str = "--set") -> dict[str, Any]:
    """Apply ``section.key=value`` strings (value parsed as YAML) to a nested dict, in order.

    Section and key names are checked here, so that a typo is reported as the override's, not the file's.
    """
    data = {section: dict(values) if isinstance(values, Mapping) else values
            for section, values in (data or {}).items()}
    for override in overrides:
        if override.split("=", 1)[0] == "agent" and "=" in override:
            data["agent"] = parse_yaml(override.split("=", 1)[1], f"{source} {override!r}")
            continue
        if "=" not in override or "." not in override.split("=", 1)[0]:
            raise ConfigError(f"{source} {override!r}: write section.key=value, e.g. learner.batch_size=32")
        path, raw = override.split("=", 1)
        *parents, key = check_key_path(f"{source} {override!r}", path)
        target = data
        for depth, name in enumerate(parents):
            child = target.get(name)
            if child is None:
                child = {}
            elif isinstance(child, Mapping):
                child = dict(child)
            else:
                where = ".".join(parents[:depth + 1])
                raise ConfigError(f"{source} {override!r}: {where!r} is not a mapping in the config file")
            target[name] = child
            target = child
        target[key] = parse_yaml(raw, f"{source} {override!r}")
    return data


def check_key_path(where: str, path: str) -> list[str]:
    """Split a dotted ``section.key`` (or ``section.key.subkey``, a key of a mapping such as ``replay.her``) into its
    names, refusing an unknown section or key with the nearest valid name; ``where`` starts the message.

    ``--set`` overrides and ``python -m r2d2kit.tune``'s search-space files name config values this way.
    """
    names = path.split(".")
    if len(names) < 2 or not all(names):
        raise ConfigError(f"{where}: {path!r} is not a section.key name; write e.g. learner.batch_size")
    _check_name(where, names[0], names[1])
    return names


def _check_name(where: str, section: Any, key: Any = None) -> None:
    """Refuse an unknown section (or an unknown key of a known one), naming the nearest valid name."""
    if section not in SECTIONS:
        nearest = _nearest(str(section), list(SECTIONS))
        raise ConfigError(f"{where}: unknown section {section!r}; {nearest}valid sections are {list(SECTIONS)}")
    fields = _section_keys(section)
    if key is not None and key not in fields:
        elsewhere = [other for other in SECTIONS if key in _section_keys(other)]
        hint = (f"it is a key of section {elsewhere[0]!r}: write {elsewhere[0]}.{key}; " if elsewhere else
                _nearest(str(key), fields))
        raise ConfigError(f"{where}: unknown key {section}.{key}; {hint}valid keys in {section!r} are "
                          f"{sorted(fields)}")


def overridden_keys(overrides: Sequence[str]) -> set[str]:
    """The ``section.key`` names that ``--set`` overrides give a value (what a message should blame)."""
    return {".".join(override.split("=", 1)[0].split(".")[:2]) for override in overrides if "=" in override}


def load_config(path: str | os.PathLike, overrides: Sequence[str] = ()) -> TrainConfig:
    """Read a YAML config (``yaml.safe_load``), apply ``--set`` overrides and validate.

    ``path``: a YAML file, or the name of a shipped config (``cue_memory``, ``minatar/breakout``; see
    :mod:`r2d2kit.training.shipped`) when no such file exists.
    """
    from r2d2kit.training.shipped import find_shipped, nearest_shipped

    path = os.fspath(path)
    if not os.path.isfile(path):
        shipped = find_shipped(path)
        if shipped is None:
            near = nearest_shipped(path)
            raise ConfigError(f"no config file at {path!r}, and no shipped config of that name"
                              + (f" (did you mean {near!r}?)" if near else "")
                              + "; python -m r2d2kit.train --list shows the shipped ones")
        path = os.fspath(shipped)
    if os.path.getsize(path) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: {os.path.getsize(path):,} bytes is not a config (the shipped ones are under "
                          f"4 KB; the limit is {MAX_CONFIG_BYTES:,})")
    with open(path) as handle:
        data = parse_yaml(handle, path)
    if not data:  # an empty file would silently train CartPoleNoVel-v1 with the paper's defaults
        raise ConfigError(f"{path}: the file holds no settings (it is empty or only comments); a config names at "
                          "least the env, e.g. 'env: {id: CartPoleNoVel-v1}' (configs/ holds complete ones)")
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: the top level must be a mapping of sections {list(SECTIONS)} (and agent)")
    merged = apply_overrides(data, overrides)
    config = build_config(merged, source=path, overridden=overridden_keys(overrides))
    if not merged.get("env"):  # (checked after the values, so that a typo is still named first)
        raise ConfigError(f"{path}: no 'env:' section; without one the run would silently train the default env "
                          f"({config.env.id}) with the paper's network; a config names at least the env, e.g. "
                          "'env: {id: CartPoleNoVel-v1}' (configs/ holds complete ones)")
    return config


def save_config(config: TrainConfig, path: str | os.PathLike) -> None:
    """Write the resolved config (every key, defaults included) as YAML."""
    with open(path, "w") as handle:
        yaml.safe_dump(config.to_dict(), handle, sort_keys=False)
