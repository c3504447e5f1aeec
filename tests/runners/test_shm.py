"""Shared memory: the weight broadcast is never torn, rings lose nothing and apply back-pressure,
segments are private and always unlinked."""

import multiprocessing as mp
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from r2d2kit.runners import shm
from r2d2kit.runners.shm import PREFIX, RecordLayout, RecordRing, WeightBroadcast, stack_records, window_layout

sys.path.insert(0, str(Path(__file__).parent))
import shm_workers  # noqa: E402

LSTM_STATE = {"state_h": ((4,), np.float32), "state_c": ((4,), np.float32)}  # an LSTM of 4 units

SPAWN = mp.get_context("spawn")


def our_segments():
    return sorted(name for name in os.listdir("/dev/shm") if name.startswith(PREFIX))


def test_weight_broadcast_is_never_torn_under_concurrent_writes():
    size = 250_000  # 1 MB: a copy takes long enough for the writer to race it
    base = np.arange(size, dtype=np.float32)
    with WeightBroadcast.create(size) as broadcast:
        assert stat.S_IMODE(os.stat(f"/dev/shm/{broadcast.name}").st_mode) == 0o600
        stop = SPAWN.Event()
        writer = SPAWN.Process(target=shm_workers.hammer_weights, args=(broadcast.name, size, stop, 120.0))
        writer.start()
        reads, last_version = 0, -1
        while reads < 100 and writer.is_alive():
            got = broadcast.read(newer_than=last_version, timeout=60)
            if got is None:
                continue
            version, vector = got
            offset = vector - base
            assert np.all(offset == offset[0]), f"torn read at version {version}"
            assert version >= last_version
            last_version, reads = version, reads + 1
        stop.set()
        writer.join(timeout=60)
        assert writer.exitcode == 0
        # the writer published all along: every read found a newer version (a fast reader may see each one)
        assert reads == 100 and broadcast.version >= reads
    assert broadcast.name not in our_segments()  # (other runs on the machine may hold their own segments)


def test_broadcast_refuses_a_wrong_size_and_reports_no_news():
    with WeightBroadcast.create(4) as broadcast:
        assert broadcast.read() is None  # nothing published yet
        assert broadcast.publish(np.ones(4)) == 1
        assert broadcast.read(newer_than=1) is None
        version, vector = broadcast.read(newer_than=0)
        assert version == 1 and vector.tolist() == [1, 1, 1, 1]
        with pytest.raises(ValueError, match=r"shape \(4,\)"):
            broadcast.publish(np.ones(5))


def test_ring_delivers_every_record_in_order_with_back_pressure():
    layout = window_layout(length=5, obs_shape=(3,), obs_dtype=np.uint8, state=LSTM_STATE)
    count, capacity = 150, 7
    with RecordRing.create(layout, capacity) as ring:
        producer = SPAWN.Process(target=shm_workers.produce_records, args=(ring.name, layout, capacity, count))
        producer.start()
        received = []
        while len(received) < count and producer.exitcode in (None, 0):
            assert len(ring) <= capacity
            drained = ring.drain(limit=3)
            received.extend(drained)
            if not drained:
                time.sleep(0.001)  # don't starve the producer on a small machine
        producer.join(timeout=30)
        assert producer.exitcode == 0
        assert [int(record["start"]) for record in received] == list(range(count))
        for number, record in enumerate(received):
            assert np.all(record["obs"] == number % 100) and record["obs"].shape == (5, 3)
        batch = stack_records(received[:4])
        assert batch["obs"].shape == (4, 5, 3) and batch["state_h"].shape == (4, 4)
    assert ring.name not in our_segments()


@pytest.mark.parametrize("obs_shape, obs_dtype", [((10, 10, 4), np.bool_), ((7, 7, 3), np.uint8)],
                         ids=["minatar-bool-channels", "minigrid-uint8-indices"])
def test_image_observations_cross_the_ring_unchanged_in_their_dtype(obs_shape, obs_dtype):
    """What the actor processes send: a window of bool channels (MinAtar) or uint8 indices (MiniGrid), one
    byte a cell in the record, read back bit for bit."""
    layout = window_layout(length=6, obs_shape=obs_shape, obs_dtype=obs_dtype, state=LSTM_STATE)
    assert layout.to_spec()["obs"] == ((6,) + obs_shape, np.dtype(obs_dtype).str)
    rng = np.random.default_rng(0)
    windows = [rng.integers(0, 2 if obs_dtype is np.bool_ else 11, (6,) + obs_shape).astype(obs_dtype)
               for _ in range(3)]
    with RecordRing.create(layout, 4) as ring:
        for start, obs in enumerate(windows):
            record = {name: np.zeros(shape, dtype) for name, shape, dtype, _ in layout.fields}
            assert ring.put({**record, "obs": obs, "start": start})
        received = ring.drain()
    assert [record["obs"].dtype for record in received] == [np.dtype(obs_dtype)] * 3
    for record, obs in zip(received, windows, strict=True):
        np.testing.assert_array_equal(record["obs"], obs)


def test_closed_ring_stops_a_waiting_producer():
    layout = RecordLayout.from_spec({"x": ((2,), np.float32)})
    with RecordRing.create(layout, 1) as ring:
        assert ring.put({"x": [1, 2]})
        assert not ring.put({"x": [3, 4]}, timeout=0.05)  # full: times out instead of dropping
        ring.close_for_writing()
        assert not ring.put({"x": [3, 4]})
        assert [r["x"].tolist() for r in ring.drain()] == [[1.0, 2.0]]


def test_a_torn_record_is_skipped_and_counted_never_delivered():
    """A payload that changed after its checksum was taken is dropped and counted."""
    layout = RecordLayout.from_spec({"x": ((4,), np.float32), "n": ((), np.int64)})
    with RecordRing.create(layout, 4) as ring:
        for n in range(3):
            assert ring.put({"x": np.full(4, n), "n": n})
        ring._slots[1, -1] ^= 0x40  # a payload byte of record 1 changed after its checksum was taken
        assert [int(r["n"]) for r in ring.drain()] == [0, 2] and ring.torn == 1
        assert ring.put({"x": np.full(4, 3), "n": 3}) and [int(r["n"]) for r in ring.drain()] == [3]


def test_a_record_not_yet_visible_is_retried_then_delivered_in_order(monkeypatch):
    """The writer publishes by bumping a counter after the payload; where memory order lets the reader see
    the counter first, the slot still holds the previous lap's stamp. The reader waits for it, in order;
    a stamp that never arrives (a corrupt slot) is skipped after STALE_RECORD_SECONDS."""
    layout = RecordLayout.from_spec({"x": ((4,), np.float32), "n": ((), np.int64)})
    with RecordRing.create(layout, 2) as ring:
        for n in range(2):
            assert ring.put({"x": np.full(4, n), "n": n})
        assert [int(r["n"]) for r in ring.drain()] == [0, 1]
        for n in (2, 3):
            assert ring.put({"x": np.full(4, n), "n": n})
        stamp = ring._slots[0, :16].view(np.int64)
        stamp[0] = 1  # record 2's sequence number not visible yet: slot 0 shows the last lap's
        assert ring.drain() == [] and ring.torn == 0 and len(ring) == 2  # nothing lost, nothing out of order
        stamp[0] = 3  # now visible
        assert [int(r["n"]) for r in ring.drain()] == [2, 3] and ring.torn == 0
        assert ring.put({"x": np.full(4, 4), "n": 4}) and ring.put({"x": np.full(4, 5), "n": 5})
        ring._slots[0, :16].view(np.int64)[0] = 99  # a stamp that will never be right
        assert ring.drain() == [] and ring.torn == 0
        monkeypatch.setattr(shm, "STALE_RECORD_SECONDS", 0.0)
        assert [int(r["n"]) for r in ring.drain()] == [5] and ring.torn == 1


def test_a_ring_whose_counters_overrun_its_slots_is_refused_not_walked():
    layout = RecordLayout.from_spec({"n": ((), np.int64)})
    with RecordRing.create(layout, 4) as ring:
        assert ring.put({"n": 0})
        ring._header[0] = 10**12  # a corrupt written counter
        with pytest.raises(RuntimeError, match=r"counters \(written 1000000000000, read 0\) do not fit its 4 slots"):
            ring.drain()
        ring._header[0] = 1
        assert [int(r["n"]) for r in ring.drain()] == [0]


def test_segments_are_unlinked_even_when_an_error_escapes():
    names = []
    with pytest.raises(RuntimeError):
        with WeightBroadcast.create(10) as broadcast:
            names.append(broadcast.name)
            assert names[0] in our_segments()
            raise RuntimeError("boom")
    assert names[0] not in our_segments()


KILLED_CREATOR = """
import os, signal, sys
from r2d2kit.runners.shm import WeightBroadcast
broadcast = WeightBroadcast.create(16)
print(broadcast.name, flush=True)
os.killpg(0, signal.SIGKILL)  # this process and its resource tracker: nothing can unlink on the way out
"""


def test_a_segment_left_by_a_killed_creator_and_tracker_is_reclaimed_and_a_live_ones_is_kept():
    child = subprocess.run([sys.executable, "-c", KILLED_CREATOR], capture_output=True, text=True, timeout=120,
                           start_new_session=True)
    assert child.returncode == -9, child.stderr[-2000:]
    orphan = child.stdout.split()[0]
    assert orphan in our_segments()  # the leak this guards against
    with WeightBroadcast.create(16) as live:  # creating a segment reclaims the orphan first
        assert orphan not in our_segments()
        with WeightBroadcast.create(16) as other:  # and leaves the live creator's (this process's) alone
            assert live.name in our_segments() and other.name in our_segments()
