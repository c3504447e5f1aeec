"""Recurrent HER: hindsight relabelling of R2D2 sequence windows.

HER: Andrychowicz et al. 2017, https://arxiv.org/abs/1707.01495; R2D2: Kapturowski et al. 2019,
https://openreview.net/forum?id=r1lyTjAqYX.

Semantics. A goal env follows the gymnasium-robotics GoalEnv protocol (dict observations with
``observation`` / ``achieved_goal`` / ``desired_goal``, a vectorised ``compute_reward``). The reward
of step ``t`` is ``compute_reward(achieved goal of o_t+1, goal)``. Each sampled window whose episode
is finished is relabelled, with probability ``k / (k + 1)`` (``k = n_sampled_goal``), with ONE goal
``g`` for the whole window:

* ``'future'``: the achieved goal of ``o_tau``, ``tau`` uniform over ``s_last + 1 .. T``, where
  ``s_last`` is the window's last transition and ``T`` the episode's transition count. The window's
  own final outcome ``o_{s_last + 1}`` is a candidate (as the flat buffer's 'future' includes the
  sampled step); later observations of the episode, beyond the window's rows, are too.
* ``'final'``: the achieved goal of the episode's last observation ``o_T``.
* ``'trace_future'``: ``tau`` uniform over ``t_s + 1 .. T``, where ``t_s = t0 + burn_in`` is the
  window's first trained row: goals often fall inside the window, so its rows see the goal reached
  (with ``'future'`` only the window's last transition can reach it). Rows after ``tau`` get a goal
  from their past: still true transitions under that goal.

``g`` replaces the desired goal in every observation row of the window (burn-in included), and all
rewards of the batch are recomputed in ONE ``compute_reward`` call: ``reward`` of every transition
row and ``prev_reward`` (the network's reward input) of every observation row, so the inputs agree
with the goal. Given ``compute_terminated`` (a goal env that ends on success), ``terminated`` of
every transition row is recomputed in the same pass (``compute_terminated(ag(o_t+1), g)``), so a
relabelled success ends its return as a real one would. Padding rows stay zero; ``mask``,
``obs_mask``, actions, ``truncated`` and the stored recurrent state are left as they are::

    episode (T = 9):  o0 o1 o2 o3 o4 o5 o6 o7 o8 o9
    window (t0 = 2):        [o2 o3 o4 o5]                   s_last = 5
    'future' goals:                      ag(o6) .. ag(o9)    'final': ag(o9)
    reward rows:             r2 r3 r4 r5                     r_t = compute_reward(ag(o_t+1), g)

Feeding it. The network sees one flat observation per step: ``observation`` and ``desired_goal``,
flattened and concatenated (:meth:`SequenceHerReplayBuffer.flatten_obs`); the buffer stores the
achieved goal of each row beside it, given to :class:`~r2d2kit.replay.SequenceBuilder` as an extra::

    flat = SequenceHerReplayBuffer.flatten_obs(obs)         # [E, obs_size + goal_size], also the actor's input
    windows = builder.step(flat, action, reward, terminated, truncated, state,
                           extras={"achieved_goal": obs["achieved_goal"]})
    buffer.add_sequences(windows)
    batch = buffer.sample(64)                               # what SequenceReplayBuffer returns, relabelled

How rows are found. Windows hold slots into the step ring; rows a window does not hold (the
observations after it) are looked up by episode time in a *goal table*: when an episode ends (its
final observation arrives with ``SequenceBuilder``'s last windows), the write indices of its rows
from the earliest live window on are appended to the table in time order, and every live window of
the episode records where its episode starts there. The step ring overwrites rows in write order and
an episode's later rows are written after its earlier ones, so while a window can be sampled (its
oldest row is stored) every later row of its episode is stored too: a goal never comes from an
overwritten row. Only windows of finished episodes are relabelled; the windows of an episode still
running are returned with their original goal.

Differences from the flat :class:`~r2d2kit.replay.HerReplayBuffer`:
    * one goal per window, not per transition; strategies ``'trace_future'``, ``'future'`` and
      ``'final'`` (the rows before a window may already be overwritten, so ``'episode'`` and
      ``'random'`` are not offered);
    * a termination recomputed under the new goal does not cut the window: later rows stay
      transitions (R2D2's n-step targets stop each return at the first termination);
    * the stored recurrent state was computed under the original goal: burn-in (or
      ``initial_state="zero"``) lets the network adapt to the relabelled goal;
    * ``n_step >= 1`` is required: only then does ``SequenceBuilder`` store an episode's final
      observation, whose achieved goal is both the 'final' goal and the last step's outcome.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from r2d2kit._validation import Seed, check_positive_int
from r2d2kit.kernels import sequence_her as sequence_her_kernels
from r2d2kit.replay.fields import FieldDeclaration, Fields, FieldSpec, fields_from_json, fields_from_saved, parse_fields
from r2d2kit.replay.goals import (
    DEFAULT_STRATEGY,
    GoalSelectionStrategy,
    HindsightBase,
    RewardFn,
    as_strategy,
    call_goal_function,
    check_goal_functions,
)
from r2d2kit.replay.persistence import MAX_COUNT, JsonValue, Metadata, SavedLayout, meta_field, meta_int
from r2d2kit.replay.protocol import DEFAULT_BETA
from r2d2kit.replay.samplers import Sampler
from r2d2kit.replay.sequence import SequenceReplayBuffer, row_specs

__all__ = ["SequenceHerReplayBuffer"]


WINDOW_STRATEGIES = (GoalSelectionStrategy.TRACE_FUTURE, GoalSelectionStrategy.FUTURE, GoalSelectionStrategy.FINAL)


@dataclass
class _EpisodeRecord:
    """The running (or last finished) episode of one ``(source, env)``."""

    episode: int
    transitions: int = -1  # T once the final observation arrived
    origin: int = 0  # goal-table position of episode time 0 (once finished)
    windows: deque = field(default_factory=deque)  # (slot, generation) of its windows, while running


def window_fields(given: Mapping[str, FieldSpec]) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """The row fields of the windows, from the ``observation``, ``goal`` and ``action`` specs: ``obs`` is the
    flattened observation then the flattened desired goal, ``achieved_goal`` is stored beside it."""
    observation, goal, action = given["observation"], given["goal"], given["action"]
    obs_size = math.prod(observation.shape) + math.prod(goal.shape)
    obs_dtype = np.result_type(observation.dtype, goal.dtype)
    return {"obs": ((obs_size,), obs_dtype), "action": (action.shape, action.dtype),
            "achieved_goal": (goal.shape, goal.dtype)}


class SequenceHerReplayBuffer(HindsightBase, SequenceReplayBuffer):
    """Prioritized R2D2 window replay for goal envs, relabelled in hindsight at sample time.

    A :class:`~r2d2kit.replay.SequenceReplayBuffer` whose per-step ``obs`` is the flattened
    ``observation`` followed by the flattened ``desired_goal`` (:meth:`flatten_obs`), with the
    step's ``achieved_goal`` stored beside it (see the module docstring for the semantics).
    Sampling, ``update_priorities``, ``update_states``, ``save``/``load`` and ``as_dataset`` work as
    on the parent; ``sample`` also returns ``achieved_goal`` ``[B, L, *goal]``, ``goal``
    ``[B, *goal]`` (the relabelled goal, or the desired goal of the window's first observation)
    and ``relabelled`` ``[B]``.

    Args:
        capacity: steps held in the ring.
        observation_spec: ``(shape, dtype)`` of ``obs["observation"]``, e.g. ``((10,), "float32")``.
        goal_spec: ``(shape, dtype)`` of ``obs["achieved_goal"]`` and ``obs["desired_goal"]``.
        action_spec: ``(shape, dtype)`` of one env's action.
        state: per-window recurrent state fields, as for ``SequenceReplayBuffer``.
        compute_reward: ``compute_reward(achieved_goal [M, *goal], desired_goal [M, *goal], info)``
            returning ``[M]`` rewards, e.g. ``env.unwrapped.compute_reward``; called once per
            ``sample`` (with ``info = {}``) when anything is relabelled.
        burn_in, trace_length, n_step: the window layout (the builder's); ``n_step >= 1``.
        period, max_sequences, sampler, alpha, eps, sort_every, initial_state, seed: as for
            ``SequenceReplayBuffer``.
        n_sampled_goal: the HER paper's ``k``: relabel probability ``k / (k + 1)`` (0: never).
        goal_selection_strategy: ``"trace_future"`` (the default), ``"future"`` or ``"final"``
            (a :class:`~r2d2kit.replay.GoalSelectionStrategy`).
        compute_terminated: optional ``compute_terminated(achieved_goal, desired_goal, info)``, same
            contract as ``compute_reward``; given, relabelled windows' ``terminated`` is recomputed.

    The relabelling kernel compiles on the first ``sample`` (about a second; cached on disk after).

    Example:
        >>> env = gymnasium.make("BitFlip-v0", n_bits=8)
        >>> buf = SequenceHerReplayBuffer(100_000, ((8,), "float32"), ((8,), "float32"),
        ...                               state={"state_h": ((64,), "float32"), "state_c": ((64,), "float32")},
        ...                               compute_reward=env.unwrapped.compute_reward,
        ...                               burn_in=4, trace_length=8, n_step=2, period=4, seed=0)
        >>> builder = SequenceBuilder(4, burn_in=4, trace_length=8, n_step=2, period=4,
        ...                           state_names=("state_h", "state_c"))
        >>> windows = builder.step(buf.flatten_obs(obs), action, reward, terminated, truncated, (h, c),
        ...                        extras={"achieved_goal": obs["achieved_goal"]})   # obs: the vector env's dict
        >>> buf.add_sequences(windows)
        >>> batch = buf.sample(64)      # obs [64, 14, 16], reward, prev_reward, goal, relabelled, ...
    """

    relabels_rewards = True  # sample() rewrites rewards for the goal it draws

    def __init__(self, capacity: int, observation_spec: FieldDeclaration, goal_spec: FieldDeclaration,
                 action_spec: FieldDeclaration = ((), "int64"),
                 state: Fields | None = None, *, compute_reward: RewardFn, burn_in: int,
                 trace_length: int, n_step: int, period: int | None = None, max_sequences: int | None = None,
                 n_sampled_goal: int = 4, goal_selection_strategy: GoalSelectionStrategy | str = DEFAULT_STRATEGY,
                 sampler: str | Sampler = "proportional", alpha: float | None = None, eps: float | None = None,
                 sort_every: int | None = None, initial_state: str = "stored", seed: Seed = None,
                 compute_terminated: RewardFn | None = None) -> None:
        check_goal_functions(compute_reward, compute_terminated)
        self.compute_terminated = compute_terminated
        check_positive_int("n_step", n_step, minimum=0)
        if n_step < 1:
            raise ValueError(f"n_step must be >= 1 for SequenceHerReplayBuffer, got {n_step}: only then does "
                             "SequenceBuilder store an episode's final observation, whose achieved goal the "
                             "relabelling needs")
        self.compute_reward = compute_reward
        self.n_sampled_goal = check_positive_int("n_sampled_goal", n_sampled_goal, minimum=0)
        self.goal_selection_strategy = as_strategy(
            goal_selection_strategy, WINDOW_STRATEGIES,
            " for sequence windows (the rows before a window may be overwritten, so 'episode' and 'random' are not "
            "offered)")
        given = parse_fields({"observation": observation_spec, "goal": goal_spec, "action": action_spec})
        self._observation_spec, self._goal_spec = given["observation"], given["goal"]
        self.goal_size = int(np.prod(self._goal_spec.shape))
        fields = window_fields(given)
        super().__init__(capacity, fields, state, burn_in=burn_in, trace_length=trace_length, n_step=n_step,
                         period=period, max_sequences=max_sequences, sampler=sampler, alpha=alpha, eps=eps,
                         sort_every=sort_every, initial_state=initial_state, seed=seed)
        self._action_spec = self._row_specs["action"]
        # per window slot: episode time of row 0, the episode's T (-1: unfinished), its goal-table origin
        self._window_start = np.zeros(self.max_sequences, dtype=np.int64)
        self._window_transitions = np.full(self.max_sequences, -1, dtype=np.int64)
        self._table_origin = np.zeros(self.max_sequences, dtype=np.int64)
        # write indices of finished episodes' rows, appended in time order; 2 * capacity entries are
        # enough: a live window's entries are outlived by fewer than 2 * capacity later ones
        self._goal_table = np.full(2 * self.capacity, -1, dtype=np.int64)
        self._table_written = 0
        self._episodes: dict[tuple[int, int], _EpisodeRecord] = {}

    # ------------------------------------------------------------------ properties
    @property
    def nbytes(self) -> int:
        """Bytes of preallocated storage: rows, slot table, states, goal table and window bookkeeping."""
        return (super().nbytes + self._goal_table.nbytes + self._window_start.nbytes
                + self._window_transitions.nbytes + self._table_origin.nbytes)

    @staticmethod
    def flatten_obs(obs: Mapping[str, npt.ArrayLike]) -> np.ndarray:
        """``[N, obs_size + goal_size]``: each GoalEnv observation's ``observation`` then ``desired_goal``, flattened.

        The network's (and the builder's) per-step input; ``obs`` holds arrays with a leading batch
        axis ``N`` (e.g. a vector env's ``num_envs``).
        """
        if not isinstance(obs, Mapping) or "observation" not in obs or "desired_goal" not in obs:
            keys = sorted(obs) if isinstance(obs, Mapping) else type(obs).__name__
            raise ValueError(f"obs must be a GoalEnv observation dict with 'observation' and 'desired_goal' "
                             f"(batched over envs), got {keys}")
        observation, desired = np.asarray(obs["observation"]), np.asarray(obs["desired_goal"])
        if observation.ndim == 0 or desired.ndim == 0 or observation.shape[0] != desired.shape[0]:
            raise ValueError(f"obs['observation'] {observation.shape} and obs['desired_goal'] {desired.shape} need "
                             "the same leading batch axis (add one for a single env: x[np.newaxis])")
        count = observation.shape[0]
        return np.concatenate([observation.reshape(count, -1), desired.reshape(count, -1)], axis=1)

    # ------------------------------------------------------------------ adding
    def _check_windows(self, windows: Mapping[str, np.ndarray]) -> int:
        if "achieved_goal" not in windows and "obs" in windows:
            raise ValueError("windows have no 'achieved_goal' rows: pass extras={'achieved_goal': "
                             "obs['achieved_goal']} to SequenceBuilder.step")
        return super()._check_windows(windows)

    def _add_window(self, windows: Mapping[str, np.ndarray], w: int, source: int) -> tuple[int, bool]:
        slot, alive = super()._add_window(windows, w, source)
        env, episode, start = int(windows["env"][w]), int(windows["episode"][w]), int(windows["start"][w])
        self._window_start[slot] = start
        self._window_transitions[slot] = -1
        self._table_origin[slot] = 0
        # the final observation: the one row with an observation but no transition
        final = np.flatnonzero(np.asarray(windows["obs_mask"][w], bool) & ~np.asarray(windows["mask"][w], bool))
        key = (source, env)
        record = self._episodes.get(key)
        if record is None or record.episode != episode:
            record = self._episodes[key] = _EpisodeRecord(episode)
        if record.transitions >= 0:
            # a later window of a finished episode: it holds o_T itself, so it never reads the table
            if final.size and start + int(final[0]) == record.transitions:
                self._window_transitions[slot] = record.transitions
                self._table_origin[slot] = record.origin
            return slot, alive
        record.windows.append((slot, int(self._generation[slot])))
        if final.size:
            self._finish_episode(record, start + int(final[0]))
        else:
            while record.windows and not self._alive(*record.windows[0]):
                record.windows.popleft()
        return slot, alive

    def _alive(self, slot: int, generation: int) -> bool:
        """The window is still in its slot and its oldest row still in the ring."""
        return (self._generation[slot] == generation
                and self._oldest_write[slot] >= self._rows_written - self.capacity)

    def _finish_episode(self, record: _EpisodeRecord, transitions: int) -> None:
        """Append the episode's rows after its earliest live window to the goal table; mark its live windows."""
        alive = np.array([slot for slot, generation in record.windows if self._alive(slot, generation)],
                         dtype=np.int64)
        record.windows.clear()
        record.transitions = transitions
        if not alive.size:
            return
        times = self._window_start[alive, None] + np.arange(self.length)  # [A, L]
        writes = self._row_write_index[self._slots[alive]]  # [A, L], -1 for padding
        first = int(self._window_start[alive].min()) + self.length  # earliest time a window reads from the table
        count = max(transitions - first + 1, 0)
        entries = np.full(count, -1, dtype=np.int64)  # write index of each time first .. T
        keep = (times >= first) & (times <= transitions) & (writes >= 0)
        # live windows agree on every row they share: a row is stored again only after its older copy,
        # and so every window holding that copy, was overwritten
        entries[times[keep] - first] = writes[keep]
        if (entries < 0).any():
            return  # rows missing (windows not from SequenceBuilder, in order): never relabel this episode
        positions = self._table_written + np.arange(count)
        self._goal_table[positions % self._goal_table.shape[0]] = entries
        record.origin = self._table_written - first
        self._table_written += count
        self._window_transitions[alive] = transitions
        self._table_origin[alive] = record.origin

    # ------------------------------------------------------------------ sampling
    def sample(self, batch_size: int, beta: float = DEFAULT_BETA, *,
               out: Mapping[str, np.ndarray] | None = None,
               rng: np.random.Generator | None = None) -> dict[str, np.ndarray]:
        """Sample windows in proportion to priority and relabel those of finished episodes in hindsight.

        Memory and ``out`` work as for ``SequenceReplayBuffer.sample`` (fresh arrays, or ``out`` filled
        in place).

        ``rng``: draw with this generator instead of the buffer's own (a diagnostic batch then
        leaves the training draws as they were).

        Returns:
            What ``SequenceReplayBuffer.sample`` returns (``obs``, ``reward`` and ``prev_reward``
            under the relabelled goal where ``relabelled``), plus ``achieved_goal`` ``[B, L, *goal]``,
            ``goal`` ``[B, *goal]`` and ``relabelled`` ``[B]`` (bool).
        """
        batch_size, beta = self._check_sample_args(batch_size, beta, out)
        with self._lock:
            self._check_not_empty()
            batch = self._batch_memory(batch_size, out)
            uniforms = (rng or self._rng).random((3, batch_size))  # [3, B]: window, relabel, goal
            indices = self._sample_windows(uniforms[0], beta, batch)
            goal_rows, pair_samples, pair_positions, pair_rows, stale = sequence_her_kernels.sequence_her_relabel(
                indices, self._slots, self._window_start, self._window_transitions, self._table_origin,
                self._goal_table, self._table_written, self._rows_written, self.capacity,
                self.goal_selection_strategy.code, self.burn_in, self.relabel_probability, uniforms[1],
                uniforms[2])
            if stale >= 0:
                raise RuntimeError(f"internal error: window slot {indices[stale]} is sampleable but rows of its "
                                   "episode after it are no longer stored; please report this")
            achieved = self._rows["achieved_goal"]
            goals = achieved.take(np.maximum(goal_rows, 0), axis=0)  # [B, *goal], used where relabelled
            pair_achieved = achieved.take(pair_rows, axis=0)  # [M, *goal]
        # outside the lock (compute_reward is the user's); ``batch`` is ours: no other sample writes it
        self._relabel(batch, goal_rows >= 0, goals, pair_samples, pair_positions, pair_achieved)
        return batch

    def _relabel(self, batch: dict[str, np.ndarray], relabelled: np.ndarray, goals: np.ndarray,
                 pair_samples: np.ndarray, pair_positions: np.ndarray, pair_achieved: np.ndarray) -> None:
        """Write the goals into the relabelled windows' obs and their recomputed rewards (in place)."""
        count, length = relabelled.shape[0], self.length
        obs = batch["obs"]  # [B, L, obs_size + goal_size]
        first_obs = np.argmax(batch["obs_mask"], axis=1)  # [B]: every window holds an observation
        original = obs[np.arange(count), first_obs, obs.shape[2] - self.goal_size:]  # [B, goal_size]
        np.copyto(batch["goal"], np.where(relabelled.reshape((count,) + (1,) * len(self._goal_spec.shape)), goals,
                                          original.reshape(goals.shape).astype(self._goal_spec.dtype)))
        np.copyto(batch["relabelled"], relabelled)
        if not relabelled.any():
            return
        if pair_samples.size:
            pair_goals = goals.take(pair_samples, axis=0)
            rewards = call_goal_function("compute_reward", self.compute_reward, pair_achieved,
                                         pair_goals).astype(np.float32)
            by_position = np.zeros((count, length + 1), dtype=np.float32)  # [B, L + 1]: reward for reaching row p
            by_position[pair_samples, pair_positions] = rewards
            batch["prev_reward"][relabelled] = by_position[relabelled, :length]
            batch["reward"][relabelled] = np.where(batch["mask"][relabelled], by_position[relabelled, 1:], 0.0)
            if self.compute_terminated is not None:
                ended = np.zeros((count, length + 1), dtype=bool)  # [B, L + 1]: reaching row p ends the episode
                ended[pair_samples, pair_positions] = call_goal_function(
                    "compute_terminated", self.compute_terminated, pair_achieved, pair_goals) != 0
                batch["terminated"][relabelled] = ended[relabelled, 1:] & batch["mask"][relabelled]
        flat_goals = goals[relabelled].reshape(-1, 1, self.goal_size).astype(obs.dtype)  # [R, 1, goal_size]
        present = batch["obs_mask"][relabelled][:, :, None]  # [R, L, 1]
        obs[relabelled, :, obs.shape[2] - self.goal_size:] = np.where(present, flat_goals, 0)

    def batch_spec(self, batch_size: int) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """Shape and dtype of every array ``sample(batch_size)`` returns."""
        spec = super().batch_spec(batch_size)
        spec["goal"] = ((batch_size,) + self._goal_spec.shape, self._goal_spec.dtype)
        spec["relabelled"] = ((batch_size,), np.dtype(bool))
        return spec

    # ------------------------------------------------------------------ persistence
    def _params(self) -> dict[str, JsonValue]:
        params = super()._params()
        params.update(n_sampled_goal=self.n_sampled_goal, goal_selection_strategy=self.goal_selection_strategy.value)
        return params

    def _saved_state(self) -> tuple[dict[str, JsonValue], dict[str, np.ndarray]]:
        meta, arrays = super()._saved_state()
        sequences = min(self._sequences_written, self.max_sequences)
        meta["specs"] = {"observation": self._observation_spec.to_json(), "goal": self._goal_spec.to_json(),
                         "action": self._action_spec.to_json()}
        meta["table_written"] = self._table_written
        meta["has_compute_terminated"] = self.compute_terminated is not None
        keys = sorted(self._episodes)
        records = [self._episodes[key] for key in keys]
        arrays.update({
            "her.window_start": self._window_start[:sequences],
            "her.window_transitions": self._window_transitions[:sequences],
            "her.table_origin": self._table_origin[:sequences],
            "her.goal_table": self._goal_table[:min(self._table_written, self._goal_table.shape[0])],
            "her.episode_key": np.array([[s, e, r.episode, r.transitions, r.origin, len(r.windows)]
                                         for (s, e), r in zip(keys, records)], dtype=np.int64).reshape(-1, 6),
            "her.episode_windows": np.array([pair for r in records for pair in r.windows],
                                            dtype=np.int64).reshape(-1, 2),
        })
        return meta, arrays

    @classmethod
    def _saved_row_specs(cls, path: str, meta: Metadata) -> dict[str, FieldSpec]:
        """The row fields the saved ``specs`` give (the constructor's, not the parent's ``fields``)."""
        saved = fields_from_saved(path, meta_field(path, meta, "specs"), "specs")
        if set(saved) != {"observation", "goal", "action"}:
            raise ValueError(f"{path!r}: malformed metadata: field 'specs' must give 'observation', 'goal' and "
                             f"'action', got {sorted(saved)}; the file is corrupt")
        return row_specs(window_fields(saved))

    @classmethod
    def _saved_layout(cls, path: str, meta: Metadata) -> SavedLayout:
        layout = super()._saved_layout(path, meta)
        capacity = meta["capacity"]
        sequences = min(meta["sequences_written"], meta["params"]["max_sequences"])
        table = min(meta_int(path, meta, "table_written"), 2 * capacity)
        int64 = np.dtype(np.int64)
        arrays = {"her.window_start": ((sequences,), int64), "her.window_transitions": ((sequences,), int64),
                  "her.table_origin": ((sequences,), int64), "her.goal_table": ((table,), int64),
                  "her.episode_key": ((None, 6), int64), "her.episode_windows": ((None, 2), int64)}
        preallocated = layout.preallocated_bytes + 24 * meta["params"]["max_sequences"] + 16 * capacity
        return SavedLayout({**layout.arrays, **arrays}, preallocated)

    @classmethod
    def _construct(cls, path: str, meta: Metadata, **functions: RewardFn | None) -> SequenceHerReplayBuffer:
        specs = fields_from_json(meta["specs"])
        return cls._saved_constructor(path, meta["capacity"], specs["observation"], specs["goal"], specs["action"],
                                      fields_from_json(meta["state"]), seed=0, **functions, **meta["params"])

    def _restore_saved_state(self, path: str, meta: Metadata, arrays: Mapping[str, np.ndarray]) -> None:
        super()._restore_saved_state(path, meta, arrays)
        self._restore_window_tables(path, arrays)
        self._restore_goal_table(path, arrays, meta["table_written"])
        self._restore_episodes(path, arrays)
        self._check_goal_lookups(path)

    def _restore_window_tables(self, path: str, arrays: Mapping[str, np.ndarray]) -> None:
        """Per window: episode time of row 0, the episode's T (-1: unfinished) and its goal-table origin."""
        sequences = min(self._sequences_written, self.max_sequences)
        for name, target, low in (("her.window_start", self._window_start, -MAX_COUNT),
                                  ("her.window_transitions", self._window_transitions, -1),
                                  ("her.table_origin", self._table_origin, -MAX_COUNT)):
            values = arrays[name]
            if values.size and (values.min() < low or values.max() > MAX_COUNT):
                raise ValueError(f"{path!r}: goal table or window bookkeeping out of range: array {name!r} holds "
                                 f"values outside [{low}, {MAX_COUNT}]; the file is corrupt")
            target[:sequences] = values

    def _restore_goal_table(self, path: str, arrays: Mapping[str, np.ndarray], table_written: int) -> None:
        """Write indices of finished episodes' rows (-1: none yet), the newest ``2 * capacity`` kept."""
        goal_table = arrays["her.goal_table"]
        if goal_table.size and (goal_table.min() < -1 or goal_table.max() >= self._rows_written):
            raise ValueError(f"{path!r}: goal table or window bookkeeping out of range: array 'her.goal_table' holds "
                             f"write indices outside [-1, rows_written = {self._rows_written}); the file is corrupt")
        self._goal_table[:goal_table.size] = goal_table
        self._table_written = table_written

    def _restore_episodes(self, path: str, arrays: Mapping[str, np.ndarray]) -> None:
        """The running (or last finished) episode of each ``(source, env)`` and its windows ``(slot, generation)``."""
        keys, pairs = arrays["her.episode_key"], arrays["her.episode_windows"]  # [E, 6], [P, 2]
        counts = keys[:, 5]
        if (counts < 0).any() or (counts > pairs.shape[0]).any() or counts.sum() != pairs.shape[0] \
                or np.unique(keys[:, :2], axis=0).shape[0] != keys.shape[0]:
            raise ValueError(f"{path!r}: the episode records (her.episode_key / her.episode_windows) are "
                             "inconsistent (window counts, or a repeated (source, env)); the file is corrupt")
        if ((keys[:, 2:5] < -MAX_COUNT) | (keys[:, 2:5] > MAX_COUNT)).any() or (keys[:, 3] < -1).any() \
                or (pairs.size and (pairs[:, 0].min() < 0 or pairs[:, 0].max() >= self.max_sequences
                                    or pairs[:, 1].min() < 0)):
            raise ValueError(f"{path!r}: goal table or window bookkeeping out of range: the episode records "
                             "(her.episode_key / her.episode_windows) hold an episode, T, origin or window slot out "
                             "of range; the file is corrupt")
        offset = 0
        for source, env, episode, record_transitions, origin, count in keys.tolist():
            windows = deque((int(slot), int(generation)) for slot, generation in pairs[offset:offset + count])
            self._episodes[(source, env)] = _EpisodeRecord(episode, record_transitions, origin, windows)
            offset += count

    def _check_goal_lookups(self, path: str) -> None:
        """Every live window of a finished episode finds the rows after it in the goal table, still stored.

        What the relabelling kernel looks up (episode times ``t0 + L .. T`` at table positions ``origin + t``);
        it would otherwise report the window at sample time as an internal error.
        """
        live = np.flatnonzero(self._sampler.alive)
        reads = live[self._window_transitions[live] >= self._window_start[live] + self.length]
        if not reads.size:
            return
        first = self._table_origin[reads] + self._window_start[reads] + self.length  # [R] table positions
        last = self._table_origin[reads] + self._window_transitions[reads]  # [R], >= first
        size = self._goal_table.shape[0]
        oldest = max(self._table_written - size, 0)
        entries = self._goal_table[np.arange(oldest, self._table_written) % size]  # positions oldest .. written - 1
        stored = (entries >= 0) & (entries >= self._rows_written - self.capacity)
        missing = np.concatenate([[0], np.cumsum(~stored)])  # missing[k]: entries before position oldest + k
        if (first < oldest).any() or (last >= self._table_written).any() \
                or (missing[last - oldest + 1] - missing[first - oldest] > 0).any():
            raise ValueError(f"{path!r}: goal table or window bookkeeping out of range: a live window of a finished "
                             "episode would look up rows the goal table no longer holds; the file is corrupt")

    def __repr__(self) -> str:
        return (f"SequenceHerReplayBuffer(capacity={self.capacity}, windows={len(self)}, length={self.length}, "
                f"steps_stored={self.steps_stored}, strategy={self.goal_selection_strategy.value!r}, "
                f"n_sampled_goal={self.n_sampled_goal}, sampler={self._sampler!r})")
