"""``tf.data`` adapters: the only module in ``r2d2kit.replay`` that imports TensorFlow.

Two pieces let any Keras/TensorFlow training loop use an r2d2kit buffer:

* :func:`buffer_dataset` (``buffer.as_dataset``): an endless dataset of sampled batches with a
  fixed element spec and prefetch (the batches of :func:`~r2d2kit.replay.batch_iterator.sampled_batches`,
  which ``buffer.batches`` iterates without TensorFlow). Prefetched batches were sampled before the newest priority
  updates; with ``prefetch=2`` that is at most two steps of staleness, which PER tolerates.
  Each batch is sampled into fresh arrays; with ``reuse_memory=True`` into a
  :class:`~r2d2kit.replay.BatchPool` of ``prefetch + 3`` batches instead, which TensorFlow wraps
  without a copy; a batch is recycled only once no tensor wraps it any more.
* :func:`priority_updater`: a function usable inside ``tf.function`` that writes new priorities
  back into the buffer (through ``tf.numpy_function``), so the update can live in the compiled
  train step.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator

import numpy as np
import tensorflow as tf

from r2d2kit.replay.batch_iterator import check_sampling_options, sampled_batches
from r2d2kit.replay.protocol import DEFAULT_BETA, SampledBuffer
from r2d2kit.replay.schedules import Beta


def element_spec(buffer: SampledBuffer, batch_size: int) -> dict[str, tf.TensorSpec]:
    """The ``tf.TensorSpec`` of one sampled batch, from ``buffer.batch_spec`` (fields, indices, weights)."""
    return {
        name: tf.TensorSpec(shape, tf.as_dtype(dtype), name=name)
        for name, (shape, dtype) in buffer.batch_spec(batch_size).items()
    }


def buffer_dataset(buffer: SampledBuffer, batch_size: int, beta: Beta = DEFAULT_BETA, prefetch: int = 2,
                   reuse_memory: bool = False, empty_wait: float = 60.0) -> tf.data.Dataset:
    """An endless ``tf.data.Dataset`` of ``buffer.sample(batch_size, beta)`` batches.

    Args:
        buffer: any r2d2kit buffer. While it is empty, iteration waits for items (added by another
            thread: actors, or a loop feeding it); after 5 s it warns once, and after ``empty_wait``
            seconds it ends with an error saying the buffer is empty (a new iterator works once
            items are there).
        batch_size: items per batch.
        beta: a float, or a callable ``beta(sample_count)`` (e.g. ``LinearSchedule``) evaluated
            at each draw.
        prefetch: batches sampled ahead in a background thread (0 disables prefetching).
        reuse_memory: gather into a pool of reused arrays instead of fresh ones (for buffers with
            ``sample_buffers``): about 1.7x faster for large batches of images, safe as long as
            every consumer of the batches holds Python references to them, as TensorFlow's tensors do.

    Notes:
        * The dataset holds the buffer weakly (``tf.data`` keeps generators alive for the whole
          process, tensorflow#57690): once the buffer is gone, iteration ends.
        * A callable ``beta`` counts draws, prefetched ones included, from 0 for every new
          ``iter(dataset)``; Keras ``fit`` re-creates iterators per epoch, which restarts it.
        * Drop iterators before the interpreter exits: a prefetching iterator alive at exit can
          hang TensorFlow's shutdown (tensorflow#22632).
        * With ``reuse_memory``, the buffer is sampled into a :class:`~r2d2kit.replay.BatchPool`
          of ``prefetch + 3`` slots per iterator: the batches in the prefetch buffer, the one in
          your hands, one that tf.data can still reference while the next is drawn (with
          ``prefetch + 2`` slots, one run in five fell back to fresh memory for it), and the one
          being drawn. Tensors wrap those
          arrays without a copy; a slot is written again only once no tensor references it, so
          a batch you keep stays intact (it just costs a new slot).
    """
    sampling = check_sampling_options(buffer, batch_size, beta, prefetch, reuse_memory, empty_wait)
    signature = element_spec(buffer, sampling.batch_size)
    buffer_ref = weakref.ref(buffer)

    def batches() -> Iterator[dict[str, np.ndarray]]:  # a new generator (a new draw count) per iterator
        live = buffer_ref()
        if live is None:
            return iter(())
        return sampled_batches(live, sampling.batch_size, sampling.beta_at, sampling.reuse_slots, sampling.empty_wait,
                               "as_dataset")

    dataset = tf.data.Dataset.from_generator(batches, output_signature=signature)
    if sampling.prefetch:
        return dataset.prefetch(sampling.prefetch)
    # tf.data would otherwise inject a prefetch of its own and sample ahead of priority updates
    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False
    return dataset.with_options(options)


def priority_updater(buffer: SampledBuffer) -> Callable[[tf.Tensor, tf.Tensor, tf.Tensor], tf.Operation]:
    """A function ``update(indices, priorities, generations)`` callable eagerly or inside ``tf.function``.

    The batch's ``generations`` are required here: the dataset draws ahead (``prefetch``) while
    items keep arriving, so a slot drawn may hold another item by the time its priority comes back,
    and that item must keep its own.

    Example:
        >>> update = priority_updater(buffer)
        >>> @tf.function
        ... def train_step(batch):
        ...     td = ...                      # [B]
        ...     update(batch["indices"], tf.abs(td), batch["generations"])
    """

    def _update(indices: np.ndarray, priorities: np.ndarray, generations: np.ndarray) -> np.int64:
        buffer.update_priorities(indices, priorities.astype(np.float64), generations)
        return np.int64(indices.shape[0])

    def update(indices: tf.Tensor, priorities: tf.Tensor, generations: tf.Tensor) -> tf.Operation:
        return tf.numpy_function(_update, [tf.cast(indices, tf.int64), tf.cast(priorities, tf.float64),
                                           tf.cast(generations, tf.int64)],
                                 tf.int64, stateful=True, name="update_priorities")

    return update
