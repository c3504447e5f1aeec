"""A seed-style pure-Python segment tree, written for the benchmarks in the manner of OpenAI
baselines' ``SegmentTree`` / ``SumSegmentTree`` / ``MinSegmentTree``.

Like the original: a Python list of ``2 * capacity`` nodes, capacity a power of two, one item at a
time (``__setitem__`` walks one leaf up to the root, ``find_prefixsum_idx`` walks one prefix sum
down). Batched work is a Python loop over items, which is what the benchmark measures.
``build`` (fill every leaf, then every parent once, O(capacity)) is an addition so that pre-filling
2^20 items does not take a minute; it is not timed.
"""

from __future__ import annotations

import operator
import random


class SegmentTree:
    """Binary tree over ``capacity`` leaves (a power of two) combined with ``operation``."""

    def __init__(self, capacity, operation, neutral_element):
        assert capacity > 0 and capacity & (capacity - 1) == 0, "capacity must be a power of 2"
        self._capacity = capacity
        self._operation = operation
        self._neutral = neutral_element
        self._value = [neutral_element for _ in range(2 * capacity)]

    def __setitem__(self, idx, val):
        idx += self._capacity
        self._value[idx] = val
        idx //= 2
        while idx >= 1:
            self._value[idx] = self._operation(self._value[2 * idx], self._value[2 * idx + 1])
            idx //= 2

    def __getitem__(self, idx):
        assert 0 <= idx < self._capacity
        return self._value[self._capacity + idx]

    def reduce(self):
        """Operation over every leaf (the root)."""
        return self._value[1]

    def build(self, values):
        """Set leaves ``0 .. len(values) - 1`` and recompute every parent once."""
        cap, value, op = self._capacity, self._value, self._operation
        value[cap:cap + len(values)] = [float(v) for v in values]
        for idx in range(cap - 1, 0, -1):
            value[idx] = op(value[2 * idx], value[2 * idx + 1])

    def update(self, indices, values):
        """Batched update: one ``__setitem__`` per item."""
        for idx, val in zip(indices, values):
            self[int(idx)] = float(val)


class SumSegmentTree(SegmentTree):
    def __init__(self, capacity):
        super().__init__(capacity, operator.add, 0.0)

    def sum(self):
        return self.reduce()

    def find_prefixsum_idx(self, prefixsum):
        """Highest index ``i`` with ``sum(arr[:i]) <= prefixsum``."""
        idx = 1
        value, cap = self._value, self._capacity
        while idx < cap:
            if value[2 * idx] > prefixsum:
                idx = 2 * idx
            else:
                prefixsum -= value[2 * idx]
                idx = 2 * idx + 1
        return idx - cap

    def sample(self, batch_size, rng=random):
        """Stratified sample as in baselines' ``_sample_proportional``: one draw per equal slice."""
        every_range_len = self.sum() / batch_size
        return [self.find_prefixsum_idx((rng.random() + i) * every_range_len) for i in range(batch_size)]


class MinSegmentTree(SegmentTree):
    def __init__(self, capacity):
        super().__init__(capacity, min, float("inf"))

    def min(self):
        return self.reduce()
