"""BatchPool: reused sample memory is handed out again only once nothing outside the pool references it.

The pool's guard is CPython's reference count. These tests take every kind of reference a caller
can hold (the dict, one array, a view, a view of a view, a memoryview) and check that each one
keeps its slot out of circulation, that dropping it frees the slot, and, with hypothesis, that over
random acquire/hold/drop programs no acquired batch ever shares memory with a batch still held.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from r2d2kit.replay import BatchPool
from r2d2kit.replay.batch_pool import ALIGNMENT, allocate_batch, check_batch_out

SPEC = {"obs": ((3, 5, 7), "uint8"), "reward": ((3,), "float32"), "mask": ((3, 5), "bool"),
        "indices": ((3,), "int64")}


@pytest.mark.parametrize("touch", [True, False])
def test_allocate_batch_gives_aligned_zeroed_disjoint_arrays(touch):
    arrays = allocate_batch(SPEC, touch=touch)
    assert list(arrays) == list(SPEC)
    for name, (shape, dtype) in SPEC.items():
        array = arrays[name]
        assert array.shape == shape and array.dtype == np.dtype(dtype), name
        assert array.ctypes.data % ALIGNMENT == 0, name
        assert array.flags.c_contiguous and array.flags.writeable, name
        assert not array.any(), name
    for value, name in enumerate(SPEC, start=1):  # fill each one's bytes with its own value: no overlap
        arrays[name].view(np.uint8)[...] = value
    for value, name in enumerate(SPEC, start=1):
        assert np.all(arrays[name].view(np.uint8) == value), f"{name} was overwritten by a later field"


# each case: a reference the caller keeps to the batch acquire() returned
HOLDERS = {
    "the dict": lambda batch: batch,
    "one small array": lambda batch: batch["reward"],
    "a view": lambda batch: batch["obs"][1],
    "a view of a view": lambda batch: batch["obs"][1][2:, ::2],
    "a reshaped view": lambda batch: batch["mask"].reshape(-1),
    "a memoryview": lambda batch: memoryview(batch["indices"]),
}


@pytest.mark.parametrize("holder", list(HOLDERS))
def test_any_reference_keeps_the_slot_and_dropping_it_frees_the_slot(holder):
    pool = BatchPool(SPEC, size=1)
    batch = pool.acquire()
    batch["obs"][...] = 7
    kept = HOLDERS[holder](batch)
    del batch
    other = pool.acquire()  # the only slot is held: a new one replaces it
    assert pool.allocated == 2 and pool.reused == 0
    assert not np.shares_memory(other["obs"], np.asarray(kept) if holder != "the dict" else kept["obs"])
    other["obs"][...] = 1
    del other, kept  # now nothing holds the second slot
    again = pool.acquire()
    assert pool.allocated == 2 and pool.reused == 1
    assert np.all(again["obs"] == 1), "the freed slot is the one handed out again"


def test_a_loop_that_rebinds_its_batch_alternates_two_slots():
    """``batch = pool.acquire()``: the previous batch is still bound during the call, so two slots serve."""
    pool = BatchPool(SPEC, size=2)
    seen = set()
    batch = None
    for _ in range(10):
        batch = pool.acquire()
        seen.add(batch["obs"].ctypes.data)
    assert len(seen) == 2 and pool.allocated == 2 and pool.reused == 8


@settings(deadline=None, max_examples=200)
@given(size=st.integers(1, 4), program=st.lists(st.tuples(st.booleans(), st.integers(0, 7)), max_size=40))
def test_no_acquired_batch_shares_memory_with_one_still_held(size, program):
    """Random programs: acquire (and hold) or drop the i-th held batch; held contents never change."""
    pool = BatchPool(SPEC, size=size)
    held: list[tuple[dict, int]] = []
    stamp = 0
    for acquire, which in program:
        if acquire or not held:
            free_slot = any(not slot.held_elsewhere() for slot in pool._slots)
            full = len(pool._slots) == size
            allocated = pool.allocated
            batch = pool.acquire()
            if free_slot and full:
                assert pool.allocated == allocated, "a slot was free, yet the pool allocated"
            for other, _ in held:
                for name in SPEC:
                    assert not np.shares_memory(batch[name], other[name]), name
            stamp += 1
            for name in SPEC:
                batch[name][...] = stamp % 100
            held.append((batch, stamp % 100))
            del batch
        else:
            del held[which % len(held)]
        for other, value in held:
            for name in SPEC:
                assert np.all(other[name] == np.asarray(value, other[name].dtype)), name
    assert pool.allocated + pool.reused == stamp


OUT_CASES = {
    "missing field": (lambda o: o.pop("mask"), ValueError, r"missing fields \['mask'\]"),
    "unknown field": (lambda o: o.update(extra=np.zeros(3)), ValueError, r"unknown fields \['extra'\]"),
    "wrong shape": (lambda o: o.update(reward=np.zeros(4, np.float32)), ValueError,
                    r"out\['reward'\] has shape \(4,\).*needs shape \(3,\)"),
    "wrong dtype": (lambda o: o.update(reward=np.zeros(3, np.float64)), ValueError,
                    r"out\['reward'\].*dtype float64.*dtype float32"),
    "read-only": (lambda o: o["obs"].setflags(write=False), ValueError, r"out\['obs'\].*read-only"),
    "strided": (lambda o: o.update(mask=np.zeros((5, 3), bool).T), ValueError, r"out\['mask'\].*strided"),
    "not an array": (lambda o: o.update(indices=[0, 0, 0]), TypeError, r"out\['indices'\] must be a numpy array"),
}


@pytest.mark.parametrize("case", list(OUT_CASES))
def test_check_batch_out_names_the_field_and_the_fix(case):
    change, error, pattern = OUT_CASES[case]
    out = allocate_batch(SPEC)
    change(out)
    with pytest.raises(error, match=pattern) as info:
        check_batch_out(out, SPEC)
    if case not in ("missing field", "unknown field"):
        assert "sample_buffers" in str(info.value)


def test_check_batch_out_refuses_a_non_mapping_and_accepts_a_good_one():
    with pytest.raises(TypeError, match="out must be a dict of arrays"):
        check_batch_out([np.zeros(3)], SPEC)
    out = allocate_batch(SPEC)
    assert check_batch_out(out, SPEC).keys() == out.keys()


def test_pool_validation():
    with pytest.raises(ValueError, match="size must be an integer >= 1"):
        BatchPool(SPEC, size=0)
    with pytest.raises(ValueError, match="at least one field"):
        BatchPool({}, size=2)
