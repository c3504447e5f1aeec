"""Tests for the flat-array kernels in ``r2d2kit.kernels.sumtree``, called directly (no validation).

Trees are built by hand here, in the kernels' layout: 8 children per node, level 0 the root block
(the root in slot 0), leaf i at slot ``leaf_offset + i`` (``layout``). Expected trees are drawn (or
computed by ``tests/reference.py``) as binary trees and converted with ``reference.as_cacheline_tree``,
which keeps every third binary level: the 8-children layout must hold exactly those nodes, bit for
bit. Slots 1..7 of the root block are never read or written: they start as NaN in every test and
must stay NaN (a kernel that walks one level too far would write them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pytest
import reference

from r2d2kit.kernels import sumtree as kernels

INF = math.inf


def assert_bitwise_equal(actual: np.ndarray, expected: np.ndarray) -> None:
    """Equal bit for bit (tells 0.0 from -0.0, compares NaN sentinels too)."""
    actual = np.ascontiguousarray(actual, dtype=np.float64)
    expected = np.ascontiguousarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape
    mismatch = np.flatnonzero(actual.view(np.uint64) != expected.view(np.uint64))
    assert mismatch.size == 0, (
        f"first mismatching slots {mismatch[:8].tolist()}: got {actual[mismatch[:8]].tolist()}, "
        f"expected {expected[mismatch[:8]].tolist()}"
    )


SUM, MIN = -0.0, INF  # what a sum / min tree holds in level 1's slots past the binary tree's width


def layout(capacity: int) -> np.ndarray:
    """``level_offsets`` of the 8-children layout, from the reference's level widths."""
    widths = reference.cacheline_levels(capacity)
    return np.concatenate([[0], np.cumsum(widths[:-1])]).astype(np.int64)


def with_sentinels(tree: np.ndarray) -> np.ndarray:
    """``tree`` with the NaN sentinels in slots 1..7 of the root block."""
    tree = tree.copy()
    tree[1:8] = np.nan
    return tree


def empty_trees(capacity: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A fresh (sum tree, min tree, level_offsets) with the NaN sentinels set."""
    sum_tree = with_sentinels(reference.cacheline_sum_tree(np.zeros(capacity)))
    min_tree = with_sentinels(reference.cacheline_min_tree(np.full(capacity, np.inf)))
    return sum_tree, min_tree, layout(capacity)


def from_levels(levels: list[list[float]], past_width: float) -> np.ndarray:
    """The kernels' layout of a binary tree drawn level by level, root first (leaves padded to a
    power of two), with the NaN sentinels; ``past_width``: ``SUM`` or ``MIN``."""
    flat = np.array([np.nan] + [value for level in levels for value in level], dtype=np.float64)
    return with_sentinels(reference.as_cacheline_tree(flat, len(levels[-1]), 0.0, past_width))


def expected_trees(priorities: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sum and min tree of a priority tree, recomputed by the reference, with the NaN sentinels."""
    return (with_sentinels(reference.cacheline_sum_tree(priorities)),
            with_sentinels(reference.cacheline_min_tree(reference.priority_min_leaves(priorities))))


def random_priorities(rng: np.random.Generator, capacity: int, zero_fraction: float = 0.25) -> np.ndarray:
    """Log-uniform priorities in [1e-8, 1e6] with some exact zeros."""
    priorities = 10.0 ** rng.uniform(-8.0, 6.0, capacity)  # [capacity]
    priorities[rng.random(capacity) < zero_fraction] = 0.0
    return priorities


def integer_priorities(rng: np.random.Generator, capacity: int, zero_fraction: float = 0.3) -> np.ndarray:
    """Integer-valued priorities: every partial sum is exact, so ``find`` must match the reference exactly."""
    priorities = rng.integers(1, 1000, capacity).astype(np.float64)  # [capacity]
    priorities[rng.random(capacity) < zero_fraction] = 0.0
    return priorities


CAPACITIES = [1, 2, 3, 5, 7, 8, 13, 100, 1000, 4097]


# =====================================================================================================
# Updates: the expected trees drawn by hand
# =====================================================================================================


@dataclass(frozen=True)
class TreeCase:
    """Batches written in order into a capacity-5 priority tree, and every node expected afterwards."""

    name: str
    batches: list[tuple[list[int], list[float]]]
    sum_levels: list[list[float]]
    min_levels: list[list[float]]
    capacity: int = field(default=5)


TREE_CASES = [
    TreeCase(
        name="five_leaves",
        batches=[([0, 1, 2, 3, 4], [1.0, 2.0, 3.0, 4.0, 5.0])],
        sum_levels=[[15.0], [10.0, 5.0], [3.0, 7.0, 5.0, 0.0], [1.0, 2.0, 3.0, 4.0, 5.0, 0.0, 0.0, 0.0]],
        min_levels=[[1.0], [1.0, 5.0], [1.0, 3.0, 5.0, INF], [1.0, 2.0, 3.0, 4.0, 5.0, INF, INF, INF]],
    ),
    TreeCase(
        name="unsorted_batch_same_tree",
        batches=[([4, 0, 3, 1, 2], [5.0, 1.0, 4.0, 2.0, 3.0])],
        sum_levels=[[15.0], [10.0, 5.0], [3.0, 7.0, 5.0, 0.0], [1.0, 2.0, 3.0, 4.0, 5.0, 0.0, 0.0, 0.0]],
        min_levels=[[1.0], [1.0, 5.0], [1.0, 3.0, 5.0, INF], [1.0, 2.0, 3.0, 4.0, 5.0, INF, INF, INF]],
    ),
    TreeCase(
        name="repeated_index_last_wins",
        batches=[([3, 0, 3, 4, 3], [9.0, 1.0, 2.0, 5.0, 4.0])],
        sum_levels=[[10.0], [5.0, 5.0], [1.0, 4.0, 5.0, 0.0], [1.0, 0.0, 0.0, 4.0, 5.0, 0.0, 0.0, 0.0]],
        min_levels=[[1.0], [1.0, 5.0], [1.0, 4.0, 5.0, INF], [1.0, INF, INF, 4.0, 5.0, INF, INF, INF]],
    ),
    TreeCase(
        name="zero_priority_leaves_the_min_tree",
        batches=[([0, 1, 2, 3, 4], [1.0, 2.0, 3.0, 4.0, 5.0]), ([0, 2], [0.0, 0.5])],
        sum_levels=[[11.5], [6.5, 5.0], [2.0, 4.5, 5.0, 0.0], [0.0, 2.0, 0.5, 4.0, 5.0, 0.0, 0.0, 0.0]],
        min_levels=[[0.5], [0.5, 5.0], [2.0, 0.5, 5.0, INF], [INF, 2.0, 0.5, 4.0, 5.0, INF, INF, INF]],
    ),
    TreeCase(
        name="overwrite_moves_the_minimum",
        batches=[([0, 1, 2, 3, 4], [1.0, 2.0, 3.0, 4.0, 5.0]), ([4, 1], [0.25, 8.0])],
        sum_levels=[[16.25], [16.0, 0.25], [9.0, 7.0, 0.25, 0.0], [1.0, 8.0, 3.0, 4.0, 0.25, 0.0, 0.0, 0.0]],
        min_levels=[[0.25], [1.0, 0.25], [1.0, 3.0, 0.25, INF], [1.0, 8.0, 3.0, 4.0, 0.25, INF, INF, INF]],
    ),
]


@pytest.mark.parametrize("case", TREE_CASES, ids=[case.name for case in TREE_CASES])
def test_priority_trees_update_builds_the_drawn_tree(case: TreeCase) -> None:
    """Every node of both trees after the case's batches, capacity 5 padded to 8 leaves.

    ``five_leaves`` (and ``unsorted_batch_same_tree``, the same leaves written out of order)::

        sum tree                                      min tree
                        15                                          1
                10               5                        1                 5
            3       7        5       0                1       3        5       inf
          1   2   3   4    5 [0   0   0]            1   2   3   4    5 [inf inf inf]

    ``repeated_index_last_wins``: indices [3, 0, 3, 4, 3] with values [9, 1, 2, 5, 4]; leaf 3 keeps
    the last value, 4. Unwritten leaves 1 and 2 are 0 in the sum tree and inf in the min tree::

                        10                                          1
                5                5                        1                 5
            1       4        5       0                1       4        5       inf
          1   0   0   4    5 [0   0   0]            1  inf inf  4    5 [inf inf inf]

    ``zero_priority_leaves_the_min_tree``: five_leaves, then leaf 0 := 0 and leaf 2 := 0.5. A zero
    holds no mass and must not be the minimum, so the min tree stores inf there::

                       11.5                                        0.5
               6.5               5                       0.5                5
            2      4.5       5       0                2      0.5       5       inf
          0   2  0.5  4    5 [0   0   0]           inf  2  0.5  4    5 [inf inf inf]

    ``overwrite_moves_the_minimum``: five_leaves, then leaf 4 := 0.25 and leaf 1 := 8::

                      16.25                                        0.25
               16               0.25                      1               0.25
            9       7       0.25     0                1       3      0.25     inf
          1   8   3   4   0.25 [0   0   0]          1   8   3   4   0.25 [inf inf inf]

    [brackets]: padding leaves 5..7, which must keep 0 (sum) and inf (min). All values are exact
    in binary, so every node is compared with ``==`` bit for bit.
    """
    sum_tree, min_tree, level_offsets = empty_trees(case.capacity)
    assert level_offsets.tolist() == [0, 8]  # the root block, then the 8 leaves: one node
    for indices, values in case.batches:
        kernels.priority_trees_update(sum_tree, min_tree, level_offsets,
                                      np.array(indices, dtype=np.int64), np.array(values, dtype=np.float64))
    assert_bitwise_equal(sum_tree, from_levels(case.sum_levels, SUM))
    assert_bitwise_equal(min_tree, from_levels(case.min_levels, MIN))


@pytest.mark.parametrize("case", TREE_CASES, ids=[case.name for case in TREE_CASES])
def test_sum_tree_update_builds_the_drawn_sum_tree(case: TreeCase) -> None:
    """``sum_tree_update`` alone gives the same sum tree as drawn in the test above."""
    sum_tree, _, level_offsets = empty_trees(case.capacity)
    for indices, values in case.batches:
        kernels.sum_tree_update(sum_tree, level_offsets,
                                np.array(indices, dtype=np.int64), np.array(values, dtype=np.float64))
    assert_bitwise_equal(sum_tree, from_levels(case.sum_levels, SUM))


def test_min_tree_update_builds_the_drawn_min_tree() -> None:
    """``min_tree_update`` stores values as given (a plain min tree: 0 is a value, not "no mass").

    Capacity 3 padded to 4. After ``[0, 1, 2] := [2, 7, 0.5]`` and then ``[2, 1, 2] := [9, 0, 3]``
    (leaf 2 ends at 3, the last of its two writes)::

                     0
              0             3
           2     0       3    [inf]
    """
    _, min_tree, level_offsets = empty_trees(3)
    assert level_offsets.tolist() == [0, 8]
    kernels.min_tree_update(min_tree, level_offsets, np.array([0, 1, 2]), np.array([2.0, 7.0, 0.5]))
    assert_bitwise_equal(min_tree, from_levels([[0.5], [2.0, 0.5], [2.0, 7.0, 0.5, INF]], MIN))
    kernels.min_tree_update(min_tree, level_offsets, np.array([2, 1, 2]), np.array([9.0, 0.0, 3.0]))
    assert_bitwise_equal(min_tree, from_levels([[0.0], [0.0, 3.0], [2.0, 0.0, 3.0, INF]], MIN))


@pytest.mark.parametrize("capacity", CAPACITIES)
def test_priority_trees_update_matches_recompute_from_leaves(capacity: int) -> None:
    """Random batches with repeated indices carrying distinct values: leaves follow the last write,
    and every internal node equals the level-by-level recompute of the reference bit for bit."""
    rng = np.random.default_rng(capacity)
    sum_tree, min_tree, level_offsets = empty_trees(capacity)
    naive = reference.NaiveSumTree(capacity)
    for _ in range(20):
        batch = int(rng.integers(1, 2 * capacity + 2))
        indices = rng.integers(0, capacity, batch)  # [batch], repeats likely
        values = random_priorities(rng, batch)  # [batch], positive values distinct (continuous draws)
        kernels.priority_trees_update(sum_tree, min_tree, level_offsets, indices, values)
        naive.update(indices, values)
        expected_sum, expected_min = expected_trees(naive.priorities)
        assert_bitwise_equal(sum_tree, expected_sum)
        assert_bitwise_equal(min_tree, expected_min)
        assert np.isnan(sum_tree[1:8]).all() and np.isnan(min_tree[1:8]).all()
        assert math.isclose(sum_tree[0], naive.total(), rel_tol=1e-12, abs_tol=0.0)
        assert min_tree[0] == naive.min()


# =====================================================================================================
# Fill and rebuild
# =====================================================================================================


def fill_ranges(capacity: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    ranges = {(0, capacity), (0, 1), (capacity - 1, capacity), (0, 0), (capacity, capacity)}
    for _ in range(4):
        start, stop = sorted(rng.integers(0, capacity + 1, 2).tolist())
        ranges.add((start, stop))
    return sorted(ranges)


@pytest.mark.parametrize("capacity", CAPACITIES)
@pytest.mark.parametrize("value", [0.0, 2.5, 3.0e-7])
def test_priority_trees_fill_matches_per_index_update(capacity: int, value: float) -> None:
    """Filling ``[start, stop)`` with one value equals updating each index there (both trees, bit for bit)."""
    rng = np.random.default_rng(1000 + capacity)
    for start, stop in fill_ranges(capacity, rng):
        sum_fill, min_fill, level_offsets = empty_trees(capacity)
        initial = random_priorities(rng, capacity)
        kernels.priority_trees_update(sum_fill, min_fill, level_offsets, np.arange(capacity), initial)
        sum_update, min_update = sum_fill.copy(), min_fill.copy()

        kernels.priority_trees_fill(sum_fill, min_fill, level_offsets, start, stop, value)
        indices = np.arange(start, stop, dtype=np.int64)
        kernels.priority_trees_update(sum_update, min_update, level_offsets, indices,
                                      np.full(indices.shape[0], value))

        assert_bitwise_equal(sum_fill, sum_update)
        assert_bitwise_equal(min_fill, min_update)
        expected_leaves = initial.copy()
        expected_leaves[start:stop] = value
        expected_sum, expected_min = expected_trees(expected_leaves)
        assert_bitwise_equal(sum_fill, expected_sum)
        assert_bitwise_equal(min_fill, expected_min)


@pytest.mark.parametrize("capacity", CAPACITIES)
def test_rebuild_recomputes_every_internal_node(capacity: int) -> None:
    """Leaves written directly, internal nodes full of garbage: a rebuild restores them all from the
    leaves, padding and the sentinels untouched."""
    rng = np.random.default_rng(2000 + capacity)
    level_offsets = layout(capacity)
    priorities = random_priorities(rng, capacity)

    sum_tree, min_tree = expected_trees(priorities)
    expected_sum, expected_min = sum_tree.copy(), min_tree.copy()
    internal = [0] if level_offsets.shape[0] > 1 else []  # slots of internal nodes (padding excluded)
    for level in range(1, level_offsets.shape[0] - 1):
        nodes = -(-capacity // 8 ** (level_offsets.shape[0] - 1 - level))
        internal += range(level_offsets[level], level_offsets[level] + nodes)
    sum_tree[internal] = rng.normal(size=len(internal))  # garbage internal nodes
    min_tree[internal] = rng.normal(size=len(internal))

    kernels.sum_tree_rebuild(sum_tree, level_offsets)
    kernels.min_tree_rebuild(min_tree, level_offsets)

    assert_bitwise_equal(sum_tree, expected_sum)  # the sentinels are NaN in both
    assert_bitwise_equal(min_tree, expected_min)
    assert math.isclose(sum_tree[0], math.fsum(priorities.tolist()), rel_tol=1e-12, abs_tol=0.0)


def test_rebuild_by_hand() -> None:
    """Capacity 3 padded to 4, leaves [4, 0, 1] (min leaves [4, inf, 1])::

        sum:        5                min:       1
               4         1               4          1
            4     0   1   [0]         4    inf   1   [inf]
    """
    sum_tree = from_levels([[-1.0], [-1.0, -1.0], [4.0, 0.0, 1.0, 0.0]], SUM)
    min_tree = from_levels([[-1.0], [-1.0, -1.0], [4.0, INF, 1.0, INF]], MIN)
    kernels.sum_tree_rebuild(sum_tree, layout(3))
    kernels.min_tree_rebuild(min_tree, layout(3))
    assert_bitwise_equal(sum_tree, from_levels([[5.0], [4.0, 1.0], [4.0, 0.0, 1.0, 0.0]], SUM))
    assert_bitwise_equal(min_tree, from_levels([[1.0], [4.0, 1.0], [4.0, INF, 1.0, INF]], MIN))


# =====================================================================================================
# Find and sample
# =====================================================================================================


def _naive(leaves: list[float]) -> reference.NaiveSumTree:
    naive = reference.NaiveSumTree(len(leaves))
    naive.update(range(len(leaves)), leaves)
    return naive


FIND_CASES = [
    # (name, leaves, prefix sums, expected leaf per prefix)
    ("boundary_goes_right", [2.0, 2.0, 2.0, 2.0, 2.0], [0.0, 1.99, 2.0, 5.0, 9.99, 10.0], [0, 0, 1, 2, 4, 4]),
    ("zero_leaf_skipped", [1.0, 0.0, 2.0, 0.0, 0.0], [0.0, 0.5, 1.0, 2.999, 3.0], [0, 0, 2, 2, 2]),
    ("total_maps_to_last_leaf_with_mass", [0.0, 3.0, 0.0, 1.0, 0.0], [0.0, 2.9, 3.0, 3.5, 4.0], [1, 1, 3, 3, 3]),
    ("only_the_last_leaf", [0.0, 0.0, 0.0, 0.0, 4.0], [0.0, 2.0, 4.0], [4, 4, 4]),
    ("only_the_first_leaf", [4.0, 0.0, 0.0, 0.0, 0.0], [0.0, 2.0, 4.0], [0, 0, 0]),
    ("capacity_one", [3.0], [0.0, 1.5, 3.0], [0, 0, 0]),
    ("capacity_two", [1.0, 1.0], [0.0, 1.0, 2.0], [0, 1, 1]),
]


@pytest.mark.parametrize("name, leaves, prefix_sums, expected", FIND_CASES, ids=[case[0] for case in FIND_CASES])
def test_sum_tree_find_by_hand(name: str, leaves: list[float], prefix_sums: list[float],
                               expected: list[int]) -> None:
    """Hand-written expectations: a prefix on a boundary belongs to the next leaf with mass, a prefix
    equal to the total to the last leaf with mass; zero-mass leaves and padding are never returned."""
    sum_tree = reference.cacheline_sum_tree(np.array(leaves))
    found = kernels.sum_tree_find(sum_tree, layout(len(leaves)), np.array(prefix_sums))
    assert found.tolist() == expected
    assert found.tolist() == _naive(leaves).find(prefix_sums).tolist()


@pytest.mark.parametrize("capacity", CAPACITIES)
def test_sum_tree_find_matches_searchsorted_exactly_on_integer_priorities(capacity: int) -> None:
    """Integer priorities keep every partial sum exact, so the descent must agree with
    ``searchsorted(cumsum, prefix, side='right')`` on every prefix, boundaries included."""
    rng = np.random.default_rng(3000 + capacity)
    for _ in range(5):
        priorities = integer_priorities(rng, capacity)
        if not priorities.any():
            priorities[rng.integers(capacity)] = 7.0
        naive = _naive(priorities.tolist())
        total = naive.total()
        prefix_sums = np.concatenate([
            rng.uniform(0.0, total, 200),        # interior points
            np.cumsum(priorities),               # every boundary (the last one is the total)
            np.cumsum(priorities) - 0.5,          # just left of each boundary
            [0.0, total],
        ])
        prefix_sums = np.clip(prefix_sums, 0.0, total)
        sum_tree = reference.cacheline_sum_tree(priorities)
        found = kernels.sum_tree_find(sum_tree, layout(capacity), prefix_sums)
        np.testing.assert_array_equal(found, naive.find(prefix_sums))
        assert np.all(priorities[found] > 0.0)


@pytest.mark.parametrize("capacity", CAPACITIES)
def test_sum_tree_find_within_rounding_of_searchsorted_on_float_priorities(capacity: int) -> None:
    """Priorities spanning 1e-8..1e6: the descent lands on a leaf with mass, and on the reference leaf
    unless the prefix is within rounding error of a boundary (then on a neighbour with mass)."""
    rng = np.random.default_rng(4000 + capacity)
    depth = reference.padded_layout(capacity)[1]
    for _ in range(5):
        priorities = random_priorities(rng, capacity)
        if not priorities.any():
            priorities[rng.integers(capacity)] = 1.0
        naive = _naive(priorities.tolist())
        sum_tree = reference.cacheline_sum_tree(priorities)
        total = sum_tree[0]
        prefix_sums = np.concatenate([rng.uniform(0.0, total, 500), [0.0, total]])
        found = kernels.sum_tree_find(sum_tree, layout(capacity), prefix_sums)
        tolerance = 4.0 * (capacity + depth + 2) * np.finfo(np.float64).eps * total
        low, high = naive.find_bracket(prefix_sums, tolerance)
        assert np.all((low <= found) & (found <= high))
        assert np.all(priorities[found] > 0.0)
        assert found[-1] == naive.last_with_mass()


def test_sum_tree_sample_by_hand() -> None:
    """Leaves [1, 0, 2, 0, 0] (total 3), three slices of mass 1: uniforms [0.5, 0.0, 0.999] give the
    prefix sums [0.5, 1.0, 2.999] and the leaves [0, 2, 2] (leaf 1 holds no mass)."""
    sum_tree = reference.cacheline_sum_tree(np.array([1.0, 0.0, 2.0, 0.0, 0.0]))
    found = kernels.sum_tree_sample(sum_tree, layout(5), np.array([0.5, 0.0, 0.999]))
    assert found.tolist() == [0, 2, 2]


@pytest.mark.parametrize("capacity", CAPACITIES)
@pytest.mark.parametrize("batch_size", [1, 7, 256])
def test_sum_tree_sample_matches_stratified_reference(capacity: int, batch_size: int) -> None:
    """Draw i is ``find((i + u_i) * total / B)``: compared with the reference given the same uniforms,
    up to a few ulps of the total; the indices never decrease and never hit a leaf without mass."""
    rng = np.random.default_rng(5000 + capacity * 7 + batch_size)
    depth = reference.padded_layout(capacity)[1]
    for make_priorities in (integer_priorities, random_priorities):
        priorities = make_priorities(rng, capacity)
        if not priorities.any():
            priorities[rng.integers(capacity)] = 1.0
        naive = _naive(priorities.tolist())
        sum_tree = reference.cacheline_sum_tree(priorities)
        uniforms = rng.random(batch_size)
        found = kernels.sum_tree_sample(sum_tree, layout(capacity), uniforms)
        tolerance = 4.0 * (capacity + depth + 4) * np.finfo(np.float64).eps * sum_tree[0]
        low, high = naive.find_bracket(naive.stratified_prefix_sums(uniforms), tolerance)
        assert found.shape == (batch_size,)
        assert np.all((low <= found) & (found <= high))
        assert np.all(priorities[found] > 0.0)
        assert np.all(np.diff(found) >= 0)


# =====================================================================================================
# Validation scans
# =====================================================================================================


@pytest.mark.parametrize("values, expected", [
    ([], -1),
    ([0.0, 1.0, 1e308], -1),
    ([-0.0], -1),
    ([5e-324], -1),
    ([1.0, np.nan], 1),
    ([np.inf], 0),
    ([1.0, 2.0, -np.inf], 2),
    ([1.0, -1e-300], 1),
    ([1.0, 2.0, np.nan, -1.0, np.inf], 2),
    ([-1.0, np.nan], 0),
], ids=["empty", "valid", "negative_zero", "subnormal", "nan", "inf", "minus_inf", "tiny_negative",
        "first_of_several", "negative_first"])
def test_first_invalid_priority_by_hand(values: list[float], expected: int) -> None:
    assert kernels.first_invalid_priority(np.array(values, dtype=np.float64), np.inf) == expected
    assert reference.first_invalid_priority(values) == expected


@pytest.mark.parametrize("values, limit, expected", [
    ([0.0, 9.99, 10.0], 10.0, 2),
    ([11.0, np.nan], 10.0, 0),
    ([1.0, 2.0], 2.0, 1),
    ([1e308], 1e300, 0),
], ids=["at_the_limit", "above_first", "equal_second", "huge"])
def test_first_invalid_priority_with_a_limit_by_hand(values: list[float], limit: float, expected: int) -> None:
    assert kernels.first_invalid_priority(np.array(values, dtype=np.float64), limit) == expected
    assert reference.first_invalid_priority(values, limit) == expected


def test_first_invalid_priority_matches_reference() -> None:
    rng = np.random.default_rng(6000)
    specials = np.array([np.nan, np.inf, -np.inf, -1.0, -1e-12])
    for _ in range(300):
        values = rng.uniform(0.0, 10.0, int(rng.integers(0, 20)))
        for position in np.flatnonzero(rng.random(values.shape[0]) < 0.1):
            values[position] = rng.choice(specials)
        limit = float(rng.choice([np.inf, 5.0, 9.5]))
        assert kernels.first_invalid_priority(values, limit) == reference.first_invalid_priority(values.tolist(), limit)


@pytest.mark.parametrize("indices, size, expected", [
    ([], 5, -1),
    ([0, 4, 2], 5, -1),
    ([0, 5], 5, 1),
    ([-1, 7], 5, 0),
    ([0, 1, 9, -3], 5, 2),
    ([0], 1, -1),
    ([1], 1, 0),
    ([-(2**63)], 5, 0),
    ([2**63 - 1], 5, 0),
], ids=["empty", "valid", "equal_to_size", "negative_first", "first_of_several", "size_one",
        "past_size_one", "int64_min", "int64_max"])
def test_first_out_of_range_by_hand(indices: list[int], size: int, expected: int) -> None:
    assert kernels.first_out_of_range(np.array(indices, dtype=np.int64), size) == expected
    assert reference.first_out_of_range(indices, size) == expected


def test_first_out_of_range_matches_reference() -> None:
    rng = np.random.default_rng(7000)
    for _ in range(300):
        size = int(rng.integers(1, 50))
        indices = rng.integers(-3, size + 3, int(rng.integers(0, 20)))
        assert kernels.first_out_of_range(indices, size) == reference.first_out_of_range(indices.tolist(), size)
