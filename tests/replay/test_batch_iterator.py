"""``buffer.batches``: the backend-free iterator of sampled batches (numpy), no TensorFlow imported.

What is checked:
    * it yields exactly the batches ``sample`` calls would, in order (a saved copy of the buffer, same
      random state, sampled side by side), with any sampler, a float or scheduled beta, prefetch or not,
      fresh or reused memory;
    * ``prefetch=0`` samples only in ``next()``, so a batch sees the newest priorities;
    * a training loop adding items and updating priorities while the iterator prefetches sees whole
      items only and leaves a consistent sum tree;
    * reused memory never overwrites a batch still held;
    * an empty buffer is waited for, then named; a sampling error reaches ``next()``; closing stops the
      thread (also while it waits), and the iterator does not keep the buffer alive;
    * bad arguments are named errors.
"""

from __future__ import annotations

import gc
import math
import threading
import time
import weakref

import numpy as np
import pytest
import reference
from dataset_checks import assert_same_batches, samples_of_a_copy

from r2d2kit.replay import LinearSchedule, ReplayBuffer
from r2d2kit.replay.batch_iterator import BatchIterator

FIELDS = {
    "obs": ((3,), "float32"),
    "action": ((), "int64"),
    "reward": ((), "float32"),
    "step": ((), "int32"),
}
SAMPLERS = ["uniform", "proportional", "rank"]


def items(start: int, count: int) -> dict[str, np.ndarray]:
    """``count`` items numbered from ``start``; every field of item ``k`` is derived from ``k``."""
    k = np.arange(start, start + count)  # [n]
    return {"obs": np.stack([k, k + 0.5, -k], axis=1).astype(np.float32), "action": k % 5,
            "reward": k.astype(np.float32), "step": k.astype(np.int32)}


def filled(sampler: str, capacity: int = 64, count: int = 40, seed: int = 0, **kwargs) -> ReplayBuffer:
    buffer = ReplayBuffer(capacity, FIELDS, sampler, seed=seed, **kwargs)
    buffer.add_batch(**items(0, count))
    buffer.update_priorities(np.arange(count), np.random.default_rng(seed + 1).uniform(0.1, 5.0, count))
    return buffer


def batch_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "r2d2kit-batches"]


@pytest.mark.parametrize("sampler", SAMPLERS)
@pytest.mark.parametrize("beta", [0.5, LinearSchedule(0.4, 1.0, steps=3)], ids=["float", "schedule"])
@pytest.mark.parametrize(("prefetch", "reuse_memory"), [(0, False), (2, False), (2, True)])
def test_batches_equal_sample_calls_on_a_saved_copy(sampler, beta, prefetch, reuse_memory, tmp_path):
    buffer = filled(sampler, seed=3)
    for _ in range(3):  # move the random state away from the seed
        buffer.sample(5, beta=0.4)
    expected = samples_of_a_copy(buffer, tmp_path / "buffer.npz", 6, beta, 8)
    with buffer.batches(6, beta=beta, prefetch=prefetch, reuse_memory=reuse_memory) as batches:
        drawn = [{key: value.copy() for key, value in next(batches).items()} for _ in range(8)]
    assert_same_batches(drawn, expected)


def test_prefetch_zero_samples_only_in_next_and_sees_the_newest_priorities():
    buffer = ReplayBuffer(16, FIELDS, alpha=1.0, eps=0.0, seed=0, sampler="proportional")
    buffer.add_batch(**items(0, 8))
    batches = buffer.batches(4, beta=0.5, prefetch=0)
    next(batches)
    only_three = np.zeros(8)
    only_three[3] = 5.0  # eps=0: every other item now has no mass
    buffer.update_priorities(np.arange(8), only_three)
    np.testing.assert_array_equal(next(batches)["indices"], [3, 3, 3, 3])
    assert batch_threads() == []  # no thread with prefetch=0


def test_a_training_loop_while_the_iterator_prefetches_sees_whole_items_and_a_consistent_tree():
    """The capacity is small so the ring wraps many times; items carry their number in every field, so a batch
    gathered halfway through a write would show mismatched rows."""
    capacity, batch_size, iterations = 128, 32, 400
    buffer = ReplayBuffer(capacity, FIELDS, alpha=0.6, seed=0, sampler="proportional")
    buffer.add_batch(**items(0, 64))
    next_item = 64
    with buffer.batches(batch_size, beta=LinearSchedule(0.4, 1.0, iterations), prefetch=4) as batches:
        for _ in range(iterations):
            batch = next(batches)
            step = batch["step"]  # [B], the item number
            np.testing.assert_array_equal(batch["obs"][:, 0], step)
            np.testing.assert_array_equal(batch["obs"][:, 2], -step)
            np.testing.assert_array_equal(batch["reward"], step)
            np.testing.assert_array_equal(batch["action"], step % 5)
            assert np.all(np.isfinite(batch["weights"]) & (batch["weights"] > 0) & (batch["weights"] <= 1))
            buffer.update_priorities(batch["indices"], np.mod(batch["reward"], 7.0) + 0.1, batch["generations"])
            buffer.add_batch(**items(next_item, 3))
            next_item += 3
    assert len(buffer) == capacity
    leaves = buffer.sampler.tree.leaves()
    assert buffer.sampler.tree.total() == pytest.approx(math.fsum(leaves), rel=1e-12)
    assert buffer.sampler.tree.total() == reference.flat_sum_tree(leaves)[1]  # bitwise: parents from children


@pytest.mark.parametrize("prefetch", [0, 1, 3])
def test_reused_memory_never_overwrites_a_batch_still_held(prefetch):
    buffer = filled("proportional", count=64)
    with buffer.batches(16, beta=0.5, prefetch=prefetch, reuse_memory=True) as batches:
        for _ in range(10):
            next(batches)
        held = [next(batches) for _ in range(3)]
        copies = [{key: value.copy() for key, value in batch.items()} for batch in held]
        for _ in range(12):
            next(batches)
        for batch, copy in zip(held, copies):
            for key in copy:
                np.testing.assert_array_equal(batch[key], copy[key], err_msg=key)
        assert not any(np.shares_memory(held[0]["obs"], batch["obs"]) for batch in held[1:])


def test_an_empty_buffer_is_waited_for_then_named_and_the_iterator_ends():
    buffer = ReplayBuffer(8, FIELDS, seed=0)
    for prefetch in (0, 2):
        batches = buffer.batches(4, prefetch=prefetch, empty_wait=0.2)
        with pytest.raises(ValueError, match=r"the ReplayBuffer is still empty after 0\.2 s: add items before "
                                             r"iterating its batches"):
            next(batches)
        with pytest.raises(StopIteration):
            next(batches)
    filler = threading.Timer(0.3, lambda: buffer.add_batch(**items(2, 1)))
    filler.start()
    with buffer.batches(2, prefetch=2, empty_wait=30.0) as batches:  # waits for the other thread's item
        assert next(batches)["step"].tolist() == [2, 2]
    filler.join()


def test_a_sampling_error_reaches_next_and_ends_the_iteration():
    buffer = filled("uniform")

    calls = []

    def sample(batch_size, beta=0.4, out=None):
        calls.append(beta)
        if len(calls) == 3:
            raise RuntimeError("the third draw fails")
        return ReplayBuffer.sample(buffer, batch_size, beta)

    buffer.sample = sample
    with buffer.batches(4, beta=0.5, prefetch=2) as batches:
        next(batches)
        next(batches)
        with pytest.raises(RuntimeError, match="the third draw fails"):
            next(batches)
        with pytest.raises(StopIteration):
            next(batches)


def test_closing_stops_the_thread_even_while_it_waits_and_the_buffer_is_not_kept_alive():
    empty = ReplayBuffer(8, FIELDS, seed=0)
    batches = empty.batches(4, prefetch=2, empty_wait=60.0)
    time.sleep(0.1)
    started = time.monotonic()
    batches.close()
    assert time.monotonic() - started < 5.0 and batch_threads() == []
    with pytest.raises(StopIteration):
        next(batches)

    buffer = filled("uniform")
    batches = buffer.batches(4, prefetch=2)
    next(batches)
    alive = weakref.ref(buffer)
    del buffer
    gc.collect()
    assert alive() is None  # the thread and the iterator hold the buffer weakly
    for _ in range(3):  # what was queued before the buffer went, then the end
        try:
            next(batches)
        except StopIteration:
            break
    else:
        pytest.fail("the iterator did not end once its buffer was gone")
    deadline = time.monotonic() + 5.0
    while batch_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert batch_threads() == []


def test_dropping_an_open_iterator_stops_its_thread():
    buffer = filled("uniform")
    batches = buffer.batches(4, prefetch=2)
    next(batches)
    del batches
    gc.collect()
    deadline = time.monotonic() + 5.0
    while batch_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert batch_threads() == []


@pytest.mark.parametrize(("arguments", "message"), [
    ({"batch_size": 0}, r"batch_size must be"),
    ({"prefetch": -1}, r"prefetch must be"),
    ({"beta": 1.5}, r"beta"),
    ({"empty_wait": -1.0}, r"empty_wait"),
    ({"reuse_memory": "yes"}, r"reuse_memory must be True or False, got 'yes'"),
])
def test_bad_arguments_are_named(arguments, message):
    buffer = filled("uniform")
    with pytest.raises((ValueError, TypeError), match=message):
        buffer.batches(**{"batch_size": 4, **arguments})
    assert batch_threads() == []


def test_a_buffer_of_another_kind_without_reusable_memory_is_refused_by_name():
    buffer = filled("uniform")

    class OwnBuffer:  # a user's SampledBuffer that cannot sample into given arrays
        __len__, batch_spec, sample = buffer.__len__, buffer.batch_spec, buffer.sample

    with pytest.raises(ValueError, match=r"reuse_memory=True needs a buffer with sample_buffers.*OwnBuffer"):
        BatchIterator(OwnBuffer(), 4, reuse_memory=True)
    own = OwnBuffer()  # held here: the iterator holds its buffer weakly
    with BatchIterator(own, 4, prefetch=0) as batches:  # any SampledBuffer works without reuse
        assert next(batches)["obs"].shape == (4, 3)
