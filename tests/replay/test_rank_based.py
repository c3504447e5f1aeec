"""Rank-based PER: P(i) = rank_i^-alpha / sum_{r<=N} r^-alpha once sorted, stratification, IS weights.

Ranks are computed here from the priorities the tests set (``reference_buffers.exact_ranks``), so
after ``sort()`` the buffer's order is checked against an independent one.
"""

from __future__ import annotations

import numpy as np
import pytest
from reference import chi_square_test
from reference_buffers import exact_ranks, is_weights, mass_intervals, rank_probabilities

from r2d2kit.replay import ReplayBuffer

FIELDS = {"obs": ((2,), "float32"), "action": ((), "int64")}


def filled_buffer(priorities, capacity: int, alpha: float, seed: int = 0, sort: bool = True,
                  **params) -> ReplayBuffer:
    """Slot ``i`` holds item ``i`` with priority ``priorities[i]``; sorted exactly unless ``sort=False``."""
    priorities = np.asarray(priorities, dtype=np.float64)
    ids = np.arange(priorities.size)
    buf = ReplayBuffer(capacity, FIELDS, alpha=alpha, seed=seed, **params, sampler="rank")
    buf.add_batch(obs=np.stack([ids, -ids], axis=1).astype(np.float32), action=ids)
    buf.update_priorities(ids, priorities)
    if sort:
        buf.sampler.sort()
    return buf


def distinct_priorities(count: int, seed: int) -> np.ndarray:
    values = np.random.default_rng(seed).permutation(np.logspace(-6, 4, count))
    assert np.unique(values).size == count
    return values


def draw_counts(buf, draws: int, batch_size: int) -> np.ndarray:
    samples = [buf.sample(batch_size, beta=0.4) for _ in range(draws // batch_size)]
    indices = np.concatenate([sample["indices"] for sample in samples])
    np.testing.assert_array_equal(np.concatenate([sample["action"] for sample in samples]), indices)
    return np.bincount(indices, minlength=len(buf))


# =====================================================================================================
# Sampling distribution after sort()
# =====================================================================================================


@pytest.mark.slow
@pytest.mark.parametrize("alpha", [0.7, 1.0])
def test_sampling_frequencies_match_rank_power_law(alpha):
    """40 of 50 slots filled: the normaliser runs over N = 40 ranks, not the capacity."""
    priorities = distinct_priorities(40, seed=1)
    buf = filled_buffer(priorities, capacity=50, alpha=alpha, seed=2)
    np.testing.assert_array_equal(buf.sampler.ranks(np.arange(40)), exact_ranks(priorities))
    counts = draw_counts(buf, 40_000, batch_size=1)
    probabilities = rank_probabilities(exact_ranks(priorities), alpha)
    statistic, dof, p_value = chi_square_test(counts, probabilities)
    assert dof >= 20
    assert p_value > 1e-4, (statistic, dof)
    # power: the same counts reject a nearby exponent
    assert chi_square_test(counts, rank_probabilities(exact_ranks(priorities), alpha + 0.1))[2] < 1e-9


def test_sampling_frequencies_with_stratified_batches_after_wraparound():
    priorities = distinct_priorities(30, seed=3)
    buf = ReplayBuffer(30, FIELDS, alpha=0.7, seed=4, sampler="rank")
    ids = np.arange(75)
    buf.add_batch(obs=np.stack([ids, ids], axis=1).astype(np.float32), action=ids)  # wraps twice and a half
    buf.update_priorities(np.arange(30), priorities)  # 30 updates = sort_every: sorted automatically
    np.testing.assert_array_equal(buf.sampler.ranks(np.arange(30)), exact_ranks(priorities))
    samples = [buf.sample(32, beta=0.4) for _ in range(1500)]
    indices = np.concatenate([sample["indices"] for sample in samples])
    counts = np.bincount(indices, minlength=30)
    assert chi_square_test(counts, rank_probabilities(exact_ranks(priorities), 0.7))[2] > 1e-4


def test_alpha_zero_is_uniform():
    buf = filled_buffer(distinct_priorities(25, seed=5), capacity=25, alpha=0.0, seed=6)
    counts = draw_counts(buf, 20_000, batch_size=1)
    assert chi_square_test(counts, np.full(25, 1 / 25))[2] > 1e-4
    np.testing.assert_array_equal(buf.sample(100, beta=1.0)["weights"], 1.0)


# =====================================================================================================
# Stratification over the rank distribution
# =====================================================================================================


@pytest.mark.parametrize("batch_size", [1, 3, 16, 64])
def test_each_draw_falls_in_its_slice_of_rank_mass(batch_size):
    priorities = distinct_priorities(45, seed=7)
    buf = filled_buffer(priorities, capacity=60, alpha=0.7, seed=8)
    ranks = exact_ranks(priorities)
    low_by_rank, high_by_rank = mass_intervals(np.arange(1, 46, dtype=np.float64) ** -0.7)
    total = high_by_rank[-1]
    slices = np.arange(batch_size + 1) * total / batch_size
    tolerance = 1e-9 * total
    for _ in range(200):
        sampled_ranks = ranks[buf.sample(batch_size, beta=0.4)["indices"]]
        low, high = low_by_rank[sampled_ranks - 1], high_by_rank[sampled_ranks - 1]
        assert np.all(low <= slices[1:] + tolerance)
        assert np.all(high >= slices[:-1] - tolerance)


# =====================================================================================================
# IS weights: (N P(i))^-beta / max_j, with exact ranks after sort()
# =====================================================================================================


@pytest.mark.parametrize("alpha", [0.0, 0.7, 1.0])
@pytest.mark.parametrize("beta", [0.0, 0.4, 1.0])
@pytest.mark.parametrize("size", [1, 17, 40])
def test_is_weights_match_the_formula(alpha, beta, size):
    priorities = distinct_priorities(size, seed=9)
    buf = filled_buffer(priorities, capacity=40, alpha=alpha, seed=10)
    probabilities = rank_probabilities(exact_ranks(priorities), alpha)
    for _ in range(3):
        sample = buf.sample(256, beta=beta)
        assert sample["weights"].dtype == np.float32
        np.testing.assert_allclose(sample["weights"], is_weights(probabilities, sample["indices"], beta), rtol=1e-6)
        assert np.all(sample["weights"] <= 1.0)
    lowest = int(np.argmin(priorities))
    sample = buf.sample(4000, beta=beta)
    assert np.any(sample["indices"] == lowest)
    assert np.all(sample["weights"][sample["indices"] == lowest] == 1.0)


def test_is_weights_hand_checked():
    """alpha = beta = 1, priorities [0.3, 5.0, 1.0, 0.1] -> ranks [3, 1, 2, 4], N = 4.

    P(rank r) = (1/r) / (1 + 1/2 + 1/3 + 1/4); (N P)^-1 is proportional to r, so the weights are
    r / 4: slots -> [0.75, 0.25, 0.5, 1.0].
    """
    buf = filled_buffer([0.3, 5.0, 1.0, 0.1], capacity=6, alpha=1.0, seed=11)
    np.testing.assert_array_equal(buf.sampler.ranks([0, 1, 2, 3]), [3, 1, 2, 4])
    expected = np.array([0.75, 0.25, 0.5, 1.0], dtype=np.float32)
    sample = buf.sample(500, beta=1.0)
    np.testing.assert_array_equal(sample["weights"], expected[sample["indices"]])
    assert set(sample["indices"].tolist()) == {0, 1, 2, 3}


def test_weights_follow_the_heap_positions_before_a_sort():
    """Between sorts the heap position stands in for the rank (documented approximation)."""
    priorities = distinct_priorities(20, seed=12)
    buf = filled_buffer(priorities, capacity=20, alpha=0.7, seed=13, sort=False, sort_every=10_000)
    buf.update_priorities([3, 7, 3], [1e5, 2e-7, 0.5])
    ranks = buf.sampler.ranks(np.arange(20))
    assert sorted(ranks.tolist()) == list(range(1, 21))
    sample = buf.sample(300, beta=0.6)
    np.testing.assert_allclose(sample["weights"],
                               is_weights(rank_probabilities(ranks, 0.7), sample["indices"], 0.6), rtol=1e-6)


# =====================================================================================================
# Ranks, sorting and max-priority bookkeeping
# =====================================================================================================


def test_sort_every_triggers_an_exact_sort():
    buf = filled_buffer(distinct_priorities(12, seed=14), capacity=12, alpha=0.7, seed=15, sort=True, sort_every=4)
    rng = np.random.default_rng(16)
    current = distinct_priorities(12, seed=14)
    for _ in range(5):
        indices = rng.choice(12, size=4, replace=False)
        values = rng.uniform(0, 100, size=4)
        current[indices] = values
        buf.update_priorities(indices, values)  # 4 values = sort_every: sorted afterwards
        np.testing.assert_array_equal(buf.sampler.ranks(np.arange(12)), exact_ranks(current))


def test_new_items_get_the_running_max_priority_and_rank_first():
    buf = filled_buffer([0.5, 0.3, 0.2], capacity=5, alpha=0.7, seed=17)
    assert buf.max_priority == 1.0
    buf.add(obs=np.zeros(2, np.float32), action=3)  # priority 1.0 beats 0.5
    buf.sampler.sort()
    np.testing.assert_array_equal(buf.sampler.ranks([0, 1, 2, 3]), [2, 3, 4, 1])
    buf.update_priorities([3, 3], [7.0, 0.1])  # 7.0 raises the max even though 0.1 wins for slot 3
    assert buf.max_priority == 7.0
    buf.add(obs=np.zeros(2, np.float32), action=4)  # slot 4 at 7.0
    buf.sampler.sort()
    np.testing.assert_array_equal(buf.sampler.ranks([0, 1, 2, 3, 4]), [2, 3, 4, 5, 1])
    buf.add(obs=np.zeros(2, np.float32), action=5)  # wraps onto slot 0, also at 7.0: ties share the top two
    buf.sampler.sort()
    assert sorted(buf.sampler.ranks([0, 4]).tolist()) == [1, 2]
    np.testing.assert_array_equal(buf.sampler.ranks([1, 2, 3]), [3, 4, 5])


def test_repeated_index_last_value_wins():
    """Slot 0 gets 10.0 then 0.5 in one call: the last value (0.5) decides its rank; 10.0 still raises the max."""
    buf = filled_buffer([1.0, 2.0, 3.0], capacity=4, alpha=0.7, sort_every=1)
    buf.update_priorities([0, 2, 0], [10.0, 2.5, 0.5])
    np.testing.assert_array_equal(buf.sampler.ranks([0, 1, 2]), [3, 2, 1])
    assert buf.max_priority == 10.0
    buf.update_priorities([1, 1], [0.1, 7.0])
    np.testing.assert_array_equal(buf.sampler.ranks([0, 1, 2]), [3, 1, 2])


def test_ranks_validates_indices():
    buf = filled_buffer([1.0, 2.0], capacity=4, alpha=0.7)
    assert buf.sampler.ranks([2, 0]).tolist() == [0, 2]  # slot 2 holds nothing: rank 0
    with pytest.raises(IndexError, match=r"slots\[0\] = 4"):
        buf.sampler.ranks([4])
