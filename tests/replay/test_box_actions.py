"""Continuous (Box) actions at the data level: float vector actions through SequenceBuilder and
SequenceReplayBuffer (ring wrap-around and episode ends included) against the brute-force reference,
EpisodeTracker's vector prev_action, and the shared-memory record of a vector action."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference_sequences import RecordedEpisode, episode_ids, vector_steps, window_rows

from r2d2kit.replay.sequence import SequenceReplayBuffer
from r2d2kit.replay.sequence_builder import SequenceBuilder
from r2d2kit.runners.episodes import EpisodeTracker
from r2d2kit.runners.shm import RecordRing, window_layout

ROW_KEYS = ("obs", "action", "reward", "prev_action", "prev_reward", "terminated", "truncated", "mask", "obs_mask")
STATE = {"state_h": ((2,), "float32"), "state_c": ((2,), "float32")}


def random_episode(rng: np.random.Generator, env: int, j: int, transitions: int, truncated: bool,
                   action_size: int) -> RecordedEpisode:
    """obs ``[env, j, t]`` (so a row names where it came from); arbitrary float actions and rewards."""
    T = transitions
    times = np.arange(T + 1)
    obs = np.stack([np.full(T + 1, env), np.full(T + 1, j), times], axis=1).astype(np.float32)
    action = rng.uniform(-2.0, 2.0, (T, action_size)).astype(np.float32)
    reward = rng.normal(size=T).astype(np.float32)
    ends = np.zeros(T, bool)
    ends[-1] = True
    state_h = rng.normal(size=(T + 1, 2)).astype(np.float32)
    state_c = rng.normal(size=(T + 1, 2)).astype(np.float32)
    return RecordedEpisode(obs, action, reward, ends & ~truncated, ends & truncated, (state_h, state_c))


@st.composite
def box_streams(draw):
    trace_length = draw(st.integers(1, 4))
    layout = {"burn_in": draw(st.integers(0, 3)), "trace_length": trace_length, "n_step": draw(st.integers(0, 3)),
              "period": draw(st.integers(1, trace_length))}
    num_envs = draw(st.integers(1, 3))
    capacity = draw(st.integers(layout["burn_in"] + trace_length + layout["n_step"] + 1, 40))
    return layout, num_envs, capacity, draw(st.integers(1, 3)), draw(st.integers(0, 2**31 - 1))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(box_streams())
def test_float_vector_actions_come_back_from_the_replay_exactly_across_ring_wraps(stream) -> None:
    """Every sampled window equals the reference's rows of its episode (float actions and prev_actions
    bit for bit, padding zero, state of its first real row), before and after the ring wraps."""
    layout, num_envs, capacity, action_size, seed = stream
    rng = np.random.default_rng(seed)
    length = layout["burn_in"] + layout["trace_length"] + layout["n_step"]
    episodes = [[random_episode(rng, env, j, int(rng.integers(1, 9)), bool(rng.integers(2)), action_size)
                 for j in range(8)] for env in range(num_envs)]
    num_steps = min(sum(e.span for e in mine) for mine in episodes)
    ids = episode_ids(episodes)
    by_id = {ids[env][j]: episodes[env][j] for env in range(num_envs) for j in range(len(episodes[env]))}
    builder = SequenceBuilder(num_envs, **layout, state_names=tuple(STATE))
    replay = SequenceReplayBuffer(capacity, {"obs": ((3,), "float32"), "action": ((action_size,), "float32")}, STATE,
                                  **layout, sampler="uniform", seed=seed)
    checked = 0
    for step in vector_steps(episodes, num_steps, ignored_action=np.float32(9.5)):
        windows = builder.step(step["obs"], step["action"], step["reward"], step["terminated"], step["truncated"],
                               step["state"])
        if windows is None:
            continue
        assert windows["action"].dtype == np.float32 and windows["prev_action"].dtype == np.float32
        assert windows["action"].shape[1:] == (length, action_size)
        replay.add_sequences(windows)
        if len(replay) == 0:
            continue
        batch = replay.sample(8)
        for b in range(8):
            first = int(np.argmax(batch["obs_mask"][b]))
            env, j, t = (int(v) for v in batch["obs"][b, first])
            start = t - first
            episode = episodes[env][j]
            want = window_rows(episode, start, length)
            for key in ROW_KEYS:
                np.testing.assert_array_equal(batch[key][b], want[key], err_msg=f"{key} of env {env} episode {j}")
            assert by_id[ids[env][j]] is episode
            for part, key in enumerate(STATE):
                np.testing.assert_array_equal(batch[key][b], episode.state[part][max(start, 0)])
            checked += 1
    assert checked > 0
    assert replay.rows_written > capacity or num_steps < capacity  # the ring wrapped whenever it could


def test_episode_tracker_keeps_a_float_vector_prev_action_zeroed_on_reset_steps() -> None:
    tracker = EpisodeTracker(2, action_shape=(2,), action_dtype=np.float32)
    assert tracker.prev_action.shape == (2, 2) and tracker.prev_action.dtype == np.float32
    actions = [np.array([[0.5, -0.25], [1.5, 2.0]], np.float32), np.array([[0.1, 0.2], [0.3, 0.4]], np.float32),
               np.array([[7.0, 7.0], [-1.0, -2.0]], np.float32)]
    done = [(False, False), (True, False), (False, False)]  # env 0 terminates at step 2; step 3 is its reset step
    seen = []
    for action, (env0, env1) in zip(actions, done, strict=True):
        tracker.record(action, np.ones(2), np.array([env0, env1]), np.zeros(2, bool))
        seen.append(tracker.prev_action.tolist())
    assert seen[0] == [[0.5, -0.25], [1.5, 2.0]]
    np.testing.assert_allclose(seen[1], [[0.1, 0.2], [0.3, 0.4]])
    assert seen[2] == [[0.0, 0.0], [-1.0, -2.0]]  # the reset step's action is ignored: zeros for the new episode


def test_episode_tracker_default_is_r2d2s_int32_index() -> None:
    tracker = EpisodeTracker(3)
    tracker.record(np.array([2, 0, 1]), np.zeros(3), np.zeros(3, bool), np.zeros(3, bool))
    assert tracker.prev_action.dtype == np.int32 and tracker.prev_action.tolist() == [2, 0, 1]


def test_window_layout_carries_a_float_vector_action_through_the_ring() -> None:
    layout = window_layout(4, (3,), np.float32, np.float32, STATE, action_shape=(2,))
    spec = layout.to_spec()
    assert spec["action"] == ((4, 2), np.dtype(np.float32).str) and spec["prev_action"] == spec["action"]
    assert window_layout(4, (3,), np.float32).to_spec()["action"] == ((4,), np.dtype(np.int64).str)  # R2D2's
    action = np.arange(8, dtype=np.float32).reshape(4, 2) / 3
    with RecordRing.create(layout, 2) as ring:
        record = {name: np.zeros(shape, dtype) for name, shape, dtype, _ in layout.fields}
        assert ring.put({**record, "action": action, "prev_action": action[::-1]})
        (received,) = ring.drain()
    np.testing.assert_array_equal(received["action"], action)
    np.testing.assert_array_equal(received["prev_action"], action[::-1])
