"""Numba kernels for flat-array sum trees and min trees.

Layout (capacity 5, padded to ``leaf_offset = 8`` leaves, ``depth = 3``)::

    node index:                     1                       root: total (or min)
                           2                 3
                       4       5        6        7
    leaves:           8  9  10  11  12  13  14  15          leaf i lives at node leaf_offset + i
    leaf index:       0  1   2   3   4  [5   6   7]         [padding]: 0 in a sum tree, +inf in a min tree

Node 0 is unused. Children of node k are 2k and 2k+1; its parent is k >> 1. Every leaf sits at the
same depth, so a batch of indices can walk the tree one level at a time: the loads of one level for
the whole batch are independent and overlap in the CPU instead of waiting on each other.

Parents are always recomputed from their two children (``tree[k] = tree[2k] + tree[2k+1]``), never
patched with a delta, so the tree is a pure function of its leaves: no float drift however many
updates it sees (flashbax #52 shows what delta patching does).

Kernels do no validation; ``r2d2kit.sumtree`` checks input before it gets here.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _recompute_parents(tree, node_indices, depth, use_min):
    """Recompute the ancestors of ``node_indices`` (all leaves), one level per pass.

    ``node_indices`` is overwritten. A parent equal to the previous one in the batch is skipped:
    sorted input (as stratified sampling produces) then costs one recompute per distinct node.
    Unsorted input recomputes some parents twice, which is idempotent within a level because every
    child below is already final.
    """
    n = node_indices.shape[0]
    for _ in range(depth):
        previous = -1
        for i in range(n):
            parent = node_indices[i] >> 1
            node_indices[i] = parent
            if parent == previous:
                continue
            previous = parent
            left = tree[2 * parent]
            right = tree[2 * parent + 1]
            if use_min:
                tree[parent] = left if left < right else right
            else:
                tree[parent] = left + right


@njit(cache=True)
def _recompute_both(sum_tree, min_tree, node_indices, depth):
    """:func:`_recompute_parents` for a sum tree and a min tree sharing one layout, in one pass."""
    n = node_indices.shape[0]
    for _ in range(depth):
        previous = -1
        for i in range(n):
            parent = node_indices[i] >> 1
            node_indices[i] = parent
            if parent == previous:
                continue
            previous = parent
            sum_tree[parent] = sum_tree[2 * parent] + sum_tree[2 * parent + 1]
            left = min_tree[2 * parent]
            right = min_tree[2 * parent + 1]
            min_tree[parent] = left if left < right else right


@njit(cache=True)
def _write_leaves_and_recompute(tree, leaf_offset, depth, leaf_indices, values, use_min):
    n = leaf_indices.shape[0]
    node_indices = np.empty(n, dtype=np.int64)
    for i in range(n):
        node = leaf_offset + leaf_indices[i]
        tree[node] = values[i]
        node_indices[i] = node
    _recompute_parents(tree, node_indices, depth, use_min)


@njit(cache=True)
def sum_tree_update(tree, leaf_offset, depth, leaf_indices, values):
    """Write ``values`` at ``leaf_indices`` and recompute their ancestors.

    Leaves are written in order, so for a repeated index the last value wins.
    """
    _write_leaves_and_recompute(tree, leaf_offset, depth, leaf_indices, values, False)


@njit(cache=True)
def min_tree_update(tree, leaf_offset, depth, leaf_indices, values):
    """Min-tree twin of :func:`sum_tree_update` (a repeated index: the last value wins)."""
    _write_leaves_and_recompute(tree, leaf_offset, depth, leaf_indices, values, True)


@njit(cache=True)
def priority_trees_update(sum_tree, min_tree, leaf_offset, depth, leaf_indices, tree_values):
    """Update a sum tree and its min tree with the same values in one pass.

    The min tree gets +inf where a value is 0: a zero-mass item is never sampled, so it must not
    set the minimum that importance weights are normalised by.
    """
    n = leaf_indices.shape[0]
    sum_nodes = np.empty(n, dtype=np.int64)
    for i in range(n):
        node = leaf_offset + leaf_indices[i]
        value = tree_values[i]
        sum_tree[node] = value
        min_tree[node] = value if value > 0.0 else np.inf
        sum_nodes[i] = node
    _recompute_both(sum_tree, min_tree, sum_nodes, depth)


@njit(cache=True)
def _recompute_range(tree, leaf_offset, start, stop, use_min):
    """Recompute every ancestor of the leaves ``[start, stop)``; O(stop - start) in total."""
    low = (leaf_offset + start) >> 1
    high = (leaf_offset + stop - 1) >> 1
    while low >= 1:
        for parent in range(low, high + 1):
            left = tree[2 * parent]
            right = tree[2 * parent + 1]
            if use_min:
                tree[parent] = left if left < right else right
            else:
                tree[parent] = left + right
        if low == 1:
            break
        low >>= 1
        high >>= 1


@njit(cache=True)
def sum_tree_rebuild_range(tree, leaf_offset, start, stop):
    """Recompute the ancestors of leaves ``[start, stop)`` of a sum tree, O(stop - start)."""
    _recompute_range(tree, leaf_offset, start, stop, False)


@njit(cache=True)
def priority_trees_fill(sum_tree, min_tree, leaf_offset, start, stop, tree_value):
    """Set the leaves ``[start, stop)`` of both trees to one value (new items at max priority)."""
    min_value = tree_value if tree_value > 0.0 else np.inf
    for leaf in range(start, stop):
        sum_tree[leaf_offset + leaf] = tree_value
        min_tree[leaf_offset + leaf] = min_value
    _recompute_range(sum_tree, leaf_offset, start, stop, False)
    _recompute_range(min_tree, leaf_offset, start, stop, True)


@njit(cache=True)
def sum_tree_rebuild(tree, leaf_offset):
    """Recompute every internal node of a sum tree from its leaves (after loading leaves)."""
    for parent in range(leaf_offset - 1, 0, -1):
        tree[parent] = tree[2 * parent] + tree[2 * parent + 1]


@njit(cache=True)
def min_tree_rebuild(tree, leaf_offset):
    """Recompute every internal node of a min tree from its leaves."""
    for parent in range(leaf_offset - 1, 0, -1):
        left = tree[2 * parent]
        right = tree[2 * parent + 1]
        tree[parent] = left if left < right else right


@njit(cache=True)
def sum_tree_find(tree, leaf_offset, depth, prefix_sums):
    """Leaf index per prefix sum: the leaf whose cumulative-sum interval holds it.

    The batch descends one level at a time. Guards: go right only where the right child has mass,
    so rounding in ``prefix - left`` can never land on a leaf with zero mass or on padding
    (baselines #171, torchrl #2230); a prefix >= total becomes +inf, so it reaches the last leaf
    with mass however the subtractions round.
    """
    n = prefix_sums.shape[0]
    nodes = np.ones(n, dtype=np.int64)
    remaining = prefix_sums.copy()
    total = tree[1]
    for i in range(n):
        if remaining[i] >= total:  # at the end: rounding in the subtractions must not pull it back
            remaining[i] = np.inf
    for _ in range(depth):
        for i in range(n):
            left_child = 2 * nodes[i]
            left_mass = tree[left_child]
            # branch-free: the direction is a coin flip per sample, which a branch predictor loses
            go_right = (remaining[i] >= left_mass) & (tree[left_child + 1] > 0.0)
            remaining[i] -= left_mass * go_right
            nodes[i] = left_child + go_right
    return nodes - leaf_offset


@njit(cache=True)
def sum_tree_sample(tree, leaf_offset, depth, uniforms):
    """Stratified sample: split the total mass into ``len(uniforms)`` equal slices, one draw each.

    Draw ``i`` is the prefix sum ``(i + uniforms[i]) * total / batch``; the indices come back in
    non-decreasing order, which makes the follow-up priority update cheaper.
    """
    n = uniforms.shape[0]
    segment = tree[1] / n
    prefix_sums = np.empty(n, dtype=np.float64)
    for i in range(n):
        prefix_sums[i] = (i + uniforms[i]) * segment
    return sum_tree_find(tree, leaf_offset, depth, prefix_sums)


@njit(cache=True)
def first_invalid_priority(values):
    """Index of the first NaN, infinite or negative value, or -1 if all are finite and >= 0."""
    for i in range(values.shape[0]):
        value = values[i]
        if not (value >= 0.0 and value < np.inf):
            return i
    return -1


@njit(cache=True)
def first_out_of_range(indices, size):
    """Index of the first entry outside ``[0, size)``, or -1 if all are in range."""
    for i in range(indices.shape[0]):
        if indices[i] < 0 or indices[i] >= size:
            return i
    return -1


@njit(cache=True)
def priority_trees_update_scaled(sum_tree, min_tree, leaf_offset, depth, leaf_indices, priorities, eps, alpha):
    """PER update in one pass: tree value ``(priority + eps) ** alpha``; returns the largest ``priority + eps``.

    Fusing the transform into the update saves the temporaries and calls a numpy version would
    make on every learner step.
    """
    n = leaf_indices.shape[0]
    nodes = np.empty(n, dtype=np.int64)
    largest = 0.0
    for i in range(n):
        shifted = priorities[i] + eps
        if shifted > largest:
            largest = shifted
        if shifted == 0.0:
            value = 0.0  # zero priority: zero mass, even with alpha = 0 (where 0 ** 0 would be 1)
        elif alpha == 1.0:
            value = shifted
        else:
            value = shifted ** alpha
        node = leaf_offset + leaf_indices[i]
        sum_tree[node] = value
        min_tree[node] = value if value > 0.0 else np.inf
        nodes[i] = node
    _recompute_both(sum_tree, min_tree, nodes, depth)
    return largest


@njit(cache=True)
def sum_tree_sample_weighted(sum_tree, min_tree, leaf_offset, depth, uniforms, beta):
    """Stratified sample plus PER importance weights in one call.

    ``w_i = (N * P(i)) ** -beta / max_j w_j`` reduces to ``(p_i / p_min) ** -beta`` (N and the
    total cancel), where ``p_min`` is the smallest positive tree value. Returns int64 indices and
    float32 weights.
    """
    indices = sum_tree_sample(sum_tree, leaf_offset, depth, uniforms)
    n = indices.shape[0]
    weights = np.empty(n, dtype=np.float32)
    smallest = min_tree[1]
    for i in range(n):
        ratio = sum_tree[leaf_offset + indices[i]] / smallest
        weights[i] = ratio ** -beta
    return indices, weights
