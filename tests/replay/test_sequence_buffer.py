"""SequenceReplayBuffer: windows sampled back equal the windows the builder emitted, across ring wraps."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from r2d2kit.replay.sequence import SequenceReplayBuffer, sequence_priorities
from r2d2kit.replay.sequence_builder import SequenceBuilder

ROW_KEYS = ["obs", "action", "reward", "prev_action", "prev_reward", "terminated", "truncated", "mask", "obs_mask"]


def drive(num_envs, burn_in, trace, n_step, period, capacity, steps, seed, check_every=1, memory="pool"):
    """Feed random episodes through builder -> buffer; check every sample against the emitted windows.

    Observations encode (env, episode, time), so a row from another window cannot hide.
    ``memory="pool"``: plain ``sample``, keeping a few earlier batches alive, which must never change;
    ``"out"``: one ``out`` dict reused for every sample, filled with junk bytes before each.
    """
    rng = np.random.default_rng(seed)
    builder = SequenceBuilder(num_envs, burn_in, trace, n_step, period, state_names=("state_h", "state_c"))
    buffer = SequenceReplayBuffer(
        capacity, {"obs": ((3,), "float32"), "action": ((), "int64")},
        {"state_h": ((2,), "float32"), "state_c": ((2,), "float32")},
        burn_in=burn_in, trace_length=trace, n_step=n_step, period=period, seed=seed)
    lengths = rng.integers(1, 3 * (burn_in + trace), size=(num_envs, 10_000))
    episode_index = np.zeros(num_envs, dtype=int)
    time = np.zeros(num_envs, dtype=int)
    episode_ids = np.arange(num_envs)
    next_episode_id = num_envs
    emitted = {}
    sampled = 0
    out_arrays = buffer.sample_buffers(16) if memory == "out" else None
    held = []  # (batch, its copy): batches the caller keeps; reused memory must never overwrite them
    for step in range(steps):
        obs = np.stack([np.arange(num_envs), episode_ids, time], axis=1).astype(np.float32)
        length = lengths[np.arange(num_envs), episode_index]
        done = time == length - 1
        truncated = done & (rng.random(num_envs) < 0.5)
        terminated = done & ~truncated
        state = (obs[:, :2] + 0.5, obs[:, 1:] - 0.5)
        out = builder.step(obs, rng.integers(0, 4, num_envs), rng.random(num_envs), terminated, truncated, state)
        final = time == length  # this step carried the final observation
        time = np.where(final, 0, time + 1)
        for env in np.flatnonzero(final):
            episode_index[env] += 1
            episode_ids[env] = next_episode_id
            next_episode_id += 1
        if out is not None:
            for w, slot in enumerate(buffer.add_sequences(out)):
                emitted[slot] = {key: value[w] for key, value in out.items()}
        if len(buffer) and step % check_every == 0:
            if memory == "out":
                for array in out_arrays.values():
                    array.view(np.uint8)[...] = 0xAB  # every byte must be written again
                batch = buffer.sample(16, out=out_arrays)
                assert batch is out_arrays
            else:
                batch = buffer.sample(16)
            for i, slot in enumerate(batch["indices"]):
                expected = emitted[slot]
                for key in ROW_KEYS + ["state_h", "state_c"]:
                    np.testing.assert_array_equal(batch[key][i], expected[key], err_msg=f"{key} step {step}")
                rows = batch["obs"][i][batch["obs_mask"][i]]
                assert len(set(map(tuple, rows[:, :2]))) == 1, "a window mixes envs or episodes"
                np.testing.assert_array_equal(np.diff(rows[:, 2]), 1)
                sampled += 1
            if memory == "pool" and step % 5 == 0:
                held = held[-2:] + [(batch, {key: value.copy() for key, value in batch.items()})]
            for kept, copy in held:
                for key in copy:
                    np.testing.assert_array_equal(kept[key], copy[key], err_msg=f"a kept batch changed: {key}")
    return buffer, sampled


@pytest.mark.parametrize("memory", ["pool", "out"])
@pytest.mark.parametrize("num_envs,burn_in,trace,n_step,period,capacity", [
    pytest.param(1, 2, 3, 1, 2, 20, id="1 env, tiny ring"),
    pytest.param(3, 4, 8, 2, 4, 97, id="3 envs, R2D2 proportions"),
    pytest.param(2, 0, 5, 0, 5, 33, id="no burn-in, no n-step"),
])
@pytest.mark.slow
def test_sampled_windows_equal_emitted_windows_across_ring_wraps(num_envs, burn_in, trace, n_step, period, capacity,
                                                                 memory):
    buffer, sampled = drive(num_envs, burn_in, trace, n_step, period, capacity, steps=500, seed=7, check_every=2,
                            memory=memory)
    assert buffer._rows_written > 5 * capacity, "the ring must wrap several times"
    assert sampled > 1000 // 2


def test_overlapping_windows_store_each_step_once():
    buffer, _ = drive(2, 4, 8, 2, 4, capacity=100_000, steps=500, seed=1, check_every=50)
    # 2 envs x 500 steps; rows still waiting in the builder are not stored yet
    assert 2 * 500 - 2 * (4 + 8 + 2) <= buffer._rows_written <= 2 * 500


def test_expired_windows_are_never_sampled_and_ignore_updates():
    buffer, _ = drive(2, 2, 4, 1, 2, capacity=30, steps=200, seed=3, check_every=1000)
    dead = np.flatnonzero(~buffer.sampler.alive[:min(buffer._sequences_written, buffer.max_sequences)])
    assert dead.size
    buffer.update_priorities(dead, np.full(dead.size, 5.0))
    np.testing.assert_array_equal(buffer.sampler.tree.get(dead), 0.0)
    batch = buffer.sample(512)
    assert buffer.sampler.alive[batch["indices"]].all()


@pytest.mark.parametrize("name,td,mask,eta,expected", [
    ("max and mean mix", [[1.0, 2.0, 3.0, 100.0]], [[1, 1, 1, 0]], 0.9, 0.9 * 3 + 0.1 * 2),
    ("pure mean", [[1.0, -3.0]], [[1, 1]], 0.0, 2.0),
    ("no valid step", [[4.0, 4.0]], [[0, 0]], 0.9, 0.0),
])
def test_sequence_priorities_closed_form(name, td, mask, eta, expected):
    assert sequence_priorities(np.array(td), np.array(mask, bool), eta)[0] == pytest.approx(expected)


def test_save_load_round_trip_continues_identically(tmp_path):
    """After a round trip, sampling, adding and updating give exactly what the original gives."""
    buffer, _ = drive(3, 2, 4, 1, 2, capacity=40, steps=150, seed=11, check_every=1000)
    path = tmp_path / "seq.npz"
    buffer.save(path)
    copy = type(buffer).load(path)
    assert len(copy) == len(buffer) and copy.steps_stored == buffer.steps_stored
    builder = SequenceBuilder(3, 2, 4, 1, 2, state_names=("state_h", "state_c"))
    rng = np.random.default_rng(5)
    for _step in range(60):
        obs = rng.random((3, 3)).astype(np.float32)
        state = (rng.random((3, 2)).astype(np.float32), rng.random((3, 2)).astype(np.float32))
        out = builder.step(obs, rng.integers(0, 4, 3), rng.random(3), rng.random(3) < 0.1, np.zeros(3, bool), state)
        if out is not None:
            np.testing.assert_array_equal(buffer.add_sequences(out), copy.add_sequences(out))
        a, b = buffer.sample(8), copy.sample(8)
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
        priorities = rng.random(8)
        buffer.update_priorities(a["indices"], priorities)
        copy.update_priorities(b["indices"], priorities)
    np.testing.assert_array_equal(buffer.sampler.tree.leaves(), copy.sampler.tree.leaves())


def test_load_refuses_a_transition_buffer_file(tmp_path):
    from r2d2kit.replay import ReplayBuffer

    path = tmp_path / "plain.npz"
    plain = ReplayBuffer(4, {"x": ((), "float32")})
    plain.add(x=1.0)
    plain.save(path)
    with pytest.raises(ValueError, match="holds a ReplayBuffer"):
        SequenceReplayBuffer.load(path)


def test_batch_spec_matches_sample():
    buffer, _ = drive(2, 2, 4, 1, 2, capacity=50, steps=60, seed=2, check_every=1000)
    batch = buffer.sample(5)
    spec = buffer.batch_spec(5)
    assert set(spec) == set(batch)
    for key, (shape, dtype) in spec.items():
        assert batch[key].shape == shape and batch[key].dtype == dtype, key


def test_zero_initial_state_option_returns_zeros_and_keeps_stored_states():
    buffer, _ = drive(2, 2, 4, 1, 2, capacity=50, steps=60, seed=4, check_every=1000)
    stored = buffer.sample(16)
    assert np.abs(stored["state_h"]).sum() > 0
    buffer.initial_state = "zero"
    zero = buffer.sample(16)
    np.testing.assert_array_equal(zero["state_h"], 0.0)
    np.testing.assert_array_equal(zero["state_c"], 0.0)
    with pytest.raises(ValueError, match="initial_state"):
        SequenceReplayBuffer(10, {"obs": ((1,), "float32"), "action": ((), "int64")}, burn_in=1,
                             trace_length=2, n_step=1, initial_state="random")


def test_as_dataset_yields_batches_with_the_sample_spec():
    buffer, _ = drive(2, 2, 4, 1, 2, capacity=50, steps=60, seed=6, check_every=1000)
    dataset = buffer.as_dataset(4, beta=0.6)
    batch = next(iter(dataset))
    for key, (shape, dtype) in buffer.batch_spec(4).items():
        assert tuple(batch[key].shape) == shape and batch[key].dtype.as_numpy_dtype == dtype, key
    assert np.all(buffer.sampler.alive[batch["indices"].numpy()])


def test_zero_priority_windows_have_no_mass_at_alpha_zero_on_add_and_update():
    """The documented contract (eps = 0: a zero priority is never sampled) holds at alpha = 0 too,
    where 0 ** 0 would be 1, and the same whether the priority came with the window or later."""
    builder = SequenceBuilder(1, 1, 2, 1, 2, state_names=("state_h", "state_c"))
    buffer = SequenceReplayBuffer(50, {"obs": ((1,), "float32"), "action": ((), "int64")},
                                  {"state_h": ((1,), "float32"), "state_c": ((1,), "float32")},
                                  burn_in=1, trace_length=2, n_step=1, period=2, alpha=0.0, eps=0.0, seed=0)
    slots = []
    zeros = np.zeros((1, 1), np.float32)
    for t in range(40):
        out = builder.step(np.full((1, 1), t, np.float32), np.zeros(1, np.int64), np.ones(1), np.zeros(1, bool),
                           np.zeros(1, bool), (zeros, zeros))
        if out is not None:
            count = len(out["obs"])
            given = np.where(np.arange(len(slots), len(slots) + count) % 2 == 0, 0.0, 3.0)
            slots += list(buffer.add_sequences(out, priorities=given))
    slots = np.asarray(slots)
    even = np.arange(slots.size) % 2 == 0  # added with priority 0, the odd ones with 3
    np.testing.assert_array_equal(buffer.sampler.tree.get(slots), np.where(even, 0.0, 1.0))
    buffer.update_priorities(slots, np.where(even, 3.0, 0.0))
    np.testing.assert_array_equal(buffer.sampler.tree.get(slots), np.where(even, 1.0, 0.0))
    assert set(buffer.sample(256)["indices"]) == set(slots[::2])


# =====================================================================================================
# Sample memory: fresh arrays by default, reuse opt-in
# =====================================================================================================


def test_sample_returns_fresh_arrays_unless_given_out():
    buffer, _ = drive(2, 2, 4, 1, 2, capacity=50, steps=60, seed=3, check_every=1000)
    batches = [buffer.sample(8) for _ in range(4)]  # dropped or kept, each batch has memory of its own
    for i, first in enumerate(batches):
        for second in batches[i + 1:]:
            assert not any(np.shares_memory(first[name], second[name]) for name in first)
    out = buffer.sample_buffers(8)
    assert all(buffer.sample(8, out=out)[name] is out[name] for name in out)  # opted in: written in place


@settings(deadline=None, max_examples=40)
@given(program=st.lists(st.sampled_from(["sample", "sample_out", "drop", "add"]), min_size=1, max_size=25),
       batch_size=st.integers(1, 9), seed=st.integers(0, 2**16))
def test_random_sample_hold_drop_programs_match_a_saved_twin(tmp_path_factory, program, batch_size, seed):
    """Default samples, ``out`` samples, drops and adds in any order: each batch equals the twin's fresh
    sample (gathered naively, window by window), and every batch still held keeps its contents."""
    buffer, _ = drive(2, 1, 3, 1, 2, capacity=23, steps=40, seed=seed % 7, check_every=1000)
    path = tmp_path_factory.mktemp("twin") / "twin.npz"
    buffer.save(path)
    twin = SequenceReplayBuffer.load(path)
    builder = SequenceBuilder(2, 1, 3, 1, 2, state_names=("state_h", "state_c"))
    rng = np.random.default_rng(seed)
    out_arrays = buffer.sample_buffers(batch_size)
    held = []
    for op in program:
        if op == "add":
            obs = rng.random((2, 3)).astype(np.float32)
            state = (rng.random((2, 2)).astype(np.float32), rng.random((2, 2)).astype(np.float32))
            windows = builder.step(obs, rng.integers(0, 4, 2), rng.random(2), rng.random(2) < 0.2,
                                   np.zeros(2, bool), state)
            if windows is not None:
                buffer.add_sequences(windows)
                twin.add_sequences(windows)
        elif op == "drop":
            if held:
                del held[int(rng.integers(len(held)))]
        else:
            batch = buffer.sample(batch_size, out=out_arrays if op == "sample_out" else None)
            want = naive_sample(twin, batch_size)
            for key in want:
                np.testing.assert_array_equal(batch[key], want[key], err_msg=key)
            if op == "sample":
                held.append((batch, want))
            del batch
        for kept, want in held:
            for key in want:
                np.testing.assert_array_equal(kept[key], want[key], err_msg=f"a kept batch changed: {key}")


def naive_sample(buffer: SequenceReplayBuffer, batch_size: int) -> dict:
    """What ``sample`` returns, drawn with the buffer's own tree and random stream but gathered window by window."""
    from r2d2kit.kernels import sumtree as tree_kernels

    t = buffer.sampler.tree.arrays
    indices, weights = tree_kernels.sum_tree_sample_weighted(t.sum_tree, t.min_tree, t.level_offsets,
                                                             buffer._rng.random(batch_size), 0.6)
    batch = {}
    for name, array in buffer._rows.items():
        batch[name] = np.stack([np.stack([array[slot] for slot in buffer._slots[i]]) for i in indices])
    batch["obs_mask"] = np.stack([[slot != buffer.capacity for slot in buffer._slots[i]] for i in indices])
    for name, array in buffer._states.items():
        batch[name] = np.stack([array[i] for i in indices])
    batch["indices"], batch["weights"] = indices, weights
    return batch


def test_sample_into_out_with_the_wrong_arrays_names_the_field():
    buffer, _ = drive(2, 2, 4, 1, 2, capacity=50, steps=60, seed=3, check_every=1000)
    with pytest.raises(ValueError, match=r"out\['obs'\] has shape \(4, 7, 3\).*needs shape \(8, 7, 3\)"):
        buffer.sample(8, out=buffer.sample_buffers(4))
    out = buffer.sample_buffers(8)
    out["reward"] = out["reward"].astype(np.float64)
    with pytest.raises(ValueError, match=r"out\['reward'\].*dtype float64.*dtype float32"):
        buffer.sample(8, out=out)
    out = buffer.sample_buffers(8)
    del out["state_c"]
    with pytest.raises(ValueError, match=r"missing fields \['state_c'\]"):
        buffer.sample(8, out=out)
    with pytest.raises(TypeError, match="batch_size must be an integer"):
        buffer.sample_buffers(2.5)


def test_zero_initial_state_is_written_into_reused_memory():
    """``initial_state="zero"``: the state arrays of reused memory are zeroed, not left from an earlier batch."""
    builder = SequenceBuilder(1, 1, 2, 1, 2, state_names=("state_h", "state_c"))
    buffer = SequenceReplayBuffer(30, {"obs": ((1,), "float32"), "action": ((), "int64")},
                                  {"state_h": ((2,), "float32"), "state_c": ((2,), "float32")}, burn_in=1,
                                  trace_length=2, n_step=1, period=2, initial_state="zero", seed=0)
    for t in range(12):
        windows = builder.step(np.full((1, 1), t, np.float32), np.zeros(1, np.int64), np.ones(1),
                               np.zeros(1, bool), np.zeros(1, bool), (np.ones((1, 2), np.float32),) * 2)
        if windows is not None:
            buffer.add_sequences(windows)
    out = buffer.sample_buffers(4)
    out["state_h"][...] = 5.0
    out["state_c"][...] = 5.0
    batch = buffer.sample(4, out=out)
    assert not batch["state_h"].any() and not batch["state_c"].any()
    assert buffer._states["state_h"].any(), "the stored states are kept"


@settings(deadline=None, max_examples=60)
@given(num_envs=st.integers(1, 3), burn_in=st.integers(0, 3), trace=st.integers(1, 4), n_step=st.integers(0, 2),
       period=st.integers(1, 4), capacity=st.integers(4, 30), steps=st.integers(1, 60), batch_size=st.integers(1, 8),
       memory=st.sampled_from(["pool", "out"]), seed=st.integers(0, 2**16))
def test_reused_memory_samples_match_the_reference_windows(num_envs, burn_in, trace, n_step, period, capacity, steps,
                                                           batch_size, memory, seed):
    """Every sample after every vector step, into reused memory, equals ``reference_sequences``' windows.

    Small rings wrap many times; ``"out"`` refills one junk-filled dict each time, ``"pool"`` keeps
    the previous batch alive (it must not change) while the next is gathered.
    """
    from reference_sequences import RecordedEpisode, expected_windows, vector_steps

    period = min(period, trace)
    rng = np.random.default_rng(seed)
    episodes = []
    for env in range(num_envs):
        mine, span = [], 0
        while span <= steps:
            T = int(rng.integers(1, 12))
            t = np.arange(T + 1)
            code = np.stack([np.full(T + 1, env), np.full(T + 1, len(mine)), t], axis=1).astype(np.float32)
            ends = np.zeros(T, bool)
            ends[-1] = True
            truncated = bool(rng.random() < 0.5)
            mine.append(RecordedEpisode(code, (1 + 100 * env + 10 * len(mine) + t[:T]).astype(np.int64),
                                        (t[:T] + 0.5).astype(np.float32), ends & (not truncated), ends & truncated,
                                        (np.concatenate([code, code[:, :1]], axis=1), -code)))
            span += T + 1
        episodes.append(mine)
    reference = {(w.env, w.episode, w.start): w for w in expected_windows(episodes, burn_in, trace, n_step, period)}
    builder = SequenceBuilder(num_envs, burn_in, trace, n_step, period, state_names=("state_h", "state_c"))
    buffer = SequenceReplayBuffer(capacity, {"obs": ((3,), "float32"), "action": ((), "int64")},
                                  {"state_h": ((4,), "float32"), "state_c": ((3,), "float32")}, burn_in=burn_in,
                                  trace_length=trace, n_step=n_step, period=period, seed=seed)
    window_of_slot = {}
    out = buffer.sample_buffers(batch_size)
    kept = None
    for s in vector_steps(episodes, steps):
        windows = builder.step(s["obs"], s["action"], s["reward"], s["terminated"], s["truncated"], s["state"])
        if windows is not None:
            slots = buffer.add_sequences(windows)
            for w, slot in enumerate(slots):
                window_of_slot[int(slot)] = (int(windows["env"][w]), int(windows["episode"][w]),
                                             int(windows["start"][w]))
        if not len(buffer):
            continue
        if memory == "out":
            for array in out.values():
                array.view(np.uint8)[...] = 0xAB
            batch = buffer.sample(batch_size, out=out)
        else:
            batch = buffer.sample(batch_size)
        for b, slot in enumerate(batch["indices"]):
            want = reference[window_of_slot[int(slot)]]
            for key, rows in want.rows.items():
                np.testing.assert_array_equal(batch[key][b], rows.astype(batch[key].dtype), err_msg=key)
            np.testing.assert_array_equal(batch["state_h"][b], want.state[0])
            np.testing.assert_array_equal(batch["state_c"][b], want.state[1])
        if kept is not None:
            for key, value in kept[1].items():
                np.testing.assert_array_equal(kept[0][key], value, err_msg=f"a kept batch changed: {key}")
        if memory == "pool":
            kept = (batch, {key: value.copy() for key, value in batch.items()})
        del batch


def test_windows_of_the_wrong_dtype_or_row_shape_are_refused_by_name():
    """A float action used to be truncated into the int64 field; a wrong observation width was blamed on
    burn_in + trace_length + n_step."""
    builder = SequenceBuilder(1, 0, 2, 1, 1)  # no recurrent state here
    buffer = SequenceReplayBuffer(50, {"obs": ((3,), "float32"), "action": ((), "int64")}, {},
                                  burn_in=0, trace_length=2, n_step=1, period=1, seed=0)
    windows = None
    for t in range(4):
        windows = builder.step(np.full((1, 3), t, np.float32), np.array([1]), np.ones(1, np.float32),
                               np.array([False]), np.array([False])) or windows
    assert windows is not None
    float_actions = dict(windows, action=windows["action"].astype(np.float64) + 0.5)
    with pytest.raises(TypeError, match=r"field 'action' has dtype int64 but got float64"):
        buffer.add_sequences(float_actions)
    wide = dict(windows, obs=np.zeros(windows["obs"].shape[:2] + (4,), np.float32))
    with pytest.raises(ValueError, match=r"windows\['obs'\] rows have shape \(4,\), but the buffer's field 'obs' is "
                                         r"\(3,\)"):
        buffer.add_sequences(wide)
    short = {key: (value[:, :-1] if np.ndim(value) >= 2 and np.shape(value)[1] == 3 else value)
             for key, value in windows.items()}
    with pytest.raises(ValueError, match=r"windows of 3 rows: burn_in \+ trace_length \+ n_step must match"):
        buffer.add_sequences(short)
    assert len(buffer) == 0 and buffer.rows_written == 0
    buffer.add_sequences(windows)
    assert len(buffer) == windows["env"].shape[0]
