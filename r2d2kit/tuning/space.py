"""The search space of ``python -m r2d2kit.tune``: which config values a trial may change, and over what.

A space file maps ``section.key`` names (the names ``--set`` takes) to a range or a list of choices::

    learner.learning_rate: {low: 1.0e-4, high: 3.0e-3, log: true}   # log-uniform
    learner.target_update_period: {choices: [100, 200, 500]}
    run.updates_per_env_step: {low: 0.05, high: 0.5}                  # uniform
    replay.burn_in: {low: 0, high: 10, step: 1}                       # integers: int bounds, int key
    model.hidden: {choices: [[32], [64, 64]]}                         # any YAML value, e.g. lists

The whole file is checked before the first trial, so that a typo costs seconds, not a night of
trials: every key must be a config key (the message names the nearest one, from the same check as
``--set``), every range needs ``low < high`` (``low > 0`` on a log scale), every choice list at least
one value, and each bound and choice, set alone on the base config, must give a valid config (a
learning rate of 0 is refused here, not in trial 7). Keys that set the tuning schedule itself
(``run.total_env_steps``, ``run.eval_every``) and the ``logging`` and ``checkpoints`` sections are
given with ``--set`` instead: every trial must be measured the same way.

Without a file, :func:`default_space` searches the values the config's agent is known to be sensitive
to (its builder names them), around the config's own.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeGuard, cast

import yaml

from r2d2kit.training.config import (
    AGENTS,
    MAX_CONFIG_BYTES,
    ConfigError,
    TrainConfig,
    build_config,
    check_key_path,
    parse_yaml,
    section_class,
)
from r2d2kit.training.shipped import find_shipped_space, nearest_shipped_space, shipped_spaces

if TYPE_CHECKING:
    import optuna

__all__ = ["Dimension", "SearchSpace", "SpaceError", "load_space", "default_space", "check_corners", "with_values"]

# A value a config key may take, as YAML reads it.
ConfigValue = bool | int | float | str | None | list | dict
Number = int | float
Scalar = bool | int | float | str | None  # what Optuna stores as a categorical choice

RANGE_FIELDS = ("low", "high", "log", "step")
CHOICE_FIELDS = ("choices",)
# set how every trial is measured (or only where its files go): the same for all trials, so --set, not the space
SCHEDULE_KEYS = ("run.total_env_steps", "run.eval_every")
SCHEDULE_SECTIONS = ("logging", "checkpoints")


class SpaceError(ConfigError):
    """A search-space problem; the message names the file, the key and the fix."""


@dataclass(frozen=True)
class Dimension:
    """One searched config value: a range ``low..high`` (``log``-scaled or ``step``-ped) or a list of ``choices``.

    A range samples integers when ``integer`` is set (int bounds on a key that is not a float), floats
    otherwise. Choices that are not plain scalars (lists, mappings) are offered to Optuna as their YAML
    text and read back by :meth:`value`, since Optuna stores only scalars.
    """

    key: str  # section.key, as --set names it; also the Optuna parameter name
    low: Number | None = None
    high: Number | None = None
    log: bool = False
    step: Number | None = None
    integer: bool = False
    choices: tuple[ConfigValue, ...] | None = None

    def suggest(self, trial: optuna.Trial) -> ConfigValue:
        """Ask ``trial`` for this dimension's value (the config value, decoded)."""
        if self.choices is not None:
            return self.value(trial.suggest_categorical(self.key, list(self._optuna_choices())))
        assert self.low is not None and self.high is not None  # a range has both bounds (load_space checks)
        if self.integer:
            return trial.suggest_int(self.key, int(self.low), int(self.high), step=int(self.step or 1), log=self.log)
        return trial.suggest_float(self.key, float(self.low), float(self.high), step=self.step, log=self.log)

    def value(self, param: ConfigValue) -> ConfigValue:
        """The config value of an Optuna parameter value of this dimension (a non-scalar choice's YAML text
        is parsed back)."""
        if self.choices is not None and not all(_is_scalar(choice) for choice in self.choices):
            return yaml.safe_load(param) if isinstance(param, str) else param
        return param

    def corners(self) -> list[ConfigValue]:
        """The values checked before any trial: both bounds, or every choice."""
        return list(self.choices) if self.choices is not None else [self.low, self.high]

    def describe(self) -> str:
        """``log range [0.0001, 0.003]``, ``integer range [0, 10] step 2``, ``choices [100, 200, 500]``."""
        if self.choices is not None:
            return f"choices {_flow(list(self.choices))}"
        kind = ("log " if self.log else "") + ("integer range" if self.integer else "range")
        step = f" step {_number(self.step)}" if self.step is not None else ""
        return f"{kind} [{_number(self.low)}, {_number(self.high)}]{step}"

    def to_dict(self) -> dict[str, ConfigValue]:
        """The entry as a space file writes it (also stored with the study, to compare on ``--resume``)."""
        if self.choices is not None:
            return {"choices": list(self.choices)}
        entry: dict[str, ConfigValue] = {"low": self.low, "high": self.high}
        if self.log:
            entry["log"] = True
        if self.step is not None:
            entry["step"] = self.step
        return entry

    def _optuna_choices(self) -> tuple[Scalar, ...]:
        assert self.choices is not None  # called for a dimension of choices only
        scalars = tuple(choice for choice in self.choices if _is_scalar(choice))
        if len(scalars) == len(self.choices):
            return scalars
        return tuple(_flow(choice) for choice in self.choices)


@dataclass(frozen=True)
class SearchSpace:
    """The searched dimensions, in the order they were given; ``source`` names where they came from."""

    dimensions: tuple[Dimension, ...]
    source: str  # the space file, or "default space"

    def suggest(self, trial: optuna.Trial) -> dict[str, ConfigValue]:
        """Sample one value per dimension from ``trial``: ``{section.key: config value}``."""
        return {dimension.key: dimension.suggest(trial) for dimension in self.dimensions}

    def values(self, params: Mapping[str, ConfigValue]) -> dict[str, ConfigValue]:
        """The config values of a finished trial's Optuna ``params`` (keys this space does not search are dropped)."""
        return {d.key: d.value(params[d.key]) for d in self.dimensions if d.key in params}

    def describe(self, base: Mapping[str, Mapping[str, ConfigValue]]) -> str:
        """One line per dimension with the base config's value beside it (what ``python -m r2d2kit.tune`` prints)."""
        width = max(len(d.key) for d in self.dimensions)
        lines = [f"search space ({self.source}):"]
        for d in self.dimensions:
            lines.append(f"  {d.key:{width}s}  {d.describe():40s}  config: {_flow(_get(base, d.key))}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, dict[str, ConfigValue]]:
        """The space as a space file writes it."""
        return {d.key: d.to_dict() for d in self.dimensions}


def with_values(data: Mapping[str, Mapping[str, ConfigValue]],
                values: Mapping[str, ConfigValue]) -> dict[str, dict[str, ConfigValue]]:
    """A copy of the nested config ``data`` with each ``section.key`` (or ``section.key.subkey``) set; ``data``
    is left as it was."""
    result = {section: dict(keys) if isinstance(keys, Mapping) else keys for section, keys in data.items()}
    for path, value in values.items():
        *parents, key = path.split(".")
        target: dict[str, Any] = result  # Any: a config's nesting depth is the data's
        for name in parents:
            child = target.get(name)
            target[name] = dict(child) if isinstance(child, Mapping) else {}
            target = target[name]
        target[key] = value
    return result


def load_space(path: str | os.PathLike, base: Mapping[str, Mapping[str, ConfigValue]]) -> SearchSpace:
    """Read and check a space file against the base config (``TrainConfig.to_dict()`` after ``--set``).

    Raises:
        SpaceError: naming the file, the key and the fix, for anything a trial would trip on.
    """
    where = os.fspath(path)
    if not os.path.isfile(where):
        shipped = find_shipped_space(where)
        if shipped is None:
            near = nearest_shipped_space(where)
            raise SpaceError(f"--space {where}: no such file, and no shipped search space of that name"
                             + (f" (did you mean {near!r}?)" if near else "")
                             + f"; the shipped ones are {list(shipped_spaces())}. A space file maps section.key names "
                             "to ranges, e.g. 'learner.learning_rate: {low: 1.0e-4, high: 3.0e-3, log: true}'")
        where = os.fspath(shipped)
    if os.path.getsize(where) > MAX_CONFIG_BYTES:
        raise SpaceError(f"{where}: {os.path.getsize(where):,} bytes is not a search space (limit "
                         f"{MAX_CONFIG_BYTES:,})")
    with open(where) as handle:
        data = parse_yaml(handle, where)
    if not isinstance(data, Mapping) or not data:
        got = "nothing (an empty file)" if data is None else f"{type(data).__name__} {_flow(data)[:60]}"
        raise SpaceError(f"{where}: a search space is a mapping of section.key names to ranges or choices, e.g. "
                         f"'learner.learning_rate: {{low: 1.0e-4, high: 3.0e-3, log: true}}'; the file holds {got}")
    dimensions = tuple(_dimension(where, key, entry) for key, entry in data.items())
    space = SearchSpace(dimensions, source=where)
    check_corners(space, base)
    return space


def default_space(config: TrainConfig, agent_dimensions: Sequence[Dimension]) -> SearchSpace:
    """The values the config's agent is sensitive to, around ``config``'s own (``agent_dimensions``: its
    builder's ``search_dimensions(config)``; R2D2's are the learning rate, Adam's epsilon and the target update
    period), then ``replay.n_step`` (1, 3, 5), ``run.updates_per_env_step`` (log range x0.5..x2; left out at
    0) and ``replay.sampler`` (uniform or proportional)."""
    ratio = config.run.updates_per_env_step
    dimensions = [*agent_dimensions, Dimension("replay.n_step", choices=(1, 3, 5))]
    if ratio > 0:  # a run without updates has nothing to scale
        dimensions.append(Dimension("run.updates_per_env_step", low=_round(ratio * 0.5), high=_round(ratio * 2),
                                    log=True))
    dimensions.append(Dimension("replay.sampler", choices=("uniform", "proportional")))
    space = SearchSpace(tuple(dimensions), source="default space")
    check_corners(space, config.to_dict())
    return space


def check_corners(space: SearchSpace, base: Mapping[str, Mapping[str, ConfigValue]]) -> None:
    """Build the base config with each bound and each choice set alone; a :class:`SpaceError` names the one that
    makes no valid config (combinations are only met in trials: a trial whose values clash fails, named)."""
    for dimension in space.dimensions:
        for value in dimension.corners():
            source = f"{space.source} ({dimension.key}: {_flow(value)})"
            try:
                build_config(with_values(base, {dimension.key: value}), source=source)
            except ConfigError as error:
                raise SpaceError(f"{error}; change the range or choices of {dimension.key} in {space.source}") from None


# --------------------------------------------------------------------------- one entry of a space file
def _dimension(where: str, key: object, entry: object) -> Dimension:
    if not isinstance(key, str):
        raise SpaceError(f"{where}: key {key!r} is not a section.key name; write e.g. learner.learning_rate")
    try:
        names = check_key_path(where, key)
    except ConfigError as error:  # the --set check's message (nearest name), as a space error
        raise SpaceError(str(error)) from None
    if key in SCHEDULE_KEYS or names[0] in SCHEDULE_SECTIONS:
        raise SpaceError(f"{where}: {key} sets how every trial is run or measured, so it is not searched; give it "
                         f"to all trials with --set {key}=VALUE")
    if not isinstance(entry, Mapping):
        raise SpaceError(f"{where}: {key}: give a range {{low: ..., high: ...}} or {{choices: [...]}}, got "
                         f"{_flow(entry)}; a value every trial shares belongs in --set {key}={_flow(entry)}")
    for field in entry:
        if field not in RANGE_FIELDS + CHOICE_FIELDS:
            close = difflib.get_close_matches(str(field), RANGE_FIELDS + CHOICE_FIELDS, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise SpaceError(f"{where}: {key}: unknown field {field!r}; {hint}a range has {list(RANGE_FIELDS)}, a "
                             "list of choices has 'choices'")
    if "choices" in entry:
        return _choices(where, key, entry)
    dimension = _range(where, key, entry, _is_float_key(names))
    if _is_int_key(names) and not dimension.integer:
        bound = next(value for value in (dimension.low, dimension.high, dimension.step) if isinstance(value, float))
        raise SpaceError(f"{where}: {key} must be int, got {bound!r} in its range; write whole numbers, e.g. "
                         "{low: 1, high: 5}")
    return dimension


def _choices(where: str, key: str, entry: Mapping[str, object]) -> Dimension:
    extra = [field for field in entry if field != "choices"]
    if extra:
        raise SpaceError(f"{where}: {key}: give either choices or a range, not both (drop {extra})")
    choices = entry["choices"]
    if not isinstance(choices, list) or not choices:
        raise SpaceError(f"{where}: {key}: choices must be a non-empty list, e.g. choices: [100, 200, 500]; got "
                         f"{_flow(choices)}")
    texts = [_flow(choice) for choice in choices]
    repeated = sorted({text for text in texts if texts.count(text) > 1})
    if repeated:
        raise SpaceError(f"{where}: {key}: choices lists {', '.join(repeated)} more than once; list each value once")
    return Dimension(key, choices=tuple(choices))


def _range(where: str, key: str, entry: Mapping[str, object], float_key: bool) -> Dimension:
    missing = [field for field in ("low", "high") if field not in entry]
    if missing:
        raise SpaceError(f"{where}: {key}: a range needs low and high ({' and '.join(missing)} missing), e.g. "
                         f"{{low: 1.0e-4, high: 3.0e-3}}; or give choices: [...]")
    low = _bound(where, key, "low", entry["low"])
    high = _bound(where, key, "high", entry["high"])
    step = _bound(where, key, "step", entry["step"]) if entry.get("step") is not None else None
    log = entry.get("log", False)
    if not isinstance(log, bool):
        raise SpaceError(f"{where}: {key}: log must be true or false, got {_flow(log)}")
    if not low < high:
        raise SpaceError(f"{where}: {key}: low ({_number(low)}) must be below high ({_number(high)}); "
                         + ("swap them" if low > high else "for one value use --set instead"))
    if log and low <= 0:
        raise SpaceError(f"{where}: {key}: a log range needs low > 0, got low {_number(low)}; raise low or drop "
                         "log: true")
    if step is not None and step <= 0:
        raise SpaceError(f"{where}: {key}: step must be > 0, got {_number(step)}")
    if step is not None and log:
        raise SpaceError(f"{where}: {key}: a log range takes no step (Optuna samples one or the other); drop one")
    integer = not float_key and all(isinstance(v, int) for v in (low, high, step) if v is not None)
    return Dimension(key, low=low, high=high, log=log, step=step, integer=integer)


def _bound(where: str, key: str, field: str, value: object) -> Number:
    """A finite number; a string like ``1e-4`` counts (YAML 1.1 reads a number without a dot as a string)."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SpaceError(f"{where}: {key}: {field} must be a finite number, got {_flow(value)}")
    return value


def _is_float_key(names: Sequence[str]) -> bool:
    """Whether the config field named by ``section.key`` holds floats (int bounds then still sample floats)."""
    return "float" in _annotation(names)


def _is_int_key(names: Sequence[str]) -> bool:
    """Whether the config field named by ``section.key`` holds integers (a float bound would sample 2.7)."""
    return _annotation(names) == "int"


def _annotation(names: Sequence[str]) -> str:
    """The config field's annotation as text; empty for a key inside a mapping (replay.her.n_sampled_goal), where
    the bounds' type decides."""
    if len(names) != 2:
        return ""
    classes = [section_class(names[0], agent) for agent in AGENTS]  # a learner key: the agent that has it
    field = next(f for cls in classes for f in dataclasses.fields(cls) if f.name == names[1])
    return field.type if isinstance(field.type, str) else getattr(field.type, "__name__", "")


def _get(data: Mapping[str, object], path: str) -> ConfigValue:
    value: object = data
    for name in path.split("."):
        value = value.get(name) if isinstance(value, Mapping) else None
    return cast(ConfigValue, value)  # a value of a config read from YAML


def _is_scalar(value: ConfigValue) -> TypeGuard[Scalar]:
    return value is None or isinstance(value, (bool, int, float, str))


def _flow(value: object) -> str:
    """A value as one line of YAML flow style (how a choice or a config value is shown)."""
    if isinstance(value, float):
        return _number(value)
    return yaml.safe_dump(value, default_flow_style=True, width=1 << 16).strip().removesuffix("\n...").strip()


def _number(value: Number | None) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def scaled(value: float, low: float, high: float) -> tuple[float, float]:
    """``(value * low, value * high)`` rounded to three significant digits: a search range around a config's value."""
    return _round(value * low), _round(value * high)


def _round(value: float) -> float:
    """Three significant digits: 0.0003, not 0.00030000000000000003."""
    return float(f"{value:.3g}")
