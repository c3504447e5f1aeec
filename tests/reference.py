"""Brute-force numpy references for r2d2kit (in the manner of STUMPY's ``tests/naive.py``).

Everything here is slow and obvious on purpose: plain arrays, Python loops, ``math.fsum``,
``np.searchsorted(np.cumsum(...))``. Tests compare the compiled kernels and the validated API against
these functions; nothing in this module imports r2d2kit, so a bug there cannot leak into the
expectations.

Sections:
    * Sum tree and min tree (priorities, last-wins updates, find, stratified sampling, flat layout)
    * Validation scans (first invalid priority, first out-of-range index)
    * Statistics (chi-square survival function and test, bin merging)
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

# =====================================================================================================
# Sum tree and min tree
# =====================================================================================================


def last_wins(indices: Iterable[int], values: Iterable[float]) -> dict[int, float]:
    """Final value per index after writing ``values`` at ``indices`` in order (a repeated index: last wins)."""
    final: dict[int, float] = {}
    for index, value in zip(indices, values):
        final[int(index)] = float(value)
    return final


class NaiveSumTree:
    """A sum tree as a plain array of priorities: every query scans all of them.

    Args:
        capacity: number of leaves.
    """

    def __init__(self, capacity: int) -> None:
        self.priorities = np.zeros(capacity, dtype=np.float64)  # [capacity]

    @property
    def capacity(self) -> int:
        return self.priorities.shape[0]

    def update(self, indices: Iterable[int], values: Iterable[float]) -> None:
        """Write ``values`` at ``indices`` one at a time, in order, so the last write of an index wins."""
        for index, value in zip(indices, values):
            self.priorities[int(index)] = float(value)

    def fill(self, start: int, stop: int, value: float) -> None:
        for index in range(start, stop):
            self.priorities[index] = value

    def total(self) -> float:
        """Correctly rounded sum of all priorities."""
        return math.fsum(self.priorities.tolist())

    def min(self) -> float:
        """Smallest positive priority; ``inf`` when no priority is positive."""
        positive = self.priorities[self.priorities > 0.0]
        return float(positive.min()) if positive.size else math.inf

    def get(self, indices: Iterable[int]) -> np.ndarray:
        return np.array([self.priorities[int(i)] for i in indices], dtype=np.float64)

    def last_with_mass(self) -> int:
        """Largest index with a positive priority (-1 when there is none)."""
        nonzero = np.flatnonzero(self.priorities > 0.0)
        return int(nonzero[-1]) if nonzero.size else -1

    def find(self, prefix_sums: Iterable[float]) -> np.ndarray:
        """Smallest ``i`` with ``cumsum[i] > prefix``; a prefix at or past the end: the last leaf with mass.

        ``side='right'`` already skips leaves with zero mass (their cumsum equals the one before),
        so the only adjustment is for a prefix that no cumsum exceeds.
        """
        prefix_sums = np.asarray(prefix_sums, dtype=np.float64)  # [N]
        cumsum = np.cumsum(self.priorities)  # [capacity], sequential sum
        found = np.searchsorted(cumsum, prefix_sums, side="right")  # [N]
        return np.where(found >= self.capacity, self.last_with_mass(), found).astype(np.int64)

    def find_bracket(self, prefix_sums: Iterable[float], tolerance: float) -> tuple[np.ndarray, np.ndarray]:
        """Lowest and highest leaf ``find`` may return when each prefix can be off by ``tolerance``.

        Rounding in a tree's partial sums (and in ``np.cumsum``) can move a prefix that lies within
        a few ulps of a boundary to the neighbouring leaf; ``find`` is monotone, so the answer for
        ``prefix +- tolerance`` brackets every acceptable leaf.
        """
        prefix_sums = np.asarray(prefix_sums, dtype=np.float64)
        low = self.find(np.maximum(prefix_sums - tolerance, 0.0))
        high = self.find(prefix_sums + tolerance)
        return low, high

    def stratified_prefix_sums(self, uniforms: np.ndarray) -> np.ndarray:
        """``prefix_i = (i + u_i) * total / B``: one draw in each of ``B`` equal slices of the mass."""
        batch = uniforms.shape[0]
        total = self.total()
        return np.array([(i + float(u)) * total / batch for i, u in enumerate(uniforms)], dtype=np.float64)

    def sample(self, uniforms: np.ndarray) -> np.ndarray:
        """Stratified sample driven by the given uniforms."""
        return self.find(self.stratified_prefix_sums(uniforms))


class NaiveMinTree:
    """A min tree as a plain array; unset leaves hold ``+inf``."""

    def __init__(self, capacity: int) -> None:
        self.values = np.full(capacity, np.inf, dtype=np.float64)  # [capacity]

    def update(self, indices: Iterable[int], values: Iterable[float]) -> None:
        for index, value in zip(indices, values):
            self.values[int(index)] = float(value)

    def min(self) -> float:
        return float(min(self.values.tolist()))

    def get(self, indices: Iterable[int]) -> np.ndarray:
        return np.array([self.values[int(i)] for i in indices], dtype=np.float64)


def padded_layout(capacity: int) -> tuple[int, int]:
    """Leaf offset (smallest power of two >= capacity) and depth, found by doubling."""
    leaf_offset, depth = 1, 0
    while leaf_offset < capacity:
        leaf_offset *= 2
        depth += 1
    return leaf_offset, depth


def flat_tree(leaves: np.ndarray, padding: float, combine) -> np.ndarray:
    """The whole flat tree recomputed from its leaves, one level at a time.

    Layout: node 1 is the root, the children of node k are 2k and 2k+1, leaf i is node
    ``leaf_offset + i``; leaves past ``len(leaves)`` hold ``padding``. Node 0 is unused and set to
    ``nan`` here, so compare from index 1. ``combine(left, right)`` is applied elementwise to the
    children of a level, which is exactly the operation a tree that recomputes parents from their
    children performs: the result is bitwise what such a tree must hold.
    """
    leaf_offset, _ = padded_layout(leaves.shape[0])
    tree = np.full(2 * leaf_offset, np.nan, dtype=np.float64)  # [2 * leaf_offset]
    tree[leaf_offset:] = padding
    tree[leaf_offset:leaf_offset + leaves.shape[0]] = leaves
    width = leaf_offset
    while width > 1:
        level = tree[width:2 * width]  # [width]
        tree[width // 2:width] = combine(level[0::2], level[1::2])
        width //= 2
    return tree


def flat_sum_tree(leaves: np.ndarray) -> np.ndarray:
    """Flat sum tree of ``leaves``: parents are ``left + right``, padding is 0."""
    return flat_tree(np.asarray(leaves, dtype=np.float64), 0.0, np.add)


def flat_min_tree(leaves: np.ndarray) -> np.ndarray:
    """Flat min tree of ``leaves`` as stored (pass ``inf`` for leaves that must not count); padding is inf."""
    return flat_tree(np.asarray(leaves, dtype=np.float64), np.inf, np.minimum)


def cacheline_levels(capacity: int) -> list[int]:
    """Slots per level of the 8-children-per-node layout, root level first: each level holds
    ``ceil(capacity / 8**k)`` nodes (k levels above the leaves) rounded up to a multiple of 8."""
    counts = [capacity]
    while counts[-1] > 1:
        counts.append(-(-counts[-1] // 8))
    return [8 * -(-count // 8) for count in reversed(counts)]


def as_cacheline_tree(flat: np.ndarray, capacity: int, padding: float, past_width: float) -> np.ndarray:
    """A flat binary tree (``flat_tree``'s layout) as the 8-children-per-node layout stores it.

    That layout keeps every third level of the binary tree, counted from the leaves, with the root
    on top: level ``l`` of ``L + 1`` holds binary level ``depth - 3 * (L - l)`` (slot ``j`` = binary
    node ``2**b + j``), level 0 holds the root in slot 0. Slots of level 1 past the binary level's
    width hold ``past_width``, and the root level's other 7 slots ``padding``.
    """
    _, depth = padded_layout(capacity)
    widths = cacheline_levels(capacity)
    out = [np.full(8, padding)]
    out[0][0] = flat[1]
    for level in range(1, len(widths)):
        binary_level = depth - 3 * (len(widths) - 1 - level)
        slots = np.full(widths[level], past_width)
        known = min(widths[level], 2**binary_level)
        slots[:known] = flat[2**binary_level:2**binary_level + known]
        out.append(slots)
    return np.concatenate(out)


def cacheline_sum_tree(leaves: np.ndarray) -> np.ndarray:
    """``flat_sum_tree(leaves)`` in the 8-children-per-node layout (-0.0, the identity of +, past the
    binary width of level 1)."""
    leaves = np.asarray(leaves, dtype=np.float64)
    return as_cacheline_tree(flat_sum_tree(leaves), leaves.shape[0], 0.0, -0.0)


def cacheline_min_tree(leaves: np.ndarray) -> np.ndarray:
    """``flat_min_tree(leaves)`` in the 8-children-per-node layout."""
    leaves = np.asarray(leaves, dtype=np.float64)
    return as_cacheline_tree(flat_min_tree(leaves), leaves.shape[0], np.inf, np.inf)


def priority_min_leaves(priorities: np.ndarray) -> np.ndarray:
    """Min-tree leaves of a priority tree: a zero priority holds no mass, so it is ``+inf`` there."""
    priorities = np.asarray(priorities, dtype=np.float64)
    return np.where(priorities > 0.0, priorities, np.inf)


# =====================================================================================================
# Validation scans
# =====================================================================================================


def first_invalid_priority(values: Iterable[float], limit: float = math.inf) -> int:
    """Position of the first value that is NaN, infinite, negative or at least a finite ``limit``; -1 if none."""
    for position, value in enumerate(values):
        value = float(value)
        if math.isnan(value) or math.isinf(value) or value < 0.0 or (math.isfinite(limit) and value >= limit):
            return position
    return -1


def first_out_of_range(indices: Iterable[int], size: int) -> int:
    """Position of the first index outside ``[0, size)``; -1 if there is none."""
    for position, index in enumerate(indices):
        if not 0 <= int(index) < size:
            return position
    return -1


# =====================================================================================================
# Statistics
# =====================================================================================================


def chi_square_sf(statistic: float, dof: int) -> float:
    """P(X >= statistic) for X ~ chi-square(dof): the regularised upper incomplete gamma Q(dof/2, x/2).

    Series expansion below ``a + 1``, Lentz's continued fraction above (Numerical Recipes, 6.2), so
    the tests do not need scipy.
    """
    a = dof / 2.0
    x = statistic / 2.0
    if x <= 0.0:
        return 1.0
    log_prefactor = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1.0:
        term = total = 1.0 / a
        denominator = a
        for _ in range(100_000):
            denominator += 1.0
            term *= x / denominator
            total += term
            if abs(term) < abs(total) * 1e-16:
                break
        return max(0.0, 1.0 - total * math.exp(log_prefactor))
    tiny = 1e-300
    b = x + 1.0 - a
    c = 1.0 / tiny
    d = 1.0 / b
    fraction = d
    for i in range(1, 100_000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        fraction *= delta
        if abs(delta - 1.0) < 1e-16:
            break
    return math.exp(log_prefactor) * fraction


def merge_small_bins(expected: np.ndarray, observed: np.ndarray,
                     min_expected: float = 5.0) -> tuple[np.ndarray, np.ndarray]:
    """Merge bins so every bin expects at least ``min_expected`` counts (the chi-square rule of thumb).

    Bins are sorted by expected count and the small ones accumulated into groups, smallest first,
    until each group reaches ``min_expected``; a remainder that falls short joins the last group.
    Bins that expect nothing at all belong in a separate exact check, not here.
    """
    expected = np.asarray(expected, dtype=np.float64)
    observed = np.asarray(observed, dtype=np.float64)
    order = np.argsort(expected, kind="stable")
    merged_expected: list[float] = []
    merged_observed: list[float] = []
    group_expected = group_observed = 0.0
    for k in order:
        group_expected += expected[k]
        group_observed += observed[k]
        if group_expected >= min_expected:
            merged_expected.append(group_expected)
            merged_observed.append(group_observed)
            group_expected = group_observed = 0.0
    if group_expected > 0.0 or group_observed > 0.0:
        if merged_expected:
            merged_expected[-1] += group_expected
            merged_observed[-1] += group_observed
        else:
            merged_expected.append(group_expected)
            merged_observed.append(group_observed)
    return np.array(merged_expected), np.array(merged_observed)


def chi_square_test(observed: np.ndarray, probabilities: np.ndarray,
                    min_expected: float = 5.0) -> tuple[float, int, float]:
    """Pearson goodness-of-fit of ``observed`` counts against ``probabilities`` (bins merged as needed).

    Bins with probability 0 are left out (check them separately: they must be empty); the expected
    counts still share out every observed count, so a stray count in such a bin raises the statistic.

    Returns:
        (statistic, degrees of freedom, p-value).
    """
    observed = np.asarray(observed, dtype=np.float64)
    probabilities = np.asarray(probabilities, dtype=np.float64)
    positive = probabilities > 0.0
    expected = observed.sum() * probabilities[positive] / math.fsum(probabilities[positive].tolist())
    merged_expected, merged_observed = merge_small_bins(expected, observed[positive], min_expected)
    if merged_expected.shape[0] < 2:
        raise ValueError("a chi-square test needs at least two bins after merging")
    statistic = math.fsum(((merged_observed - merged_expected) ** 2 / merged_expected).tolist())
    dof = merged_expected.shape[0] - 1
    return statistic, dof, chi_square_sf(statistic, dof)


def wilson_hilferty_sf(statistic: float, dof: int) -> float:
    """Wilson–Hilferty normal approximation of the chi-square survival function (good for dof >~ 10)."""
    if statistic <= 0.0:
        return 1.0
    k = float(dof)
    z = ((statistic / k) ** (1.0 / 3.0) - (1.0 - 2.0 / (9.0 * k))) / math.sqrt(2.0 / (9.0 * k))
    return 0.5 * math.erfc(z / math.sqrt(2.0))
