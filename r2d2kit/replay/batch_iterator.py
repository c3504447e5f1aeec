"""Sampled batches as a plain Python iterator of numpy arrays: ``buffer.batches``, on any Keras backend.

``as_dataset`` gives TensorFlow a ``tf.data`` pipeline; Keras on JAX or PyTorch, and any numpy training
loop, get the same batches from :class:`BatchIterator`, which draws ``prefetch`` batches ahead in a
background thread (a bounded queue, so it never runs further ahead than that). Both share
:func:`sampled_batches`, the generator that holds the buffer weakly, waits for a first item and
evaluates ``beta(count)`` at each draw; so ``buffer.batches(n, beta)`` yields exactly what
``buffer.sample(n, beta)`` calls would, in the same order.
"""

from __future__ import annotations

import queue
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Generator, Iterator
from types import TracebackType
from typing import NamedTuple, cast

import numpy as np

from r2d2kit._validation import check_float, check_positive_int
from r2d2kit.replay.batch_pool import BatchPool
from r2d2kit.replay.protocol import DEFAULT_BETA, ReusableBuffer, SampledBuffer
from r2d2kit.replay.schedules import Beta

__all__ = ["BatchIterator", "sampled_batches"]

EMPTY_WARNING_SECONDS = 5.0  # an iterator waiting this long for a first item says so once
POLL_S = 0.05  # how often a blocked prefetch thread looks whether its iterator was closed


def beta_function(beta: Beta) -> Callable[[int], float]:
    """``beta`` as a function of the draw count (a float checked to lie in [0, 1], or the schedule itself)."""
    if callable(beta):
        return beta
    fixed = check_float("beta", beta, 0.0, 1.0)
    return lambda _count: fixed


def check_reuse_memory(buffer: SampledBuffer, reuse_memory: bool) -> None:
    """``reuse_memory`` is a bool, and True only for a buffer that can sample into given arrays."""
    if not isinstance(reuse_memory, bool):
        raise TypeError(f"reuse_memory must be True or False, got {reuse_memory!r}")
    if reuse_memory and not callable(getattr(buffer, "sample_buffers", None)):
        raise ValueError(f"reuse_memory=True needs a buffer with sample_buffers() and sample(..., out=); "
                         f"{type(buffer).__name__} has none: pass reuse_memory=False")


class SamplingOptions(NamedTuple):
    """The checked arguments of ``buffer.batches`` and ``buffer.as_dataset``, which take the same ones."""

    batch_size: int
    beta_at: Callable[[int], float]
    prefetch: int
    reuse_slots: int  # 0: fresh arrays per batch; else the BatchPool's slots
    empty_wait: float


def check_sampling_options(buffer: SampledBuffer, batch_size: int, beta: Beta, prefetch: int, reuse_memory: bool,
                           empty_wait: float) -> SamplingOptions:
    """Check every argument before anything is sampled; a named error for the first bad one.

    With ``reuse_memory`` the pool has ``prefetch + 3`` slots: the batches prefetched, the one the prefetcher
    holds while its queue is full, the one in the consumer's hands, and the one being drawn (a batch is
    recycled only once nothing references it).
    """
    batch_size = check_positive_int("batch_size", batch_size)
    prefetch = check_positive_int("prefetch", prefetch, minimum=0)
    empty_wait = check_float("empty_wait", empty_wait, 0.0)
    beta_at = beta_function(beta)
    check_reuse_memory(buffer, reuse_memory)
    return SamplingOptions(batch_size, beta_at, prefetch, prefetch + 3 if reuse_memory else 0, empty_wait)


def sampled_batches(buffer: SampledBuffer, batch_size: int, beta_at: Callable[[int], float], reuse_slots: int,
                    empty_wait: float, caller: str,
                    stop: threading.Event | None = None) -> Generator[dict[str, np.ndarray], None, None]:
    """Endless ``buffer.sample(batch_size, beta_at(count))`` batches; ends once the buffer is garbage-collected
    (or ``stop`` is set while it waits for a first item).

    The buffer is held weakly (``tf.data`` keeps generators alive for the whole process, tensorflow#57690).
    ``reuse_slots``: 0 samples into fresh arrays; else into a :class:`~r2d2kit.replay.BatchPool` of that many
    slots. ``caller`` names the API in the empty-buffer warning and error.
    """
    shapes = {name: (shape, np.dtype(dtype)) for name, (shape, dtype) in buffer.batch_spec(batch_size).items()}
    buffer_ref = weakref.ref(buffer)  # the generator below never holds the buffer between draws

    def draws() -> Generator[dict[str, np.ndarray], None, None]:
        pool = BatchPool(shapes, reuse_slots) if reuse_slots else None
        count = 0
        while True:
            live = buffer_ref()
            if live is None:
                return
            if not len(live):
                live = wait_for_items(buffer_ref, empty_wait, caller, stop)
                if live is None:
                    return
            out = None if pool is None else pool.acquire()
            # out only with reuse_memory, which check_reuse_memory refused for a buffer without sample_buffers()
            batch = cast(ReusableBuffer, live).sample(batch_size, beta=beta_at(count), out=out) if out is not None \
                else live.sample(batch_size, beta=beta_at(count))
            del live, out
            yield batch
            del batch  # our own reference would keep its slot busy for the next acquire
            count += 1

    return draws()


def wait_for_items(buffer_ref: weakref.ref[SampledBuffer], empty_wait: float, caller: str,
                   stop: threading.Event | None = None) -> SampledBuffer | None:
    """The buffer once it holds an item (None if it was garbage-collected or ``stop`` was set); a ValueError
    after ``empty_wait`` s."""
    started = time.monotonic()
    warned = False
    while True:
        live = buffer_ref()
        if live is None or len(live):
            return live
        if stop is not None and stop.is_set():
            return None
        waited = time.monotonic() - started
        if waited >= empty_wait:
            raise ValueError(f"the {type(live).__name__} is still empty after {empty_wait:g} s: add items before "
                             f"iterating its {caller} (or from another thread while it waits); a new iterator works "
                             "once items are there")
        if not warned and waited >= EMPTY_WARNING_SECONDS:
            warnings.warn(f"{caller}: the {type(live).__name__} is empty; waiting up to {empty_wait:g} s for items",
                          stacklevel=2)
            warned = True
        del live
        time.sleep(0.01)


class BatchIterator(Iterator[dict[str, np.ndarray]]):
    """An endless iterator of ``buffer.sample(batch_size, beta)`` batches (numpy), ``prefetch`` drawn ahead.

    Made by ``buffer.batches(...)``; see :meth:`~r2d2kit.replay.core.BufferCore.batches` for the arguments.
    With ``prefetch > 0`` a daemon thread samples into a queue of ``prefetch`` batches, so a batch may have
    been drawn up to ``prefetch`` priority updates ago (pass its ``generations`` back with its priorities);
    ``prefetch=0`` samples in ``next()`` itself. An error while sampling is raised by the ``next()`` that
    would have returned that batch; the iterator then ends. Close it (or use it in a ``with`` block) to stop
    the thread before the buffer is dropped; the thread also stops once the buffer is garbage-collected.
    """

    def __init__(self, buffer: SampledBuffer, batch_size: int, beta: Beta = DEFAULT_BETA, prefetch: int = 2,
                 reuse_memory: bool = False, empty_wait: float = 60.0) -> None:
        options = check_sampling_options(buffer, batch_size, beta, prefetch, reuse_memory, empty_wait)
        self.prefetch = options.prefetch
        self._closed = threading.Event()
        self._source = sampled_batches(buffer, options.batch_size, options.beta_at, options.reuse_slots,
                                       options.empty_wait, "batches", self._closed)
        self._done = False
        self._queue: queue.Queue[tuple[str, object]] = queue.Queue(maxsize=max(self.prefetch, 1))
        self._thread: threading.Thread | None = None
        if self.prefetch:  # the thread holds the generator and the queue, not this iterator: dropping it ends both
            self._thread = threading.Thread(target=_fill, args=(self._source, self._queue, self._closed),
                                            name="r2d2kit-batches", daemon=True)
            self._thread.start()

    def __iter__(self) -> BatchIterator:
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        if self._done:
            raise StopIteration
        if self._thread is None:
            try:
                return next(self._source)
            except BaseException:
                self._done = True
                raise
        kind, value = self._queue.get()
        if kind == "batch":
            return cast(dict[str, np.ndarray], value)
        self._done = True
        if kind == "error":
            raise cast(BaseException, value)
        raise StopIteration

    def close(self) -> None:
        """Stop the prefetch thread (it finishes the batch it is sampling) and end the iteration."""
        self._closed.set()
        self._done = True
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._source.close()
        while not self._queue.empty():  # let go of the queued batches (and their pool slots)
            self._queue.get_nowait()

    def __enter__(self) -> BatchIterator:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def __del__(self) -> None:
        closed = getattr(self, "_closed", None)  # None: the constructor refused its arguments
        if closed is not None:
            closed.set()  # the thread ends at its next put; no join from a finaliser


def _fill(source: Iterator[dict[str, np.ndarray]], batches: queue.Queue[tuple[str, object]],
          closed: threading.Event) -> None:
    """The prefetch thread: sample into ``batches`` until ``closed``, the buffer is gone, or sampling fails
    (the error is queued for the consumer's ``next()``)."""
    try:
        for batch in source:
            if not _put(batches, ("batch", batch), closed):
                return
            del batch
        _put(batches, ("end", None), closed)
    except BaseException as error:  # noqa: BLE001  (handed to the consumer's next())
        _put(batches, ("error", error), closed)


def _put(batches: queue.Queue[tuple[str, object]], item: tuple[str, object], closed: threading.Event) -> bool:
    """Queue ``item`` unless ``closed`` is set first; False when closed."""
    while not closed.is_set():
        try:
            batches.put(item, timeout=POLL_S)
            return True
        except queue.Full:
            continue
    return False
