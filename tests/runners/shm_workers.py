"""Child-process bodies for the shared-memory tests (importable by spawned processes)."""

import time

import numpy as np

from r2d2kit.runners.shm import RecordRing, WeightBroadcast


def hammer_weights(name: str, size: int, stop, seconds: float) -> None:
    """Publish version-stamped vectors until ``stop``: element i of version v is i + v.

    The writer publishes in bursts of four back to back (faster than a reader copies: readers skip
    versions and their copies overlap writes), then rests 0-1 ms at random, as a learner rests between
    updates: a writer that never rests can starve a seqlock reader for as long as it likes on a loaded
    machine, and one that rests after every publish lets a quick reader see every version unraced.
    """
    broadcast = WeightBroadcast.attach(name, size)
    base = np.arange(size, dtype=np.float32)
    rng = np.random.default_rng(0)
    deadline = time.monotonic() + seconds
    version = 0
    while not stop.is_set() and time.monotonic() < deadline:
        version += 1
        broadcast.publish(base + version)
        if version % 4 == 0:
            time.sleep(rng.uniform(0.0, 1e-3))
    broadcast.close()


def produce_records(name: str, layout, capacity: int, count: int) -> None:
    """Write ``count`` records whose fields all encode their sequence number."""
    ring = RecordRing.attach(name, layout, capacity)
    for number in range(count):
        record = {field: np.full(shape, number % 100, dtype=dtype) for field, shape, dtype, _ in layout.fields}
        record["start"] = np.int64(number)
        if not ring.put(record, timeout=30):
            break
    ring.close()


class HangingCueMemory:
    """A CueMemory env whose ``step`` never returns: an actor that stops delivering while alive."""

    def __new__(cls, delay: int = 3):
        from r2d2kit.envs.memory import CueMemoryEnv

        class Hanging(CueMemoryEnv):
            def step(self, action):
                time.sleep(3600)

        return Hanging(delay=delay)
