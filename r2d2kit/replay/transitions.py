"""ReplayBuffer: fixed-shape items in a ring, drawn by a uniform, proportional or rank-based sampler."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from r2d2kit._validation import Seed, as_index_array
from r2d2kit.replay.core import BufferCore
from r2d2kit.replay.fields import Fields, RingStorage, fields_from_json, fields_from_saved, item_bytes
from r2d2kit.replay.persistence import JsonValue, Metadata, SavedLayout, meta_field, meta_int, meta_mapping
from r2d2kit.replay.protocol import DEFAULT_BETA
from r2d2kit.replay.samplers import Sampler, make_sampler


class ReplayBuffer(BufferCore):
    """Ring storage of fixed-shape items, sampled uniformly or by priority (PER, Schaul et al. 2016).

    New items get the running maximum priority (1.0 until a larger one is seen), so each is drawn
    soon; ``sample`` returns importance weights normalised to a maximum of 1 (all 1 when uniform).

    Args:
        capacity: number of items kept; the oldest is overwritten first.
        fields: ``{"name": (shape, dtype)}`` for one item, e.g. ``{"obs": ((4,), "float32")}``.
        sampler: ``"uniform"``, ``"proportional"`` (``P(i) ~ (p_i + eps)^alpha``) or ``"rank"``
            (``P(i) ~ rank(i)^-alpha``), or a :class:`~r2d2kit.replay.Sampler` of ``capacity`` slots
            built beforehand (then give none of the three below); see :mod:`r2d2kit.replay.samplers`.
        alpha: priority exponent of ``"proportional"`` and ``"rank"``; default PER's (0.6, 0.7).
        eps: added to every priority (``"proportional"`` only, default 1e-6): no item with a zero
            TD error starves. With ``eps=0`` a zero priority is allowed and that item is never sampled.
        sort_every: priority updates between full sorts of the rank heap (``"rank"`` only); default
            ``capacity``. A parameter the sampler does not use is a ValueError, not ignored.
        seed: int seed, ``None`` or a ``np.random.Generator`` (used as is) for sampling.

    Example:
        >>> buf = ReplayBuffer(1000, {"obs": ((4,), "float32")}, sampler="proportional", seed=0)
        >>> buf.add_batch(obs=np.zeros((8, 4)))
        >>> batch = buf.sample(4, beta=0.4)
        >>> buf.update_priorities(batch["indices"], np.full(4, 2.0), batch["generations"])
    """

    def __init__(self, capacity: int, fields: Fields, sampler: str | Sampler = "uniform", *,
                 alpha: float | None = None, eps: float | None = None, sort_every: int | None = None,
                 seed: Seed = None) -> None:
        self._storage = RingStorage(capacity, fields)
        super().__init__(make_sampler(sampler, self.capacity, alpha=alpha, eps=eps, sort_every=sort_every,
                                      dense=True), seed)

    # ----------------------------------------------------------------- properties
    @property
    def capacity(self) -> int:
        """Maximum number of items held."""
        return self._storage.capacity

    @property
    def fields(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """``{"name": (shape, dtype)}`` of one item per field."""
        return {name: (spec.shape, spec.dtype) for name, spec in self._storage.specs.items()}

    @property
    def nbytes(self) -> int:
        """Bytes of preallocated field storage (priority structures not included)."""
        return self._storage.nbytes

    def __len__(self) -> int:
        return self._storage.size

    def batch_spec(self, batch_size: int) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """Shape and dtype of every array ``sample(batch_size)`` returns."""
        spec = {name: ((batch_size,) + shape, dtype) for name, (shape, dtype) in self.fields.items()}
        spec["indices"] = ((batch_size,), np.dtype(np.int64))
        spec["generations"] = ((batch_size,), np.dtype(np.int64))
        spec["weights"] = ((batch_size,), np.dtype(np.float32))
        return spec

    # ----------------------------------------------------------------- writing
    def add(self, **fields: npt.ArrayLike) -> None:
        """Add one item: one keyword per field, each of exactly the field's shape."""
        batch = self._storage.check_item(fields)
        with self._lock:
            self._write(batch, 1)

    def add_batch(self, **fields: npt.ArrayLike) -> None:
        """Add ``n`` items: one keyword per field, each of shape ``[n, *field_shape]``."""
        batch, count = self._storage.check_batch(fields)
        with self._lock:
            self._write(batch, count)

    def _write(self, batch: Mapping[str, np.ndarray], count: int) -> None:
        for start, stop in self._storage.write(batch, count):
            self._sampler.place(slice(start, stop))
        self._sampler.advance_ring(count)

    # ----------------------------------------------------------------- sampling
    def sample(self, batch_size: int, beta: float = DEFAULT_BETA, *,
               out: Mapping[str, np.ndarray] | None = None,
               rng: np.random.Generator | None = None) -> dict[str, np.ndarray]:
        """Sample ``batch_size`` items (with replacement) into fresh arrays, or into ``out``.

        Reusing memory is opt-in (``out``; :mod:`r2d2kit.replay.batch_pool` says when it is safe):
        ``sample(512)`` of 84x84 frames took 1.95 ms into fresh arrays and 0.50 ms into reused ones
        in a process that had run a ``tf.data`` generator (TensorFlow returns freed memory at once).

        Args:
            batch_size: number of items.
            beta: importance-sampling exponent in ``[0, 1]`` (weights are all 1 when uniform).
            out: optional dict of arrays with :meth:`batch_spec`'s shapes and dtypes (e.g.
                :meth:`sample_buffers`, or a :class:`~r2d2kit.replay.BatchPool`'s ``acquire()``),
                filled in place and returned; the next ``sample`` into it overwrites it.
            rng: draw with this generator instead of the buffer's own (a diagnostic batch then leaves
                the training draws as they were).

        Returns:
            ``{field: [batch_size, *shape]}`` plus ``"indices"`` and ``"generations"`` (int64, for
            ``update_priorities``) and ``"weights"`` (float32 importance weights, max 1).
        """
        batch_size, beta = self._check_sample_args(batch_size, beta, out)
        with self._lock:
            if self._storage.size == 0:
                raise ValueError(f"cannot sample from an empty {type(self).__name__}: add items first")
            indices, weights = self._sampler.sample((rng or self._rng).random(batch_size), beta)
            batch = self._storage.gather(indices, out=self._batch_memory(batch_size, out))
            self._record_draw(batch, indices, weights)
        return batch

    def _checked_indices(self, indices: npt.ArrayLike) -> np.ndarray:
        return as_index_array("indices", indices, self._storage.size)

    # ----------------------------------------------------------------- persistence
    def _saved_state(self) -> tuple[dict[str, JsonValue], dict[str, np.ndarray]]:
        size = self._storage.size
        fields: dict[str, JsonValue] = {name: spec.to_json() for name, spec in self._storage.specs.items()}
        meta: dict[str, JsonValue] = {"capacity": self.capacity, "params": self._sampler.params(),
                                      "position": self._storage.position, "size": size, "fields": fields}
        return meta, {f"field.{name}": array[:size] for name, array in self._storage.arrays.items()}

    @classmethod
    def _saved_layout(cls, path: str, meta: Metadata) -> SavedLayout:
        capacity = meta_int(path, meta, "capacity", 1)
        size = meta_int(path, meta, "size", 0, capacity)
        position = meta_int(path, meta, "position", 0, capacity - 1)
        if size < capacity and position != size:
            raise ValueError(f"{path!r}: malformed metadata: position {position} with size {size} < capacity "
                             f"{capacity}; a ring that has not wrapped writes next at its size; the file is corrupt")
        specs = fields_from_saved(path, meta_field(path, meta, "fields"), "fields")
        sampler = cls._sampler_layout(path, meta_mapping(path, meta, "params"), capacity, dense=True)
        arrays = {f"field.{name}": ((size,) + spec.shape, spec.dtype) for name, spec in specs.items()}
        return SavedLayout({**arrays, **sampler.arrays}, capacity * item_bytes(specs) + sampler.preallocated_bytes)

    @classmethod
    def _from_meta(cls, path: str, meta: Metadata) -> ReplayBuffer:  # type: ignore[override]  # no goal functions
        return cls._saved_constructor(path, meta["capacity"], fields_from_json(meta["fields"]), seed=0,
                                      **meta["params"])

    def _restore_saved_state(self, path: str, meta: Metadata, arrays: Mapping[str, np.ndarray]) -> None:
        """Sizes were checked by ``_saved_layout``; the live slots must be exactly the stored items."""
        size, position, storage = meta["size"], meta["position"], self._storage
        if not (self._sampler.alive[:size].all() and len(self._sampler) == size):
            raise ValueError(f"{path!r}: the sampler's live slots are not the {size} stored items; the file is corrupt")
        for name, array in storage.arrays.items():
            array[:size] = arrays[f"field.{name}"]
        storage.size, storage.position = size, position

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(capacity={self.capacity}, size={len(self)}, fields={list(self.fields)}, "
                f"sampler={self._sampler!r})")
