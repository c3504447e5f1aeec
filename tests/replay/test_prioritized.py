"""Proportional PER: sampling distribution, stratification, IS weights, max-priority bookkeeping.

Expectations are float64 numpy formulas from Schaul et al. 2016 (``reference_buffers``), applied to the
priorities the tests set themselves. The chi-square survival function (``reference``, no scipy) has
its own tests first.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from reference import chi_square_sf, chi_square_test, merge_small_bins, wilson_hilferty_sf
from reference_buffers import is_weights, mass_intervals, per_probabilities

from r2d2kit.replay import ReplayBuffer

FIELDS = {"obs": ((2,), "float32"), "action": ((), "int64")}


def filled_buffer(priorities, capacity: int, alpha: float, eps: float, seed: int = 0) -> ReplayBuffer:
    """A buffer whose slot ``i`` holds item ``i`` with priority ``priorities[i]`` (set via update_priorities)."""
    priorities = np.asarray(priorities, dtype=np.float64)
    size = priorities.size
    buf = ReplayBuffer(capacity, FIELDS, alpha=alpha, eps=eps, seed=seed, sampler="proportional")
    ids = np.arange(size)
    buf.add_batch(obs=np.stack([ids, -ids], axis=1).astype(np.float32), action=ids)
    buf.update_priorities(ids, priorities)
    return buf


def draw_counts(buf, draws: int, batch_size: int) -> np.ndarray:
    samples = [buf.sample(batch_size, beta=0.4) for _ in range(draws // batch_size)]
    indices = np.concatenate([sample["indices"] for sample in samples])
    actions = np.concatenate([sample["action"] for sample in samples])
    np.testing.assert_array_equal(actions, indices)  # slot i holds item i: fields follow the indices
    return np.bincount(indices, minlength=len(buf))


def log_spread_priorities(count: int, low: float, high: float, seed: int) -> np.ndarray:
    """``count`` priorities log-spaced from ``low`` to ``high``, shuffled over the slots."""
    values = np.logspace(math.log10(low), math.log10(high), count)
    return np.random.default_rng(seed).permutation(values)


# =====================================================================================================
# The chi-square machinery (tested before it is trusted)
# =====================================================================================================


@pytest.mark.parametrize("x", [0.01, 0.5, 1.0, 3.7, 10.0, 25.0, 80.0])
@pytest.mark.parametrize("dof", [2, 4, 10, 40])
def test_chi_square_sf_even_dof_closed_form(x, dof):
    """For even dof = 2k: P(X >= x) = exp(-x/2) sum_{j<k} (x/2)^j / j!."""
    half = x / 2.0
    expected = math.exp(-half) * math.fsum(half**j / math.factorial(j) for j in range(dof // 2))
    assert chi_square_sf(x, dof) == pytest.approx(expected, rel=1e-10, abs=1e-300)


@pytest.mark.parametrize("x", [0.001, 0.3, 1.0, 2.5, 9.0, 30.0, 70.0])
def test_chi_square_sf_odd_dof_closed_forms(x):
    """dof 1: erfc(sqrt(x/2)); dof 3: erfc(sqrt(x/2)) + sqrt(2x/pi) exp(-x/2)."""
    one = math.erfc(math.sqrt(x / 2))
    three = one + math.sqrt(2 * x / math.pi) * math.exp(-x / 2)
    assert chi_square_sf(x, 1) == pytest.approx(one, rel=1e-10, abs=1e-300)
    assert chi_square_sf(x, 3) == pytest.approx(three, rel=1e-10, abs=1e-300)


@pytest.mark.parametrize("dof", [15, 50, 200])
@pytest.mark.parametrize("quantile", [0.5, 1.0, 1.3, 1.8])
def test_chi_square_sf_agrees_with_wilson_hilferty(dof, quantile):
    x = quantile * dof
    assert chi_square_sf(x, dof) == pytest.approx(wilson_hilferty_sf(x, dof), abs=5e-3)
    assert chi_square_sf(0.0, dof) == 1.0


def test_merge_small_bins_keeps_totals_and_reaches_five():
    rng = np.random.default_rng(0)
    expected = rng.exponential(3.0, 40)
    observed = rng.poisson(expected).astype(float)
    merged_e, merged_o = merge_small_bins(expected, observed)
    assert merged_e.sum() == pytest.approx(expected.sum())
    assert merged_o.sum() == observed.sum()
    assert np.all(merged_e >= 5.0)


def test_chi_square_test_accepts_multinomial_draws_and_rejects_wrong_probabilities():
    """The test has both size and power on synthetic data before it judges the buffer."""
    rng = np.random.default_rng(1)
    probabilities = per_probabilities(log_spread_priorities(40, 1e-4, 1e2, 0), 0.6)
    counts = rng.multinomial(50_000, probabilities)
    assert chi_square_test(counts, probabilities)[2] > 1e-3
    wrong = per_probabilities(log_spread_priorities(40, 1e-4, 1e2, 0), 0.55)
    assert chi_square_test(counts, wrong)[2] < 1e-9


# =====================================================================================================
# Sampling distribution: P(i) = p_i^alpha / sum_k p_k^alpha
# =====================================================================================================


@pytest.mark.slow
@pytest.mark.parametrize("alpha", [0.6, 1.0])
def test_sampling_frequencies_match_p_alpha(alpha):
    """Priorities 1e-8 .. 1e6 (plus one 0) with eps = 0: independent single draws vs p^alpha / sum p^alpha.

    The buffer is partly filled (49 of 60 slots) and its capacity is not a power of two.
    """
    priorities = np.append(log_spread_priorities(48, 1e-8, 1e6, seed=2), 0.0)
    buf = filled_buffer(priorities, capacity=60, alpha=alpha, eps=0.0, seed=123)
    counts = draw_counts(buf, 60_000, batch_size=1)
    probabilities = per_probabilities(priorities, alpha)
    assert counts[-1] == 0, "a zero-priority item (eps=0) must never be sampled"
    statistic, dof, p_value = chi_square_test(counts, probabilities)
    assert dof >= 8
    assert p_value > 1e-4, (statistic, dof)
    # The same counts are far from the neighbouring hypothesis: the test has power here.
    assert chi_square_test(counts, per_probabilities(priorities, alpha * 0.95))[2] < 1e-9


def test_sampling_frequencies_match_p_alpha_with_stratified_batches():
    """Large batches are stratified (less variance than multinomial): the chi-square stays valid, conservatively."""
    priorities = log_spread_priorities(33, 1e-8, 1e6, seed=3)
    buf = filled_buffer(priorities, capacity=33, alpha=0.6, eps=0.0, seed=7)
    counts = draw_counts(buf, 64 * 1000, batch_size=64)
    _, dof, p_value = chi_square_test(counts, per_probabilities(priorities, 0.6))
    assert dof >= 8 and p_value > 1e-4


def test_alpha_zero_is_uniform_over_stored_items():
    priorities = log_spread_priorities(20, 1e-3, 1e3, seed=4)
    buf = filled_buffer(priorities, capacity=32, alpha=0.0, eps=1e-6, seed=5)
    counts = draw_counts(buf, 20_000, batch_size=1)
    assert chi_square_test(counts, np.full(20, 1 / 20))[2] > 1e-4


def test_tree_leaves_are_shifted_priorities_to_the_alpha():
    """alpha = 1, eps = 0.5, priorities [0.5, 1.5, 2.5, 3.5] -> leaves [1, 2, 3, 4]::

                    10
               3          7
            1     2     3     4
    """
    buf = filled_buffer([0.5, 1.5, 2.5, 3.5], capacity=4, alpha=1.0, eps=0.5)
    np.testing.assert_array_equal(buf.sampler.tree.get([0, 1, 2, 3]), [1.0, 2.0, 3.0, 4.0])
    assert buf.sampler.tree.total() == 10.0 and buf.sampler.tree.min() == 1.0
    np.testing.assert_array_equal(buf.sampler.tree.find([0.0, 0.999, 1.0, 2.99, 3.0, 6.0, 9.99]), [0, 0, 1, 1, 2, 3, 3])


# =====================================================================================================
# Stratification: sample i of a batch of B comes from the i-th equal slice of the total mass
# =====================================================================================================


@pytest.mark.parametrize("batch_size", [1, 2, 7, 64])
def test_each_draw_falls_in_its_slice_of_mass(batch_size):
    priorities = log_spread_priorities(45, 1e-3, 1e3, seed=6)
    buf = filled_buffer(priorities, capacity=50, alpha=0.7, eps=0.01, seed=8)
    low, high = mass_intervals((priorities + 0.01) ** 0.7)
    total = high[-1]
    slices = np.arange(batch_size + 1) * total / batch_size
    tolerance = 1e-9 * total
    for _ in range(200):
        indices = buf.sample(batch_size, beta=0.4)["indices"]
        assert np.all(np.diff(indices) >= 0)
        # item k owns [low_k, high_k); draw i's prefix sum lies in [slice_i, slice_{i+1})
        assert np.all(low[indices] <= slices[1:] + tolerance)
        assert np.all(high[indices] >= slices[:-1] - tolerance)


def test_draw_distribution_within_each_slice():
    """Within slice i, item k is drawn with probability overlap(k, slice i) / slice width."""
    priorities = np.array([5.0, 1.0, 8.0, 2.0, 0.5, 3.0, 4.0, 0.25, 6.0, 1.5])
    batch_size = 4
    buf = filled_buffer(priorities, capacity=12, alpha=1.0, eps=0.0, seed=9)
    low, high = mass_intervals(priorities)
    width = high[-1] / batch_size
    counts = np.zeros((batch_size, priorities.size), dtype=np.int64)
    for _ in range(6000):
        indices = buf.sample(batch_size, beta=0.4)["indices"]
        counts[np.arange(batch_size), indices] += 1
    for i in range(batch_size):
        overlap = np.clip(np.minimum(high, (i + 1) * width) - np.maximum(low, i * width), 0.0, None)
        assert np.all(counts[i][overlap == 0] == 0)
        assert chi_square_test(counts[i], overlap / width)[2] > 1e-4 / batch_size


# =====================================================================================================
# Importance-sampling weights: w_i = (N P(i))^-beta / max_j w_j, max over the stored items
# =====================================================================================================


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
@pytest.mark.parametrize("eps", [0.0, 1e-6, 0.3])
@pytest.mark.parametrize("beta", [0.0, 0.4, 1.0])
def test_is_weights_match_the_formula(alpha, eps, beta):
    priorities = log_spread_priorities(37, 1e-8, 1e6, seed=10)
    buf = filled_buffer(priorities, capacity=50, alpha=alpha, eps=eps, seed=11)
    probabilities = per_probabilities(priorities + eps, alpha)  # N = len(buf) = 37
    for _ in range(4):
        sample = buf.sample(512, beta=beta)
        weights = sample["weights"]
        assert weights.dtype == np.float32
        np.testing.assert_allclose(weights, is_weights(probabilities, sample["indices"], beta), rtol=1e-6, atol=0)
        assert np.all(weights <= 1.0)


def test_is_weights_hand_checked():
    """alpha = 1, eps = 0, priorities [1, 4, 16], beta = 0.5: P = [1, 4, 16] / 21, N = 3.

    (N P)^-0.5 = sqrt(7) * [1, 1/2, 1/4]; divided by the max (item 0): weights [1, 0.5, 0.25].
    Batches of 1 show that the max is over the stored items, not the batch.
    """
    buf = filled_buffer([1.0, 4.0, 16.0], capacity=5, alpha=1.0, eps=0.0, seed=12)
    expected = {0: 1.0, 1: 0.5, 2: 0.25}
    seen = set()
    for _ in range(300):
        sample = buf.sample(1, beta=0.5)
        index = int(sample["indices"][0])
        seen.add(index)
        assert sample["weights"][0] == np.float32(expected[index])
    assert seen == {0, 1, 2}


def test_min_priority_item_has_weight_exactly_one():
    priorities = log_spread_priorities(30, 0.5, 5.0, seed=13)
    buf = filled_buffer(priorities, capacity=30, alpha=0.6, eps=0.01, seed=14)
    lowest = int(np.argmin(priorities))
    sample = buf.sample(4000, beta=0.7)
    hits = sample["indices"] == lowest
    assert hits.any(), "the lowest-priority item should be drawn in 4000 draws"
    assert np.all(sample["weights"][hits] == 1.0)
    assert np.all(sample["weights"][~hits] < 1.0)


def test_weights_are_normalised_by_the_current_minimum_after_overwrite():
    """The minimum item is overwritten by a new one (at max priority): the weights' reference moves."""
    buf = filled_buffer([0.1, 2.0, 3.0], capacity=3, alpha=1.0, eps=0.0, seed=15)
    buf.add(obs=np.zeros(2, np.float32), action=3)  # overwrites slot 0 with priority max = 3.0
    stored = np.array([3.0, 2.0, 3.0])
    sample = buf.sample(300, beta=1.0)
    np.testing.assert_allclose(sample["weights"], is_weights(per_probabilities(stored, 1.0), sample["indices"], 1.0),
                               rtol=1e-6)
    assert sample["weights"][sample["indices"] == 1].tolist() == [1.0] * int(np.sum(sample["indices"] == 1))


# =====================================================================================================
# New items get the running max of priority + eps (1.0 until a larger one is seen)
# =====================================================================================================


def test_new_items_get_the_running_max_priority():
    buf = ReplayBuffer(8, FIELDS, alpha=0.5, eps=0.1, seed=0, sampler="proportional")
    buf.add(obs=np.zeros(2, np.float32), action=0)
    assert buf.max_priority == 1.0
    assert buf.sampler.tree.get(0)[0] == 1.0
    buf.update_priorities([0], [0.2])  # below the initial max: max stays 1.0
    buf.add(obs=np.zeros(2, np.float32), action=1)
    assert buf.max_priority == 1.0 and buf.sampler.tree.get(1)[0] == 1.0
    buf.update_priorities([0, 1, 0], [5.0, 0.3, 0.4])  # 5.0 was overwritten by 0.4 but still counts
    assert buf.max_priority == 5.0 + 0.1
    np.testing.assert_allclose(buf.sampler.tree.get([0, 1]), np.array([0.5, 0.4]) ** 0.5, rtol=1e-15)
    buf.add_batch(obs=np.zeros((2, 2), np.float32), action=np.array([2, 3]))
    np.testing.assert_allclose(buf.sampler.tree.get([2, 3]), [5.1**0.5] * 2, rtol=1e-15)
    np.testing.assert_array_equal(buf.sampler.tree.get([4, 5, 6, 7]), 0.0)


def test_a_new_item_is_the_only_one_sampled_when_the_rest_have_no_mass():
    buf = filled_buffer([0.0, 0.0, 0.0], capacity=5, alpha=0.6, eps=0.0, seed=16)
    buf.add(obs=np.zeros(2, np.float32), action=99)  # slot 3, priority 1.0
    sample = buf.sample(50, beta=1.0)
    assert set(sample["indices"].tolist()) == {3}
    assert set(sample["action"].tolist()) == {99}
    np.testing.assert_array_equal(sample["weights"], 1.0)


def test_overwritten_slots_get_the_max_priority_after_wraparound():
    buf = filled_buffer([2.0, 3.0, 4.0], capacity=3, alpha=1.0, eps=0.25)
    buf.update_priorities([0, 1, 2], [0.5, 0.5, 0.5])  # max stays 4.25
    buf.add_batch(obs=np.zeros((2, 2), np.float32), action=np.array([7, 8]))  # slots 0, 1
    np.testing.assert_array_equal(buf.sampler.tree.get([0, 1, 2]), [4.25, 4.25, 0.75])
    assert buf.sampler.tree.total() == 9.25 and buf.sampler.tree.min() == 0.75
    buf.add_batch(obs=np.zeros((7, 2), np.float32), action=np.arange(7))  # more than the capacity
    np.testing.assert_array_equal(buf.sampler.tree.get([0, 1, 2]), [4.25] * 3)


@pytest.mark.parametrize("alpha, priority", [(1.0, 1e308), (2.0, 1e200), (0.5, 1e308)])
def test_a_priority_that_would_overflow_the_tree_is_refused_and_nothing_changes(alpha, priority):
    """1e308 with alpha 1 used to make the tree total inf: the same slot was drawn every time."""
    buf = filled_buffer([1.0, 2.0, 3.0], capacity=8, alpha=alpha, eps=1e-6)
    limit = buf.sampler.priority_limit
    if alpha >= 1.0:  # the closed form: 8 slots just below the limit fit; twice the limit would not
        assert 8 * (limit + 1e-6) ** alpha < np.finfo(np.float64).max <= 8 * (2 * limit) ** alpha * 4
    else:  # below 1 every finite priority fits
        assert limit == math.inf
    before = buf.sampler.tree.get(np.arange(8)).copy()
    if priority < limit:  # alpha 0.5: 1e308 ** 0.5 summed over 8 slots is finite, so it is accepted
        buf.update_priorities([0], [priority])
        assert math.isfinite(buf.sampler.tree.total())
        return
    with pytest.raises(ValueError, match=r"priorities\[1\] = .* is too large: .* below"):
        buf.update_priorities([0, 1], [0.5, priority])
    np.testing.assert_array_equal(buf.sampler.tree.get(np.arange(8)), before)
    assert buf.max_priority == 3.0 + 1e-6
