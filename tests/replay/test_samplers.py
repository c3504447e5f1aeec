"""Each sampler on its own, driven by random writes (ring wraps, slots written twice in one call, dead
slots), priority updates and draws, against a plain-Python record of which slot is alive with which
priority: the sum tree or heap holds exactly the live slots, the tree total is the exact sum of its
leaves, and the heap keeps its order. Late updates (with the generations of an earlier draw) reach
only the items that were drawn, never a new occupant of their slot."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from r2d2kit.replay.samplers import make_sampler

CAPACITY = 12

slots_strategy = st.lists(st.integers(0, CAPACITY - 1), min_size=1, max_size=10)
operation = st.one_of(
    st.tuples(st.just("place"), slots_strategy, st.lists(st.booleans(), min_size=10, max_size=10),
              st.lists(st.floats(0.0, 50.0), min_size=10, max_size=10)),
    st.tuples(st.just("ring"), st.integers(0, CAPACITY - 1), st.integers(1, CAPACITY)),
    st.tuples(st.just("update"), slots_strategy, st.lists(st.floats(0.0, 50.0), min_size=10, max_size=10)),
    st.tuples(st.just("sample"), st.integers(1, 8)),
    st.tuples(st.just("late"), st.lists(st.floats(0.0, 50.0), min_size=8, max_size=8)),  # the last draw's update
)


class Record:
    """Which slot is alive, and the priority it was last given (the running maximum for a ring write)."""

    def __init__(self, eps: float) -> None:
        self.alive = [False] * CAPACITY
        self.priority = [0.0] * CAPACITY
        self.eps = eps
        self.largest = 1.0  # every sampler's starting maximum
        self.item = [0] * CAPACITY  # which write put the slot's content there
        self.writes = 0

    def write(self, slot) -> None:
        self.writes += 1
        self.item[slot] = self.writes

    def place(self, slots, alive, priorities) -> None:
        for slot, flag, value in zip(slots, alive, priorities):  # in order: the last write of a slot wins
            self.write(slot)
            self.alive[slot] = flag
            if flag:
                self.priority[slot] = value + self.eps
        # the running maximum counts the priorities of the items that are live after the call
        self.largest = max([self.largest] + [value + self.eps for slot, flag, value in zip(slots, alive, priorities)
                                             if flag and self.alive[slot]])

    def update(self, slots, priorities, items=None) -> None:
        for position, (slot, value) in enumerate(zip(slots, priorities)):
            if items is not None and self.item[slot] != items[position]:
                continue  # another item lives there now: it keeps its own priority
            if self.alive[slot]:  # a slot that died since it was drawn keeps nothing
                self.priority[slot] = value + self.eps
                self.largest = max(self.largest, value + self.eps)


def check(sampler, record: Record, alpha: float) -> None:
    live = [slot for slot in range(CAPACITY) if record.alive[slot]]
    assert sampler.alive.tolist() == record.alive and len(sampler) == len(live)
    if sampler.name == "rank":
        heap = sampler._heap[:len(sampler)].tolist()
        assert sorted(heap) == live  # the heap holds exactly the live slots, each once
        assert all(sampler._position_of[slot] == position for position, slot in enumerate(heap))
        assert all(sampler._position_of[slot] == -1 for slot in range(CAPACITY) if not record.alive[slot])
        for position in range(1, len(heap)):  # a max-heap by priority
            assert sampler.priorities[heap[(position - 1) // 2]] >= sampler.priorities[heap[position]]
        assert all(sampler.priorities[slot] == record.priority[slot] - record.eps for slot in live)
        return
    leaves = sampler.tree.get(np.arange(CAPACITY))
    if sampler.name == "uniform":
        expected = [1.0 if flag else 0.0 for flag in record.alive]
    else:
        expected = [record.priority[slot] ** alpha if record.alive[slot] and record.priority[slot] > 0 else 0.0
                    for slot in range(CAPACITY)]
    np.testing.assert_allclose(leaves, expected, rtol=1e-12, atol=0.0)
    assert sampler.tree.total() == math.fsum(leaves.tolist()) or math.isclose(
        sampler.tree.total(), math.fsum(leaves.tolist()), rel_tol=1e-12)


@settings(max_examples=300, deadline=None)
@example(name="rank", alpha=0.7, operations=[("place", [3, 3], [False, True] + [True] * 8, [1.0] * 10)])  # a slot
# removed and written in one call: it used to end alive but out of the heap
@example(name="rank", alpha=0.7, operations=[("place", [3, 3], [True, False] + [True] * 8, [1.0] * 10),
                                             ("sample", 2)])
@example(name="proportional", alpha=1.0, operations=[("ring", 0, 12), ("sample", 8), ("ring", 0, 12),
                                                     ("late", [40.0] * 8)])  # every drawn slot written again
@given(name=st.sampled_from(["uniform", "proportional", "rank"]), alpha=st.sampled_from([0.0, 0.6, 1.0]),
       operations=st.lists(operation, min_size=1, max_size=25))
def test_a_sampler_holds_exactly_its_live_slots_through_any_writes(name, alpha, operations):
    eps = 0.01 if name == "proportional" else 0.0
    params = {"uniform": {}, "proportional": {"alpha": alpha, "eps": eps}, "rank": {"alpha": alpha}}[name]
    sampler = make_sampler(name, CAPACITY, **params)
    record = Record(eps)
    rng = np.random.default_rng(0)
    drawn = None  # the last draw: slots, their generations then, and the record's items then
    for op in operations:
        if op[0] == "place":
            slots = np.array(op[1], dtype=np.int64)
            alive = np.array(op[2][:slots.size])
            priorities = np.array(op[3][:slots.size], dtype=np.float64)
            sampler.place(slots, alive, priorities)
            record.place(op[1], op[2][:slots.size], op[3][:slots.size])
        elif op[0] == "ring":  # a transition ring's write: new items at the running maximum
            start, count = op[1], min(op[2], CAPACITY - op[1])
            sampler.place(slice(start, start + count))
            for slot in range(start, start + count):
                record.write(slot)
                record.alive[slot] = True
                record.priority[slot] = record.largest
        elif op[0] == "update":
            slots = np.array(op[1], dtype=np.int64)
            values = np.array(op[2][:slots.size], dtype=np.float64)
            sampler.update(slots, values)
            record.update(op[1], op[2][:slots.size])
        elif op[0] == "late":
            if drawn is not None:
                slots, generations, items = drawn
                values = np.array(op[1][:slots.size], dtype=np.float64)
                sampler.update(slots, values, generations)
                record.update(slots.tolist(), values.tolist(), items)
        elif len(sampler) and (name != "proportional" or sampler.tree.total() > 0):
            indices, weights = sampler.sample(rng.random(op[1]), 0.5)
            drawn = (indices, sampler.generation[indices].copy(), [record.item[int(i)] for i in indices])
            assert all(record.alive[int(i)] for i in indices)  # only live slots are drawn
            assert np.all(weights > 0) and np.all(weights <= 1.0 + 1e-6)
        check(sampler, record, alpha)
