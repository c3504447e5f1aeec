"""Actor-side SequenceBuilder: vector-env steps -> overlapping fixed-length R2D2 windows.

One episode of ``T`` transitions gives the rows ``0 .. T``: row ``t < T`` holds ``(obs_t, action_t,
reward_t)``; row ``T`` holds the final observation only, needed to bootstrap a truncated episode.
Under gymnasium's default ``"next_step"`` autoreset that observation comes with the env's next,
reset-only step; in the ``"same_step"`` and ``"disabled"`` modes it is passed as ``final_obs`` with
the step that ends the episode (:mod:`r2d2kit.replay.autoreset`).

Windows of ``L = burn_in + trace_length + n_step`` rows start every ``period`` rows at
``t0 = -burn_in + k * period`` (k = 0, 1, ...), as long as their trace holds a transition
(``t0 + burn_in < T``). The first window's burn-in is all padding, so training starts at the first
step of the episode. Example: burn_in 2, trace_length 3, n_step 1, period 2, T = 4::

    row:        -2  -1   0   1   2   3   4   5   6
    episode:             o0  o1  o2  o3  o4f               (o4f: final obs, no action)
    window 0:   [p   p | 0   1   2 | 3 ]                   burn-in | trace | n-step
    window 1:           [0   1 | 2   3   4f| p ]
    window 2:                   [2   3 | 4f  p   p | p ]   trace holds no transition -> not emitted

    obs_mask: the row holds an observation (0 <= t <= T); the LSTM steps only over these rows.
    mask:     the row holds a transition (0 <= t < T); losses and priorities use only these.

Each window carries the recurrent state given with its first real row (row ``max(t0, 0)``), which
for ``t0 <= 0`` is the state at the episode's start. Terminated and truncated are kept apart:
the learner bootstraps from the final observation after a truncation, never after a termination.

Optional ``extras`` are per-step fields that belong with the observation (a goal env's
``achieved_goal`` for :class:`~r2d2kit.replay.SequenceHerReplayBuffer`): row ``t`` holds the
extras given with ``obs_t``, row ``T`` those given with the final observation, padding holds zeros.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, TypedDict

import numpy as np

from r2d2kit._validation import as_per_env, check_positive_int
from r2d2kit.replay.autoreset import AutoresetMode, ResetSteps
from r2d2kit.replay.window_record import EPISODE_ROW, ROW_FLAGS, STATE_PREFIX, record_names

if TYPE_CHECKING:  # typing.NotRequired is Python 3.11's; the package supports 3.10
    from typing import NotRequired

    from numpy.typing import ArrayLike

_ROW_KEYS = EPISODE_ROW  # the order of a kept row's tuple
_OUTPUT_KEYS = record_names()

# one kept row: (obs, action, reward, prev_action, prev_reward, terminated, truncated, extras), _ROW_KEYS then extras
_Row = tuple[np.ndarray, np.ndarray, np.float32, np.ndarray, np.float32, bool, bool, dict[str, np.ndarray]]
_State = tuple[np.ndarray, ...]  # one env's recurrent state, one array per part


class _Window(TypedDict):
    """One window before stacking: its rows (None: padding) and where it sits in its episode."""

    rows: list[_Row | None]
    env: int
    episode: int
    start: int
    transitions: int  # T, or -1 while the episode runs
    state: NotRequired[_State]  # the state before the window's first real row, when steps pass one


class _Episode:
    """Rows of one env's current episode, dropped once no pending window needs them."""

    def __init__(self, episode_id: int) -> None:
        self.episode_id = episode_id
        self.rows: list[_Row] = []
        self.first_row = 0  # episode time of rows[0]
        self.states: dict[int, _State] = {}  # episode time -> recurrent state before that row
        self.transitions: int | None = None  # T, known once the episode ended
        self.next_window = 0  # k of the next window to emit
        self.last_action: np.ndarray | None = None  # previous row's action and reward (rows may already be dropped)
        self.last_reward = np.float32(0.0)

    @property
    def known_rows(self) -> int:
        return self.first_row + len(self.rows)


class SequenceBuilder:
    """Cuts the step stream of a vector env into overlapping windows with stored recurrent state.

    Call :meth:`step` once per ``envs.step`` with the observation the action was taken in, the
    action, the step's reward/terminated/truncated and the recurrent state *before* the step
    (a tuple of ``[num_envs, ...]`` arrays, e.g. an LSTM's ``(h, c)``, stored under ``state_names``).
    It returns the windows completed by that step as a dict of dense arrays ``[W, L, ...]`` (see the
    module docstring for the layout), or ``None``.

    Args:
        num_envs: environments in the vector env.
        burn_in: rows used only to warm up the recurrent state (R2D2: 40).
        trace_length: rows trained on (R2D2: 80).
        n_step: extra rows needed to bootstrap the last trained rows (R2D2: 5).
        period: rows between consecutive window starts (R2D2: 40).
        autoreset_mode: the vector env's (``"next_step"``, gymnasium's default; ``"same_step"`` or
            ``"disabled"``: pass ``final_obs`` to :meth:`step`). A wrong mode builds wrong windows
            silently, so it is asked for rather than guessed.
        state_names: the window field of each part of the recurrent state, in the state's order, each
            ``state_<name>`` (a network's: ``tuple(state_fields(network.state_spec()))`` from
            ``r2d2kit.models.cores``; an LSTM's ``("state_h", "state_c")``). Needed when :meth:`step`
            gets a state; they must be the replay's state fields.
    """

    def __init__(self, num_envs: int, burn_in: int, trace_length: int, n_step: int, period: int,
                 autoreset_mode: AutoresetMode = "next_step", state_names: Sequence[str] = ()) -> None:
        self.num_envs = check_positive_int("num_envs", num_envs)
        self.burn_in = check_positive_int("burn_in", burn_in, minimum=0)
        self.trace_length = check_positive_int("trace_length", trace_length)
        self.n_step = check_positive_int("n_step", n_step, minimum=0)
        self.period = check_positive_int("period", period)
        if self.period > self.trace_length:
            raise ValueError(
                f"period ({period}) must be <= trace_length ({trace_length}); otherwise some steps would "
                "never be trained on"
            )
        self.length = self.burn_in + self.trace_length + self.n_step
        self._episodes = [_Episode(env) for env in range(self.num_envs)]
        self._episodes_started = self.num_envs
        self._resets = ResetSteps(self.num_envs, autoreset_mode)
        self.autoreset_mode = self._resets.mode
        self.state_names = self._check_state_names(state_names)
        self._state_given: bool | None = None  # whether steps pass a state, fixed by the first step
        self._templates: dict[str, np.ndarray] | None = None  # zero rows for padding
        self._extra_templates: dict[str, np.ndarray] = {}  # zero rows of the extras, fixed by the first step

    # ------------------------------------------------------------------ feeding
    def step(self, obs: ArrayLike, action: ArrayLike, reward: ArrayLike, terminated: ArrayLike, truncated: ArrayLike,
             state: Sequence[ArrayLike] | None = None,
             extras: Mapping[str, ArrayLike] | None = None, final_obs: ArrayLike | None = None,
             final_extras: Mapping[str, ArrayLike] | None = None) -> dict[str, np.ndarray] | None:
        """Feed one vector step; return the windows it completed (dense ``[W, L, ...]``) or None.

        ``extras`` (optional): more per-step fields ``{"name": [num_envs, ...]}`` that belong with
        ``obs`` (e.g. ``{"achieved_goal": obs_dict["achieved_goal"]}``); each comes back as a
        ``[W, L, ...]`` array under its name. Pass the same names and shapes on every step.
        ``final_obs`` / ``final_extras`` (``"same_step"`` and ``"disabled"`` modes, on a step where an
        env's episode ends): ``[num_envs, ...]`` arrays whose rows of the ended envs hold the
        episode's final observation and its extras (``infos["final_obs"]`` in ``"same_step"`` mode).
        """
        obs = np.asarray(obs)
        action = np.asarray(action)
        for name, array in (("obs", obs), ("action", action)):  # in the signature's order: the first misfit is named
            if array.ndim == 0 or array.shape[0] != self.num_envs:
                raise ValueError(f"{name} must have a leading axis of num_envs={self.num_envs}, got {array.shape}")
        reward = as_per_env("reward", reward, self.num_envs, np.float32)
        terminated = as_per_env("terminated", terminated, self.num_envs, bool)
        truncated = as_per_env("truncated", truncated, self.num_envs, bool)
        states = self._check_state(state)
        extras = self._check_extras(extras)
        self._ensure_templates(obs, action)
        done = terminated | truncated
        final_rows = self._check_final(done, obs, final_obs, final_extras)

        reset_only = self._resets.pending.copy()  # "next_step": these envs' obs is their final observation
        _, ended = self._resets.advance(done)
        windows: list[_Window] = []
        for env in range(self.num_envs):
            episode = self._episodes[env]
            row_state = None if states is None else tuple(np.array(part[env]) for part in states)
            row_extras = {name: np.array(value[env]) for name, value in extras.items()}
            if reset_only[env]:  # the action is ignored by the env
                windows.extend(self._close_episode(env, obs[env], row_state, row_extras))
                continue
            self._append_row(episode, obs[env], action[env], reward[env], terminated[env], truncated[env], row_state,
                             row_extras)
            if ended[env] and final_rows is not None:
                final_obs, final_extras = final_rows
                row_extras = {name: np.array(value[env]) for name, value in final_extras.items()}
                windows.extend(self._close_episode(env, final_obs[env], None, row_extras))
                continue
            windows.extend(self._ready_windows(env, episode))
        return self._stack(windows) if windows else None

    def _close_episode(self, env: int, final_obs: np.ndarray, state: _State | None,
                       extras: dict[str, np.ndarray]) -> list[_Window]:
        """Append the final observation's row to ``env``'s episode, emit its last windows, start the next."""
        episode = self._episodes[env]
        self._append_row(episode, final_obs, None, 0.0, False, False, state, extras)
        episode.transitions = episode.known_rows - 1
        windows = self._ready_windows(env, episode)
        self._episodes[env] = _Episode(self._episodes_started)
        self._episodes_started += 1
        return windows

    def _check_final(self, done: np.ndarray, obs: np.ndarray, final_obs: ArrayLike | None,
                     final_extras: Mapping[str, ArrayLike] | None) -> tuple[np.ndarray, dict[str, np.ndarray]] | None:
        """``(final_obs, final_extras)`` as arrays shaped like ``obs`` and the extras, when this mode needs them
        on this step; ``None`` in ``"next_step"`` mode, where they must not be given."""
        if self.autoreset_mode == "next_step":
            if final_obs is not None or final_extras is not None:
                raise ValueError("final_obs / final_extras are for the 'same_step' and 'disabled' autoreset modes; "
                                 "under 'next_step' the final observation comes with the env's next step: drop them, "
                                 "or build the SequenceBuilder with the env's autoreset_mode")
            return None
        ending = done  # no step is reset-only in these modes
        if not ending.any():
            return None
        if final_obs is None:
            raise ValueError(f"env {int(np.flatnonzero(ending)[0])}'s episode ended on this step: with autoreset_mode="
                             f"{self.autoreset_mode!r} pass its final observation as final_obs ([num_envs, ...], "
                             + ("infos['final_obs'])" if self.autoreset_mode == "same_step" else
                                "the obs the step returned, before you reset the env)"))
        final_obs = np.asarray(final_obs)
        if final_obs.dtype == object and final_obs.shape == (self.num_envs,):  # gymnasium: None where no episode ended
            rows = np.zeros_like(obs)
            for env in np.flatnonzero(ending):
                rows[env] = final_obs[env]
            final_obs = rows
        if final_obs.shape != obs.shape:
            raise ValueError(f"final_obs must be shaped like obs {obs.shape}, got {final_obs.shape}")
        if self._extra_templates and final_extras is None:
            raise ValueError(f"final_extras must hold the ended episodes' {sorted(self._extra_templates)}, as extras "
                             "does on every step")
        return final_obs, self._check_extras(final_extras)

    def _row_templates(self) -> dict[str, np.ndarray]:
        """The zero rows for padding, fixed by the first step (which every row follows)."""
        if self._templates is None:
            raise RuntimeError("SequenceBuilder: no step fixed the row shapes yet")
        return self._templates

    def _append_row(self, episode: _Episode, obs: ArrayLike, action: ArrayLike | None, reward: float,
                    terminated: bool, truncated: bool, state: _State | None, extras: dict[str, np.ndarray]) -> None:
        time = episode.known_rows
        templates = self._row_templates()
        prev_action = templates["action"] if episode.last_action is None else episode.last_action
        prev_reward = episode.last_reward
        row_action = templates["action"] if action is None else np.array(action)
        episode.rows.append((np.array(obs), row_action, np.float32(reward), prev_action,
                             prev_reward, bool(terminated), bool(truncated), extras))
        episode.last_action, episode.last_reward = row_action, np.float32(reward)
        if state is not None and self._starts_window(time):
            episode.states[time] = state

    def _starts_window(self, time: int) -> bool:
        """Is ``time`` the first real row of some window (``max(t0, 0)``)?"""
        return time == 0 or (time + self.burn_in) % self.period == 0

    # ------------------------------------------------------------------ windows
    def _ready_windows(self, env: int, episode: _Episode) -> list[_Window]:
        ready = []
        while True:
            start = -self.burn_in + episode.next_window * self.period
            transitions = episode.transitions  # None while the episode runs
            if transitions is not None and start + self.burn_in >= transitions:
                break  # the trace would hold no transition
            if transitions is None and start + self.length > episode.known_rows:
                break  # rows still missing
            ready.append(self._window(env, episode, start))
            episode.next_window += 1
        self._forget_rows(episode)
        return ready

    def _window(self, env: int, episode: _Episode, start: int) -> _Window:
        first_real = max(start, 0)
        last_known = episode.known_rows - 1
        rows: list[_Row | None] = []
        for time in range(start, start + self.length):
            rows.append(episode.rows[time - episode.first_row] if 0 <= time <= last_known else None)
        window: _Window = {"rows": rows, "env": env, "episode": episode.episode_id, "start": start,
                           "transitions": -1 if episode.transitions is None else episode.transitions}
        if episode.states:
            window["state"] = episode.states[first_real]
        return window

    def _forget_rows(self, episode: _Episode) -> None:
        keep_from = max(0, -self.burn_in + episode.next_window * self.period)
        drop = keep_from - episode.first_row
        if drop > 0:
            del episode.rows[:drop]
            episode.first_row = keep_from
            for time in [t for t in episode.states if t < keep_from]:
                del episode.states[time]

    def _stack(self, windows: list[_Window]) -> dict[str, np.ndarray]:
        count, length = len(windows), self.length
        templates = self._row_templates()
        out = {key: np.zeros((count, length) + templates[key].shape, templates[key].dtype) for key in _ROW_KEYS}
        out.update({name: np.zeros((count, length) + template.shape, template.dtype)
                    for name, template in self._extra_templates.items()})
        out["mask"] = np.zeros((count, length), dtype=bool)
        out["obs_mask"] = np.zeros((count, length), dtype=bool)
        for w, window in enumerate(windows):
            for t, row in enumerate(window["rows"]):
                if row is None:
                    continue
                for key, value in zip(_ROW_KEYS, row):
                    out[key][w, t] = value
                for name, value in row[-1].items():  # the extras, after the _ROW_KEYS
                    out[name][w, t] = value
                out["obs_mask"][w, t] = True
                time = window["start"] + t
                ended_at = window["transitions"]
                out["mask"][w, t] = ended_at < 0 or time < ended_at
        out["env"] = np.array([w["env"] for w in windows], dtype=np.int64)
        out["episode"] = np.array([w["episode"] for w in windows], dtype=np.int64)
        out["start"] = np.array([w["start"] for w in windows], dtype=np.int64)
        if "state" in windows[0]:
            for part, name in enumerate(self.state_names):
                out[name] = np.stack([w["state"][part] for w in windows])
        return out

    # ------------------------------------------------------------------ checks
    @staticmethod
    def _check_state_names(names: Sequence[str]) -> tuple[str, ...]:
        if isinstance(names, str):
            raise TypeError(f"state_names must be a sequence of field names, got the string {names!r}; write "
                            f"({names!r},)")
        names = tuple(names)
        bad = [name for name in names if not isinstance(name, str) or not name.startswith(STATE_PREFIX)
               or not name.isidentifier()]
        if bad or len(set(names)) != len(names):
            raise ValueError(f"state_names {names} must be distinct identifiers starting with 'state_' (the replay's "
                             f"state fields, e.g. ('state_h', 'state_c')); {'bad: ' + str(bad) if bad else 'repeated'}")
        return names

    def _check_state(self, state: Sequence[ArrayLike] | None) -> tuple[np.ndarray, ...] | None:
        given = state is not None
        if self._state_given is not None and given != self._state_given:
            raise ValueError("state is None but earlier steps passed a recurrent state; pass it every step" if
                             self._state_given else "a state was passed, but earlier steps passed none")
        if state is None and self.state_names:  # else the windows would lack the fields add_sequences expects
            raise ValueError(f"state is None, but the builder stores a recurrent state under {self.state_names}; "
                             "pass the state each step starts from (state=(h, c), each [num_envs, units]), or build "
                             "SequenceBuilder without state_names for a network without one")
        self._state_given = given
        if state is None:
            return None
        if isinstance(state, np.ndarray) or not isinstance(state, (tuple, list)):
            raise TypeError("state must be a tuple of arrays such as (h, c), each [num_envs, units]; "
                            f"got {type(state).__name__} (wrap a single array as (state,))")
        parts = tuple(np.asarray(part) for part in state)
        if len(parts) != len(self.state_names):
            raise ValueError(f"state has {len(parts)} parts but the builder's state_names are {self.state_names}; "
                             "pass SequenceBuilder(..., state_names=...) naming each part's window field, e.g. "
                             "tuple(state_fields(network.state_spec())) (r2d2kit.models.cores)")
        for i, part in enumerate(parts):
            if part.ndim == 0 or part.shape[0] != self.num_envs:
                raise ValueError(f"state[{i}] must have a leading axis of num_envs={self.num_envs}, got {part.shape}")
        return parts

    def _check_extras(self, extras: Mapping[str, ArrayLike] | None) -> dict[str, np.ndarray]:
        """Extras as ``[num_envs, ...]`` arrays with the names and shapes of the first step's."""
        if extras is None:
            extras = {}
        if not isinstance(extras, Mapping):
            raise TypeError(f"extras must be a dict of per-step fields {{name: [num_envs, ...]}} or None, "
                            f"got {type(extras).__name__}")
        arrays = {}
        for name, value in extras.items():
            reserved = name in _OUTPUT_KEYS or str(name).startswith(STATE_PREFIX)
            if not isinstance(name, str) or not name.isidentifier() or reserved:
                raise ValueError(f"extras name {name!r} must be an identifier other than the builder's own output "
                                 f"keys {sorted(_OUTPUT_KEYS)} and the state_* keys; rename it")
            array = np.asarray(value)
            if array.ndim == 0 or array.shape[0] != self.num_envs:
                raise ValueError(f"extras[{name!r}] must have a leading axis of num_envs={self.num_envs}, "
                                 f"got {array.shape}")
            arrays[name] = array
        if self._templates is None:
            self._extra_templates = {name: np.zeros(array.shape[1:], array.dtype) for name, array in arrays.items()}
            return arrays
        expected = {name: template.shape for name, template in self._extra_templates.items()}
        given = {name: array.shape[1:] for name, array in arrays.items()}
        if given != expected:
            raise ValueError(f"extras changed from {expected} (the first step's names and per-env shapes) to "
                             f"{given}; pass the same extras on every step")
        return arrays

    def _ensure_templates(self, obs: np.ndarray, action: np.ndarray) -> None:
        if self._templates is None:
            flags = {name: np.zeros(shape, dtype) for name, (shape, dtype) in ROW_FLAGS.items() if name in _ROW_KEYS}
            self._templates = {
                "obs": np.zeros(obs.shape[1:], obs.dtype),
                "action": np.zeros(action.shape[1:], action.dtype),
                "prev_action": np.zeros(action.shape[1:], action.dtype),
                **flags,
            }
        elif obs.shape[1:] != self._templates["obs"].shape or action.shape[1:] != self._templates["action"].shape:
            raise ValueError(
                f"obs/action shapes changed from {self._templates['obs'].shape}/{self._templates['action'].shape} "
                f"to {obs.shape[1:]}/{action.shape[1:]}"
            )
