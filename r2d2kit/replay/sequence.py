"""SequenceReplayBuffer: R2D2 windows over a flat ring of steps stored once, drawn by priority.

Overlapping windows share most of their rows. Rows live once in a ring of ``capacity`` steps;
a window is a row of slot indices into it (plus its stored recurrent state)::

    step ring:   ... | a3 a4 a5 | b0 b1 | a6 a7 | b2 b3 | ...      (envs a, b interleaved)
    window a@2:  slots of a2 a3 a4 a5 a6 a7 ...                    (one int32 per row)
    window a@4:  slots of a4 a5 a6 a7 ...                          (a4.. not stored again)
    padding:     slot ``capacity``, a row of zeros that is never written

A window remembers the write index of its oldest row. When the ring overwrites that row, the
window dies in the sampler at once (it can never be sampled again), so a sampled window never
mixes rows of two episodes. Sampling is proportional over windows by default (R2D2's), or uniform or
rank-based, and returns dense batch-major arrays ``[B, L, ...]`` with ``L = burn_in + trace_length + n_step``.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from r2d2kit._validation import (
    Seed,
    as_index_array,
    as_priority_array,
    check_float,
    check_positive_int,
)
from r2d2kit.replay.core import BufferCore
from r2d2kit.replay.fields import (
    Fields,
    FieldSpec,
    check_cast,
    fields_from_json,
    fields_from_saved,
    item_bytes,
    parse_fields,
)
from r2d2kit.replay.persistence import (
    MAX_COUNT,
    ArraySpec,
    JsonValue,
    Metadata,
    SavedLayout,
    meta_field,
    meta_int,
    meta_mapping,
)
from r2d2kit.replay.protocol import DEFAULT_BETA
from r2d2kit.replay.samplers import Sampler, make_sampler
from r2d2kit.replay.window_record import ROW_FLAGS, ROW_MASK, WINDOW_IDS

LOST_ROW = -2  # a row link to a step of the same episode that the ring no longer holds (-1: no such step)


def sequence_priorities(abs_td: npt.ArrayLike, mask: npt.ArrayLike, eta: float = 0.9) -> np.ndarray:
    """R2D2 priority per sequence: ``eta * max|delta| + (1 - eta) * mean|delta|`` over valid steps.

    Args:
        abs_td: ``[B, T]`` absolute TD errors of the trained rows.
        mask: ``[B, T]`` true where a row holds a transition.
        eta: mix between max and mean (R2D2: 0.9).

    Returns:
        ``[B]`` float64 priorities (0 for a sequence without valid steps).
    """
    abs_td = np.abs(np.asarray(abs_td, dtype=np.float64))
    mask = np.asarray(mask, dtype=bool)
    if abs_td.shape != mask.shape or abs_td.ndim != 2:
        raise ValueError(f"abs_td {abs_td.shape} and mask {mask.shape} must both be [B, T]")
    eta = check_float("eta", eta, 0.0, 1.0)
    counts = mask.sum(axis=1)
    masked = np.where(mask, abs_td, 0.0)
    mean = masked.sum(axis=1) / np.maximum(counts, 1)
    return eta * masked.max(axis=1, initial=0.0) + (1.0 - eta) * mean


def row_specs(fields: Fields) -> dict[str, FieldSpec]:
    """Every per-row field stored: the user's (``obs``, ``action``, ``prev_action`` defaulting to the action's
    spec, ...) and the buffer's ``ROW_FLAGS``."""
    user_fields = dict(fields)
    for required in ("obs", "action"):
        if required not in user_fields:
            raise ValueError(f"fields must include {required!r}, got {list(user_fields)}")
    user_fields.setdefault("prev_action", user_fields["action"])
    for name in ROW_FLAGS:
        if name in user_fields:
            raise ValueError(f"field {name!r} is added by the buffer; remove it from fields")
    return parse_fields({**user_fields, **ROW_FLAGS})


class SequenceReplayBuffer(BufferCore):
    """Prioritized replay of fixed-length windows from :class:`~r2d2kit.replay.SequenceBuilder`.

    Args:
        capacity: steps held in the ring (the memory bound).
        fields: per-step fields from the builder, at least ``obs`` and ``action`` and
            ``prev_action`` is added with the action's spec, e.g.
            ``{"obs": ((84, 84), "uint8"), "action": ((), "int64")}``.
        state: per-window recurrent state fields, e.g. ``{"state_h": ((512,), "float32"),
            "state_c": ((512,), "float32")}``; ``{}`` for a feed-forward learner.
        burn_in, trace_length, n_step: the window layout (must match the builder's).
        max_sequences: windows kept; default ``2 * capacity // period`` is enough for the ring
            unless episodes are much shorter than ``period``. The oldest window goes first.
        period: the builder's window period (only used for the default ``max_sequences``).
        sampler: ``"proportional"`` (R2D2's), ``"uniform"`` or ``"rank"`` over the live windows, or
            a built :class:`~r2d2kit.replay.Sampler` of ``max_sequences`` slots (:mod:`r2d2kit.replay.samplers`).
        alpha: priority exponent; default 0.9 (R2D2's) for ``"proportional"``, 0.7 for ``"rank"``.
        eps, sort_every: as for :class:`~r2d2kit.replay.ReplayBuffer`.
        initial_state: ``"stored"`` returns each window's stored recurrent state (R2D2's choice);
            ``"zero"`` returns zeros (the paper's "zero start state" baseline). Combine either with
            ``burn_in > 0`` or ``0`` for the paper's four variants.
        seed: int seed, ``None`` or a ``np.random.Generator``.
    """

    relabels_rewards = False  # sample() returns the stored rewards (episode_returns sums the same ones)

    def __init__(self, capacity: int, fields: Fields, state: Fields | None = None, *,
                 burn_in: int, trace_length: int, n_step: int, period: int | None = None,
                 max_sequences: int | None = None, sampler: str | Sampler = "proportional", alpha: float | None = None,
                 eps: float | None = None, sort_every: int | None = None, initial_state: str = "stored",
                 seed: Seed = None) -> None:
        self.capacity = check_positive_int("capacity", capacity)
        self.burn_in = check_positive_int("burn_in", burn_in, minimum=0)
        self.trace_length = check_positive_int("trace_length", trace_length)
        self.n_step = check_positive_int("n_step", n_step, minimum=0)
        self.length = self.burn_in + self.trace_length + self.n_step
        period = self.trace_length if period is None else check_positive_int("period", period)
        default_sequences = max(1, 2 * self.capacity // period)
        self.max_sequences = check_positive_int(
            "max_sequences", default_sequences if max_sequences is None else max_sequences)
        if initial_state not in ("stored", "zero"):
            raise ValueError(f"initial_state must be 'stored' or 'zero', got {initial_state!r}")
        self.initial_state = initial_state

        self._row_specs = row_specs(fields)
        self._state_specs = parse_fields(state) if state else {}
        # one extra all-zero row at index `capacity` serves as padding
        self._rows = {name: np.zeros((self.capacity + 1,) + spec.shape, spec.dtype)
                      for name, spec in self._row_specs.items()}
        self._row_write_index = np.full(self.capacity + 1, -1, dtype=np.int64)
        # write index of the previous / next row of the same episode (-1: none); diagnostics walk them
        self._row_previous = np.full(self.capacity + 1, -1, dtype=np.int64)
        self._row_next = np.full(self.capacity + 1, -1, dtype=np.int64)
        self._rows_written = 0

        self._slots = np.full((self.max_sequences, self.length), self.capacity, dtype=np.int32)  # [S, L]
        self._oldest_write = np.full(self.max_sequences, -1, dtype=np.int64)
        self._generation = np.zeros(self.max_sequences, dtype=np.int64)
        self._states = {name: np.zeros((self.max_sequences,) + spec.shape, spec.dtype)
                        for name, spec in self._state_specs.items()}
        self._sequences_written = 0
        self._expiry: list[tuple[int, int, int]] = []  # heap of (oldest write index, slot, generation)
        self._last_window: dict[tuple[int, int], tuple[int, int, np.ndarray]] = {}

        r2d2_alpha = 0.9 if alpha is None and sampler == "proportional" else alpha
        super().__init__(make_sampler(sampler, self.max_sequences, alpha=r2d2_alpha, eps=eps, sort_every=sort_every),
                         seed)

    # ------------------------------------------------------------------ properties
    def __len__(self) -> int:
        """Windows that can be sampled now."""
        return len(self._sampler)

    @property
    def steps_stored(self) -> int:
        """Distinct steps currently in the ring."""
        return min(self._rows_written, self.capacity)

    @property
    def rows_written(self) -> int:
        """Distinct steps ever written into the ring (the replay ratio's denominator)."""
        return self._rows_written

    @property
    def nbytes(self) -> int:
        """Bytes of preallocated storage: rows, slot table, states, row links."""
        return (sum(a.nbytes for a in self._rows.values()) + self._slots.nbytes
                + sum(a.nbytes for a in self._states.values()) + self._row_write_index.nbytes
                + self._row_previous.nbytes + self._row_next.nbytes)

    # ------------------------------------------------------------------ adding
    def add_sequences(self, windows: Mapping[str, np.ndarray], priorities: npt.ArrayLike | None = None,
                      source: int = 0) -> np.ndarray:
        """Store windows from ``SequenceBuilder.step``; rows already stored are referenced, not copied.

        Args:
            windows: the builder's output dict (``[W, L, ...]`` arrays plus ``env``, ``episode``,
                ``start`` and the state fields).
            priorities: ``[W]`` initial priorities (e.g. computed by the actor); default: the
                running max priority.
            source: id of the producing builder (actor); windows are matched with earlier ones
                of the same ``(source, env)`` to find shared rows.

        Returns:
            The window slots used (``[W]`` int64).
        """
        count = self._check_windows(windows)
        if priorities is not None:
            priorities = as_priority_array("priorities", priorities, count, self._sampler.priority_limit)
        with self._lock:
            used = np.empty(count, dtype=np.int64)
            alive = np.empty(count, dtype=bool)
            for w in range(count):
                used[w], alive[w] = self._add_window(windows, w, source)
            self._sampler.place(used, alive, priorities)
            self._expire()
            return used

    def _add_window(self, windows: Mapping[str, np.ndarray], w: int, source: int) -> tuple[int, bool]:
        """Store window ``w``; (its slot, whether all its rows are still in the ring)."""
        env, episode, start = int(windows["env"][w]), int(windows["episode"][w]), int(windows["start"][w])
        present = np.asarray(windows["obs_mask"][w], dtype=bool)  # [L]
        key = (source, env)
        previous = self._last_window.get(key)
        row_index = np.full(self.length, -1, dtype=np.int64)  # write index of each row, -1 = padding
        if previous is not None and previous[0] == episode:
            # rows this window shares with the previous window of the same env and episode
            offsets = np.arange(self.length) + (start - previous[1])  # [L]
            inside = (offsets >= 0) & (offsets < self.length)
            shared = np.full(self.length, -1, dtype=np.int64)
            shared[inside] = previous[2][offsets[inside]]
            # a shared row is reused only if it outlives this window's own new rows: each one written
            # pushes the ring's oldest row out, and a reused row overwritten in the same call would leave
            # the window (and the episode's links) pointing at another step's data
            oldest_kept = max(self._rows_written - self.capacity, 0)
            while True:
                reuse = present & (shared >= oldest_kept)
                new = present & ~reuse
                after_writes = self._rows_written + int(np.count_nonzero(new)) - self.capacity
                if after_writes <= oldest_kept:
                    break
                oldest_kept = after_writes
            row_index[reuse] = shared[reuse]
        else:
            new = present
        new_rows = np.flatnonzero(new)
        if new_rows.size:
            write_indices = self._rows_written + np.arange(new_rows.size)
            ring_slots = write_indices % self.capacity
            for name, array in self._rows.items():
                array[ring_slots] = windows[name][w, new_rows]
            self._row_write_index[ring_slots] = write_indices
            self._row_previous[ring_slots] = -1
            self._row_next[ring_slots] = -1
            self._rows_written += int(new_rows.size)
            row_index[new_rows] = write_indices
        linked = present[:-1] & present[1:]  # consecutive rows of one window are consecutive steps
        earlier, later = row_index[:-1][linked], row_index[1:][linked]
        self._row_next[earlier % self.capacity] = later
        self._row_previous[later % self.capacity] = earlier
        first = int(np.argmax(present))
        if present[first] and new[first] and start + first > 0:
            # written again after the ring lost its first copy: the step before it is gone too
            self._row_previous[row_index[first] % self.capacity] = LOST_ROW
        self._last_window[key] = (episode, start, row_index)

        slot = self._sequences_written % self.max_sequences
        self._sequences_written += 1
        self._generation[slot] += 1
        stored = row_index >= 0
        self._slots[slot] = np.where(stored, row_index % self.capacity, self.capacity)
        oldest = int(row_index[stored].min()) if stored.any() else self._rows_written
        self._oldest_write[slot] = oldest
        for name, array in self._states.items():
            array[slot] = windows[name][w]
        heapq.heappush(self._expiry, (oldest, slot, int(self._generation[slot])))
        return slot, oldest >= self._rows_written - self.capacity

    def _expire(self) -> None:
        """Kill every window whose oldest row the ring has overwritten."""
        threshold = self._rows_written - self.capacity
        expired = []
        while self._expiry and self._expiry[0][0] < threshold:
            _, slot, generation = heapq.heappop(self._expiry)
            if self._generation[slot] == generation and self._sampler.alive[slot]:
                expired.append(slot)
        if expired:
            self._sampler.place(np.array(expired, dtype=np.int64), np.zeros(len(expired), dtype=bool))

    # ------------------------------------------------------------------ sampling
    def sample(self, batch_size: int, beta: float = DEFAULT_BETA, *,
               out: Mapping[str, np.ndarray] | None = None,
               rng: np.random.Generator | None = None) -> dict[str, np.ndarray]:
        """Sample windows in proportion to priority, into fresh arrays or into ``out``.

        Memory. A batch of R2D2 Atari windows is 57 MB; gathered into fresh memory it costs about
        1.7x a memcpy, into memory touched before about 1.1x. Reuse is opt-in: with ``out`` (e.g.
        ``buffer.sample_buffers(batch_size)``, kept across calls, or a
        :class:`~r2d2kit.replay.BatchPool`'s ``acquire()``) the batch is written into those arrays
        and the next ``sample`` into them overwrites it (:mod:`r2d2kit.replay.batch_pool` says when
        that is safe; ``R2D2Learner.train_from`` does it).

        Args:
            batch_size: windows per batch.
            beta: importance-sampling exponent in ``[0, 1]``.
            out: optional dict of arrays with :meth:`batch_spec`'s shapes and dtypes, filled in place.
            rng: draw with this generator instead of the buffer's own (a diagnostic batch then leaves
                the training draws as they were).

        Returns:
            Every row field as ``[B, L, ...]``, ``obs_mask`` (row present) and ``mask`` (row is a
            transition) as ``[B, L]``, the state fields ``[B, ...]``, ``indices`` (int64) and
            ``weights`` (float32 importance weights, max 1); with ``out``, ``out`` itself.
        """
        batch_size, beta = self._check_sample_args(batch_size, beta, out)
        with self._lock:
            self._check_not_empty()
            batch = self._batch_memory(batch_size, out)
            self._sample_windows((rng or self._rng).random(batch_size), beta, batch)
        return batch

    def _check_not_empty(self) -> None:
        if len(self._sampler) == 0:
            raise ValueError(f"cannot sample from an empty {type(self).__name__}: add windows first")

    def _sample_windows(self, uniforms: np.ndarray, beta: float, batch: dict[str, np.ndarray]) -> np.ndarray:
        """Draw windows for ``uniforms`` ``[B]`` in [0, 1) and write them into ``batch``; return their slots
        (lock held)."""
        indices, weights = self._sampler.sample(uniforms, beta)
        self._gather_windows(indices, batch)
        self._record_draw(batch, indices, weights)
        return indices

    def _gather_windows(self, indices: np.ndarray, batch: dict[str, np.ndarray]) -> None:
        """Write rows ``[B, L, ...]``, ``obs_mask`` and states of the windows in slots ``indices`` into ``batch``.

        One ``np.take`` per field straight into the output: a row copy per window row, no
        temporary. ``mode="clip"`` (the slots are valid by construction) keeps numpy from
        gathering into a hidden buffer first, which ``mode="raise"`` does whenever ``out`` is given.
        """
        rows = self._slots.take(indices, axis=0)  # [B, L] slots into the step ring
        for name, array in self._rows.items():
            np.take(array, rows, axis=0, out=batch[name], mode="clip")  # [B, L, ...]
        np.not_equal(rows, self.capacity, out=batch["obs_mask"])
        for name, array in self._states.items():
            if self.initial_state == "stored":
                np.take(array, indices, axis=0, out=batch[name], mode="clip")  # [B, ...]
            else:
                batch[name].fill(0)

    # ------------------------------------------------------------------ episode context (diagnostics)
    def _first_and_last_rows(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Write indices of the first and last stored row of each window in ``slots``."""
        rows = self._slots[slots]  # [B, L]
        present = rows != self.capacity
        first = rows[np.arange(rows.shape[0]), present.argmax(axis=1)]
        last = rows[np.arange(rows.shape[0]), self.length - 1 - present[:, ::-1].argmax(axis=1)]
        return self._row_write_index[first], self._row_write_index[last]

    def preceding_rows(self, indices: npt.ArrayLike, count: int) -> dict[str, np.ndarray]:
        """The up to ``count`` rows of each window's episode just before its first stored row.

        What a learner needs to recompute a window's start state with its current weights (the
        R2D2 paper's stale-state measure). Rows are oldest first and right-aligned: ``[B, count, ...]``
        for every row field, ``obs_mask`` ``[B, count]`` false where no row is known (before the
        episode's start, or overwritten by the ring), and ``episode_start`` ``[B]``: true where the
        rows reach back to the episode's first step, so that a zero state before them is exact.
        """
        from r2d2kit.kernels.episode_links import walk_links

        count = check_positive_int("count", count, minimum=0)
        with self._lock:
            slots = self._live_indices(indices)
            first, _ = self._first_and_last_rows(slots)
            chain, reached = walk_links(self._row_previous, self._row_write_index, first, count,
                                        self._rows_written - self.capacity)
            chain = chain[:, ::-1]  # oldest first, right-aligned
            known = chain >= 0
            ring = np.where(known, chain % self.capacity, self.capacity)
            out = {name: array[ring] for name, array in self._rows.items()}
        out["obs_mask"] = known
        out["episode_start"] = reached
        return out

    def episode_returns(self, indices: npt.ArrayLike, gamma: float, horizon: int) -> tuple[np.ndarray, np.ndarray]:
        """Discounted return actually obtained from each row of the windows in ``indices`` to its episode's end.

        Walks at most ``horizon`` rows past each window. Returns ``(returns [B, L], known [B, L])``:
        ``known`` is false for rows that are not transitions and for windows whose episode has not
        ended within ``horizon`` rows (or whose later rows the ring has overwritten). An episode cut
        by a time limit counts its rewards up to the cut. Rewards are the stored ones (a hindsight
        buffer's relabelled rewards are not seen here).
        """
        from r2d2kit.kernels.episode_links import discounted_episode_returns, walk_links

        gamma = check_float("gamma", gamma, 0.0, 1.0)
        horizon = check_positive_int("horizon", horizon, minimum=0)
        with self._lock:
            slots = self._live_indices(indices)
            _, last = self._first_and_last_rows(slots)
            chain, _ = walk_links(self._row_next, self._row_write_index, last, horizon,
                                  self._rows_written - self.capacity)
            tail = np.where(chain >= 0, chain % self.capacity, -1)
            ended = self._rows["terminated"] | self._rows["truncated"]
            return discounted_episode_returns(self._slots[slots], tail, self.capacity,
                                              self._rows["reward"].astype(np.float64), self._rows["mask"], ended,
                                              gamma)

    def _live_indices(self, indices: npt.ArrayLike) -> np.ndarray:
        slots = as_index_array("indices", indices, self.max_sequences)
        dead = slots[~self._sampler.alive[slots]]
        if dead.size:
            raise ValueError(f"indices {dead[:5].tolist()} hold no live window; pass indices from a recent sample()")
        return slots

    def _checked_indices(self, indices: npt.ArrayLike) -> np.ndarray:
        return as_index_array("indices", indices, self.max_sequences)

    def update_states(self, indices: npt.ArrayLike, **states: npt.ArrayLike) -> None:
        """Refresh stored recurrent states of sampled windows (R2D2's "stored state" refresh)."""
        with self._lock:
            slots = as_index_array("indices", indices, self.max_sequences)
            for name, value in states.items():
                if name not in self._states:
                    raise ValueError(f"unknown state field {name!r}; the buffer's are {list(self._states)}")
                array = np.asarray(value)
                expected = (slots.shape[0],) + self._state_specs[name].shape
                if array.shape != expected:
                    raise ValueError(f"state {name!r} must have shape {expected}, got {array.shape}")
                alive = self._sampler.alive[slots]
                self._states[name][slots[alive]] = array[alive]

    # ------------------------------------------------------------------ checks
    def _check_windows(self, windows: Mapping[str, np.ndarray]) -> int:
        needed = set(self._row_specs) | set(self._state_specs) | {ROW_MASK, *WINDOW_IDS}
        missing = sorted(needed - set(windows))
        if missing:
            raise ValueError(f"windows are missing {missing}; pass the dict SequenceBuilder.step returns")
        count = int(np.asarray(windows["env"]).shape[0])
        for name, spec in self._row_specs.items():
            shape = np.shape(windows[name])
            if shape[:2] != (count, self.length):
                raise ValueError(f"windows[{name!r}] has shape {shape}, expected {(count, self.length) + spec.shape} "
                                 f"(windows of {self.length} rows: burn_in + trace_length + n_step must match the "
                                 "builder's)")
            if shape[2:] != spec.shape:
                raise ValueError(f"windows[{name!r}] rows have shape {shape[2:]}, but the buffer's field {name!r} is "
                                 f"{spec.shape}: build the buffer with the env's observation and action shapes")
            check_cast(spec, np.asarray(windows[name]))  # a float action is refused, as add() refuses it
        for name, spec in self._state_specs.items():
            shape = np.shape(windows[name])
            if shape != (count,) + spec.shape:
                raise ValueError(f"windows[{name!r}] has shape {shape}, expected {(count,) + spec.shape}")
            check_cast(spec, np.asarray(windows[name]))
        return count

    # ------------------------------------------------------------------ tf.data
    def batch_spec(self, batch_size: int) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """Shape and dtype of every array ``sample(batch_size)`` returns."""
        spec = {name: ((batch_size, self.length) + s.shape, s.dtype) for name, s in self._row_specs.items()}
        spec["obs_mask"] = ((batch_size, self.length), np.dtype(bool))
        spec.update({name: ((batch_size,) + s.shape, s.dtype) for name, s in self._state_specs.items()})
        spec["indices"] = ((batch_size,), np.dtype(np.int64))
        spec["generations"] = ((batch_size,), np.dtype(np.int64))
        spec["weights"] = ((batch_size,), np.dtype(np.float32))
        return spec

    def _params(self) -> dict[str, JsonValue]:
        """Constructor keyword arguments that ``load`` passes back."""
        return {"burn_in": self.burn_in, "trace_length": self.trace_length, "n_step": self.n_step,
                "max_sequences": self.max_sequences, **self._sampler.params(),
                "initial_state": self.initial_state}

    def _saved_state(self) -> tuple[dict[str, JsonValue], dict[str, np.ndarray]]:
        """JSON metadata and arrays that ``save`` writes (call with the lock held)."""
        rows = min(self._rows_written, self.capacity)
        sequences = min(self._sequences_written, self.max_sequences)
        user_fields: dict[str, JsonValue] = {name: spec.to_json() for name, spec in self._row_specs.items()
                                             if name not in ROW_FLAGS}
        meta: dict[str, JsonValue] = {"capacity": self.capacity, "fields": user_fields, "params": self._params(),
                                      "state": {name: spec.to_json() for name, spec in self._state_specs.items()},
                                      "rows_written": self._rows_written,
                                      "sequences_written": self._sequences_written}
        arrays = {f"row.{name}": array[:rows] for name, array in self._rows.items()}
        arrays["row_write_index"] = self._row_write_index[:rows]
        arrays["row_previous"] = self._row_previous[:rows]
        arrays["row_next"] = self._row_next[:rows]
        arrays.update({f"state.{name}": array[:sequences] for name, array in self._states.items()})
        arrays.update(slots=self._slots[:sequences], oldest_write=self._oldest_write[:sequences],
                      generation=self._generation[:sequences])
        keys = sorted(self._last_window)
        arrays["last_window_key"] = np.array([[s, e, self._last_window[(s, e)][0], self._last_window[(s, e)][1]]
                                              for s, e in keys], dtype=np.int64).reshape(-1, 4)
        arrays["last_window_rows"] = np.array([self._last_window[k][2] for k in keys],
                                              dtype=np.int64).reshape(-1, self.length)
        return meta, arrays

    @classmethod
    def _saved_layout(cls, path: str, meta: Metadata) -> SavedLayout:
        capacity = meta_int(path, meta, "capacity", 1)
        params = meta_mapping(path, meta, "params")
        burn_in = meta_int(path, params, "burn_in", 0, label="params.burn_in")
        trace_length = meta_int(path, params, "trace_length", 1, label="params.trace_length")
        n_step = meta_int(path, params, "n_step", 0, label="params.n_step")
        max_sequences = meta_int(path, params, "max_sequences", 1, label="params.max_sequences")
        length = burn_in + trace_length + n_step
        rows = min(meta_int(path, meta, "rows_written"), capacity)
        sequences = min(meta_int(path, meta, "sequences_written"), max_sequences)
        rows_specs = cls._saved_row_specs(path, meta)
        state = meta_mapping(path, meta, "state")
        state_specs = fields_from_saved(path, state, "state") if state else {}
        int64 = np.dtype(np.int64)
        arrays: dict[str, ArraySpec] = {f"row.{name}": ((rows,) + spec.shape, spec.dtype)
                                        for name, spec in rows_specs.items()}
        arrays.update({f"state.{name}": ((sequences,) + spec.shape, spec.dtype) for name, spec in state_specs.items()})
        arrays.update(row_write_index=((rows,), int64), row_previous=((rows,), int64), row_next=((rows,), int64),
                      slots=((sequences, length), np.dtype(np.int32)), oldest_write=((sequences,), int64),
                      generation=((sequences,), int64), last_window_key=((None, 4), int64),
                      last_window_rows=((None, length), int64))
        sampler = cls._sampler_layout(path, params, max_sequences)
        preallocated = ((capacity + 1) * (item_bytes(rows_specs) + 24)
                        + max_sequences * (4 * length + 16 + item_bytes(state_specs)) + sampler.preallocated_bytes)
        return SavedLayout({**arrays, **sampler.arrays}, preallocated)

    @classmethod
    def _saved_row_specs(cls, path: str, meta: Metadata) -> dict[str, FieldSpec]:
        """The row fields a saved buffer's constructor arguments give (refusals name the file)."""
        saved = fields_from_saved(path, meta_field(path, meta, "fields"), "fields")
        try:
            return row_specs({name: (spec.shape, spec.dtype) for name, spec in saved.items()})
        except ValueError as error:
            raise ValueError(f"{path!r}: malformed metadata: field 'fields': {error}") from None

    @classmethod
    def _from_meta(cls, path: str, meta: Metadata) -> SequenceReplayBuffer:  # type: ignore[override]  # no goal functions
        return cls._saved_constructor(path, meta["capacity"], fields_from_json(meta["fields"]),
                                      fields_from_json(meta["state"]), seed=0, **meta["params"])

    def _restore_saved_state(self, path: str, meta: Metadata, arrays: Mapping[str, np.ndarray]) -> None:
        """Inverse of ``_saved_state`` on a freshly constructed buffer with the saved parameters.

        Shapes and dtypes were checked by ``_saved_layout``; here every table must be one that writes
        leave behind, since the kernels and ``add_sequences`` index with it unchecked.
        """
        rows = min(meta["rows_written"], self.capacity)
        sequences = min(meta["sequences_written"], self.max_sequences)
        for name, array in self._rows.items():
            array[:rows] = arrays[f"row.{name}"]
        for name, array in self._states.items():
            array[:sequences] = arrays[f"state.{name}"]
        self._restore_rows(path, arrays, meta["rows_written"])
        self._restore_windows(path, arrays, meta["sequences_written"])
        self._restore_last_windows(path, arrays)

    def _restore_rows(self, path: str, arrays: Mapping[str, np.ndarray], rows_written: int) -> None:
        """The ring's write indices (each slot holds its latest write) and the episode links between rows."""
        rows = min(rows_written, self.capacity)
        ring = np.arange(rows)
        latest = ring + (rows_written - 1 - ring) // self.capacity * self.capacity  # [rows]
        if not np.array_equal(arrays["row_write_index"], latest):
            raise ValueError(f"{path!r}: array 'row_write_index' is not the latest write of each ring slot after "
                             f"rows_written = {rows_written}; the file is corrupt")
        self._row_write_index[:rows] = latest
        for name, target in (("row_previous", self._row_previous), ("row_next", self._row_next)):
            links = arrays[name]
            if links.size and (links.min() < LOST_ROW or links.max() >= rows_written):
                raise ValueError(f"{path!r}: {name} holds write indices outside [{LOST_ROW}, rows_written)")
            target[:rows] = links
        self._rows_written = rows_written

    def _restore_windows(self, path: str, arrays: Mapping[str, np.ndarray], sequences_written: int) -> None:
        """The window table: slots into the ring, write counts per slot, and which windows live.

        A window lives exactly while its oldest row is stored (``_expire`` keeps it so), and a live
        window's rows are all stored, its ``oldest_write`` the oldest of them.
        """
        sequences = min(sequences_written, self.max_sequences)
        slots, oldest, generation = arrays["slots"], arrays["oldest_write"], arrays["generation"]
        if slots.size and (slots.min() < 0 or slots.max() > self.capacity):
            raise ValueError(f"{path!r}: window slot table points outside the step ring")
        written = (sequences_written - 1 - np.arange(sequences)) // self.max_sequences + 1  # [sequences]
        if not np.array_equal(generation, written):
            raise ValueError(f"{path!r}: array 'generation' is not the number of windows written to each slot after "
                             f"sequences_written = {sequences_written}; the file is corrupt")
        if self._sampler.alive[sequences:].any():
            raise ValueError(f"{path!r}: a live window slot was never written; the file is corrupt")
        live = self._sampler.alive[:sequences]
        if oldest.size and (oldest.min() < 0 or oldest.max() > self._rows_written) \
                or (live != (oldest >= self._rows_written - self.capacity)).any():
            raise ValueError(f"{path!r}: array 'oldest_write' disagrees with the live windows (a window lives exactly "
                             "while its oldest row is stored); the file is corrupt")
        present = slots[live] != self.capacity  # [A, L]
        writes = self._row_write_index[slots[live]]  # [A, L]; -1 for padding and never-written slots
        first = np.where(present, writes, np.iinfo(np.int64).max).min(axis=1, initial=np.iinfo(np.int64).max)
        if (present & (writes < 0)).any() or (present.any(axis=1) & (first != oldest[live])).any():
            raise ValueError(f"{path!r}: a live window's rows are not stored, or its 'oldest_write' is not its oldest "
                             "row; the file is corrupt")
        self._slots[:sequences] = slots
        self._oldest_write[:sequences] = oldest
        self._generation[:sequences] = generation
        self._sequences_written = sequences_written
        self._expiry = [(int(self._oldest_write[s]), int(s), int(self._generation[s]))
                        for s in np.flatnonzero(self._sampler.alive)]
        heapq.heapify(self._expiry)

    def _restore_last_windows(self, path: str, arrays: Mapping[str, np.ndarray]) -> None:
        """The last window of each ``(source, env)``, whose rows ``add_sequences`` reuses (write indices or -1)."""
        keys, rows = arrays["last_window_key"], arrays["last_window_rows"]  # [K, 4], [K, L]
        if keys.shape[0] != rows.shape[0]:
            raise ValueError(f"{path!r}: 'last_window_key' has {keys.shape[0]} rows, 'last_window_rows' "
                             f"{rows.shape[0]}; the file is corrupt")
        if rows.size and (rows.min() < -1 or rows.max() >= self._rows_written):
            raise ValueError(f"{path!r}: array 'last_window_rows' holds write indices outside [-1, rows_written = "
                             f"{self._rows_written}); the file is corrupt")
        if np.unique(keys[:, :2], axis=0).shape[0] != keys.shape[0] \
                or ((keys[:, 2:] < -MAX_COUNT) | (keys[:, 2:] > MAX_COUNT)).any():
            raise ValueError(f"{path!r}: array 'last_window_key' repeats a (source, env) or holds an episode or start "
                             f"outside [-{MAX_COUNT}, {MAX_COUNT}]; the file is corrupt")
        for (source, env, episode, start), row_index in zip(keys.tolist(), rows):
            self._last_window[(source, env)] = (episode, start, row_index.copy())

    def __repr__(self) -> str:
        return (f"SequenceReplayBuffer(capacity={self.capacity}, windows={len(self)}, "
                f"length={self.length}, steps_stored={self.steps_stored}, sampler={self._sampler!r})")
