"""Sample memory: fresh arrays by default, reused memory when the caller opts in.

Why opt in. ``SequenceReplayBuffer.sample(64)`` of R2D2 Atari windows gathers 57 MB (64 x 125 rows
of 84x84 uint8). Into fresh memory that costs about 1.7x a memcpy of the bytes, because the kernel
must fault in and zero every new page; into memory touched before about 1.1x
(``benchmarks/bench_window_gather.py``). But memory written again is only safe when nothing still
uses the previous batch, which a buffer cannot know for sure, so ``sample()`` returns fresh arrays
unless told otherwise. Two ways to opt in:

* ``sample(n, out=arrays)`` with arrays you own (``buffer.sample_buffers(n)``): the next sample into
  them overwrites the batch. Safe when each batch is consumed before the next is drawn, as a
  synchronous training step does (``R2D2Learner.train_from``, and so the trainer, works this way).
* ``sample(n, out=pool.acquire())`` with a :class:`BatchPool`: a slot is handed out again only once
  nothing outside the pool references its arrays (the dict, an array, a view, a TensorFlow tensor
  that wraps one without a copy, as ``tf.data`` does for 64-byte-aligned arrays). The count is
  CPython's reference count, so raw pointers taken past Python (``array.ctypes.data``, a C extension
  that wraps memory without a reference) escape it, and reference counts behave differently on
  free-threaded CPython: use it only where every consumer holds Python references
  (``as_dataset(..., reuse_memory=True)`` does, for TensorFlow's tensors).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from r2d2kit._validation import check_positive_int

__all__ = ["BatchPool", "allocate_batch", "check_batch_out"]

ALIGNMENT = 64  # bytes; TensorFlow wraps (does not copy) numpy arrays aligned like this

BatchSpec = Mapping[str, tuple[tuple[int, ...], npt.DTypeLike]]


def allocate_batch(spec: BatchSpec, touch: bool = True) -> dict[str, np.ndarray]:
    """Zeroed arrays for every ``{name: (shape, dtype)}`` of ``spec``, carved from one block.

    Each array starts on a 64-byte boundary (TensorFlow then wraps it without a copy). With
    ``touch`` every page is written once here, so the first gather into the arrays faults in no
    memory; without, the first gather pays for it (as a fresh array would).
    """
    layout = []
    offset = 0
    for name, (shape, dtype) in spec.items():
        dtype = np.dtype(dtype)
        shape = tuple(int(n) for n in shape)
        offset += -offset % max(ALIGNMENT, dtype.alignment)
        layout.append((name, shape, dtype, offset))
        offset += int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.zeros(offset + ALIGNMENT, dtype=np.uint8)
    if touch:
        raw.fill(0)  # np.zeros may map untouched pages; write them now, not in the first gather
    start = -raw.ctypes.data % ALIGNMENT
    block = raw[start:start + offset]
    arrays = {}
    for name, shape, dtype, at in layout:
        size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        arrays[name] = block[at:at + size].view(dtype).reshape(shape)
    return arrays


def check_batch_out(out: object, spec: BatchSpec) -> dict[str, np.ndarray]:
    """Check that ``out`` has one writable C-contiguous array per field of ``spec`` with its shape and dtype.

    Raises:
        TypeError: ``out`` is not a mapping, or a value is not a numpy array.
        ValueError: a field is missing or unknown, or an array has the wrong shape or dtype, or
            cannot be written in place; the message names the field and the fix.
    """
    fix = "allocate it with buffer.sample_buffers(batch_size)"
    if not isinstance(out, Mapping):
        raise TypeError(f"out must be a dict of arrays ({fix}), got {type(out).__name__}")
    missing = [name for name in spec if name not in out]
    unknown = [name for name in out if name not in spec]
    if missing or unknown:
        raise ValueError(f"out has missing fields {missing} and unknown fields {unknown}; "
                         f"the batch's fields are {list(spec)} ({fix})")
    for name, (shape, dtype) in spec.items():
        array = out[name]
        if not isinstance(array, np.ndarray):
            raise TypeError(f"out[{name!r}] must be a numpy array, got {type(array).__name__} ({fix})")
        shape, dtype = tuple(shape), np.dtype(dtype)
        if array.shape != shape or array.dtype != dtype:
            raise ValueError(f"out[{name!r}] has shape {array.shape} and dtype {array.dtype}, the batch needs "
                             f"shape {shape} and dtype {dtype} ({fix})")
        if not (array.flags.c_contiguous and array.flags.writeable):
            raise ValueError(f"out[{name!r}] must be writable and C-contiguous, got a "
                             f"{'read-only' if not array.flags.writeable else 'strided'} array ({fix})")
    return dict(out)


def _reference_counts(objects: list[object]) -> list[int]:
    """CPython reference counts of ``objects`` (one helper, so the counting's own references match)."""
    return [sys.getrefcount(item) for item in objects]


class _Slot:
    """One batch's arrays, their shared block, and their reference counts while only the pool held them."""

    def __init__(self, spec: BatchSpec) -> None:
        self.arrays = allocate_batch(spec, touch=False)  # the gather that follows writes every page
        # the arrays and the block they share, which every view of them references (numpy collapses
        # view chains to the owner); no local may hold any of them while the idle counts are taken
        self.objects: list[object] = list(self.arrays.values()) + [next(iter(self.arrays.values())).base]
        self.idle_counts = _reference_counts(self.objects)

    def held_elsewhere(self) -> bool:
        return _reference_counts(self.objects) != self.idle_counts


class BatchPool:
    """A few preallocated batches, each handed out again only once nothing outside the pool references it.

    See the module docstring for the lifetime rule. ``acquire`` is not thread-safe: call it under
    the owner's lock (the buffers do).

    Args:
        spec: ``{name: (shape, dtype)}`` of one batch, e.g. ``buffer.batch_spec(64)``.
        size: slots kept; to reuse memory with ``k`` batches alive at once, ``size >= k + 1``.

    Example:
        >>> pool = BatchPool(buffer.batch_spec(64), size=4)
        >>> batch = buffer.sample(64, out=pool.acquire())   # reused memory, never memory still held
    """

    def __init__(self, spec: BatchSpec, size: int) -> None:
        self.spec = {name: (tuple(shape), np.dtype(dtype)) for name, (shape, dtype) in spec.items()}
        if not self.spec:
            raise ValueError("spec must name at least one field, got an empty mapping")
        self.size = check_positive_int("size", size)
        self._slots: list[_Slot] = []
        self._next = 0
        self.allocated = 0  # slots built, including those that replaced held ones
        self.reused = 0  # acquisitions served from a slot built earlier

    @property
    def nbytes(self) -> int:
        """Bytes of the slots the pool holds now."""
        return sum(array.nbytes for slot in self._slots for array in slot.arrays.values())

    def acquire(self) -> dict[str, np.ndarray]:
        """A new dict of one slot's arrays that nothing outside the pool references (contents: the last batch)."""
        count = len(self._slots)
        for step in range(count):
            position = (self._next + step) % count
            slot = self._slots[position]
            if not slot.held_elsewhere():
                self._next = (position + 1) % self.size
                self.reused += 1
                return dict(slot.arrays)
        slot = _Slot(self.spec)
        self.allocated += 1
        if count < self.size:
            self._slots.append(slot)
            self._next = (count + 1) % self.size
        else:  # every slot is held: let go of the oldest, which lives on while it is referenced
            self._slots[self._next] = slot
            self._next = (self._next + 1) % self.size
        return dict(slot.arrays)

    def __repr__(self) -> str:
        return (f"BatchPool(size={self.size}, slots={len(self._slots)}, allocated={self.allocated}, "
                f"reused={self.reused})")
