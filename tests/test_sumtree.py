"""Tests for the validated ``SumTree`` / ``MinTree`` API, against the brute-force ``tests/reference.py``.

* Hypothesis drives random sequences of batched updates (repeated indices carrying distinct values),
  fills and reloads into trees of any capacity, and checks every query against the reference after
  every step, plus the whole flat tree bit for bit against a recompute from the leaves.
* A drift test applies 10^6 updates and compares the total with ``math.fsum`` of the leaves.
* Validation tests: every refused input raises before anything is written.
* Statistical tests: sampled frequencies against priorities / total (chi-square, no scipy).

The bit-for-bit checks read the flat arrays through ``SumTree.arrays`` / ``MinTree.arrays``: the point
of the test is that *every* node equals a recompute, not just the root. The expected arrays are the
reference's binary trees (``flat_sum_tree``) as the 8-children-per-node layout stores them
(``cacheline_sum_tree``).
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import reference
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from r2d2kit import MinTree, SumTree

JIT_DISABLED = os.environ.get("NUMBA_DISABLE_JIT") == "1"
EPS = float(np.finfo(np.float64).eps)
# Subnormal priorities (hypothesis draws 5e-324) round on a fixed grid, not relative to the total: the
# kernel's (i + u) * (total / B) can be i + u half-steps of that grid from the reference's (i + u) * total / B.
SUBNORMAL = float(np.finfo(np.float64).smallest_subnormal)

HYPOTHESIS_SETTINGS = settings(
    deadline=None,
    max_examples=40 if JIT_DISABLED else 80,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def assert_bitwise_equal(actual: np.ndarray, expected: np.ndarray) -> None:
    """Equal bit for bit (tells 0.0 from -0.0)."""
    actual = np.ascontiguousarray(actual, dtype=np.float64)
    expected = np.ascontiguousarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape
    mismatch = np.flatnonzero(actual.view(np.uint64) != expected.view(np.uint64))
    assert mismatch.size == 0, (
        f"first mismatching slots {mismatch[:8].tolist()}: got {actual[mismatch[:8]].tolist()}, "
        f"expected {expected[mismatch[:8]].tolist()}"
    )


# =====================================================================================================
# Strategies
# =====================================================================================================

#: How priorities are drawn. With integer values every partial sum is exact (capacity * 2**20 < 2**53),
#: so ``find`` must agree with ``searchsorted`` exactly, boundaries included; with the float kinds
#: a prefix within rounding error of a boundary may land on the neighbouring leaf with mass.
PRIORITY_KINDS = {
    "integer": st.integers(0, 2**20).map(float),
    "log_uniform": st.one_of(st.just(0.0), st.floats(-8.0, 6.0).map(lambda exponent: 10.0**exponent)),
    "any_float": st.floats(0.0, 1e6, allow_nan=False, allow_infinity=False).map(abs),
}

#: Awkward values mixed into whole-tree reloads of the "any_float" kind (subnormals included).
AWKWARD_FLOATS = np.array([0.0, 5e-324, 1.1125369292536007e-308, 1e-150, 0.5, 1.0, 2.0, 1e6])


def numpy_priorities(kind: str, rng: np.random.Generator, size: int) -> np.ndarray:
    """A whole tree's worth of priorities of one kind, from numpy (drawing thousands of values
    through hypothesis would make generation and shrinking slow)."""
    if kind == "integer":
        values = rng.integers(0, 2**20 + 1, size).astype(np.float64)
    elif kind == "log_uniform":
        values = 10.0 ** rng.uniform(-8.0, 6.0, size)
    else:
        values = rng.uniform(0.0, 1e6, size)
        awkward = rng.random(size) < 0.2
        values[awkward] = rng.choice(AWKWARD_FLOATS, int(awkward.sum()))
    values[rng.random(size) < rng.random()] = 0.0  # a random share of zero-mass leaves
    return values


capacities = st.one_of(
    st.just(1),
    st.sampled_from([2, 3, 5, 6, 7, 9, 100, 1023, 1025, 3001]),
    st.integers(2, 64),
    st.integers(65, 4100),
)


@st.composite
def update_batches(draw, capacity: int, priorities: st.SearchStrategy) -> tuple[list[int], list[float]]:
    """A batch of updates. Indices come from a small pool, so they repeat; values are all distinct,
    so a repeated index shows which of its writes survived."""
    size = draw(st.integers(0, min(3 * capacity, 150)))
    pool = draw(st.lists(st.integers(0, capacity - 1), min_size=1, max_size=max(1, size // 2)))
    indices = draw(st.lists(st.sampled_from(pool), min_size=size, max_size=size))
    values = draw(st.lists(priorities, min_size=size, max_size=size, unique=True))
    return indices, values


# =====================================================================================================
# Checks against the reference after every step
# =====================================================================================================


def check_whole_tree(tree: SumTree, naive: reference.NaiveSumTree) -> None:
    """Leaves as written, and every internal node equal to a recompute from the leaves, bit for bit."""
    assert_bitwise_equal(tree.leaves(), naive.priorities)
    assert_bitwise_equal(tree.get(np.arange(tree.capacity)), naive.priorities)

    expected_sum = reference.cacheline_sum_tree(naive.priorities)
    expected_min = reference.cacheline_min_tree(reference.priority_min_leaves(naive.priorities))
    assert_bitwise_equal(tree.arrays.sum_tree, expected_sum)
    assert_bitwise_equal(tree.arrays.min_tree, expected_min)

    reloaded = SumTree(tree.capacity)
    reloaded.set_leaves(tree.leaves())
    assert_bitwise_equal(tree.arrays.sum_tree, reloaded.arrays.sum_tree)
    assert_bitwise_equal(tree.arrays.min_tree, reloaded.arrays.min_tree)
    assert_bitwise_equal(np.array([tree.total()]), np.array([reloaded.total()]))

    assert math.isclose(tree.total(), naive.total(), rel_tol=1e-12, abs_tol=0.0)
    assert tree.min() == naive.min()


def check_find(tree: SumTree, naive: reference.NaiveSumTree, exact: bool, data: st.DataObject) -> None:
    total = tree.total()
    cumsum = np.cumsum(naive.priorities)  # [capacity]
    boundaries = data.draw(st.lists(st.sampled_from(cumsum.tolist()), max_size=20), label="boundaries")
    interior = data.draw(st.lists(st.floats(0.0, total), max_size=20), label="interior prefix sums")
    prefix_sums = np.clip(np.array([0.0, total] + boundaries + interior, dtype=np.float64), 0.0, total)

    found = tree.find(prefix_sums)
    assert found.dtype.kind == "i" and found.shape == prefix_sums.shape
    assert np.all(naive.priorities[found] > 0.0), "find returned a leaf without mass"
    if exact:
        np.testing.assert_array_equal(found, naive.find(prefix_sums))
    else:
        depth = reference.padded_layout(tree.capacity)[1]
        tolerance = max(4.0 * (tree.capacity + depth + 4) * EPS * total, 4.0 * SUBNORMAL)
        low, high = naive.find_bracket(prefix_sums, tolerance)
        assert np.all((low <= found) & (found <= high)), (prefix_sums, found, low, high)
    if exact:
        assert found[1] == naive.last_with_mass()  # prefix == total; with rounding see the dedicated test


def check_sample(tree: SumTree, naive: reference.NaiveSumTree, exact: bool, data: st.DataObject) -> None:
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    batch_size = data.draw(st.integers(1, 64), label="batch_size")
    rng = np.random.default_rng(seed)
    drawn = tree.sample(batch_size, rng)

    replay = np.random.default_rng(seed)
    uniforms = replay.random(batch_size)  # the uniforms sample() must have used
    assert rng.random() == replay.random(), "sample() must draw exactly batch_size uniforms from rng"

    assert drawn.shape == (batch_size,)
    assert np.all((0 <= drawn) & (drawn < tree.capacity))
    assert np.all(naive.priorities[drawn] > 0.0), "a leaf with zero priority was sampled"
    assert np.all(np.diff(drawn) >= 0), "stratified indices must not decrease"

    depth = reference.padded_layout(tree.capacity)[1]
    # The kernel may round (i + u) * total / B differently from the reference: a few ulps of the
    # total; the float kinds add the rounding of the partial sums.
    tolerance = max((8.0 if exact else 4.0 * (tree.capacity + depth + 4)) * EPS * tree.total(),
                    (batch_size + 2) * SUBNORMAL)
    low, high = naive.find_bracket(naive.stratified_prefix_sums(uniforms), tolerance)
    assert np.all((low <= drawn) & (drawn <= high)), (uniforms, drawn, low, high)

    np.testing.assert_array_equal(tree.sample(batch_size, seed), drawn)  # an int seed is a fresh generator


def check_no_mass_refused(tree: SumTree) -> None:
    with pytest.raises(ValueError):
        tree.sample(4, 0)
    with pytest.raises(ValueError):
        tree.find([0.0])


# =====================================================================================================
# Property tests
# =====================================================================================================


@HYPOTHESIS_SETTINGS
@given(capacity=capacities, kind=st.sampled_from(sorted(PRIORITY_KINDS)), data=st.data())
def test_sum_tree_matches_reference_after_every_step(capacity: int, kind: str, data: st.DataObject) -> None:
    """Updates (repeated indices, distinct values: the last wins), zeroing, fills and reloads, in any
    order; after each step every query agrees with the brute-force reference."""
    priorities = PRIORITY_KINDS[kind]
    exact = kind == "integer"
    tree = SumTree(capacity)
    naive = reference.NaiveSumTree(capacity)
    assert tree.capacity == capacity

    steps = data.draw(st.lists(st.sampled_from(["update", "update", "update", "zero", "fill", "set_leaves"]),
                               min_size=1, max_size=6), label="steps")
    for step in steps:
        if step == "update":
            indices, values = data.draw(update_batches(capacity, priorities), label="update")
            tree.update(indices, values)
            naive.update(indices, values)
            final = reference.last_wins(indices, values)  # {index: the value of its last write}
            assert_bitwise_equal(tree.get(list(final)), np.array(list(final.values())))
        elif step == "zero":
            indices = data.draw(st.lists(st.integers(0, capacity - 1), max_size=min(capacity, 100)), label="zero")
            tree.update(np.array(indices, dtype=np.int64), 0.0)  # a scalar priority is broadcast
            naive.update(indices, [0.0] * len(indices))
        elif step == "fill":
            start = data.draw(st.integers(0, capacity), label="start")
            stop = data.draw(st.integers(start, capacity), label="stop")
            value = data.draw(priorities, label="fill value")
            tree.fill(start, stop, value)
            naive.fill(start, stop, value)
        else:
            seed = data.draw(st.integers(0, 2**32 - 1), label="leaves seed")
            leaves = numpy_priorities(kind, np.random.default_rng(seed), capacity)
            tree.set_leaves(leaves)
            naive.priorities[:] = leaves

        check_whole_tree(tree, naive)
        if naive.last_with_mass() >= 0:
            check_find(tree, naive, exact, data)
            check_sample(tree, naive, exact, data)
        else:
            assert tree.total() == 0.0
            check_no_mass_refused(tree)


@HYPOTHESIS_SETTINGS
@given(capacity=capacities, kind=st.sampled_from(sorted(PRIORITY_KINDS)), data=st.data())
def test_min_tree_matches_reference_after_every_step(capacity: int, kind: str, data: st.DataObject) -> None:
    """``MinTree``: unset leaves are inf, 0 is a value like any other, repeated index: the last wins."""
    tree = MinTree(capacity)
    naive = reference.NaiveMinTree(capacity)
    assert tree.min() == math.inf
    for _ in range(data.draw(st.integers(1, 5), label="steps")):
        indices, values = data.draw(update_batches(capacity, PRIORITY_KINDS[kind]), label="update")
        tree.update(indices, values)
        naive.update(indices, values)

        assert tree.min() == naive.min()
        assert_bitwise_equal(tree.get(np.arange(capacity)), naive.values)
        assert_bitwise_equal(tree.get(indices), naive.get(indices))
        assert_bitwise_equal(tree.arrays.min_tree, reference.cacheline_min_tree(naive.values))


@pytest.mark.parametrize("capacity", [1, 2, 3, 5, 1000, 1025])
def test_repeated_index_keeps_the_last_of_many_distinct_values(capacity: int) -> None:
    """One index written 50 times with distinct values in one batch holds the 50th; the total and
    the minimum see only that value."""
    tree = SumTree(capacity)
    index = capacity - 1
    values = np.linspace(1.0, 50.0, 50)[::-1].copy()  # [50], distinct, decreasing: the last is the smallest
    tree.update(np.full(50, index), values)
    assert tree.get([index]).tolist() == [1.0]
    assert tree.total() == 1.0
    assert tree.min() == 1.0
    values = np.linspace(1.0, 50.0, 50)  # increasing: the last is the largest
    tree.update(np.full(50, index), values)
    assert tree.get([index]).tolist() == [50.0]
    assert (tree.total(), tree.min()) == (50.0, 50.0)


# =====================================================================================================
# Drift
# =====================================================================================================


def test_total_does_not_drift_over_a_million_updates() -> None:
    """10^6 batched updates (2000 batches of 500, values log-uniform in 1e-8..1e6) into capacity
    100_003: the total still equals ``math.fsum`` of the leaves to 1e-12 relative, and every node
    equals a recompute from the leaves bit for bit (parents are recomputed, never patched by a delta).

    Without the JIT the kernels run as Python, so the test runs a smaller instance of the same thing.
    """
    capacity, batches, batch_size = (10_007, 40, 500) if JIT_DISABLED else (100_003, 2000, 500)
    rng = np.random.default_rng(20240601)
    tree = SumTree(capacity)
    naive = reference.NaiveSumTree(capacity)
    for _ in range(batches):
        indices = rng.integers(0, capacity, batch_size)  # [batch_size]
        values = 10.0 ** rng.uniform(-8.0, 6.0, batch_size)  # [batch_size]
        tree.update(indices, values)
        naive.update(indices.tolist(), values.tolist())

    leaves = tree.leaves()
    assert_bitwise_equal(leaves, naive.priorities)
    exact_total = math.fsum(leaves.tolist())
    assert math.isclose(tree.total(), exact_total, rel_tol=1e-12, abs_tol=0.0), (tree.total(), exact_total)
    assert_bitwise_equal(tree.arrays.sum_tree, reference.cacheline_sum_tree(leaves))
    assert tree.min() == naive.min()


# =====================================================================================================
# Validation: refuse bad input by name, before anything is written
# =====================================================================================================


def populated_sum_tree(capacity: int = 10) -> SumTree:
    tree = SumTree(capacity)
    tree.update(np.arange(capacity), np.arange(1.0, capacity + 1.0))
    return tree


def populated_min_tree(capacity: int = 10) -> MinTree:
    tree = MinTree(capacity)
    tree.update(np.arange(capacity - 1), np.arange(1.0, capacity))  # the last leaf stays unset (inf)
    return tree


def snapshot(tree: SumTree | MinTree) -> list[np.ndarray]:
    arrays = [tree.arrays.min_tree.copy()]
    if isinstance(tree, SumTree):
        arrays.append(tree.arrays.sum_tree.copy())
    return arrays


def assert_unchanged(tree: SumTree | MinTree, before: list[np.ndarray]) -> None:
    for after, saved in zip(snapshot(tree), before):
        assert_bitwise_equal(after, saved)


TREES = {"SumTree": populated_sum_tree, "MinTree": populated_min_tree}

BAD_PRIORITIES = [(math.nan, "nan"), (math.inf, "inf"), (-math.inf, "-inf"), (-0.5, "-0.5"),
                  (-1e-300, "-1e-300")]


@pytest.mark.parametrize("make_tree", TREES.values(), ids=TREES.keys())
@pytest.mark.parametrize("bad, text", BAD_PRIORITIES, ids=[text for _, text in BAD_PRIORITIES])
def test_update_refuses_invalid_priority_naming_the_first(make_tree, bad: float, text: str) -> None:
    """The valid values before the bad one must not be written either: validation comes first."""
    tree = make_tree()
    before = snapshot(tree)
    with pytest.raises(ValueError) as raised:
        tree.update([0, 1, 2, 3, 4], [100.0, 200.0, bad, 300.0, math.nan])
    message = str(raised.value)
    assert "[2]" in message and text in message
    assert "[4]" not in message
    assert_unchanged(tree, before)


@pytest.mark.parametrize("bad, text", BAD_PRIORITIES, ids=[text for _, text in BAD_PRIORITIES])
def test_set_leaves_and_fill_refuse_invalid_priority(bad: float, text: str) -> None:
    tree = populated_sum_tree(6)
    before = snapshot(tree)
    with pytest.raises(ValueError) as raised:
        tree.set_leaves([1.0, 2.0, 3.0, bad, 5.0, 6.0])
    assert "[3]" in str(raised.value) and text in str(raised.value)
    with pytest.raises(ValueError) as raised:
        tree.fill(0, 6, bad)
    assert text in str(raised.value)
    assert_unchanged(tree, before)


@pytest.mark.parametrize("make_tree", TREES.values(), ids=TREES.keys())
@pytest.mark.parametrize("bad_index", [-1, 10, 11, -10, 2**40])
def test_out_of_range_index_is_an_index_error(make_tree, bad_index: int) -> None:
    tree = make_tree(10)
    before = snapshot(tree)
    with pytest.raises(IndexError) as raised:
        tree.update([0, 1, bad_index, 2], [5.0, 6.0, 7.0, 8.0])
    assert "[2]" in str(raised.value) and str(bad_index) in str(raised.value)
    with pytest.raises(IndexError):
        tree.get([3, bad_index])
    assert_unchanged(tree, before)


@pytest.mark.parametrize("make_tree", TREES.values(), ids=TREES.keys())
@pytest.mark.parametrize("indices", [[0.0, 1.0], np.array([1.5]), np.float64(2.0), ["0"]],
                         ids=["float_list", "float_array", "float_scalar", "string"])
def test_non_integer_indices_are_a_type_error(make_tree, indices) -> None:
    """Float indices are refused rather than truncated."""
    tree = make_tree()
    before = snapshot(tree)
    with pytest.raises(TypeError):
        tree.update(indices, 5.0)
    with pytest.raises(TypeError):
        tree.get(indices)
    assert_unchanged(tree, before)


@pytest.mark.parametrize("make_tree", TREES.values(), ids=TREES.keys())
@pytest.mark.parametrize("priorities", [["1.0"], "a", [None], [1.0 + 2.0j]],
                         ids=["string_list", "string", "none", "complex"])
def test_non_real_priorities_are_a_type_error(make_tree, priorities) -> None:
    tree = make_tree()
    before = snapshot(tree)
    with pytest.raises(TypeError):
        tree.update([0], priorities)
    assert_unchanged(tree, before)


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8, np.float32])
def test_integer_and_float32_priorities_are_converted(dtype) -> None:
    tree = SumTree(4)
    tree.update(np.array([0, 2], dtype=np.int32), np.array([3, 4], dtype=dtype))
    got = tree.get([0, 1, 2, 3])
    assert got.dtype == np.float64
    assert got.tolist() == [3.0, 0.0, 4.0, 0.0]
    assert (tree.total(), tree.min()) == (7.0, 3.0)
    tree.update([1], [5])  # a Python int
    assert tree.get([1]).tolist() == [5.0]


@pytest.mark.parametrize("make_tree", TREES.values(), ids=TREES.keys())
@pytest.mark.parametrize("indices, priorities", [
    ([0, 1, 2], [1.0, 2.0]),
    ([0, 1], [1.0, 2.0, 3.0]),
    ([0, 1], [[1.0, 2.0]]),
    ([[0, 1]], [1.0, 2.0]),
    ([], [1.0]),
], ids=["fewer_priorities", "more_priorities", "priorities_2d", "indices_2d", "no_indices"])
def test_shape_mismatch_is_a_value_error(make_tree, indices, priorities) -> None:
    tree = make_tree()
    before = snapshot(tree)
    with pytest.raises(ValueError):
        tree.update(indices, priorities)
    assert_unchanged(tree, before)


def test_set_leaves_needs_one_priority_per_leaf() -> None:
    tree = populated_sum_tree(5)
    before = snapshot(tree)
    for leaves in ([1.0] * 4, [1.0] * 6, [[1.0] * 5]):
        with pytest.raises(ValueError):
            tree.set_leaves(leaves)
    assert_unchanged(tree, before)


@pytest.mark.parametrize("tree_type", [SumTree, MinTree])
@pytest.mark.parametrize("capacity, error", [
    (0, ValueError), (-1, ValueError), (2.5, TypeError), (True, TypeError), (np.bool_(True), TypeError),
    ("5", TypeError), (None, TypeError), (5.0, TypeError),
])
def test_invalid_capacity_is_refused(tree_type, capacity, error) -> None:
    with pytest.raises(error):
        tree_type(capacity)


@pytest.mark.parametrize("tree_type", [SumTree, MinTree])
def test_integer_capacities_are_accepted(tree_type) -> None:
    assert tree_type(1).capacity == 1
    assert tree_type(np.int64(7)).capacity == 7
    assert tree_type(np.uint8(3)).capacity == 3


@pytest.mark.parametrize("verb", ["sample", "find"])
def test_sample_and_find_refuse_a_tree_without_mass(verb: str) -> None:
    """Nothing added yet, and then every priority set back to 0: both refused with a message that
    says why (no priority mass)."""
    tree = SumTree(5)
    call = (lambda: tree.sample(3, 0)) if verb == "sample" else (lambda: tree.find([0.0]))
    with pytest.raises(ValueError) as raised:
        call()
    message = str(raised.value).lower()
    assert verb in message and "priorit" in message
    tree.update([0, 4], [1.0, 2.0])
    call()  # now fine
    tree.update([0, 4], [0.0, 0.0])
    assert tree.total() == 0.0 and tree.min() == math.inf
    with pytest.raises(ValueError) as raised:
        call()
    assert verb in str(raised.value).lower()


@pytest.mark.parametrize("bad", [-1e-300, -1.0, math.nan, math.inf, -math.inf, "just_above_total"])
def test_find_refuses_prefix_sums_outside_zero_to_total(bad) -> None:
    tree = populated_sum_tree(5)  # total 15
    total = tree.total()
    bad = float(np.nextafter(total, math.inf)) if bad == "just_above_total" else bad
    with pytest.raises(ValueError) as raised:
        tree.find([0.0, bad])
    assert "[1]" in str(raised.value)
    np.testing.assert_array_equal(tree.find([0.0, total]), [0, 4])  # both ends are allowed


@pytest.mark.parametrize("capacity, leaves", [
    (4, {0: 1.0, 2: 1e-300, 3: 1e-300}),
    (6, {1: 3.0, 4: 1e-20, 5: 1e-20}),
    (100, {0: 1e6, 16: 0.5, 70: 1e-150, 90: 1e-150}),
], ids=["capacity_4", "capacity_6", "capacity_100"])
def test_find_at_total_returns_last_leaf_with_mass_when_tiny_masses_round_away(capacity: int, leaves) -> None:
    """``find(total())`` maps to the last leaf with mass (the documented contract), also when the
    masses after some leaf are too small to change the rounded total: there the rounded total equals
    the boundary after that leaf, and the descent must still run to the end."""
    tree = SumTree(capacity)
    tree.update(list(leaves), list(leaves.values()))
    assert tree.find([tree.total()]).tolist() == [max(leaves)]


@pytest.mark.parametrize("batch_size, error", [(0, ValueError), (-1, ValueError), (2.5, TypeError),
                                                (True, TypeError)])
def test_sample_refuses_invalid_batch_size(batch_size, error) -> None:
    with pytest.raises(error):
        populated_sum_tree().sample(batch_size, 0)


def test_sample_refuses_an_invalid_rng() -> None:
    with pytest.raises(TypeError):
        populated_sum_tree().sample(4, "seed")


@pytest.mark.parametrize("start, stop", [(-1, 3), (3, 2), (0, 11), (11, 11)])
def test_fill_refuses_a_range_outside_the_tree(start: int, stop: int) -> None:
    tree = populated_sum_tree(10)
    before = snapshot(tree)
    with pytest.raises(IndexError):
        tree.fill(start, stop, 1.0)
    assert_unchanged(tree, before)


@pytest.mark.parametrize("start, stop", [(0.5, 3), (1, 2.5), (1.0, 3)])
def test_fill_refuses_float_bounds_with_a_type_error(start, stop) -> None:
    """Like float indices everywhere else: a TypeError from the wrapper, tree unchanged."""
    tree = populated_sum_tree(10)
    before = snapshot(tree)
    with pytest.raises(TypeError):
        tree.fill(start, stop, 1.0)
    assert_unchanged(tree, before)


# =====================================================================================================
# Statistics: sampled frequencies follow priorities / total
# =====================================================================================================


def spread_priorities() -> np.ndarray:
    """97 priorities log-uniform over 1e-8..1e6, with the extremes present and zero-mass leaves
    (the last leaf among them)."""
    rng = np.random.default_rng(97)
    priorities = 10.0 ** rng.uniform(-8.0, 6.0, 97)  # [97]
    priorities[[10, 11]] = 1e-8
    priorities[50] = 1e6
    priorities[[3, 40, 96]] = 0.0
    return priorities


def test_chi_square_test_rejects_an_off_by_one_sampler() -> None:
    """The statistical test below has power: counts from priorities shifted by one leaf (the
    classic descent bug) or flattened to p**0.95 are rejected."""
    priorities = spread_priorities()
    rng = np.random.default_rng(1)
    mass = priorities > 0.0
    for wrong in (np.roll(priorities, 1), priorities**0.95):
        counts = rng.multinomial(200_000, wrong / wrong.sum())
        _, _, p_value = reference.chi_square_test(counts[mass], priorities[mass])
        assert p_value < 1e-6
    counts = rng.multinomial(200_000, priorities / priorities.sum())
    assert reference.chi_square_test(counts[mass], priorities[mass])[2] > 1e-3


def test_single_draws_follow_priorities_chi_square() -> None:
    """``sample(1, rng)`` repeated is an i.i.d. categorical draw: Pearson's chi-square against
    priorities / total, bins expecting fewer than 5 counts merged (smallest first), so the 1e-8
    leaves are pooled instead of dividing by an expected count of ~1e-9. Zero-mass leaves: never."""
    priorities = spread_priorities()
    tree = SumTree(priorities.shape[0])
    tree.set_leaves(priorities)
    rng = np.random.default_rng(2024)
    draws = 50_000 if JIT_DISABLED else 200_000
    counts = np.bincount(np.concatenate([tree.sample(1, rng) for _ in range(draws)]),
                         minlength=priorities.shape[0])  # [97]

    assert counts[priorities == 0.0].sum() == 0
    mass = priorities > 0.0
    statistic, dof, p_value = reference.chi_square_test(counts[mass], priorities[mass])
    assert dof >= 20  # enough bins survive merging for the test to mean something
    assert p_value > 1e-3, (statistic, dof, p_value)


def test_stratified_batches_follow_priorities() -> None:
    """Stratified sampling is tighter than i.i.d.: within one batch of B, leaf i is drawn
    B * p_i / total times, give or take 2 (the slices lying inside its mass interval are always
    drawn there; at most the two it straddles add or miss one each). Pooled over batches, the
    counts also pass the chi-square test (conservative here: stratification only lowers variance)."""
    priorities = spread_priorities()
    tree = SumTree(priorities.shape[0])
    tree.set_leaves(priorities)
    expected_per_batch = 512 * priorities / math.fsum(priorities.tolist())  # [97]
    rng = np.random.default_rng(7)
    pooled = np.zeros(priorities.shape[0], dtype=np.int64)
    for _ in range(200 if JIT_DISABLED else 1000):
        counts = np.bincount(tree.sample(512, rng), minlength=priorities.shape[0])  # [97]
        assert np.max(np.abs(counts - expected_per_batch)) <= 2.0
        assert counts[priorities == 0.0].sum() == 0
        pooled += counts
    mass = priorities > 0.0
    statistic, dof, p_value = reference.chi_square_test(pooled[mass], priorities[mass])
    assert p_value > 1e-3, (statistic, dof, p_value)
