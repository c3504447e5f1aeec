"""Numba kernels for rank-based prioritisation: a binary max-heap whose array order stands in for rank.

As in the PER paper (Schaul et al. 2016, appendix B.2.1), the heap array approximates the sorted
order: heap position ``k`` is treated as rank ``k + 1``. A periodic full sort (done by the caller)
makes it exact again. Arrays:

    priorities[item]     raw priority of a ring slot
    heap[position]       ring slot at heap position (0 = highest priority)
    position_of[item]    inverse of ``heap``; -1 for slots not in the heap
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _sift_up(priorities, heap, position_of, position):
    item = heap[position]
    key = priorities[item]
    while position > 0:
        parent = (position - 1) >> 1
        parent_item = heap[parent]
        if priorities[parent_item] >= key:
            break
        heap[position] = parent_item
        position_of[parent_item] = position
        position = parent
    heap[position] = item
    position_of[item] = position
    return position


@njit(cache=True)
def _sift_down(priorities, heap, position_of, position, size):
    item = heap[position]
    key = priorities[item]
    while True:
        child = 2 * position + 1
        if child >= size:
            break
        right = child + 1
        if right < size and priorities[heap[right]] > priorities[heap[child]]:
            child = right
        child_item = heap[child]
        if priorities[child_item] <= key:
            break
        heap[position] = child_item
        position_of[child_item] = position
        position = child
    heap[position] = item
    position_of[item] = position


@njit(cache=True)
def rank_heap_update(priorities, heap, position_of, size, items, values):
    """Set ``values`` for stored ``items`` in order (a repeated item: the last value wins)."""
    for i in range(items.shape[0]):
        item = items[i]
        priorities[item] = values[i]
        position = _sift_up(priorities, heap, position_of, position_of[item])
        _sift_down(priorities, heap, position_of, position, size)


@njit(cache=True)
def rank_heap_write(priorities, heap, position_of, size, items, values):
    """Give ``items`` priorities ``values`` in order, pushing those not in the heap; returns the new size."""
    for i in range(items.shape[0]):
        item = items[i]
        priorities[item] = values[i]
        if position_of[item] < 0:
            heap[size] = item
            position_of[item] = size
            _sift_up(priorities, heap, position_of, size)
            size += 1
        else:
            position = _sift_up(priorities, heap, position_of, position_of[item])
            _sift_down(priorities, heap, position_of, position, size)
    return size


@njit(cache=True)
def rank_heap_remove(priorities, heap, position_of, size, items):
    """Take ``items`` out of the heap (those not in it are skipped); returns the new size.

    The last heap entry fills the hole and is sifted to its place, as in a textbook heap delete.
    """
    for i in range(items.shape[0]):
        item = items[i]
        position = position_of[item]
        if position < 0:
            continue
        position_of[item] = -1
        size -= 1
        if position < size:
            heap[position] = heap[size]
            position_of[heap[position]] = position
            position = _sift_up(priorities, heap, position_of, position)
            _sift_down(priorities, heap, position_of, position, size)
    return size


@njit(cache=True)
def rank_sample(cumulative, size, heap, uniforms, exponent):
    """Stratified draw of heap positions from ``P(rank) ~ rank^-alpha`` plus importance weights.

    ``cumulative[k] = sum_{r <= k+1} r^-alpha`` is precomputed once for the full capacity; the
    ``size`` first entries split the current distribution into equal-probability segments, one
    uniform draw per segment. ``exponent = alpha * beta`` gives the normalised weight
    ``((k + 1) / size) ** exponent`` (the max weight belongs to the lowest rank, ``size``).
    Returns ring slots (int64) and weights (float32).
    """
    n = uniforms.shape[0]
    total = cumulative[size - 1]
    segment = total / n
    items = np.empty(n, dtype=np.int64)
    weights = np.empty(n, dtype=np.float32)
    for i in range(n):
        target = (i + uniforms[i]) * segment
        low = 0
        high = size - 1
        while low < high:  # first position with cumulative > target
            middle = (low + high) >> 1
            if cumulative[middle] > target:
                high = middle
            else:
                low = middle + 1
        items[i] = heap[low]
        weights[i] = ((low + 1) / size) ** exponent
    return items, weights
