"""SequenceReplayBuffer.preceding_rows and episode_returns against a brute-force record of every step.

Observations encode (env, episode, time), so each returned row names where it came from; the record
of all rewards gives the discounted return of every step by a plain backward sum.
"""

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from r2d2kit.replay.sequence import SequenceReplayBuffer
from r2d2kit.replay.sequence_builder import SequenceBuilder


def fill(num_envs, burn_in, trace, n_step, period, capacity, steps, seed, max_length):
    """Random episodes through builder -> buffer; returns the buffer and {(episode id): (rewards, ended)}."""
    rng = np.random.default_rng(seed)
    builder = SequenceBuilder(num_envs, burn_in, trace, n_step, period, state_names=("state_h", "state_c"))
    buffer = SequenceReplayBuffer(capacity, {"obs": ((3,), "float32"), "action": ((), "int64")},
                                  {"state_h": ((2,), "float32"), "state_c": ((2,), "float32")},
                                  burn_in=burn_in, trace_length=trace, n_step=n_step, period=period, seed=seed)
    lengths = rng.integers(1, max_length + 1, size=(num_envs, 100_000))
    episode_index = np.zeros(num_envs, dtype=int)
    time = np.zeros(num_envs, dtype=int)
    episode_ids = np.arange(num_envs)
    next_id = num_envs
    record = {int(e): [] for e in episode_ids}  # episode id -> rewards of its transitions, in order
    ended = set()
    for _ in range(steps):
        obs = np.stack([np.arange(num_envs), episode_ids, time], axis=1).astype(np.float32)
        length = lengths[np.arange(num_envs), episode_index]
        done = time == length - 1
        truncated = done & (rng.random(num_envs) < 0.5)
        terminated = done & ~truncated
        reward = rng.integers(0, 5, num_envs).astype(np.float32)
        for env in np.flatnonzero(time < length):
            record[int(episode_ids[env])].append(float(reward[env]))
        ended.update(int(e) for e in episode_ids[done])  # its last transition is this step's
        out = builder.step(obs, rng.integers(0, 3, num_envs), reward, terminated, truncated,
                           (obs[:, :2], obs[:, 1:]))
        final = time == length
        time = np.where(final, 0, time + 1)
        for env in np.flatnonzero(final):
            episode_index[env] += 1
            episode_ids[env] = next_id
            record[next_id] = []
            next_id += 1
        if out is not None:
            buffer.add_sequences(out)
    return buffer, record, ended


def live_slots(buffer):
    return np.flatnonzero(buffer._sampler.alive)


def first_time(buffer, slot):
    rows = buffer._slots[slot]
    present = rows != buffer.capacity
    return buffer._rows["obs"][rows[present][0]]


def check_preceding(buffer, count):
    slots = live_slots(buffer)
    context = buffer.preceding_rows(slots, count)
    assert context["obs"].shape == (slots.size, count, 3)
    oldest_kept = buffer.rows_written - buffer.capacity
    for i, slot in enumerate(slots):
        env, episode, t0 = first_time(buffer, slot)
        known = context["obs_mask"][i]
        rows = context["obs"][i][known]
        # right-aligned and contiguous: the known rows are the last ones
        assert not known.any() or known[np.argmax(known):].all()
        expected_times = np.arange(t0 - rows.shape[0], t0)
        np.testing.assert_array_equal(rows[:, 0], env)
        np.testing.assert_array_equal(rows[:, 1], episode)
        np.testing.assert_array_equal(rows[:, 2], expected_times)
        reaches_start = rows.shape[0] == t0
        assert context["episode_start"][i] == reaches_start
        if not reaches_start and rows.shape[0] < count:
            assert oldest_kept > 0  # the walk stopped early only because the ring overwrote the rows before
        np.testing.assert_array_equal(context["obs"][i][~known], 0.0)


def check_returns(buffer, record, finished, gamma, horizon):
    slots = live_slots(buffer)
    returns, known = buffer.episode_returns(slots, gamma, horizon)
    windows_checked = 0
    for i, slot in enumerate(slots):
        rows = buffer._slots[slot]
        for j, ring in enumerate(rows):
            if ring == buffer.capacity or not buffer._rows["mask"][ring]:
                assert not known[i, j]
                continue
            env, episode, t = buffer._rows["obs"][ring]
            rewards = record[int(episode)]
            if int(episode) not in finished:
                assert not known[i, j]
                continue
            if known[i, j]:
                tail = np.asarray(rewards[int(t):], dtype=np.float64)
                expected = float(np.sum(tail * gamma ** np.arange(tail.size)))
                assert returns[i, j] == pytest.approx(expected, rel=1e-12, abs=1e-12)
                windows_checked += 1
            else:
                # unknown only when the end lies beyond the horizon, the ring lost rows on the way, or the
                # episode's last transition is still in the builder (not yet delivered in a window)
                last_present = rows[rows != buffer.capacity][-1]
                t_last = buffer._rows["obs"][last_present][2]
                transitions = len(rewards)
                beyond = transitions - 1 - t_last
                stored = buffer._rows["obs"][:min(buffer.rows_written, buffer.capacity)]
                delivered = np.any((stored[:, 1] == episode) & (stored[:, 2] == transitions - 1))
                assert beyond > horizon or buffer.rows_written > buffer.capacity or not delivered
    return windows_checked


@settings(max_examples=150, deadline=None)
@example(num_envs=3, burn_in=0, trace=4, n_step=3, capacity=20, steps=17, count=0, horizon=0, seed=0)  # a row
# written again after the ring lost its first copy has lost its predecessor too
@example(num_envs=1, burn_in=0, trace=1, n_step=1, capacity=20, steps=199, count=0, horizon=0, seed=1)  # an
# episode whose last transition is stored, before its final observation
@example(num_envs=3, burn_in=0, trace=4, n_step=1, capacity=54, steps=20, count=0, horizon=1, seed=1)  # an
# episode that ended in the env, its last transition still in the builder
@example(num_envs=3, burn_in=2, trace=2, n_step=3, capacity=20, steps=52, count=1, horizon=0, seed=949)  # a
# shared row that this window's own new rows push out of the ring is written again, not reused
@given(num_envs=st.integers(1, 3), burn_in=st.integers(0, 3), trace=st.integers(1, 5), n_step=st.integers(1, 3),
       capacity=st.integers(20, 120), steps=st.integers(5, 200), count=st.integers(0, 25),
       horizon=st.integers(0, 40), seed=st.integers(0, 2**16))
def test_context_and_returns_match_the_record_across_ring_wraps(num_envs, burn_in, trace, n_step, capacity, steps,
                                                                count, horizon, seed):
    period = max(1, trace // 2)
    buffer, record, finished = fill(num_envs, burn_in, trace, n_step, period, capacity, steps, seed, max_length=30)
    if not len(buffer):
        return
    check_preceding(buffer, count)
    check_returns(buffer, record, finished, gamma=0.9, horizon=horizon)


def test_returns_of_a_hand_checked_episode():
    """One env, one episode of 4 transitions with rewards 1, 2, 3, 4, gamma 0.5, then a second episode."""
    builder = SequenceBuilder(1, 0, 2, 1, 1)  # windows without a recurrent state, as the buffer stores them
    buffer = SequenceReplayBuffer(100, {"obs": ((1,), "float32"), "action": ((), "int64")}, {},
                                  burn_in=0, trace_length=2, n_step=1, period=1, seed=0)
    rewards = [1.0, 2.0, 3.0, 4.0, 0.0, 7.0]
    ends = [False, False, False, True, False, False]
    for t, (reward, end) in enumerate(zip(rewards, ends)):
        out = builder.step(np.array([[t]], np.float32), np.array([0]), np.array([reward], np.float32),
                           np.array([end]), np.array([False]))
        if out is not None:
            buffer.add_sequences(out)
    out = builder.step(np.array([[99]], np.float32), np.array([0]), np.array([0.0], np.float32),
                       np.array([False]), np.array([False]))
    if out is not None:
        buffer.add_sequences(out)
    slots = live_slots(buffer)
    returns, known = buffer.episode_returns(slots, 0.5, horizon=10)
    by_time = {}
    for i, slot in enumerate(slots):
        for j, ring in enumerate(buffer._slots[slot]):
            if known[i, j]:
                by_time[int(buffer._rows["obs"][ring][0])] = returns[i, j]
    # G_3 = 4, G_2 = 3 + 2, G_1 = 2 + 2.5, G_0 = 1 + 2.25; the second episode has not ended
    assert by_time == {0: 3.25, 1: 4.5, 2: 5.0, 3: 4.0}


def test_links_survive_save_and_load(tmp_path):
    buffer, _, _ = fill(2, 2, 4, 1, 2, 60, 150, seed=3, max_length=20)
    buffer.save(tmp_path / "b.npz")
    loaded = SequenceReplayBuffer.load(tmp_path / "b.npz")
    slots = live_slots(buffer)
    for key, value in buffer.preceding_rows(slots, 10).items():
        np.testing.assert_array_equal(loaded.preceding_rows(slots, 10)[key], value)
    for mine, theirs in zip(buffer.episode_returns(slots, 0.9, 30), loaded.episode_returns(slots, 0.9, 30)):
        np.testing.assert_array_equal(mine, theirs)


def test_dead_indices_are_refused_by_name():
    buffer, _, _ = fill(1, 0, 2, 1, 1, 20, 60, seed=1, max_length=10)
    dead = np.flatnonzero(~buffer._sampler.alive)[:1]
    with pytest.raises(ValueError, match="no live window"):
        buffer.preceding_rows(dead, 3)
