"""BufferCore: what every r2d2kit buffer kind shares, written once.

A kind (transitions, HER transitions, R2D2 windows, HER windows) brings its storage, its writer
(``add`` / ``add_batch`` / ``add_sequences``), ``sample`` and ``batch_spec``; the core owns the rest:

* the lock: every verb is atomic, so ``batches`` or a ``tf.data`` pipeline may sample in its own thread while the
  training loop adds items and updates priorities;
* the random generator and the sampler (:mod:`r2d2kit.replay.samplers`), hence ``max_priority``
  and ``update_priorities``;
* sample memory: fresh arrays per ``sample``, or the caller's ``out=`` (:mod:`r2d2kit.replay.batch_pool`);
* pickle-free ``save`` / ``load`` of one ``.npz`` (the kind adds its arrays through two hooks);
* ``batches`` (numpy, any backend) and ``as_dataset`` (``tf.data``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import numpy.typing as npt

from r2d2kit._validation import Seed, as_generator, check_float, check_positive_int
from r2d2kit.replay.batch_iterator import BatchIterator
from r2d2kit.replay.batch_pool import allocate_batch, check_batch_out
from r2d2kit.replay.persistence import (
    ArraySpec,
    JsonValue,
    Metadata,
    SavedLayout,
    meta_field,
    meta_mapping,
    read_npz,
    rng_from_json,
    rng_to_json,
    write_npz,
)
from r2d2kit.replay.protocol import DEFAULT_BETA, SAMPLERS, RewardFn
from r2d2kit.replay.samplers import ProportionalSampler, RankSampler, Sampler, UniformSampler
from r2d2kit.replay.schedules import Beta

if TYPE_CHECKING:
    import tensorflow as tf

# What a saved buffer may make ``load`` preallocate by default: a file proves the items it stores, not
# the capacity it claims (see ``BufferCore.load``). R2D2 on Atari (250 000 84x84 frames) takes 1.8 GB.
DEFAULT_MAX_BYTES = 8 * 2**30
_SAMPLER_CLASSES = {kind.name: kind for kind in (UniformSampler, ProportionalSampler, RankSampler)}
_Buffer = TypeVar("_Buffer", bound="BufferCore")


class BufferCore:
    """The shared part of every buffer (see the module docstring); not used on its own."""

    def __init__(self, sampler: Sampler, seed: Seed) -> None:
        self._sampler = sampler
        self._rng = as_generator(seed)
        self._lock = threading.RLock()

    @property
    def sampler(self) -> Sampler:
        """How items are drawn (read it, don't write it): its ``alive`` slots, ``tree`` or ``ranks``."""
        return self._sampler

    @property
    def max_priority(self) -> float:
        """The largest priority seen so far (``priority + eps`` for ``"proportional"``); new items get it."""
        return self._sampler.max_priority

    def __len__(self) -> int:
        """The samples ``sample`` can draw from now (see :mod:`r2d2kit.replay.protocol`)."""
        raise NotImplementedError

    def sample(self, batch_size: int, beta: float = DEFAULT_BETA, *, out: Mapping[str, np.ndarray] | None = None,
               rng: np.random.Generator | None = None) -> dict[str, np.ndarray]:
        """A batch of ``batch_size`` items (the kind's docstring says what it holds)."""
        raise NotImplementedError

    def batch_spec(self, batch_size: int) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """Shape and dtype of every array ``sample(batch_size)`` returns."""
        raise NotImplementedError

    def sample_buffers(self, batch_size: int) -> dict[str, np.ndarray]:
        """Zeroed arrays for ``sample(batch_size, out=...)``: one per :meth:`batch_spec` field, already touched.

        The arrays are 64-byte aligned, so TensorFlow wraps them without a copy.
        """
        return allocate_batch(self.batch_spec(check_positive_int("batch_size", batch_size)))

    def _check_sample_args(self, batch_size: object, beta: object, out: object) -> tuple[int, float]:
        """Validated ``batch_size`` and ``beta``; ``out`` must be ``None`` or fit (see ``check_batch_out``)."""
        batch_size = check_positive_int("batch_size", batch_size)
        beta = check_float("beta", beta, 0.0, 1.0)
        if out is not None:
            check_batch_out(out, self.batch_spec(batch_size))
        return batch_size, beta

    def _batch_memory(self, batch_size: int, out: Mapping[str, np.ndarray] | None) -> dict[str, np.ndarray]:
        """``out`` (checked) as a dict, else fresh arrays: ``np.empty`` per field took 2 us for a
        512-transition batch, carving one aligned block 58 us; the gather writes every element."""
        if out is not None:
            return out if isinstance(out, dict) else dict(out)
        return {name: np.empty(shape, dtype) for name, (shape, dtype) in self.batch_spec(batch_size).items()}

    def _record_draw(self, batch: dict[str, np.ndarray], indices: np.ndarray, weights: np.ndarray) -> None:
        """Write a draw's ``indices``, ``weights`` and the slots' ``generations`` into ``batch`` (lock held)."""
        np.copyto(batch["indices"], indices)
        np.copyto(batch["weights"], weights)
        self._sampler.generations_of(indices, out=batch["generations"])

    def update_priorities(self, indices: npt.ArrayLike, priorities: npt.ArrayLike,
                          generations: npt.ArrayLike | None = None) -> None:
        """Set new priorities (typically ``|TD error|``) for sampled ``indices``; a repeated index: the last wins.

        Items that died since they were sampled (a window whose rows are gone) are skipped. Pass the
        batch's ``generations`` too (``batch["generations"]``) whenever items may be added between
        ``sample`` and this call (a ``tf.data`` pipeline, actors in other threads): then an item
        written into a sampled slot since, which is another item, keeps its own priority. Without
        them that slot's new occupant gets the old item's priority. With the uniform sampler the
        input is only validated.

        Raises:
            IndexError: an index that holds no item.
            ValueError: a priority is NaN, infinite or negative (the first one is named), or
                ``generations`` is not one integer per index.
        """
        with self._lock:
            slots = self._checked_indices(indices)
            self._sampler.update(slots, priorities, _checked_generations(generations, slots.shape[0]))

    def _checked_indices(self, indices: npt.ArrayLike) -> np.ndarray:
        """``indices`` as int64 slots that may be passed to the sampler, or an ``IndexError``."""
        raise NotImplementedError

    # ----------------------------------------------------------------- persistence
    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the whole buffer to ``path`` (``.npz``, no pickle, atomic replace).

        Items, priorities, counters and the random state are kept, so sampling after ``load`` gives
        exactly what sampling without the round trip would. Goal functions are not saved: pass them
        to ``load``.
        """
        with self._lock:
            meta, arrays = self._saved_state()
            meta["sampler"], sampler_arrays = self._sampler.state()
            meta.update({"class": type(self).__name__, "rng": rng_to_json(self._rng)})
            write_npz(path, meta, {**arrays, **sampler_arrays})

    @classmethod
    def load(cls: type[_Buffer], path: str | os.PathLike[str], *, max_bytes: int = DEFAULT_MAX_BYTES,
             **functions: RewardFn | None) -> _Buffer:
        """Read a buffer written by ``save``; a missing, truncated, foreign or corrupt file raises, naming it.

        Nothing in the file is trusted before it is checked (:mod:`r2d2kit.replay.persistence`): every
        array must have exactly the shape and dtype the metadata implies (nothing is cast), counters and
        tables must agree with the arrays, and a failed load leaves no buffer behind.

        Memory. Arrays are read at their size in the file (entries are stored uncompressed, so none
        inflates), and nothing is allocated before the checks. The buffer is then built at its saved
        capacity, which the file proves only in part: a proportional or rank sampler saves one priority
        per slot, a uniform one only the live slots, and field storage is saved for the stored items
        alone. So the capacity is taken on trust up to ``max_bytes``: a file whose capacity would
        preallocate more is refused before anything is allocated.

        Args:
            path: the file ``save`` wrote.
            max_bytes: the most the buffer may preallocate at its saved capacity (fields, trees and
                tables; default 8 GiB). Raise it to load a larger buffer from a file you trust, on a
                machine with that memory.
            functions: what the kind's constructor needs and ``save`` cannot keep (the HER buffers'
                ``compute_reward`` and ``compute_terminated``).

        Raises:
            FileNotFoundError: no file at ``path``.
            ValueError: the file is not a readable buffer of this class, or something in it is refused
                (the message names the file and the field or array).
        """
        path = os.fspath(path)
        max_bytes = check_positive_int("max_bytes", max_bytes)
        meta, arrays = read_npz(path, cls.__name__, lambda saved: cls._checked_layout(path, saved, max_bytes))
        rng = rng_from_json(path, meta_field(path, meta, "rng"))
        buffer = cls._from_meta(path, meta, **functions)
        try:
            buffer._sampler.restore(meta["sampler"], arrays, path)
            buffer._restore_saved_state(path, meta, arrays)
        except (KeyError, TypeError, IndexError, OverflowError) as error:  # a check missed it: still name the file
            raise ValueError(f"{path!r}: saved buffer metadata is incomplete or malformed ({error!r})") from error
        buffer._rng = rng
        return buffer

    @classmethod
    def _checked_layout(cls, path: str, meta: Metadata, max_bytes: int) -> Mapping[str, ArraySpec]:
        """The arrays a saved buffer of this kind must hold; refused if building it would take over ``max_bytes``."""
        meta_mapping(path, meta, "sampler")
        layout = cls._saved_layout(path, meta)
        needed = layout.preallocated_bytes
        if needed > max_bytes:
            raise ValueError(f"{path!r}: the saved {cls.__name__} would preallocate {needed} bytes "
                             f"({needed / 2**30:.3g} GiB) at its saved capacity, more than max_bytes = {max_bytes}; "
                             "if the file is trusted and the machine has the memory, pass "
                             f"load(..., max_bytes={needed})")
        return layout.arrays

    @classmethod
    def _saved_layout(cls, path: str, meta: Metadata) -> SavedLayout:
        """The kind's check of its metadata: the arrays it implies and the bytes its capacity preallocates.

        The one place a kind reads sizes from a file; it allocates nothing sized by them.
        """
        raise NotImplementedError

    @staticmethod
    def _sampler_layout(path: str, params: Metadata, slots: int, dense: bool = False) -> SavedLayout:
        """The saved sampler's arrays and preallocation (``params.sampler`` names it) over ``slots`` slots."""
        name = meta_field(path, params, "sampler", "params.sampler")
        if not isinstance(name, str) or name not in _SAMPLER_CLASSES:
            raise ValueError(f"{path!r}: malformed metadata: field 'params.sampler' = {name!r:.80} must be one of "
                             f"{SAMPLERS}; the file is corrupt")
        return _SAMPLER_CLASSES[name].saved_layout(slots, dense)

    @classmethod
    def _saved_constructor(cls: type[_Buffer], path: str, *args: Any, **kwargs: Any) -> _Buffer:
        """``cls(*args, **kwargs)`` with arguments read from ``path``; one it refuses names the file."""
        try:
            return cls(*args, **kwargs)
        except (ValueError, TypeError, OverflowError) as error:
            raise ValueError(f"{path!r}: malformed metadata: the saved constructor arguments are refused ({error}); "
                             "the file is corrupt or was not written by save()") from error

    def _saved_state(self) -> tuple[dict[str, JsonValue], dict[str, np.ndarray]]:
        """JSON metadata (constructor arguments included) and arrays of the kind (lock held)."""
        raise NotImplementedError

    @classmethod
    def _from_meta(cls: type[_Buffer], path: str, meta: Metadata, **functions: RewardFn | None) -> _Buffer:
        """A fresh buffer with the saved constructor arguments."""
        raise NotImplementedError

    def _restore_saved_state(self, path: str, meta: Metadata, arrays: Mapping[str, np.ndarray]) -> None:
        """Inverse of ``_saved_state`` on a fresh buffer whose sampler is already restored."""
        raise NotImplementedError

    # ------------------------------------------------------------- iterators
    def batches(self, batch_size: int, beta: Beta = DEFAULT_BETA, prefetch: int = 2, reuse_memory: bool = False,
                empty_wait: float = 60.0) -> BatchIterator:
        """An endless iterator of ``sample(batch_size, beta)`` batches as numpy arrays, on any Keras backend.

        The backend-free twin of :meth:`as_dataset`: the same batches in the same order, ``prefetch`` of them
        drawn ahead in a background thread (0: each drawn in ``next()``, after the newest priority updates).
        ``beta`` may be a float or a callable ``beta(sample_count)``; ``reuse_memory`` samples into a pool of
        reused arrays (a batch is written again only once nothing references it); ``empty_wait``: how long
        an iterator waits for the first item. Close it, or use it in a ``with`` block, to stop its thread:
        see :class:`~r2d2kit.replay.batch_iterator.BatchIterator`.
        """
        return BatchIterator(self, batch_size, beta=beta, prefetch=prefetch, reuse_memory=reuse_memory,
                             empty_wait=empty_wait)

    # ----------------------------------------------------------------- tf.data
    def as_dataset(self, batch_size: int, beta: Beta = DEFAULT_BETA, prefetch: int = 2, reuse_memory: bool = False,
                   empty_wait: float = 60.0) -> tf.data.Dataset:
        """An endless ``tf.data.Dataset`` of ``sample(batch_size, beta)`` batches (imports TensorFlow; an
        ``ImportError`` naming the numpy alternative, ``sample``, where TensorFlow is not installed).

        ``beta`` may be a float or a callable ``beta(sample_count)`` such as
        :class:`~r2d2kit.replay.LinearSchedule`; ``reuse_memory`` and ``empty_wait`` (how long an
        iterator waits for the first item): see :func:`~r2d2kit.replay.dataset.buffer_dataset`.
        """
        try:
            from r2d2kit.replay.dataset import buffer_dataset
        except ImportError as error:
            if error.name != "tensorflow":
                raise
            raise ImportError("as_dataset builds a tf.data pipeline, which needs TensorFlow (pip install tensorflow); "
                              "without it (e.g. Keras on JAX) iterate buffer.batches(batch_size, beta), the same "
                              "batches as numpy arrays") from None
        return buffer_dataset(self, batch_size, beta=beta, prefetch=prefetch, reuse_memory=reuse_memory,
                              empty_wait=empty_wait)


def _checked_generations(generations: npt.ArrayLike | None, count: int) -> np.ndarray | None:
    """``generations`` as ``count`` int64 values (``None`` stays ``None``), or a ValueError that names the fix."""
    if generations is None:
        return None
    if isinstance(generations, np.ndarray) and generations.dtype == np.int64 and generations.shape == (count,):
        return generations  # a batch's own array: nothing to convert
    array = np.asarray(generations)
    if array.shape != (count,) or (array.size and not np.issubdtype(array.dtype, np.integer)):
        raise ValueError(f"generations must be {count} integers, one per index (the batch's 'generations'), got "
                         f"shape {array.shape} and dtype {array.dtype}")
    return array.astype(np.int64, copy=False)
