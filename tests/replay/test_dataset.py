"""The tf.data adapters: ``buffer.as_dataset`` and ``priority_updater``.

What is checked:
    * the element spec is fixed (batch axis included) and every drawn batch matches it;
    * the dataset yields exactly the batches that ``sample`` calls would (a saved copy of the
      buffer, same random state, is sampled side by side);
    * a callable beta (``LinearSchedule``) is evaluated once per draw (weights against the formula);
    * ``priority_updater`` writes ``(p + eps)^alpha`` eagerly and inside ``tf.function``;
    * a training loop adding items and updating priorities while the dataset prefetches in its own
      thread sees whole items only and leaves a consistent sum tree.

No iterator outlives its test, not even through a failure's traceback: a prefetching
``from_generator`` iterator still alive at interpreter exit can hang the process
(tensorflow/tensorflow#22632).
"""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest
import reference
import tensorflow as tf
from dataset_checks import assert_same_batches, draw, samples_of_a_copy, to_numpy

from r2d2kit.replay import (
    LinearSchedule,
    ReplayBuffer,
)
from r2d2kit.replay.dataset import buffer_dataset, priority_updater

FIELDS = {
    "obs": ((3,), "float32"),
    "action": ((), "int64"),
    "reward": ((), "float32"),
    "done": ((), "bool"),
    "frame": ((2, 2), "uint8"),
    "step": ((), "int32"),
}
SAMPLERS = ["uniform", "proportional", "rank"]


def items(start: int, count: int) -> dict[str, np.ndarray]:
    """``count`` items numbered from ``start``; every field of item ``k`` is derived from ``k``."""
    k = np.arange(start, start + count)  # [n]
    return {
        "obs": np.stack([k, k + 0.5, -k], axis=1).astype(np.float32),  # [n, 3]
        "action": k % 5,
        "reward": k.astype(np.float32),
        "done": k % 2 == 0,
        "frame": np.broadcast_to((k % 256).astype(np.uint8)[:, None, None], (count, 2, 2)),  # [n, 2, 2]
        "step": k.astype(np.int32),
    }


def filled(sampler: str, capacity: int = 64, count: int = 40, seed: int = 0, **kwargs):
    """A buffer drawn by ``sampler`` holding ``count`` items, with distinct priorities where they matter."""
    buffer = ReplayBuffer(capacity, FIELDS, sampler, seed=seed, **kwargs)
    buffer.add_batch(**items(0, count))
    rng = np.random.default_rng(seed + 1)
    buffer.update_priorities(np.arange(count), rng.uniform(0.1, 5.0, count))
    return buffer


# ------------------------------------------------------------------------------------------- spec
@pytest.mark.parametrize("sampler", SAMPLERS)
@pytest.mark.parametrize("batch_size", [1, 7])
def test_element_spec_is_fixed_and_batches_match_it(sampler, batch_size):
    buffer = filled(sampler)
    dataset = buffer.as_dataset(batch_size, beta=0.5)
    spec = dataset.element_spec

    assert set(spec) == set(FIELDS) | {"indices", "generations", "weights"}
    for name, (shape, dtype) in FIELDS.items():
        assert spec[name].shape == (batch_size,) + shape, name
        assert spec[name].dtype == tf.as_dtype(dtype), name
    assert spec["indices"].shape == (batch_size,) and spec["indices"].dtype == tf.int64
    assert spec["generations"].shape == (batch_size,) and spec["generations"].dtype == tf.int64
    assert spec["weights"].shape == (batch_size,) and spec["weights"].dtype == tf.float32
    assert all(s.shape.is_fully_defined() for s in spec.values())
    assert {name: (tuple(s.shape), s.dtype.as_numpy_dtype) for name, s in spec.items()} == buffer.batch_spec(batch_size)

    for batch in draw(dataset, 3):
        for name, value in batch.items():
            assert value.shape == tuple(spec[name].shape) and value.dtype == spec[name].dtype.as_numpy_dtype, name


def test_an_empty_buffer_is_waited_for_then_named_and_a_new_iterator_recovers():
    """Iterating an empty buffer used to fail at once and leave the iterator ending forever."""
    import threading

    buffer = ReplayBuffer(8, FIELDS, seed=0, sampler="proportional")
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"the ReplayBuffer is still empty after 0\.2 s: add "
                                                             r"items before iterating"):
        draw(buffer.as_dataset(4, prefetch=0, empty_wait=0.2), 1)
    buffer.add_batch(**items(1, 1))
    batch = draw(buffer.as_dataset(4, prefetch=0, empty_wait=0.2), 1)[0]  # a new iterator: the items are there
    assert batch["action"].tolist() == [1, 1, 1, 1]
    waiting = ReplayBuffer(8, FIELDS, seed=0)
    filler = threading.Timer(0.3, lambda: waiting.add_batch(**items(2, 1)))
    filler.start()
    batch = draw(waiting.as_dataset(2, prefetch=2, empty_wait=30.0), 1)[0]  # waits for the other thread's item
    filler.join()
    assert batch["action"].tolist() == [2, 2]


# ------------------------------------------------------------------------------ same as sample()
@pytest.mark.parametrize("sampler", SAMPLERS)
@pytest.mark.parametrize("beta", [0.5, LinearSchedule(0.4, 1.0, steps=3)], ids=["float", "schedule"])
@pytest.mark.parametrize("prefetch", [0, 2])
def test_batches_equal_sample_calls_on_a_saved_copy(sampler, beta, prefetch, tmp_path):
    buffer = filled(sampler, seed=3)
    for _ in range(3):  # move the random state away from the seed
        buffer.sample(5, beta=0.4)
    path = tmp_path / "buffer.npz"
    expected = samples_of_a_copy(buffer, path, 6, beta, 8)
    assert_same_batches(draw(buffer.as_dataset(6, beta=beta, prefetch=prefetch), 8), expected)


# ------------------------------------------------------------------------------------ beta(count)
def test_beta_schedule_is_evaluated_at_each_draw():
    alpha, eps = 0.7, 1e-3
    buffer = ReplayBuffer(50, FIELDS, alpha=alpha, eps=eps, seed=0, sampler="proportional")
    buffer.add_batch(**items(0, 20))
    priorities = np.linspace(0.05, 4.0, 20)  # distinct: weights differ per item
    buffer.update_priorities(np.arange(20), priorities)
    schedule = LinearSchedule(0.2, 1.0, steps=4)  # 0.2, 0.4, 0.6, 0.8, 1.0, 1.0, ...

    # w_i = (N P(i))^-beta / max_j (N P(j))^-beta, the max over the 20 stored items
    mass = (priorities + eps) ** alpha  # [N]
    probabilities = mass / math.fsum(mass)
    n = len(buffer)

    for count, batch in enumerate(draw(buffer.as_dataset(16, beta=schedule, prefetch=0), 7)):
        beta = schedule(count)
        expected = (n * probabilities[batch["indices"]]) ** -beta / (n * probabilities.min()) ** -beta
        np.testing.assert_allclose(batch["weights"], expected, rtol=1e-6, err_msg=f"draw {count}, beta {beta}")
        assert batch["weights"].max() <= 1.0


# ------------------------------------------------------------------------------- priority_updater
@pytest.mark.parametrize("mode", ["eager", "tf.function"])
def test_priority_updater_writes_exact_tree_values(mode):
    alpha, eps = 0.6, 1e-3
    buffer = ReplayBuffer(16, FIELDS, alpha=alpha, eps=eps, seed=0, sampler="proportional")
    buffer.add_batch(**items(0, 10))
    update = priority_updater(buffer)
    if mode == "tf.function":
        update = tf.function(update)

    indices = tf.constant([0, 3, 3, 5, 7], dtype=tf.int32)  # cast to int64 inside
    priorities = tf.constant([0.5, 2.0, 7.0, 0.0, 3.25], dtype=tf.float32)  # index 3: the last value wins
    count = update(indices, priorities, tf.ones(5, tf.int32))  # every slot written once so far

    assert int(count) == 5
    written = {0: 0.5, 3: 7.0, 5: 0.0, 7: 3.25}
    for index, priority in written.items():
        np.testing.assert_allclose(buffer.sampler.tree.get([index]), [(priority + eps) ** alpha], rtol=1e-12, atol=0)
    untouched = [i for i in range(10) if i not in written]
    np.testing.assert_array_equal(buffer.sampler.tree.get(untouched), 1.0)  # new items got max priority 1^alpha
    assert buffer.max_priority == pytest.approx(7.0 + eps, rel=1e-12)
    assert buffer.sampler.tree.total() == reference.flat_sum_tree(buffer.sampler.tree.leaves())[1]


def test_priority_updater_reports_invalid_priorities():
    buffer = ReplayBuffer(16, FIELDS, seed=0, sampler="proportional")
    buffer.add_batch(**items(0, 8))
    update = priority_updater(buffer)
    with pytest.raises(ValueError, match=r"priorities\[1\] = -2\.0"):
        update(tf.constant([1, 2]), tf.constant([1.0, -2.0]), tf.constant([1, 1]))
    with pytest.raises(tf.errors.OpError, match=r"priorities\[1\] = nan"):
        tf.function(update)(tf.constant([1, 2]), tf.constant([1.0, float("nan")]), tf.constant([1, 1]))
    with pytest.raises(tf.errors.OpError, match=r"indices\[1\] = 12 is out of range"):
        tf.function(update)(tf.constant([1, 12]), tf.constant([1.0, 1.0]), tf.constant([1, 1]))
    with pytest.raises(tf.errors.OpError, match=r"generations must be 2 integers"):
        tf.function(update)(tf.constant([1, 2]), tf.constant([1.0, 1.0]), tf.constant([1, 1, 1]))


# ------------------------------------------------------------------------------------ concurrency
def test_training_loop_while_the_dataset_prefetches():
    """Add items and update priorities in the loop while the dataset samples in its thread.

    The capacity is small so the ring wraps many times; items carry their number in every field,
    so a batch gathered halfway through a write would show mismatched rows.
    """
    capacity, batch_size, iterations = 128, 32, 400
    buffer = ReplayBuffer(capacity, FIELDS, alpha=0.6, seed=0, sampler="proportional")
    buffer.add_batch(**items(0, 64))
    update = priority_updater(buffer)
    dataset = buffer.as_dataset(batch_size, beta=LinearSchedule(0.4, 1.0, iterations), prefetch=4)

    @tf.function
    def train_step(batches):
        batch = next(batches)
        new_priorities = tf.math.floormod(batch["reward"], 7.0) + 0.1  # [B], depends on the item
        update(batch["indices"], new_priorities, batch["generations"])
        return batch

    next_item = 64
    batches = iter(dataset)
    try:
        for _ in range(iterations):
            batch = to_numpy(train_step(batches))
            step = batch["step"]  # [B], the item number
            np.testing.assert_array_equal(batch["obs"][:, 0], step)
            np.testing.assert_array_equal(batch["obs"][:, 2], -step)
            np.testing.assert_array_equal(batch["reward"], step)
            np.testing.assert_array_equal(batch["action"], step % 5)
            np.testing.assert_array_equal(batch["frame"][:, 1, 1], step % 256)
            assert np.all((batch["indices"] >= 0) & (batch["indices"] < capacity))
            assert np.all(np.isfinite(batch["weights"]) & (batch["weights"] > 0) & (batch["weights"] <= 1))
            buffer.add_batch(**items(next_item, 3))
            next_item += 3
    finally:
        del batches

    assert len(buffer) == capacity
    leaves = buffer.sampler.tree.leaves()
    assert buffer.sampler.tree.total() == pytest.approx(math.fsum(leaves), rel=1e-12)
    assert buffer.sampler.tree.total() == reference.flat_sum_tree(leaves)[1]  # bitwise: parents from children
    assert buffer.sampler.tree.min() == leaves[leaves > 0].min()


# ------------------------------------------------------------------------------------ prefetch=0
def test_prefetch_zero_samples_only_on_demand(monkeypatch):
    """prefetch=0: no batch is sampled before it is asked for, so it sees the newest priorities.

    Regression: tf.data's default ``inject_prefetch`` optimisation used to add a prefetch of its own.
    """
    buffer = ReplayBuffer(16, FIELDS, alpha=1.0, eps=0.0, seed=0, sampler="proportional")
    buffer.add_batch(**items(0, 8))
    calls = []
    read_ahead = threading.Event()
    sample = buffer.sample

    def counting_sample(*args, **kwargs):
        calls.append(threading.current_thread().name)
        if len(calls) > 1:
            read_ahead.set()
        return sample(*args, **kwargs)

    monkeypatch.setattr(buffer, "sample", counting_sample)
    batches = iter(buffer.as_dataset(4, beta=0.5, prefetch=0))
    next(batches)
    # a correct implementation never samples before the next request, so there this wait always
    # times out: it cannot fail spuriously
    sampled_ahead = read_ahead.wait(timeout=0.5)
    only_three = np.zeros(8)
    only_three[3] = 5.0  # eps=0: every other item now has no mass
    buffer.update_priorities(np.arange(8), only_three)
    after_update = next(batches)["indices"].numpy()
    del batches

    assert not sampled_ahead, f"sampled ahead of the request ({len(calls)} sample calls for 2 batches)"
    np.testing.assert_array_equal(after_update, [3, 3, 3, 3])


def test_dataset_does_not_keep_the_buffer_alive():
    """tf.data holds generators for the whole process (tensorflow#57690); the buffer must still be freed."""
    import gc
    import weakref

    from r2d2kit.replay import ReplayBuffer

    buffer = ReplayBuffer(16, {"x": ((), "float32")}, seed=0, sampler="proportional")
    buffer.add_batch(x=np.arange(4, dtype=np.float32))
    dataset = buffer.as_dataset(2, prefetch=0)
    iterator = iter(dataset)
    next(iterator)
    del iterator
    alive = weakref.ref(buffer)
    del buffer
    gc.collect()
    assert alive() is None


# ---------------------------------------------------------------------------------- reused memory
def _held_batches_survive(monkeypatch, prefetch: int, guard: bool) -> tuple[bool, list]:
    """Draw from a prefetching iterator while holding three batches; were they left intact?

    ``guard=False`` disables the pool's reference check, to show what it protects against: tf.data
    wraps the pool's aligned arrays without copying them.
    """
    import r2d2kit.replay.batch_iterator as dataset_module
    import r2d2kit.replay.batch_pool as batch_pool

    pools = []

    class RecordingPool(batch_pool.BatchPool):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            pools.append(self)

    monkeypatch.setattr(dataset_module, "BatchPool", RecordingPool)
    if not guard:
        monkeypatch.setattr(batch_pool._Slot, "held_elsewhere", lambda slot: False)
    buffer = filled("proportional", capacity=64, count=64)
    batches = iter(buffer.as_dataset(16, beta=0.5, prefetch=prefetch, reuse_memory=True))
    try:
        for _ in range(10):
            next(batches)
        held = [next(batches) for _ in range(3)]
        copies = [to_numpy(batch) for batch in held]
        for _ in range(12):
            next(batches)
        intact = all(np.array_equal(batch[key].numpy(), copy[key]) for batch, copy in zip(held, copies)
                     for key in copy)
    finally:
        del batches
    return intact, pools


def test_the_dataset_samples_into_fresh_arrays_unless_reuse_is_asked_for(monkeypatch):
    import r2d2kit.replay.batch_iterator as dataset_module

    built = []
    monkeypatch.setattr(dataset_module, "BatchPool", lambda *args: built.append(args) or None)
    buffer = filled("proportional", capacity=64, count=64)
    batches = iter(buffer.as_dataset(16, beta=0.5, prefetch=0))
    next(batches)
    del batches
    assert built == []  # no pool: every batch was sampled into arrays of its own

    class OwnBuffer:  # a user's SampledBuffer that cannot sample into given arrays
        __len__, batch_spec, sample = buffer.__len__, buffer.batch_spec, buffer.sample

    with pytest.raises(ValueError, match=r"reuse_memory=True needs a buffer with sample_buffers.*OwnBuffer"):
        buffer_dataset(OwnBuffer(), 16, reuse_memory=True)


@pytest.mark.parametrize("prefetch", [0, 1, 3])
def test_batches_held_from_a_prefetching_iterator_are_never_overwritten(monkeypatch, prefetch):
    intact, pools = _held_batches_survive(monkeypatch, prefetch, guard=True)
    assert intact, "a batch still held was overwritten by a later one"
    (pool,) = pools
    assert pool.size == prefetch + 3
    assert pool.reused >= 12, f"the pool should recycle dropped batches: {pool}"
    assert pool.allocated <= prefetch + 3 + 3, f"only the three held batches need new memory: {pool}"


def test_without_the_reference_check_tf_data_would_see_overwritten_batches(monkeypatch):
    """tf.data wraps 64-byte-aligned numpy arrays without a copy, so recycling by turn alone is unsafe."""
    intact, _ = _held_batches_survive(monkeypatch, 2, guard=False)
    assert not intact
