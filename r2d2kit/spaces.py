"""Gymnasium spaces -> what an agent stores and acts on: compact integer codes in replay, one-hots in the network.

An agent's networks read one observation array; R2D2 picks one of ``A`` actions, SAC one flat vector.
This module turns the other spaces gymnasium envs use (POPGym's ``Discrete`` cards, ``MultiDiscrete``
boards, ``Tuple`` and ``Dict`` of them) into that shape, in one place that the model builder, the
actors, the replay and evaluation all share (``r2d2kit.training.builders.make_env`` applies :func:`wrap_spaces`)::

    observation space             stored (replay, actors, shared memory)    the network sees (encoder input)
    Box (any shape, any dtype)    as it is: images stay images              as it is
    Discrete(n, start)            1 code: x - start                         n one-hot entries
    MultiDiscrete(nvec, start)    1 code per component (flattened)          nvec[i] one-hot entries per component
    MultiBinary(n)                n bits                                    n bits
    Tuple / Dict of the above     codes concatenated (Dict: the space's     one-hots and values concatenated
    (nested too; a Box inside     key order, which gymnasium sorts),        in the same order
    is flattened into values)     one flat vector

The codes are uint8 when every entry is a category below 256 or a bit (int32 for larger
categories) and float32 as soon as a Box contributes values; the one-hots are made inside the
network by :class:`r2d2kit.models.code_encoding.CodeEncoder`, so replay never stores them.

Actions: ``Discrete(n)`` as it is; ``Discrete(n, start)``, ``MultiDiscrete(nvec)`` and
``MultiBinary(n)`` become one ``Discrete(prod(nvec))`` (mixed radix, first component most
significant, as ``numpy.ravel_multi_index``) with the mapping back in :class:`ActionLayout`.
Anything else (``Text``, ``Graph``, ``Sequence``...) is refused with :class:`UnsupportedSpaceError`
naming the space, the reason and a fix. A continuous ``Box`` action space is refused for R2D2 (which
picks one of finitely many actions) and accepted for an agent with continuous actions (SAC: pass
``continuous_actions=True``): it is stored and acted on as one flat float32 vector of the action's
entries (:class:`BoxActionLayout`), with finite bounds the policy scales its squashed actions to.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, SupportsFloat, TypeGuard, cast

import gymnasium as gym
import numpy as np
import numpy.typing as npt

__all__ = ["UnsupportedSpaceError", "Segment", "ObservationLayout", "ActionLayout", "observation_layout",
           "action_layout", "check_spaces", "FlatCodes", "FlatActions", "GoalObservation", "is_goal_space",
           "wrap_spaces", "BoxActionLayout", "box_action_layout", "FlatBoxActions"]

GOAL_KEYS = ("observation", "achieved_goal", "desired_goal")  # the GoalEnv protocol's observation dict

MAX_CATEGORIES = 65_536  # categories of one Discrete entry that are one-hot encoded (wider: a Box of values)
MAX_ACTIONS = 65_536  # actions of the flattened Discrete: one Q-value each


class UnsupportedSpaceError(ValueError):
    """A space r2d2kit cannot store or act in; the message names the space, the reason and a fix."""


@dataclass(frozen=True)
class Segment:
    """A run of entries of the code vector that are encoded alike.

    Attributes:
        path: where in the observation the entries come from (``obs``, ``obs[1]``, ``obs['pos']``).
        kind: ``"values"`` (Box entries) or ``"bits"`` (MultiBinary), both fed as they are, or
            ``"categorical"`` (Discrete / MultiDiscrete components, one-hot encoded).
        size: code entries in the run.
        categories: one-hot width of each entry of a ``"categorical"`` run (0 for values).
    """

    path: str
    kind: str
    size: int
    categories: int = 0

    @property
    def encoded_size(self) -> int:
        """Entries this run takes in the network's input: ``size * categories``, or ``size`` for values."""
        return self.size * self.categories if self.kind == "categorical" else self.size


@dataclass(frozen=True)
class ObservationLayout:
    """How a non-Box observation space is flattened into codes and how the network expands them.

    Build it with :func:`observation_layout`; :class:`FlatCodes` applies it to an env.

    Attributes:
        space: the env's observation space.
        segments: the code vector's runs, in order.
        code_space: the Box of the codes (shape ``[code_size]``) that replay and actors see.
    """

    space: gym.Space
    segments: tuple[Segment, ...]
    code_space: gym.spaces.Box = field(repr=False)

    @property
    def code_size(self) -> int:
        """Entries of the stored code vector."""
        return sum(segment.size for segment in self.segments)

    @property
    def encoded_size(self) -> int:
        """Entries of the network's input after one-hot encoding."""
        return sum(segment.encoded_size for segment in self.segments)

    def codes(self, observation: Any) -> np.ndarray:
        """One observation of ``space`` -> its code vector ``[code_size]`` (dtype of ``code_space``)."""
        parts: list[np.ndarray] = []
        _collect_codes(self.space, observation, parts)
        return np.concatenate(parts).astype(self.code_space.dtype, copy=False)

    def encoding_plan(self) -> tuple[np.ndarray, np.ndarray]:
        """Gather plan of the network's encoding: ``(source, category)``, each ``[encoded_size]``.

        Entry ``j`` of the encoded vector is ``codes[source[j]]`` where ``category[j] < 0`` (values),
        else ``1.0 if codes[source[j]] == category[j] else 0.0`` (one-hot slot).
        """
        source, category = [], []
        start = 0
        for segment in self.segments:
            columns = np.arange(start, start + segment.size)
            if segment.kind == "categorical":
                source.append(np.repeat(columns, segment.categories))  # [size * categories]
                category.append(np.tile(np.arange(segment.categories), segment.size))
            else:
                source.append(columns)
                category.append(np.full(segment.size, -1))
            start += segment.size
        return (np.concatenate(source).astype(np.int32), np.concatenate(category).astype(np.float32))

    def describe(self) -> str:
        """One line per run, for the start-of-run printout."""
        codes = "code" if self.code_size == 1 else "codes"
        lines = [(f"observation {self.space} -> {self.code_size} stored {codes} ({self.code_space.dtype}) -> "
                  f"{self.encoded_size} network inputs")]
        for segment in self.segments:
            what = (f"{segment.size} x one-hot({segment.categories})" if segment.kind == "categorical"
                    else f"{segment.size} {segment.kind}")
            lines.append(f"  {segment.path:20s} {what}")
        return "\n".join(lines)


def _refuse(role: str, space: gym.Space, path: str, reason: str, fix: str) -> UnsupportedSpaceError:
    where = "" if path in ("obs", "action") else f" at {path}"
    return UnsupportedSpaceError(f"{role} space {space}{where}: {reason}; fix: {fix}")


def _segments(space: gym.Space, path: str, root: gym.Space) -> list[Segment]:
    """The runs of ``space`` (recursively), refusing what cannot be a fixed-size vector."""
    if isinstance(space, gym.spaces.Box):
        return [Segment(path, "values", int(np.prod(space.shape, dtype=np.int64)))]
    if isinstance(space, gym.spaces.MultiBinary):
        return [Segment(path, "bits", int(np.prod(space.shape, dtype=np.int64)))]
    if isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
        nvec = np.asarray([space.n] if isinstance(space, gym.spaces.Discrete) else space.nvec).reshape(-1)
        if nvec.size and int(nvec.max()) > MAX_CATEGORIES:
            raise _refuse("observation", root, path, f"{int(nvec.max())} categories are more than the "
                          f"{MAX_CATEGORIES} r2d2kit one-hot encodes", "an observation wrapper in env.wrappers "
                          "that turns the entry into a Box of values (e.g. the number scaled to [0, 1])")
        runs: list[Segment] = []
        for n in nvec.tolist():  # consecutive components of equal width share a run
            if runs and runs[-1].categories == n:
                runs[-1] = Segment(path, "categorical", runs[-1].size + 1, n)
            else:
                runs.append(Segment(path, "categorical", 1, int(n)))
        return runs
    if isinstance(space, gym.spaces.Tuple):
        return [s for i, sub in enumerate(space.spaces) for s in _segments(sub, f"{path}[{i}]", root)]
    if isinstance(space, gym.spaces.Dict):
        return [s for key, sub in space.spaces.items() for s in _segments(sub, f"{path}[{key!r}]", root)]
    kind = type(space).__name__
    raise _refuse("observation", root, path, f"{kind} observations have no fixed-size vector form (r2d2kit "
                  "supports Box, Discrete, MultiDiscrete, MultiBinary and Tuple/Dict of these)",
                  f"drop or replace the {kind} entry with an observation wrapper in env.wrappers (e.g. "
                  "gymnasium.wrappers.FilterObservation for a Dict entry, or a wrapper keeping only the "
                  "image, as minigrid.wrappers.ImgObsWrapper does)")


def _bounds(space: gym.Space) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Lower and upper bounds of the codes of ``space``, flattened, in segment order."""
    if isinstance(space, gym.spaces.Box):
        return [space.low.reshape(-1).astype(np.float64)], [space.high.reshape(-1).astype(np.float64)]
    if isinstance(space, gym.spaces.MultiBinary):
        size = int(np.prod(space.shape, dtype=np.int64))
        return [np.zeros(size)], [np.ones(size)]
    if isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
        nvec = np.asarray([space.n] if isinstance(space, gym.spaces.Discrete) else space.nvec).reshape(-1)
        return [np.zeros(nvec.size)], [nvec.astype(np.float64) - 1]
    # the checked kinds left: a Tuple or a Dict
    if isinstance(space, gym.spaces.Tuple):
        children = space.spaces
    else:
        children = tuple(cast(gym.spaces.Dict, space).spaces.values())
    lows, highs = [], []
    for child in children:
        low, high = _bounds(child)
        lows += low
        highs += high
    return lows, highs


def _collect_codes(space: gym.Space, observation: Any, out: list[np.ndarray]) -> None:
    """Append the codes of one ``observation`` of ``space`` to ``out`` (same order as ``_segments``)."""
    if isinstance(space, gym.spaces.Discrete):
        out.append(np.asarray([int(observation) - int(space.start)]))
    elif isinstance(space, gym.spaces.MultiDiscrete):
        out.append((np.asarray(observation, dtype=np.int64) - space.start).reshape(-1))
    elif isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary)):
        out.append(np.asarray(observation).reshape(-1))
    elif isinstance(space, gym.spaces.Tuple):
        for sub, part in zip(space.spaces, observation, strict=True):
            _collect_codes(sub, part, out)
    else:  # Dict: the space's key order, whatever the observation dict's order
        for key, sub in cast(gym.spaces.Dict, space).spaces.items():
            _collect_codes(sub, observation[key], out)


def observation_layout(space: gym.Space) -> ObservationLayout | None:
    """The code layout of an observation space; ``None`` for a Box, which passes through as it is.

    Raises:
        UnsupportedSpaceError: a space (or an entry of a Tuple/Dict) with no fixed-size vector form.
    """
    if isinstance(space, gym.spaces.Box):
        return None
    segments = tuple(_segments(space, "obs", space))
    if not segments:
        raise _refuse("observation", space, "obs", "it holds no entries", "give the env a non-empty observation")
    lows, highs = _bounds(space)
    low, high = np.concatenate(lows), np.concatenate(highs)
    if any(segment.kind == "values" for segment in segments):
        dtype: type = np.float32
    else:
        dtype = np.uint8 if high.max(initial=0) <= 255 else np.int32
    code_space = gym.spaces.Box(low.astype(dtype), high.astype(dtype), dtype=dtype)
    return ObservationLayout(space, segments, code_space)


@dataclass(frozen=True)
class ActionLayout:
    """A ``Discrete(start)``, ``MultiDiscrete`` or ``MultiBinary`` action space as one ``Discrete(num_actions)``.

    Index ``a`` is the mixed-radix number of the components (first component most significant,
    as ``numpy.ravel_multi_index``); :meth:`to_env` and :meth:`to_index` map both ways.

    Attributes:
        space: the env's action space.
        nvec: choices per component, flattened.
        start: the value of each component's first choice, flattened.
    """

    space: gym.Space
    nvec: np.ndarray = field(repr=False)
    start: np.ndarray = field(repr=False)

    @property
    def num_actions(self) -> int:
        """Actions of the flattened ``Discrete`` space."""
        return int(np.prod(self.nvec, dtype=np.int64))

    def to_env(self, index: int | np.integer) -> np.integer | np.ndarray:
        """Flat action index -> the env's action (an int for Discrete, an array otherwise)."""
        index = int(index)
        if not 0 <= index < self.num_actions:
            raise ValueError(f"action index {index} is outside [0, {self.num_actions}) of {self.space}")
        components = np.asarray(np.unravel_index(index, tuple(self.nvec.tolist())), dtype=np.int64) + self.start
        if isinstance(self.space, gym.spaces.Discrete):
            return self.space.dtype.type(components[0])
        return components.reshape(self.space.shape).astype(self.space.dtype)

    def to_index(self, action: npt.ArrayLike) -> int:
        """The env's action -> its flat index (the inverse of :meth:`to_env`)."""
        components = np.asarray(action, dtype=np.int64).reshape(-1) - self.start
        return int(np.ravel_multi_index(tuple(components.tolist()), tuple(self.nvec.tolist())))


def action_layout(space: gym.Space) -> ActionLayout | None:
    """The flattening of an action space; ``None`` for ``Discrete(n)`` starting at 0 (used as it is).

    Raises:
        UnsupportedSpaceError: continuous or structured action spaces, or more than
            :data:`MAX_ACTIONS` flattened actions.
    """
    if isinstance(space, gym.spaces.Discrete):
        if int(space.start) == 0:
            return None
        nvec, start = np.asarray([space.n]), np.asarray([space.start])
    elif isinstance(space, gym.spaces.MultiDiscrete):
        nvec, start = np.asarray(space.nvec).reshape(-1), np.asarray(space.start).reshape(-1)
    elif isinstance(space, gym.spaces.MultiBinary):
        size = int(np.prod(space.shape, dtype=np.int64))
        nvec, start = np.full(size, 2), np.zeros(size)
    elif isinstance(space, gym.spaces.Box):
        raise _refuse("action", space, "action", "R2D2 picks one of finitely many actions (argmax over "
                      "Q-values) and cannot output continuous actions",
                      "train recurrent SAC on it (agent: sac), or discretise the actions with a wrapper listed in "
                      "env.wrappers, e.g. a function "
                      "'def discrete_actions(env): return gymnasium.wrappers.DiscretizeAction(env, bins=9)' "
                      "in your module, named as 'your_module:discrete_actions'")
    else:
        raise _refuse("action", space, "action", f"R2D2 acts in Discrete, MultiDiscrete or MultiBinary "
                      f"action spaces, not {type(space).__name__}",
                      "an action wrapper in env.wrappers that maps one Discrete action to the env's action")
    count = math.prod(int(n) for n in nvec.tolist())
    if count > MAX_ACTIONS:
        raise _refuse("action", space, "action", f"flattened, it has {count} actions (one Q-value each), more "
                      f"than {MAX_ACTIONS}", "an action wrapper in env.wrappers that offers fewer combinations")
    return ActionLayout(space, nvec.astype(np.int64), start.astype(np.int64))


@dataclass(frozen=True)
class BoxActionLayout:
    """A continuous ``Box`` action space as one flat float32 vector of ``size`` entries (replay, actors and
    the network see the vector; the env gets it back in its own shape and dtype).

    Attributes:
        space: the env's action space.
        low, high: its finite bounds, flattened, float32 (the policy scales its tanh-squashed actions to them).
    """

    space: gym.spaces.Box
    low: np.ndarray = field(repr=False)
    high: np.ndarray = field(repr=False)

    @property
    def size(self) -> int:
        """Entries of the action vector."""
        return int(self.low.size)

    @property
    def vector_space(self) -> gym.spaces.Box:
        """The flat float32 Box the agent acts in (``[size]``)."""
        return gym.spaces.Box(self.low, self.high, dtype=np.float32)

    def to_env(self, vector: npt.ArrayLike) -> np.ndarray:
        """A flat action vector -> the env's action (its shape and dtype)."""
        vector = np.asarray(vector, dtype=np.float32)
        if vector.shape != (self.size,):
            raise ValueError(f"action vector of shape {vector.shape}, expected ({self.size},) for {self.space}")
        return vector.reshape(self.space.shape).astype(self.space.dtype)

    def to_vector(self, action: npt.ArrayLike) -> np.ndarray:
        """The env's action -> the flat float32 vector (the inverse of :meth:`to_env`)."""
        return np.asarray(action, dtype=np.float32).reshape(-1)


def box_action_layout(space: gym.Space) -> BoxActionLayout:
    """The flat vector form of a continuous action space (an agent with continuous actions, e.g. SAC).

    Raises:
        UnsupportedSpaceError: not a float ``Box``, an empty one, or one with a non-finite bound (a squashed
            policy needs both bounds to scale its actions to).
    """
    if not isinstance(space, gym.spaces.Box):
        raise _refuse("action", space, "action", f"a continuous-action agent acts in a Box action space, not "
                      f"{type(space).__name__}", "use the r2d2 agent for discrete actions, or an action wrapper "
                      "in env.wrappers that maps a Box of actions to the env's")
    if not np.issubdtype(space.dtype, np.floating):
        raise _refuse("action", space, "action", f"its dtype {space.dtype} is not a float dtype, so it is not "
                      "continuous", "use the r2d2 agent (integer actions), or an action wrapper in env.wrappers "
                      "whose action_space is a float32 Box")
    low = np.asarray(space.low, dtype=np.float64).reshape(-1)
    high = np.asarray(space.high, dtype=np.float64).reshape(-1)
    if low.size == 0:
        raise _refuse("action", space, "action", "it holds no entries", "give the env a non-empty action space")
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
        raise _refuse("action", space, "action", "it has a non-finite bound, and a squashed (tanh) policy scales "
                      "its actions to both bounds", "an action wrapper in env.wrappers whose action_space is a Box "
                      "with the finite range the env accepts, e.g. gymnasium.wrappers.TransformAction(env, func, "
                      "Box(-1.0, 1.0, shape)) (func mapping [-1, 1] to the env's actions), or "
                      "gymnasium.wrappers.RescaleAction / ClipAction over such a Box")
    if np.any(high <= low):
        raise _refuse("action", space, "action", "some entry has high <= low, so it has no range to act in",
                      "an action wrapper in env.wrappers that drops the fixed entries")
    return BoxActionLayout(space, low.astype(np.float32), high.astype(np.float32))


def check_spaces(observation_space: gym.Space, action_space: gym.Space, *, continuous_actions: bool = False
                 ) -> tuple[ObservationLayout | None, ActionLayout | BoxActionLayout | None]:
    """Both layouts of an env (``None`` where a space is used as it is), refusing unsupported spaces.

    ``continuous_actions``: the agent acts in a ``Box`` (SAC): the action's layout is
    :func:`box_action_layout`'s; else (R2D2, the default) :func:`action_layout`'s.

    Raises:
        UnsupportedSpaceError: naming the space, the reason and a fix.
    """
    if continuous_actions:
        return observation_layout(observation_space), box_action_layout(action_space)
    return observation_layout(observation_space), action_layout(action_space)


class FlatCodes(gym.ObservationWrapper):
    """Observations of ``layout.space`` -> their code vectors (``layout.code_space``).

    Args:
        env: the env; its observation space must be the layout's.
        layout: default :func:`observation_layout` of the env's observation space.

    Attributes:
        observation_layout: the layout applied.
    """

    def __init__(self, env: gym.Env, layout: ObservationLayout | None = None) -> None:
        super().__init__(env)
        layout = layout or observation_layout(env.observation_space)
        if layout is None:
            raise ValueError(f"FlatCodes: a Box observation space ({env.observation_space}) needs no codes")
        self.observation_layout = layout
        self.observation_space = layout.code_space

    def observation(self, observation: Any) -> np.ndarray:
        """The code vector of one observation."""
        return self.observation_layout.codes(observation)


class FlatActions(gym.ActionWrapper):
    """One ``Discrete(layout.num_actions)`` action space over the env's (MultiDiscrete, ...) actions.

    Args:
        env: the env; its action space must be the layout's.
        layout: default :func:`action_layout` of the env's action space.

    Attributes:
        action_layout: the mapping applied.
    """

    def __init__(self, env: gym.Env, layout: ActionLayout | None = None) -> None:
        super().__init__(env)
        layout = layout or action_layout(env.action_space)
        if layout is None:
            raise ValueError(f"FlatActions: a Discrete action space starting at 0 ({env.action_space}) needs "
                             "no flattening")
        self.action_layout = layout
        self.action_space = gym.spaces.Discrete(layout.num_actions)

    def action(self, action: int | np.integer) -> np.integer | np.ndarray:
        """Flat index -> the env's action."""
        return self.action_layout.to_env(action)


class FlatBoxActions(gym.ActionWrapper):
    """One flat float32 ``Box`` action space over the env's continuous actions of any shape and float dtype.

    Args:
        env: the env; its action space must be the layout's.
        layout: default :func:`box_action_layout` of the env's action space.

    Attributes:
        action_layout: the mapping applied.
    """

    def __init__(self, env: gym.Env, layout: BoxActionLayout | None = None) -> None:
        super().__init__(env)
        self.action_layout = layout or box_action_layout(env.action_space)
        self.action_space = self.action_layout.vector_space

    def action(self, action: npt.ArrayLike) -> np.ndarray:
        """Flat vector -> the env's action."""
        return self.action_layout.to_env(action)


def is_goal_space(space: gym.Space) -> TypeGuard[gym.spaces.Dict]:
    """Whether ``space`` is a GoalEnv observation: a Dict of exactly ``observation``, ``achieved_goal``
    and ``desired_goal``."""
    return isinstance(space, gym.spaces.Dict) and set(space.spaces) == set(GOAL_KEYS)


class GoalObservation(gym.ObservationWrapper):
    """A GoalEnv's observation dict -> what the network sees: ``observation`` then ``desired_goal``,
    flattened into one float32 vector (the layout of
    :meth:`r2d2kit.replay.SequenceHerReplayBuffer.flatten_obs`, so hindsight relabelling can rewrite
    the goal part).

    The achieved goal is left out of the network's input: it may hold state the task hides from the
    agent (``PointMassGoal-v0``'s velocity), and a goal policy acts on the goal it is given. It travels
    in ``info["achieved_goal"]`` of every ``reset`` and ``step`` instead, for relabelling.

    Raises:
        UnsupportedSpaceError: ``observation`` or ``desired_goal`` is not a Box of at most one axis.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        space = env.observation_space
        if not is_goal_space(space):
            raise UnsupportedSpaceError(f"GoalObservation needs a Dict of {list(GOAL_KEYS)}, got {space}")
        parts = [space["observation"], space["desired_goal"]]
        for key, part in zip(("observation", "desired_goal"), parts):
            if not isinstance(part, gym.spaces.Box) or len(part.shape) > 1:
                raise UnsupportedSpaceError(
                    f"obs[{key!r}] is {part}: a goal env's {key} must be a Box of at most one axis (vector), "
                    f"because the network sees it flattened beside the goal; fix: wrap the env so that {key} is "
                    f"a vector (e.g. features of an image), or train it with an ImageModel of your own loop")
        observation_box, goal_box = cast("list[gym.spaces.Box]", parts)  # both, as checked above
        self.observation_size = int(np.prod(observation_box.shape, dtype=np.int64))
        self.goal_size = int(np.prod(goal_box.shape, dtype=np.int64))
        lows, highs = _bounds(gym.spaces.Tuple(parts))  # flattened, observation first
        self.observation_space = gym.spaces.Box(np.concatenate(lows).astype(np.float32),
                                                np.concatenate(highs).astype(np.float32), dtype=np.float32)

    def observation(self, observation: Mapping[str, npt.ArrayLike]) -> np.ndarray:
        """``[observation_size + goal_size]`` float32: the observation, then the desired goal."""
        return np.concatenate([np.asarray(observation["observation"], np.float32).ravel(),
                               np.asarray(observation["desired_goal"], np.float32).ravel()])

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        return self.observation(obs), {**info, "achieved_goal": np.asarray(obs["achieved_goal"], np.float32)}

    def step(self, action: object) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        info = {**info, "achieved_goal": np.asarray(obs["achieved_goal"], np.float32)}
        return self.observation(obs), reward, terminated, truncated, info


def wrap_spaces(env: gym.Env, *, continuous_actions: bool = False) -> gym.Env:
    """``env`` with :class:`GoalObservation`, :class:`FlatActions` and :class:`FlatCodes` applied where
    its spaces need them.

    A Box observation space and a ``Discrete(n)`` action space are left as they are, so such envs
    (and their runs and checkpoints) are unchanged. A GoalEnv (:func:`is_goal_space`) gets
    :class:`GoalObservation`: the network sees the observation and the desired goal, never the
    achieved goal. ``env.get_wrapper_attr("observation_layout")`` gives the network builder the
    observation layout (``"action_layout"``: the action mapping).

    ``continuous_actions`` (an agent acting in a ``Box``, SAC): the action space must be a float ``Box``
    with finite bounds (:func:`box_action_layout`); one that is not already a flat float32 vector gets
    :class:`FlatBoxActions`.

    Raises:
        UnsupportedSpaceError: naming the space, the reason and a fix.
    """
    if is_goal_space(env.observation_space):
        env = GoalObservation(env)
    obs_layout, act_layout = check_spaces(env.observation_space, env.action_space,
                                          continuous_actions=continuous_actions)
    if isinstance(act_layout, BoxActionLayout):
        space = act_layout.space
        if len(space.shape) != 1 or space.dtype != np.float32:
            env = FlatBoxActions(env, act_layout)
    elif act_layout is not None:
        env = FlatActions(env, act_layout)
    if obs_layout is not None:
        env = FlatCodes(env, obs_layout)
    return env
