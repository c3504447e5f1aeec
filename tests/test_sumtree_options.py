"""SumTree(track_min=False) behaves exactly like the default tree, minus min()."""

import numpy as np
import pytest

from r2d2kit import SumTree


@pytest.mark.parametrize("capacity", [1, 7, 1000])
def test_untracked_min_tree_gives_identical_sums_finds_and_samples(capacity):
    rng = np.random.default_rng(capacity)
    tracked, untracked = SumTree(capacity), SumTree(capacity, track_min=False)
    for _ in range(50):
        indices = rng.integers(0, capacity, size=rng.integers(1, 40))
        values = rng.uniform(0, 5, size=indices.size) * (rng.random(indices.size) > 0.2)
        for tree in (tracked, untracked):
            tree.update(indices, values)
        start = int(rng.integers(0, capacity))
        stop = int(rng.integers(start, capacity + 1))
        for tree in (tracked, untracked):
            tree.fill(start, stop, 1.5)
        assert untracked.total() == tracked.total()
        np.testing.assert_array_equal(untracked.leaves(), tracked.leaves())
        np.testing.assert_array_equal(untracked.arrays.sum_tree, tracked.arrays.sum_tree)
        if tracked.total() > 0:
            np.testing.assert_array_equal(untracked.sample(64, np.random.default_rng(1)),
                                          tracked.sample(64, np.random.default_rng(1)))


def test_untracked_min_refuses_with_a_clear_message():
    tree = SumTree(4, track_min=False)
    tree.update([0], [1.0])
    with pytest.raises(RuntimeError, match="track_min=True"):
        tree.min()
