"""SumTree and MinTree: validated Python API over the flat-array kernels in ``r2d2kit.kernels``.

Every call checks its input (dtype, shape, range, finiteness) and then hands contiguous arrays to a
compiled kernel. The first use in a fresh environment compiles the kernels: import, a 2^20-leaf
update and the first sample took 5 to 9 s (median 7) on a busy 2-core machine; ``numba`` caches them
on disk, so later processes load them in well under a second (1.7 s for the same steps, import included).

Kernel-level code (the replay buffers) reaches a tree's arrays through :attr:`SumTree.arrays`, a
:class:`TreeArrays`, never through private attributes.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from r2d2kit._validation import (
    Seed,
    as_generator,
    as_index_array,
    as_priority_array,
    check_positive_int,
)
from r2d2kit.kernels import sumtree as kernels

__all__ = ["SumTree", "MinTree", "TreeArrays"]


class TreeArrays(NamedTuple):
    """The arrays of a :class:`SumTree` or :class:`MinTree`, for code that calls the kernels in
    ``r2d2kit.kernels.sumtree`` directly (the replay buffers do, to fuse validation and updates).

    The layout (8 children per node, one 64-byte cache line) is drawn in that module's docstring.
    Read the arrays freely; write them only through the tree kernels (``priority_trees_update``,
    ``priority_trees_fill``, ...), which recompute every ancestor of what they write: a leaf
    written by hand leaves its ancestors stale.

    Attributes:
        sum_tree: float64 ``[size]``, the sum tree: slot 0 the total, leaf ``i`` at
            ``leaf_offset + i``; None for a :class:`MinTree`.
        min_tree: float64 ``[size]``, the min tree in the same layout: slot 0 the minimum. In a
            :class:`SumTree` a leaf holds its priority, or +inf where the priority is 0 (no mass);
            None for ``SumTree(track_min=False)``.
        level_offsets: int64 ``[levels]``, the first slot of each level, the root's (0) first and
            the leaves' last. The kernels take it as their layout argument.
        leaf_offset: ``level_offsets[-1]``, the slot of leaf 0.
    """

    sum_tree: np.ndarray | None
    min_tree: np.ndarray | None
    level_offsets: np.ndarray
    leaf_offset: int


def _sum_tree_array(capacity: int, size: int) -> np.ndarray:
    """A zeroed sum tree, with the -0.0 slots of ``kernels.level_padding`` set."""
    tree = kernels.aligned_tree(size, 0.0)
    _blank_sum_tree(tree, capacity)
    return tree


def _blank_sum_tree(tree: np.ndarray, capacity: int) -> None:
    tree[:] = 0.0
    start, stop = kernels.level_padding(capacity)
    tree[start:stop] = -0.0


class SumTree:
    """Sum tree over ``capacity`` non-negative priorities, with O(1) total and minimum.

    ``update`` of a batch costs O(batch * log capacity); ``sample`` draws one index per equal slice
    of the total mass (stratified, as in the PER paper). A leaf with priority 0 holds no mass: it is
    never sampled and is left out of ``min()``.

    Args:
        capacity: number of leaves, any integer >= 1 (storage: about 1.14 slots per leaf).
        track_min: keep a companion min tree so ``min()`` is O(1). Updates then write two trees;
            pass False when you never need ``min()`` (about half the update cost).

    Example:
        >>> tree = SumTree(5)
        >>> tree.update([0, 3, 3], [1.0, 9.0, 2.0])   # a repeated index: the last value wins
        >>> tree.total(), tree.min()
        (3.0, 1.0)
    """

    def __init__(self, capacity: int, track_min: bool = True) -> None:
        self._capacity = check_positive_int("capacity", capacity)
        self._offsets, size = kernels.tree_layout(self._capacity)
        self._leaf_offset = int(self._offsets[-1])
        self._sum = _sum_tree_array(self._capacity, size)
        self._track_min = bool(track_min)
        self._min = kernels.aligned_tree(size if self._track_min else 1, np.inf)
        self._arrays = TreeArrays(self._sum, self._min if self._track_min else None, self._offsets,
                                  self._leaf_offset)

    @property
    def capacity(self) -> int:
        """Number of leaves (valid indices are ``0 .. capacity - 1``)."""
        return self._capacity

    @property
    def arrays(self) -> TreeArrays:
        """The tree's arrays and layout, for kernel-level code (see :class:`TreeArrays`)."""
        return self._arrays

    def update(self, indices: npt.ArrayLike, priorities: npt.ArrayLike) -> None:
        """Set the priorities at ``indices``; a repeated index: the last value wins.

        Raises:
            IndexError: an index is outside ``[0, capacity)``.
            ValueError: a priority is NaN, infinite or negative (the first one is named).
        """
        leaf_indices = as_index_array("indices", indices, self._capacity)
        values = as_priority_array("priorities", priorities, leaf_indices.shape[0])
        if self._track_min:
            kernels.priority_trees_update(self._sum, self._min, self._offsets, leaf_indices, values)
        else:
            kernels.sum_tree_update(self._sum, self._offsets, leaf_indices, values)

    def fill(self, start: int, stop: int, priority: float) -> None:
        """Set every leaf in ``[start, stop)`` to one priority in O(stop - start)."""
        for name, bound in (("start", start), ("stop", stop)):
            if isinstance(bound, (bool, np.bool_)) or not isinstance(bound, (int, np.integer)):
                raise TypeError(f"{name} must be an integer, got {bound!r} ({type(bound).__name__})")
        if not 0 <= start <= stop <= self._capacity:
            raise IndexError(f"fill range [{start}, {stop}) must lie within [0, {self._capacity}]")
        value = as_priority_array("priority", priority, 1)[0]
        if stop > start:
            if self._track_min:
                kernels.priority_trees_fill(self._sum, self._min, self._offsets, start, stop, value)
            else:
                self._sum[self._leaf_offset + start:self._leaf_offset + stop] = value
                kernels.sum_tree_rebuild_range(self._sum, self._offsets, start, stop)

    def total(self) -> float:
        """Sum of all priorities, O(1)."""
        return float(self._sum[0])

    def min(self) -> float:
        """Smallest positive priority, O(1); ``inf`` while the tree holds no mass."""
        if not self._track_min:
            raise RuntimeError("this SumTree was built with track_min=False; build it with track_min=True for min()")
        return float(self._min[0])

    def get(self, indices: npt.ArrayLike) -> np.ndarray:
        """Priorities at ``indices`` as a float64 array."""
        leaf_indices = as_index_array("indices", indices, self._capacity)
        return self._sum[self._leaf_offset + leaf_indices]

    def find(self, prefix_sums: npt.ArrayLike) -> np.ndarray:
        """Leaf index per prefix sum: the smallest ``i`` with ``cumsum(priorities)[i] > prefix_sum``.

        A prefix sum equal to ``total()`` maps to the last leaf with mass; leaves with zero mass
        are never returned.

        Raises:
            ValueError: the tree holds no mass, or a prefix sum is outside ``[0, total()]``.
        """
        total = self._require_mass("find")
        sums = np.asarray(prefix_sums)
        if not (np.issubdtype(sums.dtype, np.floating) or np.issubdtype(sums.dtype, np.integer)):
            raise TypeError(f"prefix_sums must hold real numbers, got dtype {sums.dtype}")
        sums = sums.astype(np.float64, copy=False)
        if sums.ndim == 0:
            sums = sums.reshape(1)
        elif sums.ndim != 1:
            raise ValueError(f"prefix_sums must be a scalar or a 1-D array, got shape {sums.shape}")
        outside = np.flatnonzero(~((sums >= 0.0) & (sums <= total)))
        if outside.size:
            i = int(outside[0])
            raise ValueError(f"prefix_sums[{i}] = {float(sums[i])!r} is outside [0, total()] = [0, {total!r}]")
        return kernels.sum_tree_find(self._sum, self._offsets, sums)

    def sample(self, batch_size: int, rng: Seed = None) -> np.ndarray:
        """Stratified sample: one index per equal slice of the total mass, in non-decreasing order.

        Args:
            batch_size: number of indices (>= 1).
            rng: a ``np.random.Generator`` (advanced in place), an int seed, or None.

        Raises:
            ValueError: the tree holds no mass (nothing added yet, or every priority is 0).
        """
        batch_size = check_positive_int("batch_size", batch_size)
        self._require_mass("sample")
        uniforms = as_generator(rng).random(batch_size)
        return kernels.sum_tree_sample(self._sum, self._offsets, uniforms)

    def leaves(self) -> np.ndarray:
        """A copy of all ``capacity`` priorities (for saving and inspection)."""
        return self._sum[self._leaf_offset:self._leaf_offset + self._capacity].copy()

    def set_leaves(self, priorities: npt.ArrayLike) -> None:
        """Replace all priorities at once and rebuild the tree in O(capacity) (for loading)."""
        values = as_priority_array("priorities", priorities, self._capacity)
        _blank_sum_tree(self._sum, self._capacity)
        self._sum[self._leaf_offset:self._leaf_offset + self._capacity] = values
        kernels.sum_tree_rebuild(self._sum, self._offsets)
        if self._track_min:
            self._min[:] = np.inf
            self._min[self._leaf_offset:self._leaf_offset + self._capacity] = np.where(values > 0, values, np.inf)
            kernels.min_tree_rebuild(self._min, self._offsets)

    def _require_mass(self, verb: str) -> float:
        total = float(self._sum[0])
        if not total > 0.0:
            raise ValueError(
                f"cannot {verb} in a SumTree with total priority 0: add items (or set a positive "
                "priority) first"
            )
        return total

    def __repr__(self) -> str:
        return f"SumTree(capacity={self._capacity}, total={self.total():.6g}, track_min={self._track_min})"


class MinTree:
    """Min tree over ``capacity`` values with O(1) minimum; unset leaves hold ``+inf``.

    Args:
        capacity: number of leaves, any integer >= 1.
    """

    def __init__(self, capacity: int) -> None:
        self._capacity = check_positive_int("capacity", capacity)
        self._offsets, size = kernels.tree_layout(self._capacity)
        self._leaf_offset = int(self._offsets[-1])
        self._min = kernels.aligned_tree(size, np.inf)
        self._arrays = TreeArrays(None, self._min, self._offsets, self._leaf_offset)

    @property
    def capacity(self) -> int:
        """Number of leaves."""
        return self._capacity

    @property
    def arrays(self) -> TreeArrays:
        """The tree's arrays and layout (``sum_tree`` is None), see :class:`TreeArrays`."""
        return self._arrays

    def update(self, indices: npt.ArrayLike, values: npt.ArrayLike) -> None:
        """Set ``values`` at ``indices`` (finite, >= 0); a repeated index: the last value wins."""
        leaf_indices = as_index_array("indices", indices, self._capacity)
        array = as_priority_array("values", values, leaf_indices.shape[0])
        kernels.min_tree_update(self._min, self._offsets, leaf_indices, array)

    def min(self) -> float:
        """Smallest value, O(1); ``inf`` while no leaf is set."""
        return float(self._min[0])

    def get(self, indices: npt.ArrayLike) -> np.ndarray:
        """Values at ``indices`` (``inf`` where unset)."""
        leaf_indices = as_index_array("indices", indices, self._capacity)
        return self._min[self._leaf_offset + leaf_indices]

    def __repr__(self) -> str:
        return f"MinTree(capacity={self._capacity}, min={self.min():.6g})"
