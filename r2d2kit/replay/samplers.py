"""Samplers: which stored item a buffer draws, the same three for every buffer kind.

A buffer keeps its items in slots ``[0, capacity)`` (transitions, HER steps or R2D2 windows) and
tells its sampler what each write did with :meth:`Sampler.place`: a slot now holds a new
sampleable item (at the running maximum priority, so that it is drawn soon), or holds nothing
sampleable any more (overwritten, or its episode partly overwritten). The sampler draws slots with
importance weights and takes priority updates, skipping slots that died since they were drawn and,
given the draw's generations, slots written again since (another item now lives there)::

    buffer.add(...)     --> sampler.place(slots, alive)           uniform | proportional | rank
    buffer.sample(B)    --> sampler.sample(uniforms [B], beta)    --> slots [B], weights [B]
                            sampler.generations_of(slots)         --> generations [B]
    update_priorities   --> sampler.update(slots, priorities, generations)

* ``"uniform"``: every live item equally likely; weights 1; priorities validated and ignored.
* ``"proportional"``: PER's ``P(i) ~ (p_i + eps)^alpha`` over a sum tree, weights
  ``(N P(i))^-beta / max_j`` with the max over the live items (a min tree).
* ``"rank"``: PER's ``P(i) ~ rank(i)^-alpha`` over a heap kept roughly sorted (fully every
  ``sort_every`` updates); outliers in ``|TD|`` cannot dominate. Weights ``(rank_i / N)^(alpha beta)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from r2d2kit._validation import as_index_array, as_priority_array, check_float, check_positive_int
from r2d2kit.kernels import rank as rank_kernels
from r2d2kit.kernels import sumtree as tree_kernels
from r2d2kit.kernels.samplers import first_changed, first_changed_in_ring, mark_alive, ring_generations
from r2d2kit.replay.persistence import JsonValue, Metadata, SavedLayout, meta_float, meta_int
from r2d2kit.replay.protocol import SAMPLERS
from r2d2kit.sumtree import SumTree

__all__ = ["SAMPLERS", "Sampler", "UniformSampler", "ProportionalSampler", "RankSampler", "make_sampler"]

DEFAULT_ALPHA = {"uniform": 0.0, "proportional": 0.6, "rank": 0.7}  # PER's exponents for each scheme


PARAMETERS = {"uniform": (), "proportional": ("alpha", "eps"), "rank": ("alpha", "sort_every")}  # what each uses


def make_sampler(sampler: str | Sampler, capacity: int, *, alpha: float | None = None, eps: float | None = None,
                 sort_every: int | None = None, dense: bool = False) -> Sampler:
    """The sampler a buffer draws with: one named ``sampler`` built here, or a ``Sampler`` built by the caller.

    ``alpha`` defaults to PER's exponent for the scheme (0.6 proportional, 0.7 rank); ``eps`` (default
    1e-6) is used by ``"proportional"``, ``sort_every`` by ``"rank"``. A parameter the sampler does not
    use is refused, not dropped: ``alpha`` with ``"uniform"`` would otherwise look like prioritised
    replay and be uniform. A built sampler brings its own parameters, so none may be given with it.
    ``dense``: live slots are always ``[0, n)`` and never removed (transition rings), which lets
    ``"uniform"`` skip its tree.
    """
    given = {name: value for name, value in (("alpha", alpha), ("eps", eps), ("sort_every", sort_every))
             if value is not None}
    if isinstance(sampler, Sampler):
        kind = type(sampler).__name__
        if given:
            raise ValueError(f"{', '.join(f'{k}={v!r}' for k, v in given.items())} given beside a built {kind}: "
                             f"pass {'them' if len(given) > 1 else 'it'} to {kind}(...) instead")
        if sampler.capacity != capacity:
            raise ValueError(f"the {kind} has {sampler.capacity} slots but the buffer needs {capacity}: build it as "
                             f"{kind}({capacity}, ...)")
        if len(sampler):
            raise ValueError(f"the {kind} already holds {len(sampler)} items (another buffer's?); give each buffer "
                             "a sampler of its own")
        sampler.dense = dense
        return sampler
    if sampler not in SAMPLERS:
        raise ValueError(f"sampler must be one of {', '.join(repr(s) for s in SAMPLERS)} or a Sampler, got "
                         f"{sampler!r}")
    unused = [name for name in given if name not in PARAMETERS[sampler]]
    if unused:
        users = [name for name, uses in PARAMETERS.items() if unused[0] in uses]
        raise ValueError(f"{unused[0]}={given[unused[0]]!r} has no effect with sampler={sampler!r}"
                         + (", which draws every item alike" if sampler == "uniform" else "")
                         + f"; it is used by sampler={' or '.join(repr(u) for u in users)}: pass that sampler, "
                         f"or drop {unused[0]}")
    alpha = DEFAULT_ALPHA[sampler] if alpha is None else check_float("alpha", alpha, 0.0)
    if sampler == "uniform":
        built: Sampler = UniformSampler(capacity, dense=dense)
    elif sampler == "proportional":
        built = ProportionalSampler(capacity, alpha=alpha, eps=1e-6 if eps is None else eps)
    else:
        built = RankSampler(capacity, alpha=alpha, sort_every=sort_every)
    built.dense = dense
    return built


class Sampler:
    """What every sampler does (see the module docstring); ``len()`` counts the live slots."""

    name = ""

    def __init__(self, capacity: int) -> None:
        self.capacity = check_positive_int("capacity", capacity)
        self.alive = np.zeros(self.capacity, dtype=bool)
        self.max_priority = 1.0  # the largest priority seen; new items get it
        self.priority_limit = math.inf  # priorities from here up are refused (see ProportionalSampler)
        self.dense = False  # live slots are [0, n) and never die: updates skip the check (8 us for 512 of 2^20)
        # how many times each slot was written: a batch drawn before a slot's latest write carries an older
        # number, so its late priority update skips the new occupant (adds can come between draw and update)
        self.generation = np.zeros(self.capacity, dtype=np.int64)  # unused when dense: see generations_of
        self._ring_items = 0  # dense: items added to the ring, those a long add skipped included
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def place(self, slots: np.ndarray | slice, alive: np.ndarray | None = None,
              priorities: np.ndarray | None = None) -> None:
        """``slots`` now hold new items (``alive`` true or omitted) or nothing sampleable (false).

        ``priorities``: validated initial priorities of the new items; default the running maximum.
        A ``slice`` is a ring write: new items at the running maximum in ``[start, stop)``.
        """
        if not self.dense:
            self.generation[slots] += 1  # a slot written twice in one call: once, enough to tell it changed
        if isinstance(slots, slice):
            self._count += slots.stop - slots.start - int(np.count_nonzero(self.alive[slots]))
            self.alive[slots] = True
            self._place_range(slots.start, slots.stop)
            return
        alive = np.ones(slots.shape[0], dtype=bool) if alive is None else alive
        self._count += mark_alive(self.alive, slots, alive)  # a slot written twice: the last write wins
        self._place(slots, alive, priorities)

    def advance_ring(self, items: int) -> None:
        """A dense ring took ``items`` more items (its ``place`` calls cover the slots the last ones went to)."""
        self._ring_items += items

    def generations_of(self, slots: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """How many times each of ``slots`` has been written: read from :attr:`generation`, or for a dense
        ring computed from its item count (no random reads of a capacity-long array)."""
        out = np.empty(slots.shape[0], np.int64) if out is None else out
        if self.dense:
            ring_generations(self._ring_items, self.capacity, slots, out)
        else:
            np.take(self.generation, slots, out=out)
        return out

    def update(self, slots: np.ndarray, priorities: npt.ArrayLike, generations: np.ndarray | None = None) -> None:
        """New priorities for drawn ``slots`` (validated); slots that died since are skipped, and with the
        draw's ``generations`` (:meth:`generations_of` the slots then) so are slots written again since."""
        values = as_priority_array("priorities", priorities, slots.shape[0], self.priority_limit)
        keep = None if self.dense else self.alive[slots]
        if generations is not None and self._first_changed(slots, generations) >= 0:
            current = self.generations_of(slots) == generations
            keep = current if keep is None else keep & current
        if keep is not None and not keep.all():
            slots, values = slots[keep], values[keep]
        self._update(slots, values)

    def _first_changed(self, slots: np.ndarray, generations: np.ndarray) -> int:
        if self.dense:
            return first_changed_in_ring(self._ring_items, self.capacity, slots, generations)
        return first_changed(self.generation, slots, generations)

    def sample(self, uniforms: np.ndarray, beta: float) -> tuple[np.ndarray, np.ndarray]:
        """One slot per uniform in ``[0, 1)`` (stratified where the scheme allows) and its weight."""
        if self._count == 0:
            raise ValueError("cannot sample: nothing sampleable is stored")
        return self._sample(uniforms, beta)

    def probability_spread(self) -> float:
        """The largest sampling probability over the mean one (1: uniform; nan when nothing is stored).

        How far prioritisation concentrates the draws: with spread ``s`` the favourite item is
        drawn ``s`` times as often as under uniform replay.
        """
        return 1.0 if len(self) else float("nan")

    def params(self) -> dict[str, JsonValue]:
        """The constructor arguments besides capacity (saved with the buffer)."""
        return {"sampler": self.name}

    def __repr__(self) -> str:
        settings = ", ".join(f"{key}={value!r}" for key, value in self.params().items() if key != "sampler")
        return f"{type(self).__name__}({self.capacity}{', ' if settings else ''}{settings})"

    @classmethod
    def saved_layout(cls, capacity: int, dense: bool = False) -> SavedLayout:
        """The arrays :meth:`restore` reads for ``capacity`` slots, and the bytes a sampler of that many
        slots allocates (``load`` checks both before it builds one; ``dense`` as in :func:`make_sampler`)."""
        arrays = {"sampler.alive": ((None,), np.dtype(np.int64)),
                  "sampler.generation": ((capacity,), np.dtype(np.int64))}
        return SavedLayout(arrays, 9 * capacity)  # a bool and a generation per slot

    def state(self) -> tuple[dict[str, JsonValue], dict[str, np.ndarray]]:
        """Scalars (JSON) and arrays that :meth:`restore` needs."""
        every_slot = np.arange(self.capacity, dtype=np.int64)
        return ({"max_priority": self.max_priority},
                {"sampler.alive": np.flatnonzero(self.alive), "sampler.generation": self.generations_of(every_slot)})

    def restore(self, scalars: Metadata, arrays: Mapping[str, np.ndarray], path: str) -> None:
        """Inverse of :meth:`state` on a fresh sampler; ``arrays`` have :meth:`saved_layout`'s shapes and dtypes.

        ``max_priority`` starts at 1 and only grows (every sampler), and stays below what the tree can sum.
        """
        live = arrays["sampler.alive"]
        if live.size and (live.min() < 0 or live.max() >= self.capacity or np.unique(live).size != live.size):
            raise ValueError(f"{path!r}: the saved live slots are not distinct slots below {self.capacity}; the file "
                             "is corrupt")
        generations = arrays["sampler.generation"]
        if generations.size and generations.min() < 0:
            raise ValueError(f"{path!r}: array 'sampler.generation' holds a negative count; the file is corrupt")
        if self.dense:  # a ring's counts follow from its item count, which is their sum
            self._ring_items = int(generations.sum())
            if not np.array_equal(self.generations_of(np.arange(self.capacity, dtype=np.int64)), generations):
                raise ValueError(f"{path!r}: array 'sampler.generation' is not what a ring of {self._ring_items} items "
                                 "leaves; the file is corrupt")
        else:
            self.generation[:] = generations
        self.alive[live] = True
        self._count = int(live.size)
        self.max_priority = meta_float(path, scalars, "max_priority", 1.0, self._max_priority_bound(),
                                       label="sampler.max_priority")

    def _max_priority_bound(self) -> float:
        """The largest ``max_priority`` this sampler can reach."""
        return math.inf

    # hooks
    def _place(self, slots: np.ndarray, alive: np.ndarray, priorities: np.ndarray | None) -> None:
        raise NotImplementedError

    def _place_range(self, start: int, stop: int) -> None:
        self._place(np.arange(start, stop, dtype=np.int64), np.ones(stop - start, dtype=bool), None)

    def _update(self, slots: np.ndarray, values: np.ndarray) -> None:
        """Priorities of live slots (validated)."""

    def _sample(self, uniforms: np.ndarray, beta: float) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError


class UniformSampler(Sampler):
    """Every live item equally likely: a 0/1 sum tree over the slots (``dense``: no tree, the live
    slots are ``[0, n)``)."""

    name = "uniform"

    def __init__(self, capacity: int, dense: bool = False) -> None:
        super().__init__(capacity)
        self.tree = None if dense else SumTree(self.capacity, track_min=False)

    def _place_range(self, start: int, stop: int) -> None:
        if self.tree is not None:
            super()._place_range(start, stop)

    def _place(self, slots: np.ndarray, alive: np.ndarray, priorities: np.ndarray | None) -> None:
        assert self.tree is not None  # a dense ring (no tree) places slices only: see _place_range
        t = self.tree.arrays
        tree_kernels.sum_tree_update(t.sum_tree, t.level_offsets, slots, alive.astype(np.float64))

    def update(self, slots: np.ndarray, priorities: npt.ArrayLike, generations: np.ndarray | None = None) -> None:
        as_priority_array("priorities", priorities, slots.shape[0])

    def _sample(self, uniforms: np.ndarray, beta: float) -> tuple[np.ndarray, np.ndarray]:
        if self.tree is None:
            indices = np.minimum((uniforms * self._count).astype(np.int64), self._count - 1)
        else:
            t = self.tree.arrays
            indices = tree_kernels.sum_tree_find(t.sum_tree, t.level_offsets, uniforms * self.tree.total())
        return indices, np.ones(uniforms.shape[0], dtype=np.float32)

    @classmethod
    def saved_layout(cls, capacity: int, dense: bool = False) -> SavedLayout:
        layout = super().saved_layout(capacity)
        return layout if dense else layout._replace(preallocated_bytes=layout.preallocated_bytes
                                                    + _tree_bytes(capacity))

    def restore(self, scalars: Metadata, arrays: Mapping[str, np.ndarray], path: str) -> None:
        super().restore(scalars, arrays, path)
        if self.tree is not None:
            self.tree.set_leaves(self.alive.astype(np.float64))

    def _max_priority_bound(self) -> float:
        return 1.0  # uniform sampling never raises it


class ProportionalSampler(Sampler):
    """Proportional PER: tree value ``(priority + eps)^alpha`` per live slot, 0 elsewhere.

    Args:
        capacity: slots.
        alpha: prioritisation exponent, 0 = uniform (PER: 0.6; R2D2: 0.9).
        eps: added to every priority so that no item with a zero TD error starves. With ``eps=0``
            a zero priority is allowed and that item is never drawn.
    """

    name = "proportional"

    def __init__(self, capacity: int, alpha: float = 0.6, eps: float = 1e-6) -> None:
        super().__init__(capacity)
        self.alpha = check_float("alpha", alpha, 0.0)
        self.eps = check_float("eps", eps, 0.0)
        self.tree = SumTree(self.capacity)
        # the largest priority whose tree value, summed over every slot, stays finite (1e308 with alpha 1
        # used to make the total inf and draw one slot every time)
        log_limit = math.log(np.finfo(np.float64).max / (4.0 * self.capacity)) / max(self.alpha, 1e-300)
        self.priority_limit = math.exp(log_limit) - self.eps if log_limit < 709.0 else math.inf

    def _place(self, slots: np.ndarray, alive: np.ndarray, priorities: np.ndarray | None) -> None:
        values = np.full(slots.shape[0], self.max_priority) if priorities is None else priorities + self.eps
        if priorities is not None:
            kept = alive & self.alive[slots]  # (a slot written twice in one call: its last write)
            if kept.any():
                self.max_priority = max(self.max_priority, float(values[kept].max()))
        t = self.tree.arrays
        # a zero priority has no mass, even at alpha = 0 (0 ** 0 = 1)
        tree_kernels.priority_trees_update(t.sum_tree, t.min_tree, t.level_offsets, slots,
                                           np.where(alive & (values > 0.0), values ** self.alpha, 0.0))

    def _place_range(self, start: int, stop: int) -> None:
        t = self.tree.arrays  # one pass over the range's ancestors (2.6 us for 512 slots, 6.7 us by index)
        tree_kernels.priority_trees_fill(t.sum_tree, t.min_tree, t.level_offsets, start, stop,
                                         self.max_priority ** self.alpha)

    def _update(self, slots: np.ndarray, values: np.ndarray) -> None:
        t = self.tree.arrays
        largest = tree_kernels.priority_trees_update_scaled(t.sum_tree, t.min_tree, t.level_offsets, slots, values,
                                                            self.eps, self.alpha)
        self.max_priority = max(self.max_priority, largest)

    def _sample(self, uniforms: np.ndarray, beta: float) -> tuple[np.ndarray, np.ndarray]:
        if not self.tree.total() > 0.0:
            raise ValueError("cannot sample: every stored priority is 0 (possible only with eps=0)")
        t = self.tree.arrays
        return tree_kernels.sum_tree_sample_weighted(t.sum_tree, t.min_tree, t.level_offsets, uniforms, beta)

    def probability_spread(self) -> float:
        """Largest tree value times the live count over the tree total."""
        if not len(self) or not self.tree.total() > 0.0:
            return float("nan")
        largest = float(self.tree.get(np.flatnonzero(self.alive)).max())
        return largest * len(self) / self.tree.total()

    def params(self) -> dict[str, JsonValue]:
        return {"sampler": self.name, "alpha": self.alpha, "eps": self.eps}

    def state(self) -> tuple[dict[str, JsonValue], dict[str, np.ndarray]]:
        scalars, arrays = super().state()
        return scalars, dict(arrays, **{"sampler.tree": self.tree.leaves()})

    @classmethod
    def saved_layout(cls, capacity: int, dense: bool = False) -> SavedLayout:
        layout = super().saved_layout(capacity)
        return SavedLayout({**layout.arrays, "sampler.tree": ((capacity,), np.dtype(np.float64))},
                           layout.preallocated_bytes + 2 * _tree_bytes(capacity))  # sum and min trees

    def restore(self, scalars: Metadata, arrays: Mapping[str, np.ndarray], path: str) -> None:
        """Live leaves must be tree values ``(p + eps)^alpha`` no larger than the saved ``max_priority``'s."""
        super().restore(scalars, arrays, path)
        live = arrays["sampler.tree"][self.alive]
        largest = self.max_priority ** self.alpha * (1.0 + 1e-9)  # numpy's and the kernels' pow may differ by an ulp
        bad = np.flatnonzero(~((live >= 0.0) & (live <= largest)))
        if bad.size:
            raise ValueError(f"{path!r}: array 'sampler.tree' holds the live priority {live[bad[0]]!r}, outside [0, "
                             f"max_priority ** alpha = {largest:.6g}]; the file is corrupt")
        self.tree.set_leaves(np.where(self.alive, arrays["sampler.tree"], 0.0))

    def _max_priority_bound(self) -> float:
        return self.priority_limit + self.eps  # update() refuses priorities from the limit up


class RankSampler(Sampler):
    """Rank-based PER over a binary max-heap whose array order stands in for the ranks.

    Heap position ``k`` is rank ``k + 1``; every ``sort_every`` priority updates the heap is sorted
    exactly. Sampling is stratified over equal-probability segments of the rank distribution, whose
    cumulative sums are precomputed once for the full capacity.

    Args:
        capacity: slots.
        alpha: rank exponent (PER: 0.7).
        sort_every: priority updates between full sorts; default ``capacity``.
    """

    name = "rank"

    def __init__(self, capacity: int, alpha: float = 0.7, sort_every: int | None = None) -> None:
        super().__init__(capacity)
        self.alpha = check_float("alpha", alpha, 0.0)
        self.sort_every = check_positive_int("sort_every", self.capacity if sort_every is None else sort_every)
        self._cumulative = np.cumsum(np.arange(1, self.capacity + 1, dtype=np.float64) ** -self.alpha)
        self.priorities = np.zeros(self.capacity, dtype=np.float64)
        self._heap = np.zeros(self.capacity, dtype=np.int64)
        self._position_of = np.full(self.capacity, -1, dtype=np.int64)
        self._heap_size = 0  # equals len(self) outside calls
        self._updates_since_sort = 0

    def ranks(self, slots: npt.ArrayLike) -> np.ndarray:
        """Current (approximate) rank of each slot, 1 = highest priority; 0 for a slot holding nothing."""
        return self._position_of[as_index_array("slots", slots, self.capacity)] + 1

    def sort(self) -> None:
        """Sort the heap exactly (a sorted array is a valid max-heap)."""
        items = self._heap[:self._count]
        order = np.argsort(-self.priorities[items], kind="stable")
        self._heap[:self._count] = items[order]
        self._position_of[self._heap[:self._count]] = np.arange(self._count)
        self._updates_since_sort = 0

    def _place(self, slots: np.ndarray, alive: np.ndarray, priorities: np.ndarray | None) -> None:
        # the heap holds exactly the live slots. A slot written twice in one call ends as its last write
        # left it (``self.alive``, already updated): written only if it ends alive, removed only if it ends
        # dead (writing then removing it whatever the order left a live slot out of the heap)
        ends_alive = self.alive[slots]
        written = alive & ends_alive
        born = slots[written]
        values = np.full(born.shape[0], self.max_priority) if priorities is None else priorities[written]
        if priorities is not None and values.size:
            self.max_priority = max(self.max_priority, float(values.max()))
        size = rank_kernels.rank_heap_write(self.priorities, self._heap, self._position_of, self._heap_size, born,
                                            values)
        self._heap_size = rank_kernels.rank_heap_remove(self.priorities, self._heap, self._position_of, size,
                                                        slots[~ends_alive])

    def _update(self, slots: np.ndarray, values: np.ndarray) -> None:
        rank_kernels.rank_heap_update(self.priorities, self._heap, self._position_of, self._heap_size, slots, values)
        if values.size:
            self.max_priority = max(self.max_priority, float(values.max()))
        self._updates_since_sort += values.size
        if self._updates_since_sort >= self.sort_every:
            self.sort()

    def _sample(self, uniforms: np.ndarray, beta: float) -> tuple[np.ndarray, np.ndarray]:
        return rank_kernels.rank_sample(self._cumulative, self._count, self._heap, uniforms, self.alpha * beta)

    def probability_spread(self) -> float:
        """Rank 1's probability times the live count: ``N / sum_k k^-alpha`` (exact, whatever the priorities)."""
        if not len(self):
            return float("nan")
        return len(self) / float(self._cumulative[len(self) - 1])

    def params(self) -> dict[str, JsonValue]:
        return {"sampler": self.name, "alpha": self.alpha, "sort_every": self.sort_every}

    def state(self) -> tuple[dict[str, JsonValue], dict[str, np.ndarray]]:
        scalars, arrays = super().state()
        return (dict(scalars, updates_since_sort=self._updates_since_sort),
                {"sampler.heap": self._heap[:self._count].copy(), "sampler.priorities": self.priorities.copy(),
                 "sampler.generation": arrays["sampler.generation"]})

    @classmethod
    def saved_layout(cls, capacity: int, dense: bool = False) -> SavedLayout:
        arrays = {"sampler.heap": ((None,), np.dtype(np.int64)),
                  "sampler.priorities": ((capacity,), np.dtype(np.float64)),
                  "sampler.generation": ((capacity,), np.dtype(np.int64))}
        return SavedLayout(arrays, capacity * 41)  # alive, cumulative sums, priorities, heap, positions, generations

    def restore(self, scalars: Metadata, arrays: Mapping[str, np.ndarray], path: str) -> None:
        """The heap must hold the live slots in max-heap order of priorities in ``[0, max_priority]``."""
        heap = arrays["sampler.heap"]
        # the heap holds exactly the live slots
        super().restore(scalars, {"sampler.alive": heap, "sampler.generation": arrays["sampler.generation"]}, path)
        priorities = arrays["sampler.priorities"]
        bad = np.flatnonzero(~((priorities >= 0.0) & (priorities <= self.max_priority)))
        if bad.size:
            raise ValueError(f"{path!r}: array 'sampler.priorities' holds the priority {priorities[bad[0]]!r} at slot "
                             f"{bad[0]}, outside [0, max_priority = {self.max_priority!r}]; the file is corrupt")
        ordered = priorities[heap]  # heap position k's parent is (k - 1) // 2
        above_parent = np.flatnonzero(ordered[1:] > ordered[np.arange(heap.size - 1) // 2]) + 1
        if above_parent.size:
            raise ValueError(f"{path!r}: array 'sampler.heap' is not a max-heap: position {above_parent[0]} outranks "
                             "its parent; the file is corrupt")
        self.priorities[:] = priorities
        self._heap[:heap.size] = heap
        self._position_of[heap] = np.arange(heap.size)
        self._heap_size = heap.size
        self._updates_since_sort = meta_int(path, scalars, "updates_since_sort", 0, self.sort_every - 1,
                                            label="sampler.updates_since_sort")


def _tree_bytes(capacity: int) -> int:
    """Bytes of one ``SumTree`` array over ``capacity`` leaves: at most 8/7 slot per leaf, 8 per level, alignment."""
    return 8 * (capacity + capacity // 7 + 200)
