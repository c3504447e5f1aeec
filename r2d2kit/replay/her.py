"""Hindsight experience replay over transitions (Andrychowicz et al. 2017, https://arxiv.org/abs/1707.01495).

Mental model: a vector env's steps go into one flat ring with a column per env, so each episode
is contiguous (modulo the column length) and its steps are found by arithmetic on per-env write
counts. Relabelling happens at sample time, for the whole batch in one kernel call, and the
rewards of relabelled samples come from one batched ``compute_reward`` call::

    add(vector step) --> column of each env: ... | o_t g_t a_t r_t o_t+1 ag_t+1 | ...   (+ episode start/end)
    sample(B)        --> sum tree: B steps --> her_sample_goals: goal step j per sample (or none)
                     --> goal = next_achieved_goal[j] --> compute_reward(next_ag, goal, {})  [one call]
                     --> n-step returns under that goal --> dict of [B, ...] arrays

A relabelled goal is the achieved goal *after* the chosen step j (``next_achieved_goal[j]``), so a
transition relabelled with its own outcome (``future`` may pick ``j = t``) succeeds. The goal step
is chosen by counts inside the episode, which stays correct when the episode wraps around the end
of its column: r2d2kit never falls back to another strategy there (the seed article's buffer falls
back to 'final' for such episodes).

Differences from Stable-Baselines3's ``HerReplayBuffer``:
    * each sample is relabelled independently with probability ``k / (k + 1)`` (SB3 splits the
      batch exactly); with stratified sampling an exact split would tie relabelling to the
      stratum, i.e. to the position in the ring;
    * an episode partly overwritten by the ring is never sampled (its steps lose their mass when
      its first step is overwritten), and an unfinished episode is sampled but, by default, not
      relabelled;
    * per-step ``infos`` are not stored (they cannot be saved without pickle); ``compute_reward``
      receives an empty dict;
    * termination is recomputed under the new goal only if ``compute_terminated`` is given (the
      GoalEnv method of that name); otherwise the stored flag is kept, as in SB3;
    * n-step returns (``n_step > 1``) sum rewards recomputed under the relabelled goal.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from r2d2kit._validation import Seed, as_index_array, check_float, check_positive_int
from r2d2kit.kernels import her as her_kernels
from r2d2kit.replay.autoreset import AutoresetMode, ResetSteps
from r2d2kit.replay.core import BufferCore
from r2d2kit.replay.fields import (
    FieldDeclaration,
    FieldSpec,
    check_cast,
    fields_from_json,
    fields_from_saved,
    item_bytes,
    parse_fields,
)
from r2d2kit.replay.goals import (
    DEFAULT_STRATEGY,
    GoalSelectionStrategy,
    HindsightBase,
    RewardFn,
    as_strategy,
    call_goal_function,
    check_goal_functions,
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
from r2d2kit.replay.samplers import Sampler, UniformSampler, make_sampler

__all__ = ["HerReplayBuffer"]

GOAL_KEYS = ("observation", "achieved_goal", "desired_goal")
# stored field <- (argument of add, key in that dict or None)
_STEP_SOURCES = {
    "observation": ("obs", "observation"),
    "achieved_goal": ("obs", "achieved_goal"),
    "desired_goal": ("obs", "desired_goal"),
    "action": ("action", None),
    "next_observation": ("next_obs", "observation"),
    "next_achieved_goal": ("next_obs", "achieved_goal"),
}


def step_specs(given: Mapping[str, FieldSpec]) -> dict[str, FieldSpec]:
    """Every per-step field stored, from the ``observation``, ``goal`` and ``action`` specs."""
    obs, goal, act = given["observation"], given["goal"], given["action"]
    return {
        "observation": obs,
        "achieved_goal": FieldSpec("achieved_goal", goal.shape, goal.dtype),
        "desired_goal": FieldSpec("desired_goal", goal.shape, goal.dtype),
        "action": act,
        "reward": FieldSpec("reward", (), np.dtype(np.float32)),
        "terminated": FieldSpec("terminated", (), np.dtype(bool)),
        "truncated": FieldSpec("truncated", (), np.dtype(bool)),
        "next_observation": FieldSpec("next_observation", obs.shape, obs.dtype),
        "next_achieved_goal": FieldSpec("next_achieved_goal", goal.shape, goal.dtype),
    }


class HerReplayBuffer(HindsightBase, BufferCore):
    """Transition replay for goal-conditioned envs (gymnasium-robotics GoalEnv protocol) with hindsight relabelling.

    Storage: ``rows = capacity // num_envs`` rows of ``num_envs`` columns; the ``c``-th step of env
    ``e`` lives at flat index ``(c % rows) * num_envs + e`` (``capacity % num_envs`` slots stay
    unused). Per step the buffer keeps ``observation``, ``achieved_goal``, ``desired_goal``,
    ``action``, ``reward`` (float32), ``terminated``, ``truncated``, ``next_observation`` and
    ``next_achieved_goal``, plus 24 bytes of episode bookkeeping. Keeping ``next_observation``
    doubles the observation memory (``nbytes`` reports the total); in exchange every step is
    self-contained, including an episode's last step, whose next observation is no other step's.

    Sampling is uniform over sampleable transitions, or by priority (``sampler``); a transition is
    sampleable while its whole episode is in the ring. Each sample whose episode
    is finished (or any, with ``relabel_unfinished``) is relabelled with probability
    ``n_sampled_goal / (n_sampled_goal + 1)``.

    Args:
        capacity: transitions held (over all envs); at least ``num_envs``. An episode longer than
            ``capacity // num_envs`` steps can never be sampled.
        observation_spec: ``(shape, dtype)`` of ``obs["observation"]``, e.g. ``((10,), "float32")``.
        goal_spec: ``(shape, dtype)`` of ``obs["achieved_goal"]`` and ``obs["desired_goal"]``.
        action_spec: ``(shape, dtype)`` of one env's action.
        num_envs: envs in the vector env that feeds :meth:`add`.
        n_sampled_goal: the paper's ``k``: relabel probability ``k / (k + 1)`` (0: no relabelling).
        goal_selection_strategy: a :class:`~r2d2kit.replay.GoalSelectionStrategy` or its name
            (``"trace_future"``, the default, draws what ``"future"`` draws on a transition).
        compute_reward: ``compute_reward(achieved_goal [M, *goal], desired_goal [M, *goal], info)``
            returning ``[M]`` rewards, e.g. ``env.unwrapped.compute_reward``. Called once per
            ``sample`` with ``info = {}``.
        compute_terminated: optional ``compute_terminated(achieved_goal, desired_goal, info)`` of
            the same shape contract; given, the termination of relabelled steps is recomputed
            under the new goal (for envs that end an episode on success, like BitFlip).
        n_step: steps summed per sample (1: one-step transitions); at most ``capacity // num_envs``.
        gamma: discount for the n-step return and the returned ``discount``.
        sampler: ``"uniform"``, ``"proportional"`` or ``"rank"`` over the sampleable transitions
            (:mod:`r2d2kit.replay.samplers`); ``alpha``, ``eps`` and ``sort_every`` as for
            :class:`~r2d2kit.replay.ReplayBuffer`.
        relabel_unfinished: also relabel steps of episodes still running ('future' and 'final'
            then use the steps stored so far).
        autoreset_mode: the vector env's autoreset mode. ``"next_step"`` (gymnasium >= 1.0's
            default): the step after an episode ends only carries the reset observation, so it is
            ignored for that env. ``"same_step"`` / ``"disabled"``: every step is a transition and
            ``next_obs`` of a finished env must be its true final observation (taken from
            ``infos["final_obs"]`` when :meth:`add` gets gymnasium's infos).
        seed: int seed, ``None`` or a ``np.random.Generator`` (used as is).

    Example:
        >>> env = gymnasium.make("BitFlip-v0", n_bits=8)
        >>> buf = HerReplayBuffer(10_000, ((8,), "float32"), ((8,), "float32"), num_envs=4,
        ...                       compute_reward=env.unwrapped.compute_reward, seed=0)
        >>> buf.add(obs, action, reward, next_obs, terminated, truncated)   # one vector-env step
        >>> batch = buf.sample(256)      # observation, desired_goal, reward, discount, ...
    """

    def __init__(self, capacity: int, observation_spec: FieldDeclaration, goal_spec: FieldDeclaration,
                 action_spec: FieldDeclaration = ((), "int64"), *,
                 compute_reward: RewardFn, num_envs: int = 1, n_sampled_goal: int = 4,
                 goal_selection_strategy: GoalSelectionStrategy | str = DEFAULT_STRATEGY,
                 compute_terminated: RewardFn | None = None,
                 n_step: int = 1, gamma: float = 0.99, sampler: str | Sampler = "uniform", alpha: float | None = None,
                 eps: float | None = None, sort_every: int | None = None, relabel_unfinished: bool = False,
                 autoreset_mode: AutoresetMode = "next_step", seed: Seed = None) -> None:
        self.capacity = check_positive_int("capacity", capacity)
        self.num_envs = check_positive_int("num_envs", num_envs)
        if self.capacity < self.num_envs:
            raise ValueError(f"capacity must be >= num_envs = {self.num_envs} (one column per env), got {capacity}")
        self.rows = self.capacity // self.num_envs
        self.n_sampled_goal = check_positive_int("n_sampled_goal", n_sampled_goal, minimum=0)
        self.goal_selection_strategy = as_strategy(goal_selection_strategy, tuple(GoalSelectionStrategy))
        # on a transition the trace is its one step: 'trace_future' draws what 'future' draws
        trace = self.goal_selection_strategy is GoalSelectionStrategy.TRACE_FUTURE
        self._strategy_code = GoalSelectionStrategy.FUTURE.code if trace else self.goal_selection_strategy.code
        check_goal_functions(compute_reward, compute_terminated)
        self.compute_reward = compute_reward
        self.compute_terminated = compute_terminated
        self.n_step = check_positive_int("n_step", n_step)
        if self.n_step > self.rows:  # each sample allocates n_step slots: a file's huge n_step must not pass
            raise ValueError(f"n_step must be <= capacity // num_envs = {self.rows} (no sampleable episode has more "
                             f"steps), got {n_step}")
        self.gamma = check_float("gamma", gamma, 0.0, 1.0)
        if not isinstance(relabel_unfinished, (bool, np.bool_)):
            raise TypeError(f"relabel_unfinished must be True or False, got {relabel_unfinished!r}")
        self.relabel_unfinished = bool(relabel_unfinished)
        self._resets = ResetSteps(self.num_envs, autoreset_mode)
        self.autoreset_mode = self._resets.mode

        self._specs = step_specs(parse_fields({"observation": observation_spec, "goal": goal_spec,
                                               "action": action_spec}))
        goal = self._specs["desired_goal"]
        slots = self.rows * self.num_envs
        self._slots = slots
        self._data = {name: np.zeros((slots,) + spec.shape, spec.dtype) for name, spec in self._specs.items()
                      if name not in ("achieved_goal", "desired_goal", "next_achieved_goal")}
        # the three goal fields share one array, so that a batch's goals (relabelled or not) are one take
        self._goals = np.zeros((3 * slots,) + goal.shape, goal.dtype)  # [achieved | desired | next_achieved]
        for k, name in enumerate(("achieved_goal", "desired_goal", "next_achieved_goal")):
            self._data[name] = self._goals[k * slots:(k + 1) * slots]
        self._step_count = np.full(slots, -1, dtype=np.int64)  # per-env write count of the step in the slot
        self._episode_start = np.full(slots, -1, dtype=np.int64)  # count of its episode's first step
        self._episode_end = np.full(slots, -1, dtype=np.int64)  # one past its episode's last count; -1 unfinished
        self._env_written = np.zeros(self.num_envs, dtype=np.int64)  # [E] steps written per env
        self._env_episode_start = np.zeros(self.num_envs, dtype=np.int64)  # [E] count of the running episode's start

        # mass 1 per sampleable transition: len() and 'random' goals read it; the uniform sampler is it
        sampler = make_sampler(sampler, slots, alpha=alpha, eps=eps, sort_every=sort_every)
        self._valid = sampler if sampler.name == "uniform" else UniformSampler(slots)
        super().__init__(sampler, seed)

    # ----------------------------------------------------------------- properties
    def __len__(self) -> int:
        """Transitions that can be sampled now (their whole episode is in the ring)."""
        return len(self._valid)

    @property
    def fields(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """``{"name": (shape, dtype)}`` of every per-step array stored."""
        return {name: (spec.shape, spec.dtype) for name, spec in self._specs.items()}

    @property
    def nbytes(self) -> int:
        """Bytes of preallocated storage: step fields and episode bookkeeping (trees not included)."""
        return (sum(array.nbytes for array in self._data.values()) + self._step_count.nbytes
                + self._episode_start.nbytes + self._episode_end.nbytes)

    # ----------------------------------------------------------------- adding
    def add(self, obs: Mapping[str, npt.ArrayLike], action: npt.ArrayLike, reward: npt.ArrayLike,
            next_obs: Mapping[str, npt.ArrayLike], terminated: npt.ArrayLike, truncated: npt.ArrayLike,
            infos: Mapping[str, Any] | None = None) -> np.ndarray:
        """Add one vector-env step: every argument has a leading axis of ``num_envs``.

        ``obs`` is where ``action`` was taken, ``next_obs`` what ``envs.step`` returned. With the
        ``"next_step"`` autoreset mode the step right after an env's episode ended is not stored
        for that env (its action is ignored by gymnasium). ``infos`` is read only for
        ``final_obs`` in the ``"same_step"`` mode; it is not stored.

        Returns:
            ``[num_envs]`` int64: the flat index each env's step was written to, -1 where skipped.
        """
        values, done = self._check_step(obs, action, reward, next_obs, terminated, truncated, infos)
        written = np.full(self.num_envs, -1, dtype=np.int64)
        with self._lock:
            active, ended = self._resets.advance(done)
            envs = np.flatnonzero(active)
            if envs.size:
                flat = (self._env_written[envs] % self.rows) * self.num_envs + envs  # [m]
                for name, array in self._data.items():
                    array[flat] = values[name][envs]
                leaves, valid = her_kernels.her_write(
                    envs, ended[envs], self._step_count, self._episode_start, self._episode_end, self._env_written,
                    self._env_episode_start, self.rows, self.num_envs)
                self._place(leaves, valid > 0.0)
                written[envs] = flat
        return written

    def _place(self, leaves: np.ndarray, alive: np.ndarray) -> None:
        self._valid.place(leaves, alive)
        if self._sampler is not self._valid:
            self._sampler.place(leaves, alive)

    def _check_step(self, obs, action, reward, next_obs, terminated, truncated, infos):
        """Every field as a checked ``[num_envs, ...]`` array, and the per-env episode-end flags."""
        values = {}
        for prefix, mapping in (("obs", obs), ("next_obs", next_obs)):
            if not isinstance(mapping, Mapping) or set(mapping) != set(GOAL_KEYS):
                keys = sorted(mapping) if isinstance(mapping, Mapping) else type(mapping).__name__
                raise ValueError(f"{prefix} must be a dict with exactly the keys {list(GOAL_KEYS)} (a GoalEnv "
                                 f"observation, batched over envs), got {keys}")
        if self.autoreset_mode == "same_step" and infos is not None and "final_obs" in infos:
            next_obs = self._with_final_obs(next_obs, infos)
        given = {"obs": obs, "action": action, "next_obs": next_obs}
        for name, (argument, key) in _STEP_SOURCES.items():
            value = given[argument] if key is None else given[argument][key]
            label = argument if key is None else f"{argument}[{key!r}]"
            values[name] = self._per_env(label, value, self._specs[name])
        self._per_env("next_obs['desired_goal']", next_obs["desired_goal"], self._specs["desired_goal"])
        rewards = self._per_env("reward", reward, self._specs["reward"])
        bad = np.flatnonzero(~np.isfinite(rewards))
        if bad.size:
            raise ValueError(f"reward[{bad[0]}] = {float(rewards[bad[0]])!r} is not finite; check the env's reward")
        values["reward"] = rewards
        values["terminated"] = self._per_env_flags("terminated", terminated)
        values["truncated"] = self._per_env_flags("truncated", truncated)
        return values, values["terminated"] | values["truncated"]

    def _per_env(self, label: str, value: npt.ArrayLike, spec: FieldSpec) -> np.ndarray:
        array = np.asarray(value)
        expected = (self.num_envs,) + spec.shape
        if array.shape != expected:
            hint = " (one vector-env step: add a leading env axis, e.g. x[np.newaxis])" \
                if array.shape == spec.shape else ""
            raise ValueError(f"{label} must have shape {expected} (num_envs = {self.num_envs}), "
                             f"got {array.shape}{hint}")
        return check_cast(FieldSpec(label, spec.shape, spec.dtype), array).astype(spec.dtype, copy=False)

    def _per_env_flags(self, label: str, value: npt.ArrayLike) -> np.ndarray:
        array = np.asarray(value)
        if array.shape != (self.num_envs,):
            raise ValueError(f"{label} must have shape ({self.num_envs},), got {array.shape}")
        if array.dtype != np.bool_:
            if not np.issubdtype(array.dtype, np.integer) or not np.isin(array, (0, 1)).all():
                raise TypeError(f"{label} must hold booleans (as envs.step returns them), got {array!r}")
            array = array.astype(bool)
        return array

    def _with_final_obs(self, next_obs: Mapping[str, npt.ArrayLike], infos: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """``next_obs`` with each finished env's true final observation from gymnasium's same-step infos."""
        finals = infos["final_obs"]
        flags = np.asarray(infos.get("_final_obs", [final is not None for final in finals]), dtype=bool)
        patched = {key: np.array(next_obs[key], copy=True) for key in GOAL_KEYS}
        for env in np.flatnonzero(flags):
            for key in GOAL_KEYS:
                patched[key][env] = finals[env][key]
        return patched

    # ----------------------------------------------------------------- sampling
    def sample(self, batch_size: int, beta: float = DEFAULT_BETA, *,
               out: Mapping[str, np.ndarray] | None = None,
               rng: np.random.Generator | None = None) -> dict[str, np.ndarray]:
        """Sample ``batch_size`` transitions (with replacement) and relabel them in hindsight.

        Args:
            batch_size: number of transitions.
            beta: importance-sampling exponent in ``[0, 1]`` (weights are 1 when uniform).
            out: optional arrays with :meth:`batch_spec`'s shapes and dtypes, filled in place
                (e.g. :meth:`sample_buffers`); default fresh arrays.
            rng: draw with this generator instead of the buffer's own (a diagnostic batch then leaves
                the training draws as they were).

        Returns:
            ``observation``, ``achieved_goal``, ``desired_goal`` (the relabelled goal where
            ``relabelled``), ``action``, ``reward`` (the n-step return under that goal, float32),
            ``next_observation`` and ``next_achieved_goal`` (after the last summed step),
            ``discount`` (``gamma^m``, 0 if the last summed step terminated; float32),
            ``relabelled`` (bool), ``indices`` (int64, for ``update_priorities``) and ``weights``
            (float32, max 1). Use ``desired_goal`` with both observations.
        """
        batch_size, beta = self._check_sample_args(batch_size, beta, out)
        with self._lock:  # held through compute_reward: the returns read stored rewards the ring may overwrite
            if len(self) == 0:
                raise ValueError(self._nothing_to_sample())
            uniforms = (rng or self._rng).random((3, batch_size))  # [3, B]: sample, relabel, goal
            indices, weights = self._sampler.sample(uniforms[0], beta)
            if self._strategy_code == 3:  # random: goal steps uniform over everything sampleable
                random_goals = self._valid.sample(uniforms[2], beta)[0]
            else:
                random_goals = indices  # unused by the other strategies
            goal_indices, steps, pair_samples, pair_steps = her_kernels.her_sample_goals(
                indices, self._step_count, self._episode_start, self._episode_end, self._env_written, self.rows,
                self.num_envs, self.n_step, self._strategy_code, self.relabel_probability, self.relabel_unfinished,
                uniforms[1], uniforms[2], random_goals)
            batch = self._batch_memory(batch_size, out)
            self._gather(batch, indices, goal_indices, steps, pair_samples, pair_steps)
            self._record_draw(batch, indices, weights)
        return batch

    def _gather(self, batch: dict[str, np.ndarray], indices: np.ndarray, goal_indices: np.ndarray, steps: np.ndarray,
                pair_samples: np.ndarray, pair_steps: np.ndarray) -> None:
        """Write the batch of sampled ``indices`` into ``batch``: relabelled goals, recomputed rewards, n-step
        returns (``mode="clip"``: the indices are valid, and numpy then takes straight into the output)."""
        d, slots = self._data, self._slots
        relabelled = goal_indices >= 0  # [B]
        goal_rows = np.where(relabelled, goal_indices + 2 * slots, indices + slots)  # [B] rows of self._goals
        desired = np.take(self._goals, goal_rows, axis=0, out=batch["desired_goal"], mode="clip")  # [B, *goal]
        if pair_samples.size:
            achieved = d["next_achieved_goal"].take(pair_steps, axis=0)  # [M, *goal]
            goals = desired.take(pair_samples, axis=0)  # [M, *goal]
            pair_rewards = call_goal_function("compute_reward", self.compute_reward, achieved, goals).astype(np.float64)
            if self.compute_terminated is None:
                pair_terminated = d["terminated"].take(pair_steps)
            else:
                pair_terminated = call_goal_function("compute_terminated", self.compute_terminated,
                                                     achieved, goals) != 0
        else:
            pair_rewards, pair_terminated = np.zeros(0), np.zeros(0, dtype=bool)
        returns, discount, last_steps = her_kernels.her_nstep_returns(
            steps, goal_indices, d["reward"], d["terminated"], pair_rewards, pair_terminated, self.gamma)
        for name, source, rows in (("observation", d["observation"], indices), ("achieved_goal", self._goals, indices),
                                   ("action", d["action"], indices),
                                   ("next_observation", d["next_observation"], last_steps),
                                   ("next_achieved_goal", d["next_achieved_goal"], last_steps)):
            np.take(source, rows, axis=0, out=batch[name], mode="clip")
        np.copyto(batch["reward"], returns)
        np.copyto(batch["discount"], discount)
        np.copyto(batch["relabelled"], relabelled)

    def _nothing_to_sample(self) -> str:
        if not self._env_written.any():
            return "cannot sample from an empty HerReplayBuffer: add steps first"
        return (f"cannot sample: every stored episode is partly overwritten (an episode longer than "
                f"capacity // num_envs = {self.rows} steps can never be sampled); raise capacity")

    def _checked_indices(self, indices: npt.ArrayLike) -> np.ndarray:
        leaves = as_index_array("indices", indices, self._step_count.shape[0])
        never = np.flatnonzero(self._step_count[leaves] < 0)
        if never.size:
            i = int(never[0])
            raise IndexError(f"indices[{i}] = {leaves[i]} holds no transition yet; pass indices from sample()")
        return leaves

    # ----------------------------------------------------------------- tf.data
    def batch_spec(self, batch_size: int) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """Shape and dtype of every array ``sample(batch_size)`` returns."""
        s = self._specs
        spec = {name: ((batch_size,) + s[name].shape, s[name].dtype)
                for name in ("observation", "achieved_goal", "desired_goal", "action", "reward", "next_observation",
                             "next_achieved_goal")}
        spec["discount"] = ((batch_size,), np.dtype(np.float32))
        spec["relabelled"] = ((batch_size,), np.dtype(bool))
        spec["indices"] = ((batch_size,), np.dtype(np.int64))
        spec["generations"] = ((batch_size,), np.dtype(np.int64))
        spec["weights"] = ((batch_size,), np.dtype(np.float32))
        return spec

    # ----------------------------------------------------------------- persistence
    def _saved_state(self) -> tuple[dict[str, JsonValue], dict[str, np.ndarray]]:
        slots = min(self.rows, int(self._env_written.max())) * self.num_envs
        meta: dict[str, JsonValue] = {"capacity": self.capacity, "slots": slots,
                "has_compute_terminated": self.compute_terminated is not None,
                "specs": {name: self._specs[name].to_json() for name in ("observation", "desired_goal", "action")},
                "params": {"num_envs": self.num_envs, "n_sampled_goal": self.n_sampled_goal,
                           "goal_selection_strategy": self.goal_selection_strategy.value, "n_step": self.n_step,
                           "gamma": self.gamma, **self._sampler.params(),
                           "relabel_unfinished": self.relabel_unfinished, "autoreset_mode": self.autoreset_mode}}
        arrays = {f"field.{name}": array[:slots] for name, array in self._data.items()}
        arrays.update(step_count=self._step_count[:slots], episode_start=self._episode_start[:slots],
                      episode_end=self._episode_end[:slots], env_written=self._env_written,
                      env_episode_start=self._env_episode_start, skip=self._resets.pending,
                      valid=np.flatnonzero(self._valid.alive))
        return meta, arrays

    @classmethod
    def _saved_layout(cls, path: str, meta: Metadata) -> SavedLayout:
        capacity = meta_int(path, meta, "capacity", 1)
        params = meta_mapping(path, meta, "params")
        num_envs = meta_int(path, params, "num_envs", 1, capacity, label="params.num_envs")
        ring = capacity // num_envs * num_envs  # slots of the flat ring: rows x envs
        slots = meta_int(path, meta, "slots", 0, ring)
        if slots % num_envs:
            raise ValueError(f"{path!r}: malformed metadata: {slots} saved slots do not fit rows of {num_envs} envs; "
                             "the file is corrupt")
        saved = fields_from_saved(path, meta_field(path, meta, "specs"), "specs")
        if set(saved) != {"observation", "desired_goal", "action"}:
            raise ValueError(f"{path!r}: malformed metadata: field 'specs' must give 'observation', 'desired_goal' "
                             f"and 'action', got {sorted(saved)}; the file is corrupt")
        specs = step_specs({"observation": saved["observation"], "goal": saved["desired_goal"],
                            "action": saved["action"]})
        int64 = np.dtype(np.int64)
        arrays: dict[str, ArraySpec] = {f"field.{name}": ((slots,) + spec.shape, spec.dtype)
                                        for name, spec in specs.items()}
        arrays.update(step_count=((slots,), int64), episode_start=((slots,), int64), episode_end=((slots,), int64),
                      env_written=((num_envs,), int64), env_episode_start=((num_envs,), int64),
                      skip=((num_envs,), np.dtype(bool)), valid=((None,), int64))
        sampler = cls._sampler_layout(path, params, ring)
        valid = 0 if params["sampler"] == "uniform" else UniformSampler.saved_layout(ring).preallocated_bytes
        preallocated = ring * (item_bytes(specs) + 24) + num_envs * 17 + sampler.preallocated_bytes + valid
        return SavedLayout({**arrays, **sampler.arrays}, preallocated)

    @classmethod
    def _construct(cls, path: str, meta: Metadata, **functions: RewardFn | None) -> HerReplayBuffer:
        specs = fields_from_json(meta["specs"])
        return cls._saved_constructor(path, meta["capacity"], specs["observation"], specs["desired_goal"],
                                      specs["action"], seed=0, **functions, **meta["params"])

    def _restore_saved_state(self, path: str, meta: Metadata, arrays: Mapping[str, np.ndarray]) -> None:
        """Shapes were checked by ``_saved_layout``; the bookkeeping must be what the writes leave behind."""
        slots = meta["slots"]
        for name, array in self._data.items():
            array[:slots] = arrays[f"field.{name}"]
        self._step_count[:slots] = arrays["step_count"]
        self._episode_start[:slots] = arrays["episode_start"]
        self._episode_end[:slots] = arrays["episode_end"]
        self._env_written[:] = arrays["env_written"]
        self._env_episode_start[:] = arrays["env_episode_start"]
        self._resets.pending[:] = arrays["skip"]
        self._check_bookkeeping(path, slots)
        if self._valid is not self._sampler:
            # which steps are sampleable; their generations are never asked for
            self._valid.restore({"max_priority": 1.0}, {"sampler.alive": arrays["valid"], "sampler.generation":
                                                        np.zeros(self._valid.capacity, np.int64)}, path)
        elif not np.array_equal(arrays["valid"], arrays["sampler.alive"]):  # one sampler: saved twice
            raise ValueError(f"{path!r}: arrays 'valid' and 'sampler.alive' differ (with the uniform sampler both are "
                             "the sampleable slots); the file is corrupt")
        if (self._valid.alive != self._sampleable()).any() or (self._sampler.alive != self._valid.alive).any():
            raise ValueError(f"{path!r}: the saved sampleable slots disagree with the stored steps (a step is "
                             "sampleable exactly while its whole episode is stored); the file is corrupt")

    def _check_bookkeeping(self, path: str, slots: int) -> None:
        """Refuse loaded counts that would send the kernels outside the ring (they do no bounds checks), or that
        no sequence of writes leaves: the step in each slot is its env's latest of that row."""
        written = self._env_written
        if (written < 0).any() or (written > MAX_COUNT).any() \
                or min(self.rows, int(written.max())) * self.num_envs != slots:
            raise ValueError(f"{path!r}: env write counts {written.tolist()} do not match the {slots} saved slots")
        if self.autoreset_mode != "next_step" and self._resets.pending.any():
            raise ValueError(f"{path!r}: array 'skip' marks a pending autoreset step in the {self.autoreset_mode!r} "
                             "autoreset mode; the file is corrupt")
        count, start, end = self._step_count[:slots], self._episode_start[:slots], self._episode_end[:slots]
        env = np.arange(slots) % self.num_envs  # [slots]
        row = np.arange(slots) // self.num_envs  # [slots]
        env_written = written[env]  # [slots]
        running = self._env_episode_start[env]  # [slots]: start of each env's running episode
        latest = np.where(env_written > row, row + (env_written - 1 - row) // self.rows * self.rows, -1)  # [slots]
        stored = count >= 0
        consistent = (count == latest) & np.where(
            stored, (start >= 0) & (start <= count) & ((end == -1) == (start == running))
            & ((end == -1) | ((end > count) & (end <= running))), (start == -1) & (end == -1))
        if not consistent.all() or (self._env_episode_start > written).any() or (self._env_episode_start < 0).any():
            bad = int(np.flatnonzero(~consistent)[0]) if not consistent.all() else -1
            raise ValueError(f"{path!r}: episode bookkeeping is inconsistent (slot {bad}); the file is corrupt")

    def _sampleable(self) -> np.ndarray:
        """``[ring]`` bool: the slots whose step's whole episode is stored (its first step not yet overwritten)."""
        slots = self._step_count.shape[0]
        oldest_kept = self._env_written[np.arange(slots) % self.num_envs] - self.rows  # [ring]
        return (self._step_count >= 0) & (self._episode_start >= oldest_kept)

    def __repr__(self) -> str:
        return (f"HerReplayBuffer(capacity={self.capacity}, num_envs={self.num_envs}, size={len(self)}, "
                f"strategy={self.goal_selection_strategy.value!r}, n_sampled_goal={self.n_sampled_goal}, "
                f"n_step={self.n_step}, sampler={self._sampler!r})")
