"""Training configuration: typed sections read from YAML, validated with messages that say how to fix them.

A config file is nested by component::

    env:      {id: CartPoleNoVel-v1, num_envs: 4}
    model:    {encoder: mlp, hidden: [64], lstm_units: 64, head_units: 64}
    replay:   {capacity: 100000}
    learner:  {burn_in: 10, trace_length: 20, ...}      # R2D2Config; omitted keys keep the paper's values
    run:      {total_env_steps: 100000, ...}
    logging:  {run_dir: runs}

Every key is optional. An unknown section or key, a value of the wrong type, an out-of-range value
or an unknown environment id is a :class:`ConfigError` naming the file, the key and a fix (the
nearest valid key, the expected type, the registered ids). Command-line overrides use the same
names: ``--set learner.batch_size=32`` (values are parsed as YAML, so ``[64, 64]`` is a list).
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import yaml

from r2d2kit.learner import R2D2Config


class ConfigError(ValueError):
    """A configuration problem; the message names the file, the key and the fix."""


@dataclass
class EnvConfig:
    """The gymnasium environment (``import r2d2kit.envs`` registers r2d2kit's own ids first)."""

    id: str = "CartPoleNoVel-v1"
    num_envs: int = 4
    kwargs: dict = field(default_factory=dict)  # passed to gymnasium.make


@dataclass
class ModelConfig:
    """The recurrent Q-network (see ``r2d2kit.models.QNetwork``)."""

    encoder: str = "mlp"  # mlp | dqn | r2d3 | "package.module:ImageModelSubclass"
    hidden: list = field(default_factory=lambda: [64])  # MLP encoder widths
    lstm_units: int = 512
    dueling: bool = True
    head_units: int = 512
    prev_action_reward: bool = True


@dataclass
class ReplayConfig:
    """The sequence replay buffer (priority exponents live in ``learner``)."""

    capacity: int = 100_000  # steps
    initial_state: str = "stored"  # stored | zero

    def __post_init__(self) -> None:
        if self.initial_state not in ("stored", "zero"):
            raise ValueError(f"initial_state must be 'stored' or 'zero', got {self.initial_state!r}")
        if self.capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {self.capacity}")


@dataclass
class RunConfig:
    """Budget, exploration and evaluation."""

    total_env_steps: int = 100_000
    warmup_steps: int = 2_000
    updates_per_env_step: float = 0.25
    epsilon: float = 0.4
    epsilon_alpha: float = 7.0
    eval_every: int = 5_000
    eval_episodes: int = 10
    seed: int = 0
    runner: str = "local"  # local (processes and ray: coming)

    def __post_init__(self) -> None:
        if self.total_env_steps < 1:
            raise ValueError(f"total_env_steps must be >= 1, got {self.total_env_steps}")
        if self.updates_per_env_step < 0:
            raise ValueError(f"updates_per_env_step must be >= 0, got {self.updates_per_env_step}")
        if not 0.0 <= self.epsilon <= 1.0:
            raise ValueError(f"epsilon must be in [0, 1], got {self.epsilon}")
        if self.runner != "local":
            raise ValueError(f"runner {self.runner!r} is not available yet; use 'local'")


@dataclass
class LoggingConfig:
    """Where runs are written."""

    run_dir: str = "runs"
    name: str = ""  # default: <env id>-<timestamp>
    progress: bool = True


@dataclass
class TrainConfig:
    """The whole configuration of ``python -m r2d2kit.train``."""

    env: EnvConfig = field(default_factory=EnvConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    learner: R2D2Config = field(default_factory=R2D2Config)
    run: RunConfig = field(default_factory=RunConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)

    def to_dict(self) -> dict:
        """Plain nested dict (what ``save_config`` writes)."""
        return dataclasses.asdict(self)


SECTIONS = {f.name: f.default_factory for f in dataclasses.fields(TrainConfig)}


def _nearest(name: str, options: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, list(options), n=1, cutoff=0.5)
    return f"did you mean {close[0]!r}? " if close else ""


def _check_type(where: str, value: Any, annotation: Any) -> Any:
    """Return ``value`` if it matches the field's annotation (ints are accepted for floats)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(annotation)
        if value is None and type(None) in options:
            return value
        annotation = next(option for option in options if option is not type(None))
        origin = typing.get_origin(annotation)
    expected = origin or annotation
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if expected is int and isinstance(value, bool):
        raise ConfigError(f"{where} must be an integer, got {value!r}")
    if not isinstance(value, expected):
        raise ConfigError(f"{where} must be {expected.__name__}, got {value!r} ({type(value).__name__})")
    return value


def build_config(data: Mapping[str, Any] | None, source: str = "<config>") -> TrainConfig:
    """Validate a nested mapping into a :class:`TrainConfig`; raise :class:`ConfigError` naming ``source``."""
    data = {} if data is None else data
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: the top level must be a mapping of sections {list(SECTIONS)}, got "
                          f"{type(data).__name__}")
    sections = {}
    for section, values in data.items():
        if section not in SECTIONS:
            raise ConfigError(f"{source}: unknown section {section!r}; {_nearest(str(section), SECTIONS)}"
                              f"valid sections are {list(SECTIONS)}")
        values = {} if values is None else values
        if not isinstance(values, Mapping):
            raise ConfigError(f"{source}: section {section!r} must be a mapping of keys, got {values!r}")
        cls = SECTIONS[section]
        fields = {f.name: f for f in dataclasses.fields(cls)}
        hints = typing.get_type_hints(cls)
        checked = {}
        for key, value in values.items():
            if key not in fields:
                raise ConfigError(f"{source}: unknown key {section}.{key}; {_nearest(str(key), fields)}"
                                  f"valid keys in {section!r} are {sorted(fields)}")
            checked[key] = _check_type(f"{source}: {section}.{key}", value, hints[key])
        try:
            sections[section] = cls(**checked)
        except ValueError as error:
            raise ConfigError(f"{source}: section {section!r}: {error}") from None
    config = TrainConfig(**sections)
    _check_env_id(config.env.id, source)
    return config


def _check_env_id(env_id: str, source: str) -> None:
    import gymnasium

    import r2d2kit.envs  # noqa: F401  (registers r2d2kit's ids)

    if env_id not in gymnasium.envs.registry:
        raise ConfigError(f"{source}: env.id {env_id!r} is not a registered gymnasium id; "
                          f"{_nearest(env_id, list(gymnasium.envs.registry))}import the module that registers it "
                          "or pick a registered id")


def apply_overrides(data: dict, overrides: Sequence[str], source: str = "--set") -> dict:
    """Apply ``section.key=value`` strings (value parsed as YAML) to a nested dict, in order."""
    data = {section: dict(values) if isinstance(values, Mapping) else values
            for section, values in (data or {}).items()}
    for override in overrides:
        if "=" not in override or "." not in override.split("=", 1)[0]:
            raise ConfigError(f"{source} {override!r}: write section.key=value, e.g. learner.batch_size=32")
        path, raw = override.split("=", 1)
        section, key = path.split(".", 1)
        target = data.setdefault(section, {})
        if target is None:
            target = data[section] = {}
        if not isinstance(target, dict):
            raise ConfigError(f"{source} {override!r}: section {section!r} is not a mapping in the config file")
        target[key] = yaml.safe_load(raw)
    return data


def load_config(path: str | os.PathLike, overrides: Sequence[str] = ()) -> TrainConfig:
    """Read a YAML config (``yaml.safe_load``), apply ``--set`` overrides and validate."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ConfigError(f"no config file at {path!r}")
    try:
        with open(path) as handle:
            data = yaml.safe_load(handle)
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not valid YAML: {error}") from None
    if data is not None and not isinstance(data, Mapping):
        raise ConfigError(f"{path}: the top level must be a mapping of sections {list(SECTIONS)}")
    return build_config(apply_overrides(data or {}, overrides), source=path)


def save_config(config: TrainConfig, path: str | os.PathLike) -> None:
    """Write the resolved config (every key, defaults included) as YAML."""
    with open(path, "w") as handle:
        yaml.safe_dump(config.to_dict(), handle, sort_keys=False)
