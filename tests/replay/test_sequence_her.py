"""SequenceHerReplayBuffer against hand-written cases and the brute-force model in ``reference_sequence_her``.

Observations and goals spell out ``(env, j, t)`` (see ``reference_sequence_her``), so every sampled
window, every relabelled goal and every recomputed reward can be traced back to the rows it came from:

    obs row            [env, j, t, env, j, desired]   desired = 1000 (stored) or the relabelled goal's 3 values
    achieved_goal row  [env, j, t + 0.5]              a goal taken from o_tau is [env, j, tau + 0.5]
    distance_reward    -sum |achieved - goal|         so a relabelled reward of row t is -|t + 1 - tau|

Window layout in the hand-written cases (burn_in 1, trace_length 2, n_step 1, period 2: L = 4)::

    episode T = 5:   o0 o1 o2 o3 o4 o5
    window t0 = -1: [p  o0 o1 o2]          s_last = 2   future tau in {3, 4, 5}
    window t0 =  1:       [o1 o2 o3 o4]    s_last = 4   future tau in {5}
    window t0 =  3:             [o3 o4 o5 p]   s_last = 4   future tau in {5}
"""

from __future__ import annotations

from collections import Counter

import gymnasium as gym
import numpy as np
import pytest
from dataset_checks import assert_dataset_matches_sample
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from reference import chi_square_test
from reference_sequence_her import (
    GoalEpisode,
    ReferenceSequenceHer,
    distance_reward,
    distance_terminated,
    fixed_episodes,
    random_episodes,
)

import r2d2kit.envs  # noqa: F401  (registers BitFlip-v0)
from r2d2kit.replay import SequenceBuilder, SequenceHerReplayBuffer, SequenceReplayBuffer

STATE_NAMES = ("state_h", "state_c")  # the windows' fields of an LSTM's (h, c)

STATE = {"state_h": ((2,), "float32"), "state_c": ((2,), "float32")}
UNCHANGED = ("achieved_goal", "action", "prev_action", "terminated", "truncated", "mask", "obs_mask")


# =====================================================================================================
# Driving and checking
# =====================================================================================================


class Rig:
    """Builder + buffer fed from a reference, remembering which window each slot holds."""

    def __init__(self, episodes, capacity: int, burn_in: int, trace_length: int, n_step: int, period: int,
                 seed: int = 0, **kwargs) -> None:
        kwargs.setdefault("compute_reward", distance_reward)
        self.reference = ReferenceSequenceHer(episodes, burn_in, trace_length, n_step, period)
        self.builder = SequenceBuilder(len(episodes), burn_in, trace_length, n_step, period, state_names=STATE_NAMES)
        self.buffer = SequenceHerReplayBuffer(capacity, ((3,), "float32"), ((3,), "float32"), ((), "int64"), STATE,
                                              burn_in=burn_in, trace_length=trace_length, n_step=n_step,
                                              period=period, seed=seed, **kwargs)
        self.fed = 0  # vector steps fed so far
        self.emitted: dict[int, tuple[int, int, int]] = {}  # window slot -> (env, j, start)
        self.stored_until: dict[tuple[int, int], int] = {}  # (env, j) -> last episode time in an added window

    def feed(self, steps: int) -> None:
        for _ in range(steps):
            s = self.reference.vector_step(self.fed)
            out = self.builder.step(s["obs"], s["action"], s["reward"], s["terminated"], s["truncated"], s["state"],
                                    extras=s["extras"])
            self.fed += 1
            if out is None:
                continue
            for w, slot in enumerate(self.buffer.add_sequences(out)):
                first = int(np.argmax(out["obs_mask"][w]))
                env, j = int(out["obs"][w, first, 0]), int(out["obs"][w, first, 1])
                start = int(out["start"][w])
                self.emitted[int(slot)] = (env, j, start)
                last = start + int(np.flatnonzero(out["obs_mask"][w])[-1])
                self.stored_until[env, j] = max(self.stored_until.get((env, j), -1), last)

    def ring(self) -> dict[tuple[int, int, int], list[int]]:
        """(env, j, t) -> the ring slots holding that row now (a brute-force scan of the step ring)."""
        buffer = self.buffer
        held = {}
        for slot in range(buffer.capacity):
            write = buffer._row_write_index[slot]
            if 0 <= write and write >= buffer._rows_written - buffer.capacity:
                env, j, t = (int(x) for x in buffer._rows["obs"][slot, :3])
                held.setdefault((env, j, t), []).append(slot)
        return held

    def check_later_rows_outlive_earlier_ones(self) -> int:
        """Every sampleable window: all rows of its episode from its first row on (as far as added) are stored.

        This is the ring property relabelling relies on. Returns how many windows were checked.
        """
        held = self.ring()
        checked = 0
        for slot in np.flatnonzero(self.buffer.sampler.tree.leaves() > 0.0):
            env, j, start = self.emitted[int(slot)]
            for t in range(max(start, 0), self.stored_until[env, j] + 1):
                assert (env, j, t) in held, f"window {slot} ({env}, {j}, t0={start}) is sampleable but row {t} is gone"
            checked += 1
        return checked

    def check(self, batch: dict[str, np.ndarray]) -> Counter:
        """Every sampled window against the reference; returns what the batch exercised.

        Expectations are built window by window, then compared key by key for the whole batch.
        """
        ref, buffer = self.reference, self.buffer
        strategy, L = buffer.goal_selection_strategy.value, buffer.length
        held = self.ring()
        seen = Counter()
        expected = {key: [] for key in UNCHANGED + ("obs", "reward", "prev_reward", "state_h", "state_c", "goal")}
        where = []
        for b, slot in enumerate(batch["indices"]):
            env, j, start = self.emitted[int(slot)]
            assert start in ref.window_starts(env, j)
            T = ref.episodes[env][j].transitions
            where.append(f"sample {b}: window ({env}, {j}, t0={start}), T={T}, fed {self.fed} steps")
            goal = batch["goal"][b]
            if batch["relabelled"][b]:
                assert ref.finished(env, j, self.fed), f"unfinished episode relabelled, {where[b]}"
                tau = float(goal[2]) - 0.5
                assert goal[0] == env and goal[1] == j and tau == int(tau), f"goal {goal} from elsewhere, {where[b]}"
                tau = int(tau)
                assert tau in ref.goal_times(env, j, start, strategy), f"{strategy!r} goal from o_{tau}, {where[b]}"
                rows = ref.rows(env, j, start, ref.goal(env, j, tau),
                                terminate_on_goal=buffer.compute_terminated is not None)
                seen["relabelled success inside the window"] += bool(rows["terminated"][:L].any()
                                                                     & (tau <= start + L - 1)) \
                    if buffer.compute_terminated is not None else 0
                expected["goal"].append(ref.goal(env, j, tau))
                seen["relabelled"] += 1
                seen["goal after the window"] += tau > start + L - 1
                seen["reward of the row after the window"] += bool(rows["mask"][L - 1])
                seen["episode shorter than a window"] += T < L
                slots = [held[env, j, t][0] for t in range(max(start, 0), tau + 1)]  # every row used is stored
                seen["rows wrap the ring"] += any(b2 < a for a, b2 in zip(slots, slots[1:]))
            else:
                rows = ref.rows(env, j, start)
                expected["goal"].append(ref.episodes[env][j].desired_goal())
                seen["unfinished, kept"] += not ref.finished(env, j, self.fed)
            for key, value in rows.items():
                expected[key].append(value)
            h, c = ref.state(env, j, start)
            expected["state_h"].append(h)
            expected["state_c"].append(c)
        for key, values in expected.items():
            want = np.array(values, dtype=batch[key].dtype)
            if not np.array_equal(batch[key], want):
                b = int(np.flatnonzero((batch[key] != want).reshape(len(values), -1).any(axis=1))[0])
                raise AssertionError(f"{key} differs, {where[b]}:\n got  {batch[key][b].tolist()}\n"
                                     f" want {want[b].tolist()}")
        return seen


# =====================================================================================================
# Hand-checked cases (Acme test_cases style)
# =====================================================================================================

# one env, layout burn_in 1, trace 2, n_step 1, period 2 (L = 4); episodes (T, ...) then one unfinished;
# goals: window start t0 -> the episode times tau whose achieved goal relabelling may give it
HAND_CASES = {
    "future_reaches_past_the_window": dict(lengths=[5], strategy="future", episode=0,
                                           goals={-1: {3, 4, 5}, 1: {5}, 3: {5}}),
    "final_is_the_last_observation": dict(lengths=[5], strategy="final", episode=0,
                                          goals={-1: {5}, 1: {5}, 3: {5}}),
    "episode_shorter_than_a_window": dict(lengths=[1], strategy="future", episode=0, goals={-1: {1}}),
    "windows_holding_the_final_observation": dict(lengths=[3], strategy="future", episode=0, goals={-1: {3}, 1: {3}}),
    "second_episode_of_the_env": dict(lengths=[2, 4], strategy="future", episode=1, goals={-1: {3, 4}, 1: {4}}),
}


@pytest.mark.parametrize("name", list(HAND_CASES))
def test_hand_checked_case(name):
    case = HAND_CASES[name]
    episodes = [[GoalEpisode(0, j, T, "terminated") for j, T in enumerate(case["lengths"])] +
                [GoalEpisode(0, len(case["lengths"]), 50, "truncated")]]
    rig = Rig(episodes, 100, 1, 2, 1, 2, goal_selection_strategy=case["strategy"], n_sampled_goal=1)
    rig.feed(sum(T + 1 for T in case["lengths"]) + 12)  # the episode ends, the next one runs on
    rig.check(rig.buffer.sample(500))
    seen_goals: dict[int, set] = {}
    for _ in range(10):
        batch = rig.buffer.sample(500)
        for b in np.flatnonzero(batch["relabelled"]):
            env, j, start = rig.emitted[int(batch["indices"][b])]
            assert j < len(case["lengths"]), "only finished episodes are relabelled"
            if j == case["episode"]:
                seen_goals.setdefault(start, set()).add(int(batch["goal"][b, 2] - 0.5))
    assert seen_goals == case["goals"]
    for start, taus in case["goals"].items():  # the reference agrees with the table
        assert set(rig.reference.goal_times(0, case["episode"], start, case["strategy"])) == taus


def test_literal_relabelled_window():
    """Episode T = 3, window t0 = -1 relabelled 'final' (goal = ag(o_3)); the last row's reward reads o_3 past it."""
    episodes = [[GoalEpisode(0, 0, 3, "terminated"), GoalEpisode(0, 1, 40, "truncated")]]
    rig = Rig(episodes, 100, 1, 2, 1, 2, goal_selection_strategy="final", n_sampled_goal=10**6)
    rig.feed(6)
    batch = rig.buffer.sample(200)
    first = np.flatnonzero(batch["relabelled"] & (batch["obs"][:, 1, 2] == 0) & batch["obs_mask"][:, 1]
                           & ~batch["obs_mask"][:, 0])
    assert first.size
    b = first[0]
    goal = [0.0, 0.0, 3.5]
    np.testing.assert_array_equal(batch["goal"][b], goal)
    np.testing.assert_array_equal(batch["obs"][b], [[0, 0, 0, 0, 0, 0],        # p  (padding)
                                                    [0, 0, 0] + goal,            # o0
                                                    [0, 0, 1] + goal,            # o1
                                                    [0, 0, 2] + goal])           # o2
    np.testing.assert_array_equal(batch["mask"][b], [False, True, True, True])
    np.testing.assert_array_equal(batch["reward"][b], [0, -2, -1, 0])  # r_t = -|t + 1 - 3|; r_2 from o_3
    np.testing.assert_array_equal(batch["prev_reward"][b], [0, 0, -2, -1])


# =====================================================================================================
# Random multi-env streams vs the reference
# =====================================================================================================

CONFIGS = {
    # capacity not a multiple of any episode length; the ring wraps many times
    "one_env_cap_23": dict(num_envs=1, capacity=23, layout=(2, 3, 1, 2), steps=150, lengths=[[7, 3, 9, 4]]),
    "three_envs_interleaved_cap_97": dict(num_envs=3, capacity=97, layout=(4, 8, 2, 4), steps=200,
                                          lengths=[[30, 11], [5, 17, 2], [23]]),
    "episodes_shorter_than_a_window": dict(num_envs=2, capacity=41, layout=(3, 4, 2, 2), steps=150,
                                           lengths=[[1, 2, 5], [3, 8, 1, 4]]),
    "no_burn_in_period_1": dict(num_envs=2, capacity=19, layout=(0, 3, 1, 1), steps=120,
                                lengths=[[6, 2, 25], [4, 9]]),
}


@pytest.mark.parametrize("strategy", ["future", "final", "trace_future"])
@pytest.mark.parametrize("config", list(CONFIGS))
def test_relabelling_matches_the_reference(config, strategy):
    c = CONFIGS[config]
    terminated = {"compute_terminated": distance_terminated} if strategy == "trace_future" else {}
    rig = Rig(fixed_episodes(c["lengths"], c["steps"]), c["capacity"], *c["layout"], seed=1,
              goal_selection_strategy=strategy, **terminated)
    seen = Counter()
    for _part in range(4):  # check at four points of the stream: the ring differs each time
        rig.feed(c["steps"] // 4)
        rig.check_later_rows_outlive_earlier_ones()
        seen += rig.check(rig.buffer.sample(128))
    assert rig.buffer._rows_written > 3 * c["capacity"], "the ring must wrap"
    if config != "episodes_shorter_than_a_window":  # there most windows hold o_T themselves
        assert rig.buffer._table_written > 2 * c["capacity"], "the goal table must wrap"
    assert seen["relabelled"] > 100 and seen["unfinished, kept"] > 0, seen
    assert seen["rows wrap the ring"] > 0 and seen["reward of the row after the window"] > 0, seen
    if strategy == "future" or config != "episodes_shorter_than_a_window":
        assert seen["goal after the window"] > 0, seen
    if strategy == "trace_future":  # goals inside the window: relabelled successes end returns there
        assert seen["relabelled success inside the window"] > 0, seen
    if config == "episodes_shorter_than_a_window":
        assert seen["episode shorter than a window"] > 0, seen


@pytest.mark.parametrize("config", ["three_envs_interleaved_cap_97", "no_burn_in_period_1"])
def test_relabelling_into_reused_memory_matches_the_reference(config):
    """One ``out`` dict for every sample, junk bytes in it before each: relabelled goals, rewards and
    flags of the previous batch must not survive, and a default-memory batch kept meanwhile never changes."""
    c = CONFIGS[config]
    rig = Rig(fixed_episodes(c["lengths"], c["steps"]), c["capacity"], *c["layout"], seed=2)
    out = rig.buffer.sample_buffers(64)
    kept = None
    seen = Counter()
    for _part in range(8):
        rig.feed(c["steps"] // 8)
        for array in out.values():
            array.view(np.uint8)[...] = 0xAB
        assert rig.buffer.sample(64, out=out) is out
        seen += rig.check(out)
        if kept is None:
            kept = rig.buffer.sample(64)
            copy = {key: value.copy() for key, value in kept.items()}
        for _ in range(3):
            rig.buffer.sample(64)  # default memory: must leave the kept batch alone
    assert seen["relabelled"] > 50 and seen["unfinished, kept"] > 0, seen
    for key in copy:
        np.testing.assert_array_equal(kept[key], copy[key], err_msg=key)
    with pytest.raises(ValueError, match=r"out\['goal'\] has shape"):
        bad = rig.buffer.sample_buffers(64)
        bad["goal"] = np.zeros((64, 4), np.float32)
        rig.buffer.sample(64, out=bad)


@settings(deadline=None, max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(num_envs=st.integers(1, 3), burn_in=st.integers(0, 3), trace_length=st.integers(1, 4),
       n_step=st.integers(1, 2), period=st.integers(1, 4), capacity=st.integers(3, 25), max_len=st.integers(1, 14),
       steps=st.integers(1, 100), strategy=st.sampled_from(["future", "final", "trace_future"]),
       terminate=st.booleans(), seed=st.integers(0, 2**16))
def test_random_streams_match_the_reference(num_envs, burn_in, trace_length, n_step, period, capacity, max_len,
                                            steps, strategy, terminate, seed):
    """After every vector step: sampleable windows keep their episode's later rows, and samples match the reference."""
    period = min(period, trace_length)
    episodes = random_episodes(np.random.default_rng(seed), num_envs, steps, max_len)
    rig = Rig(episodes, capacity, burn_in, trace_length, n_step, period, seed=seed, goal_selection_strategy=strategy,
              n_sampled_goal=2, compute_terminated=distance_terminated if terminate else None)
    seen = Counter()
    for _ in range(steps):
        rig.feed(1)
        rig.check_later_rows_outlive_earlier_ones()
        if len(rig.buffer):
            seen += rig.check(rig.buffer.sample(8))
    for name in sorted(seen):
        event(name)
    if rig.buffer._table_written > rig.buffer._goal_table.shape[0]:
        event("goal table wrapped")


def test_two_actors_share_the_buffer():
    """Two builders (sources 0 and 1) whose env indices and episode ids collide feed one buffer in lockstep."""
    episodes = fixed_episodes([[7, 3], [12], [4, 9], [2, 6, 5]], 120)  # envs 0, 1: actor 0; envs 2, 3: actor 1
    rig = Rig(episodes, 61, 2, 3, 1, 2, seed=8)
    actors = [(ReferenceSequenceHer(episodes[:2], 2, 3, 1, 2), SequenceBuilder(2, 2, 3, 1, 2, state_names=STATE_NAMES)),
              (ReferenceSequenceHer(episodes[2:], 2, 3, 1, 2), SequenceBuilder(2, 2, 3, 1, 2, state_names=STATE_NAMES))]
    seen = Counter()
    for step in range(110):
        for source, (reference, builder) in enumerate(actors):
            s = reference.vector_step(step)
            out = builder.step(s["obs"], s["action"], s["reward"], s["terminated"], s["truncated"], s["state"],
                               extras=s["extras"])
            if out is not None:
                for w, slot in enumerate(rig.buffer.add_sequences(out, source=source)):
                    first = int(np.argmax(out["obs_mask"][w]))
                    env, j, start = int(out["obs"][w, first, 0]), int(out["obs"][w, first, 1]), int(out["start"][w])
                    rig.emitted[int(slot)] = (env, j, start)
                    last = start + int(np.flatnonzero(out["obs_mask"][w])[-1])
                    rig.stored_until[env, j] = max(rig.stored_until.get((env, j), -1), last)
        rig.fed += 1
        if step % 10 == 9:
            rig.check_later_rows_outlive_earlier_ones()
            seen += rig.check(rig.buffer.sample(64))
    assert seen["relabelled"] > 200 and seen["goal after the window"] > 0 and seen["rows wrap the ring"] > 0, seen


def test_an_episode_rewritten_in_the_ring_still_relabels_from_stored_rows():
    """A tiny ring shared by 3 envs: windows re-store rows the ring overwrote; goals still come from stored rows."""
    rig = Rig(fixed_episodes([[9, 4], [13], [6, 2]], 200), 14, 2, 3, 1, 2, seed=3)
    seen = Counter()
    for _ in range(40):
        rig.feed(5)
        rig.check_later_rows_outlive_earlier_ones()
        if len(rig.buffer):
            seen += rig.check(rig.buffer.sample(32))
    rows_added = sum(min(until + 1, ep.transitions + 1) for (env, j), until in rig.stored_until.items()
                     for ep in [rig.reference.episodes[env][j]])
    assert rig.buffer._rows_written > rows_added, "no row was stored twice: the case does not exercise rewrites"
    assert seen["relabelled"] > 50


def test_windows_fed_with_a_gap_are_never_relabelled():
    """Misuse: two consecutive windows of an episode never reach the buffer, so rows 5 and 6 are missing.

    (burn_in 1, trace 2, n_step 1, period 2; T = 9: windows t0 = -1, 1, 3, 5, 7; 3 and 5 dropped.)
    """
    episodes = [[GoalEpisode(0, 0, 9, "terminated"), GoalEpisode(0, 1, 4, "terminated"),
                 GoalEpisode(0, 2, 30, "truncated")]]
    rig = Rig(episodes, 100, 1, 2, 1, 2, n_sampled_goal=10**6)
    for step in range(20):
        s = rig.reference.vector_step(step)
        out = rig.builder.step(s["obs"], s["action"], s["reward"], s["terminated"], s["truncated"], s["state"],
                               extras=s["extras"])
        rig.fed += 1
        if out is None:
            continue
        keep = ~((out["obs"][:, :, 1].max(axis=1) == 0) & np.isin(out["start"], [3, 5]))  # [W]
        kept = {key: value[keep] for key, value in out.items()}
        if keep.any():
            for w, slot in enumerate(rig.buffer.add_sequences(kept)):
                first = int(np.argmax(kept["obs_mask"][w]))
                rig.emitted[int(slot)] = (0, int(kept["obs"][w, first, 1]), int(kept["start"][w]))
    batch = rig.buffer.sample(300)
    episode = np.array([rig.emitted[int(slot)][1] for slot in batch["indices"]])
    assert (episode == 0).any() and not batch["relabelled"][episode == 0].any()
    assert batch["relabelled"][episode == 1].all()
    rig.check(batch)


# =====================================================================================================
# Statistics: relabel fraction, uniform 'future' goals
# =====================================================================================================


@pytest.mark.parametrize("n_sampled_goal", [0, 1, 4])
def test_relabel_fraction_is_k_over_k_plus_one(n_sampled_goal):
    calls = []

    def counting_reward(achieved, desired, info):
        calls.append(achieved.shape[0])
        return distance_reward(achieved, desired, info)

    episodes = fixed_episodes([[6, 11, 3], [9, 4], [500]], 120)  # env 2's one episode never ends
    rig = Rig(episodes, 300, 2, 4, 1, 2, seed=5, n_sampled_goal=n_sampled_goal, compute_reward=counting_reward)
    rig.feed(100)
    relabelled, finished = [], []
    for _ in range(20):
        batch = rig.buffer.sample(500)
        relabelled.append(batch["relabelled"])
        finished.append([rig.reference.finished(*rig.emitted[int(slot)][:2], rig.fed) for slot in batch["indices"]])
    relabelled, finished = np.concatenate(relabelled), np.array(finished).reshape(-1)
    assert (~finished).any() and not relabelled[~finished].any()
    p = n_sampled_goal / (n_sampled_goal + 1)
    n = int(finished.sum())
    assert abs(relabelled[finished].mean() - p) <= 4.5 * np.sqrt(p * (1 - p) / n) + 1e-12
    assert len(calls) == (0 if n_sampled_goal == 0 else 20), "compute_reward: one call per sample() that relabels"


@pytest.mark.parametrize("strategy", ["future", "trace_future"])
def test_future_goals_are_uniform_over_their_range(strategy):
    """One episode of T = 10 (burn_in 1, trace 2, n_step 1, period 2): tau uniform per window over
    s_last + 1 .. T ('future') or t0 + burn_in + 1 .. T ('trace_future')."""
    rig = Rig([[GoalEpisode(0, 0, 10, "truncated"), GoalEpisode(0, 1, 99, "truncated")]], 200, 1, 2, 1, 2, seed=6,
              n_sampled_goal=1, goal_selection_strategy=strategy)
    rig.feed(14)
    counts: Counter = Counter()
    for _ in range(20):
        batch = rig.buffer.sample(2000)
        for b in np.flatnonzero(batch["relabelled"]):
            counts[rig.emitted[int(batch["indices"][b])][2], int(batch["goal"][b, 2] - 0.5)] += 1
    cells = [(start, tau) for start in rig.reference.window_starts(0, 0)
             for tau in rig.reference.goal_times(0, 0, start, strategy)]
    assert set(counts) == set(cells)
    starts = rig.reference.window_starts(0, 0)
    probabilities = [1.0 / len(starts) / len(rig.reference.goal_times(0, 0, start, strategy)) for start, _ in cells]
    _, _, p_value = chi_square_test(np.array([counts[cell] for cell in cells]), np.array(probabilities))
    assert p_value > 1e-4


# =====================================================================================================
# A real goal env
# =====================================================================================================


def test_bitflip_final_goals_make_the_last_transition_a_success():
    """BitFlip through a vector env, builder and buffer: relabelled 'final' windows end in reward 0."""
    num_envs, n_bits = 3, 5
    envs = gym.make_vec("BitFlip-v0", num_envs=num_envs, n_bits=n_bits, vectorization_mode="sync")
    compute_reward = envs.envs[0].unwrapped.compute_reward
    builder = SequenceBuilder(num_envs, 2, 4, 1, 2, state_names=STATE_NAMES)
    buffer = SequenceHerReplayBuffer(500, ((n_bits,), "float32"), ((n_bits,), "float32"), state=STATE,
                                     compute_reward=compute_reward, burn_in=2, trace_length=4, n_step=1, period=2,
                                     goal_selection_strategy="final", seed=0)
    rng = np.random.default_rng(0)
    obs, _ = envs.reset(seed=0)
    for _ in range(150):
        action = rng.integers(0, n_bits, num_envs)
        flat = buffer.flatten_obs(obs)
        state = (rng.random((num_envs, 2), dtype=np.float32), rng.random((num_envs, 2), dtype=np.float32))
        next_obs, reward, terminated, truncated, _ = envs.step(action)
        windows = builder.step(flat, action, reward, terminated, truncated, state,
                               extras={"achieved_goal": obs["achieved_goal"]})
        if windows is not None:
            buffer.add_sequences(windows)
        obs = next_obs
    envs.close()
    batch = buffer.sample(256)
    relabelled = batch["relabelled"]
    assert relabelled.any() and not relabelled.all()
    # row i is the episode's last transition and row i + 1 holds o_T, whose achieved goal is the 'final' goal
    ends = relabelled[:, None] & batch["mask"][:, :-1] & batch["obs_mask"][:, 1:] & ~batch["mask"][:, 1:]
    assert ends.any()
    np.testing.assert_array_equal(batch["reward"][:, :-1][ends], 0.0)
    rows = batch["obs_mask"][relabelled]  # every observation carries the goal
    np.testing.assert_array_equal(batch["obs"][relabelled][..., n_bits:][rows],
                                  np.broadcast_to(batch["goal"][relabelled][:, None], rows.shape + (n_bits,))[rows])
    check = compute_reward(batch["achieved_goal"][relabelled][:, 1:], batch["goal"][relabelled][:, None], {})
    prev = batch["prev_reward"][relabelled][:, 1:]
    later = rows[:, 1:] & rows[:, :-1]  # prev_reward of row i + 1 = R(ag of row i + 1, goal)
    np.testing.assert_array_equal(prev[later], check[later])


# =====================================================================================================
# PER, persistence, tf.data
# =====================================================================================================


def test_update_priorities_steers_sampling_and_relabelled_windows_keep_their_slot():
    rig = Rig(fixed_episodes([[8, 3], [5]], 80), 120, 2, 3, 1, 2, seed=7)
    rig.feed(60)
    batch = rig.buffer.sample(16)
    live = np.flatnonzero(rig.buffer.sampler.tree.leaves() > 0)
    favourite = int(batch["indices"][batch["relabelled"]][0])
    rig.buffer.update_priorities(live, np.where(live == favourite, 1e6, 0.0))
    again = rig.buffer.sample(256, beta=0.5)
    assert (again["indices"] == favourite).mean() > 0.99
    rig.check(again)
    rig.buffer.update_priorities(again["indices"], np.abs(again["reward"]).max(axis=1))


def continuation(rig: Rig, steps: int, seed: int) -> list[np.ndarray]:
    """The same adds, samples and priority updates on a rig; everything returned, flattened."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        rig.feed(1)
        if not len(rig.buffer):
            continue
        batch = rig.buffer.sample(16, beta=0.6)
        out.extend(batch[key] for key in sorted(batch))
        rig.buffer.update_priorities(batch["indices"], rng.exponential(2.0, 16))
        out.append(rig.buffer.sampler.tree.leaves())
    return out


@pytest.mark.parametrize("strategy", ["future", "final", "trace_future"])
def test_save_load_round_trip_continues_identically(tmp_path, strategy):
    """Saved mid-episode: the copy relabels, adds and updates exactly as the original does."""
    episodes = fixed_episodes([[9, 3, 14], [5, 2], [20]], 200)
    original = Rig(episodes, 37, 2, 3, 1, 2, seed=12, goal_selection_strategy=strategy, n_sampled_goal=2)
    copy = Rig(episodes, 37, 2, 3, 1, 2, seed=12, goal_selection_strategy=strategy, n_sampled_goal=2)
    continuation(original, 60, seed=1)
    path = tmp_path / "seq_her.npz"
    original.buffer.save(path)
    copy.buffer = SequenceHerReplayBuffer.load(path, compute_reward=distance_reward)
    copy.builder, copy.fed = original.builder, original.fed  # one builder feeds both from here on
    copy.emitted, copy.stored_until = dict(original.emitted), dict(original.stored_until)
    assert repr(copy.buffer) == repr(original.buffer)
    first, second = [], []
    for _ in range(40):
        s = original.reference.vector_step(original.fed)
        out = original.builder.step(s["obs"], s["action"], s["reward"], s["terminated"], s["truncated"], s["state"],
                                    extras=s["extras"])
        original.fed += 1
        if out is not None:
            np.testing.assert_array_equal(original.buffer.add_sequences(out), copy.buffer.add_sequences(out))
        for rig, results in ((original, first), (copy, second)):
            batch = rig.buffer.sample(16, beta=0.6)
            results.extend(batch[key] for key in sorted(batch))
            rig.buffer.update_priorities(batch["indices"], np.arange(1.0, 17.0))
    for a, b in zip(first, second):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(original.buffer.sampler.tree.leaves(), copy.buffer.sampler.tree.leaves())


def test_load_needs_compute_reward_and_refuses_other_files(tmp_path):
    rig = Rig(fixed_episodes([[4]], 20), 30, 1, 2, 1, 2)
    rig.feed(10)
    path = tmp_path / "b.npz"
    rig.buffer.save(path)
    with pytest.raises(TypeError, match="compute_reward"):
        SequenceHerReplayBuffer.load(path, compute_reward=None)
    # saved without compute_terminated: loading with one would change relabelled targets
    with pytest.raises(ValueError, match="saved from a buffer without compute_terminated"):
        SequenceHerReplayBuffer.load(path, compute_reward=distance_reward, compute_terminated=distance_terminated)
    with pytest.raises(ValueError, match="holds a SequenceHerReplayBuffer"):
        SequenceReplayBuffer.load(path)
    with np.load(path, allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    arrays["her.goal_table"] = arrays["her.goal_table"] + 10**9
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(ValueError, match="out of range"):
        SequenceHerReplayBuffer.load(tmp_path / "bad.npz", compute_reward=distance_reward)
    del arrays["her.episode_key"]
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(ValueError, match="missing the 'her.episode_key' array"):
        SequenceHerReplayBuffer.load(tmp_path / "bad.npz", compute_reward=distance_reward)


def test_as_dataset_yields_what_sample_would(tmp_path):
    rig = Rig(fixed_episodes([[6, 3], [4]], 40), 50, 2, 3, 1, 2, seed=13)
    rig.feed(30)
    rig.buffer.save(tmp_path / "b.npz")
    copy = SequenceHerReplayBuffer.load(tmp_path / "b.npz", compute_reward=distance_reward)
    assert_dataset_matches_sample(rig.buffer, copy, 8, beta=0.5)


# =====================================================================================================
# SequenceBuilder extras
# =====================================================================================================


def test_builder_extras_follow_the_observation_rows():
    """Row t holds the extras given with o_t, row T those of the final observation, padding zeros."""
    episodes = [[GoalEpisode(0, 0, 3, "terminated"), GoalEpisode(0, 1, 9, "truncated")]]
    reference = ReferenceSequenceHer(episodes, 1, 2, 1, 2)
    builder = SequenceBuilder(1, 1, 2, 1, 2)  # no recurrent state here
    windows = []
    for step in range(4):
        s = reference.vector_step(step)
        out = builder.step(s["obs"], s["action"], s["reward"], s["terminated"], s["truncated"], extras=s["extras"])
        if out is not None:
            windows.extend((int(out["start"][w]), out["achieved_goal"][w]) for w in range(out["env"].shape[0]))
    assert [start for start, _ in windows] == [-1, 1]
    for start, achieved in windows:
        np.testing.assert_array_equal(achieved, reference.rows(0, 0, start)["achieved_goal"])
    np.testing.assert_array_equal(windows[1][1][2], [0, 0, 3.5])  # row T: the final observation's achieved goal


@pytest.mark.parametrize("first, later, error, pattern", [
    ({"achieved_goal": np.zeros((2, 3))}, {"achieved_goal": np.zeros((2, 4))}, ValueError, "extras changed"),
    ({"achieved_goal": np.zeros((2, 3))}, None, ValueError, "extras changed"),
    ({"achieved_goal": np.zeros((3, 3))}, None, ValueError, r"extras\['achieved_goal'\] must have a leading axis"),
    ({"mask": np.zeros((2, 3))}, None, ValueError, "extras name 'mask'"),
    ({"state_x": np.zeros((2, 3))}, None, ValueError, "state_"),
    ([np.zeros((2, 3))], None, TypeError, "extras must be a dict"),
])
def test_builder_extras_validation(first, later, error, pattern):
    builder = SequenceBuilder(2, 1, 2, 1, 2)  # no recurrent state here
    args = (np.zeros((2, 4)), np.zeros(2, np.int64), np.zeros(2), np.zeros(2, bool), np.zeros(2, bool))
    with pytest.raises(error, match=pattern):
        builder.step(*args, extras=first)
        builder.step(*args, extras=later)


# =====================================================================================================
# Validation
# =====================================================================================================


@pytest.mark.parametrize("kwargs, error, pattern", [
    (dict(n_step=0), ValueError, "n_step must be >= 1 for SequenceHerReplayBuffer"),
    (dict(goal_selection_strategy="episode"), ValueError,
     "one of 'trace_future', 'future', 'final'.*'episode' and 'random' are not offered"),
    (dict(compute_terminated="ended"), TypeError, "compute_terminated must be callable"),
    (dict(goal_selection_strategy="futur"), ValueError, "got 'futur'"),
    (dict(n_sampled_goal=-1), ValueError, "n_sampled_goal"),
    (dict(n_sampled_goal=1.5), TypeError, "n_sampled_goal"),
    (dict(compute_reward="reward"), TypeError, "compute_reward must be callable"),
    (dict(goal_spec=((3,), "U4")), ValueError, "dtype"),
    (dict(capacity=0), ValueError, "capacity"),
    (dict(alpha=-1.0), ValueError, "alpha"),
])
def test_constructor_validation(kwargs, error, pattern):
    arguments = dict(capacity=10, observation_spec=((3,), "float32"), goal_spec=((3,), "float32"),
                     compute_reward=distance_reward, burn_in=1, trace_length=2, n_step=1)
    arguments.update(kwargs)
    with pytest.raises(error, match=pattern):
        SequenceHerReplayBuffer(**arguments)


def test_windows_without_achieved_goal_explain_the_fix():
    buffer = SequenceHerReplayBuffer(10, ((3,), "float32"), ((3,), "float32"), compute_reward=distance_reward,
                                     burn_in=1, trace_length=2, n_step=1)
    builder = SequenceBuilder(1, 1, 2, 1, 2)  # no recurrent state here
    out = None
    for t in range(4):
        out = builder.step(np.zeros((1, 6)), [0], [0.0], [t == 2], [False]) or out
    with pytest.raises(ValueError, match=r"extras=\{'achieved_goal'"):
        buffer.add_sequences(out)
    with pytest.raises(ValueError, match="empty SequenceHerReplayBuffer"):
        buffer.sample(4)


@pytest.mark.parametrize("returned, error, pattern", [
    (lambda a, d, i: np.zeros(3), ValueError, "returned shape"),
    (lambda a, d, i: np.full(a.shape[0], np.nan), ValueError, "finite"),
    (lambda a, d, i: np.array(["x"] * a.shape[0]), TypeError, "real numbers"),
])
def test_compute_reward_contract_is_checked(returned, error, pattern):
    rig = Rig(fixed_episodes([[4]], 20), 30, 1, 2, 1, 2, n_sampled_goal=10**6, compute_reward=returned)
    rig.feed(10)
    with pytest.raises(error, match=pattern):
        rig.buffer.sample(8)


def test_flatten_obs():
    obs = {"observation": np.arange(6.0).reshape(2, 3), "achieved_goal": np.ones((2, 2)),
           "desired_goal": np.full((2, 1, 2), 7.0)}
    np.testing.assert_array_equal(SequenceHerReplayBuffer.flatten_obs(obs), [[0, 1, 2, 7, 7], [3, 4, 5, 7, 7]])
    with pytest.raises(ValueError, match="'observation' and 'desired_goal'"):
        SequenceHerReplayBuffer.flatten_obs({"observation": np.zeros((2, 3))})
    with pytest.raises(ValueError, match="same leading batch axis"):
        SequenceHerReplayBuffer.flatten_obs({"observation": np.zeros((2, 3)), "desired_goal": np.zeros((3, 2))})


def test_batch_spec_and_nbytes():
    rig = Rig(fixed_episodes([[5]], 20), 30, 1, 2, 1, 2)
    rig.feed(12)
    batch = rig.buffer.sample(5)
    spec = rig.buffer.batch_spec(5)
    assert set(spec) == set(batch)
    for key, (shape, dtype) in spec.items():
        assert batch[key].shape == shape and batch[key].dtype == dtype, key
    parent = SequenceReplayBuffer(30, {"obs": ((6,), "float32"), "action": ((), "int64"),
                                       "achieved_goal": ((3,), "float32")}, STATE, burn_in=1, trace_length=2, n_step=1,
                                  period=2)
    assert rig.buffer.nbytes == parent.nbytes + 2 * 30 * 8 + 3 * parent.max_sequences * 8
