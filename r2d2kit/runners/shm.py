"""Shared memory between the learner and actor processes: a weight broadcast and per-actor rings.

* :class:`WeightBroadcast`: the learner publishes a flat float32 weight vector with a version
  number; actors copy it out when the version changes. A sequence lock (odd while writing) plus a
  CRC-32 of the payload make a torn read impossible to accept: a reader that raced a writer
  retries.
* :class:`RecordRing`: a single-producer single-consumer ring of fixed-size records (one R2D2
  window each, see :func:`window_layout`). The actor blocks when the ring is full (back-pressure:
  nothing is dropped and memory does not grow); the learner drains what is there. Every slot carries
  its sequence number and a CRC-32 of its payload, checked on the copy the reader takes: the writer
  publishes by bumping a counter after the payload, which x86 keeps in order but ARM's weaker memory
  order does not promise. A record whose sequence number is not visible yet is retried at the next
  drain (dropped and counted only if it stays so for ``STALE_RECORD_SECONDS``); one whose checksum
  does not match is dropped and counted, never used.
  The CRC costs about 0.7 ms per Pong-size window (125 rows of 84x84) at each end, against 40 env
  steps of acting per window.

Every segment is created private (mode 0600, the ``SharedMemory`` default) by the learner, which
owns it and unlinks it on every exit path (``with`` blocks); actors only attach. One path no code
can catch: a SIGKILL of the learner *and* Python's resource tracker (killing a whole process group
or session, as a sandbox or container teardown does) leaves its segments in ``/dev/shm``. So a
segment's name carries its creator's pid namespace and pid, and every creation first unlinks the
segments of creators in this namespace that no longer exist (:func:`reclaim_orphaned_segments`). The
layout:

    WeightBroadcast:  [ int64 sequence | int64 crc | pad to 64 B | float32 x n ]
    RecordRing:       [ int64 written | int64 read | int64 closed | pad to 64 B | capacity x slot ]
    slot:             [ int64 sequence (record index + 1) | int64 crc | record ]
"""

from __future__ import annotations

import functools
import os
import re
import secrets
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from multiprocessing import resource_tracker, shared_memory
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # typing.Self is Python 3.11's; the package supports 3.10
    from typing import Self

    from numpy.typing import ArrayLike, DTypeLike

HEADER_BYTES = 64
SLOT_HEADER_BYTES = 16
STALE_RECORD_SECONDS = 1.0  # a published record still not visible after this long is corrupt, not late: skipped
PREFIX = "r2d2kit_"
SHM_DIR = "/dev/shm"  # where Linux lists POSIX shared memory; elsewhere nothing is reclaimed


@functools.cache
def _namespace() -> str:
    """This process's pid namespace (its inode), so a pid in a name is only judged where it means something."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "0"


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, another user's
    return True


def reclaim_orphaned_segments() -> list[str]:
    """Unlink this user's r2d2kit segments whose creator (same pid namespace) no longer exists; their names.

    Creators unlink their own segments on every exit a process can see; this reclaims what a SIGKILL of
    the creator together with its resource tracker left behind. A live creator's segments are never touched.
    """
    pattern = re.compile(rf"{PREFIX}{_namespace()}_(\d+)_[0-9a-f]{{12}}")
    reclaimed: list[str] = []
    try:
        names = os.listdir(SHM_DIR)
    except OSError:
        return reclaimed
    for name in names:
        match = pattern.fullmatch(name)
        if match is None or _pid_exists(int(match.group(1))):
            continue
        try:
            if os.stat(os.path.join(SHM_DIR, name)).st_uid == os.getuid():
                os.unlink(os.path.join(SHM_DIR, name))
                reclaimed.append(name)
        except OSError:
            continue  # another process reclaimed it first
    return reclaimed


def _create(size: int) -> shared_memory.SharedMemory:
    reclaim_orphaned_segments()
    name = f"{PREFIX}{_namespace()}_{os.getpid()}_{secrets.token_hex(6)}"
    return shared_memory.SharedMemory(name=name, create=True, size=max(size, 1))


def _attach(name: str) -> shared_memory.SharedMemory:
    # Python < 3.13 registers attached segments with the resource tracker, which would unlink the
    # learner's segment when this (actor) process exits (cpython#82300): only the creator owns it.
    # Unregistering afterwards is not an option: spawned children share the creator's tracker, so
    # that would drop the creator's own registration. Skip the registration instead.
    register = resource_tracker.register
    resource_tracker.register = lambda *args, **kwargs: None
    try:
        return shared_memory.SharedMemory(name=name)
    finally:
        resource_tracker.register = register


class _Segment:
    """Owns or attaches one segment; ``close`` releases it and, for the owner, unlinks it."""

    def __init__(self, block: shared_memory.SharedMemory, owner: bool) -> None:
        self._block: shared_memory.SharedMemory | None = block
        self.owner = owner
        self.name = block.name

    def close(self) -> None:
        """Detach; the owner also unlinks the segment (safe to call twice)."""
        block = self._block
        if block is None:
            return
        self._release_views()
        block.close()
        if self.owner:
            try:
                block.unlink()
            except FileNotFoundError:
                pass
        self._block = None

    def _release_views(self) -> None:
        """Drop numpy views of the buffer (``SharedMemory.close`` refuses while they exist)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001  (interpreter shutdown)
            pass


class WeightBroadcast(_Segment):
    """One writer publishes float32 vectors of a fixed size; any number of readers copy them out.

    A sequence lock: a reader retries until its copy saw no write, so it needs a pause between publishes
    at least as long as one copy (0.05 ms per MB). The learner publishes every ``publish_every`` updates,
    milliseconds apart; a writer publishing in a tight loop could starve readers.
    """

    def __init__(self, block: shared_memory.SharedMemory, size: int, owner: bool) -> None:
        super().__init__(block, owner)
        self.size = int(size)
        self._header: np.ndarray | None = np.ndarray((2,), dtype=np.int64, buffer=block.buf)
        self._data: np.ndarray | None = np.ndarray((self.size,), dtype=np.float32, buffer=block.buf,
                                                   offset=HEADER_BYTES)

    @classmethod
    def create(cls, size: int) -> WeightBroadcast:
        """A new broadcast for ``size`` float32 values (the learner's side)."""
        return cls(_create(HEADER_BYTES + 4 * int(size)), size, owner=True)

    @classmethod
    def attach(cls, name: str, size: int) -> WeightBroadcast:
        """Attach to an existing broadcast by name (an actor's side)."""
        return cls(_attach(name), size, owner=False)

    def _views(self) -> tuple[np.ndarray, np.ndarray]:
        """The header and payload views of the segment; ValueError once closed."""
        if self._header is None or self._data is None:
            raise ValueError(f"weight broadcast {self.name} is closed")
        return self._header, self._data

    @property
    def version(self) -> int:
        """Number of completed publishes."""
        header, _ = self._views()
        return int(header[0]) // 2

    def publish(self, vector: np.ndarray) -> int:
        """Write a new version (single writer only); returns its version number."""
        header, data = self._views()
        vector = np.ascontiguousarray(vector, dtype=np.float32)
        if vector.shape != (self.size,):
            raise ValueError(f"weight vector must have shape ({self.size},), got {vector.shape}")
        # the checksum before the odd mark: readers wait out only the copy (1 MB: 0.07 ms) and not the CRC
        # (0.34 ms), so a publisher that never rests still leaves them room to read
        crc = zlib.crc32(vector.data)  # .data: the contiguous array's own buffer, not a copy
        header[0] += 1  # odd: writing
        data[:] = vector
        header[1] = crc
        header[0] += 1  # even: complete
        return int(header[0]) // 2

    def read(self, newer_than: int = -1, timeout: float = 5.0) -> tuple[int, np.ndarray] | None:
        """A consistent copy ``(version, vector)`` if a version newer than ``newer_than`` exists, else None."""
        header, data = self._views()
        deadline = time.monotonic() + timeout
        while True:
            before = int(header[0])
            if before % 2 == 0 and before // 2 <= max(newer_than, 0):
                return None  # nothing newer (version 0: nothing published yet)
            if before % 2 == 0:
                copy = data.copy()
                crc = int(header[1])
                if int(header[0]) == before and zlib.crc32(copy.data) == crc:
                    return before // 2, copy
            if time.monotonic() > deadline:
                raise TimeoutError("weight broadcast stayed mid-write; is the learner alive?")
            time.sleep(0)

    def _release_views(self) -> None:
        self._header = None
        self._data = None


@dataclass(frozen=True)
class RecordLayout:
    """Byte layout of one record: named fixed-shape arrays, each 8-byte aligned."""

    fields: tuple[tuple[str, tuple[int, ...], str, int], ...]  # (name, shape, dtype, offset)
    nbytes: int

    @classmethod
    def from_spec(cls, spec: Mapping[str, tuple[tuple[int, ...], DTypeLike]]) -> RecordLayout:
        fields, offset = [], 0
        for name, (shape, dtype) in spec.items():
            dtype = np.dtype(dtype)
            fields.append((name, tuple(shape), dtype.str, offset))
            size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            offset += (size + 7) // 8 * 8
        return cls(tuple(fields), max(offset, 8))

    def to_spec(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """``{name: (shape, dtype string)}``: the layout in a form that crosses to a spawned process."""
        return {name: (shape, dtype) for name, shape, dtype, _ in self.fields}


def window_layout(length: int, obs_shape: tuple[int, ...], obs_dtype: DTypeLike, action_dtype: DTypeLike = np.int64,
                  state: Mapping[str, tuple[tuple[int, ...], DTypeLike]] | None = None,
                  extras: Mapping[str, tuple[tuple[int, ...], DTypeLike]] | None = None,
                  action_shape: tuple[int, ...] = ()) -> RecordLayout:
    """The record of one :class:`~r2d2kit.replay.SequenceBuilder` window (the learner gives it the max priority).

    ``action_shape``: one action's shape: ``()`` for R2D2's action index, ``(size,)`` for a continuous agent's
    flat float32 action vector (with ``action_dtype`` float32); ``prev_action`` has the same.

    ``state``: the recurrent state stored per window, ``{state_<name>: (shape, dtype)}``
    (:func:`r2d2kit.training.builders.state_fields`).
    ``extras``: per-row fields stored beside the observations, ``{name: (row shape, dtype)}`` (a goal
    env's ``{"achieved_goal": ((goal_size,), "float32")}``), each ``[length, *shape]`` in the record.
    """
    from r2d2kit.replay.window_record import window_fields

    action = (tuple(action_shape), action_dtype)
    return RecordLayout.from_spec(window_fields(length, (obs_shape, obs_dtype), action, state, extras))


class RecordRing(_Segment):
    """Single-producer single-consumer ring of records in shared memory, with back-pressure."""

    def __init__(self, block: shared_memory.SharedMemory, layout: RecordLayout, capacity: int, owner: bool) -> None:
        super().__init__(block, owner)
        self.layout = layout
        self.capacity = int(capacity)
        self.torn = 0  # records skipped because their checksum did not match or they never became visible
        self._stale_since: tuple[int, float] | None = None  # (record index, first seen) of a record not yet visible
        self._header: np.ndarray | None = np.ndarray((3,), dtype=np.int64, buffer=block.buf)  # written, read, closed
        self._slots: np.ndarray | None = np.ndarray((self.capacity, SLOT_HEADER_BYTES + layout.nbytes),
                                                    dtype=np.uint8, buffer=block.buf, offset=HEADER_BYTES)

    @classmethod
    def create(cls, layout: RecordLayout, capacity: int) -> RecordRing:
        """A new ring of ``capacity`` records (the learner's side)."""
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        size = HEADER_BYTES + capacity * (SLOT_HEADER_BYTES + layout.nbytes)
        return cls(_create(size), layout, capacity, owner=True)

    @classmethod
    def attach(cls, name: str, layout: RecordLayout, capacity: int) -> RecordRing:
        """Attach to an existing ring by name (the actor's side)."""
        return cls(_attach(name), layout, capacity, owner=False)

    def _views(self) -> tuple[np.ndarray, np.ndarray]:
        """The header and slot views of the segment; ValueError once closed."""
        if self._header is None or self._slots is None:
            raise ValueError(f"record ring {self.name} is closed")
        return self._header, self._slots

    def __len__(self) -> int:
        header, _ = self._views()
        return int(header[0] - header[1])

    @property
    def closed(self) -> bool:
        """True once the consumer asked producers to stop."""
        header, _ = self._views()
        return bool(header[2])

    def close_for_writing(self) -> None:
        """Tell the producer to stop (it returns False from ``put`` instead of waiting)."""
        header, _ = self._views()
        header[2] = 1

    def put(self, record: Mapping[str, ArrayLike], timeout: float | None = None) -> bool:
        """Append one record, waiting while the ring is full. False if closed or timed out."""
        header, slots = self._views()
        deadline = None if timeout is None else time.monotonic() + timeout
        while int(header[0] - header[1]) >= self.capacity:
            if self.closed or (deadline is not None and time.monotonic() > deadline):
                return False
            time.sleep(0.0005)
        if self.closed:
            return False
        index = int(header[0])
        slot = slots[index % self.capacity]
        for name, shape, dtype, offset in self.layout.fields:
            view = np.ndarray(shape, dtype=dtype, buffer=slot, offset=SLOT_HEADER_BYTES + offset)
            view[...] = record[name]
        stamp = slot[:SLOT_HEADER_BYTES].view(np.int64)
        stamp[1] = zlib.crc32(slot[SLOT_HEADER_BYTES:].data)  # .data: the slot's own bytes, not a copy
        stamp[0] = index + 1
        header[0] = index + 1  # publish after the payload is written
        return True

    def drain(self, limit: int | None = None) -> list[dict[str, np.ndarray]]:
        """Copy out every waiting record (at most ``limit``), oldest first, and free their slots.

        A record whose sequence number is not visible yet ends this drain; the next one retries it
        (after ``STALE_RECORD_SECONDS`` it is skipped). A record whose CRC-32 does not match its copy
        is skipped. Both count in :attr:`torn`.

        Raises:
            RuntimeError: the ring's counters claim more records than it has slots (a corrupt
                segment); nothing is read.
        """
        header, slots = self._views()
        start = int(header[1])
        available = int(header[0]) - start
        if not 0 <= available <= self.capacity:
            raise RuntimeError(f"record ring {self.name}: its counters (written {int(header[0])}, read {start}) "
                               f"do not fit its {self.capacity} slots; the shared segment is corrupt")
        count = available if limit is None else min(available, limit)
        out: list[dict[str, np.ndarray]] = []
        taken = 0
        while taken < count:
            index = start + taken
            slot = slots[index % self.capacity].copy()
            stamp = slot[:SLOT_HEADER_BYTES].view(np.int64)
            if stamp[0] != index + 1 and not self._given_up_on(index):
                break  # published counter seen before the payload: retry at the next drain
            taken += 1
            if stamp[0] != index + 1 or stamp[1] != zlib.crc32(slot[SLOT_HEADER_BYTES:].data):
                self.torn += 1
                continue
            out.append({name: np.ndarray(shape, dtype=dtype, buffer=slot, offset=SLOT_HEADER_BYTES + offset)
                        for name, shape, dtype, offset in self.layout.fields})
        header[1] = start + taken
        return out

    def _given_up_on(self, index: int) -> bool:
        """Has the record at ``index`` stayed invisible for ``STALE_RECORD_SECONDS`` (corrupt, not late)?"""
        now = time.monotonic()
        if self._stale_since is None or self._stale_since[0] != index:
            self._stale_since = (index, now)
        return now - self._stale_since[1] >= STALE_RECORD_SECONDS

    def _release_views(self) -> None:
        self._header = None
        self._slots = None


def stack_records(records: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Stack drained window records into the ``[W, ...]`` dict ``SequenceReplayBuffer.add_sequences`` takes."""
    return {name: np.stack([record[name] for record in records]) for name in records[0]}
