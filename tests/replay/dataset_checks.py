"""Shared checks for ``as_dataset`` and ``batches``: draw batches safely, and compare them with ``sample`` calls.

No iterator outlives its caller, not even through a failure's traceback: a prefetching
``from_generator`` iterator still alive at interpreter exit can hang the process
(tensorflow/tensorflow#22632).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # the HER tests import TensorFlow only inside their dataset test
    import tensorflow as tf


def to_numpy(batch: dict[str, tf.Tensor]) -> dict[str, np.ndarray]:
    return {key: value.numpy() for key, value in batch.items()}


def draw(dataset: tf.data.Dataset, count: int) -> list[dict[str, np.ndarray]]:
    """The first ``count`` batches of a fresh iterator, which is gone (thread stopped) on return."""
    batches = iter(dataset)
    try:
        return [to_numpy(next(batches)) for _ in range(count)]
    finally:
        del batches  # also when next() raises: a traceback must not keep the iterator alive


def assert_dataset_matches_sample(buffer: Any, copy: Any, batch_size: int, beta: float, draws: int = 3) -> dict:
    """``buffer.as_dataset`` has ``batch_spec``'s element spec and yields what ``copy.sample`` would.

    ``copy`` is a saved-and-loaded twin of ``buffer`` (same items, priorities and random state).
    Returns the dataset's element spec for further checks.
    """
    dataset = buffer.as_dataset(batch_size, beta=beta, prefetch=0)
    spec = dataset.element_spec
    assert {name: (tuple(s.shape), s.dtype.as_numpy_dtype) for name, s in spec.items()} == \
        {name: (shape, dtype.type) for name, (shape, dtype) in buffer.batch_spec(batch_size).items()}
    assert_same_batches(draw(dataset, draws), [copy.sample(batch_size, beta=beta) for _ in range(draws)])
    return spec


def samples_of_a_copy(buffer: Any, path: Any, batch_size: int, beta: Any, count: int) -> list[dict[str, np.ndarray]]:
    """What ``count`` ``sample`` calls give on a saved-and-loaded twin of ``buffer`` (same items, priorities and
    random state), ``beta`` a float or a schedule evaluated at each draw's count."""
    buffer.save(path)
    copy = type(buffer).load(path)
    beta_at = beta if callable(beta) else (lambda _count: beta)
    return [copy.sample(batch_size, beta=beta_at(draw_count)) for draw_count in range(count)]


def assert_same_batches(drawn: list[dict[str, np.ndarray]], expected: list[dict[str, np.ndarray]]) -> None:
    """Batch for batch: the same fields, values and dtypes."""
    assert len(drawn) == len(expected)
    for count, (got, want) in enumerate(zip(drawn, expected)):
        assert set(got) == set(want)
        for key in want:
            np.testing.assert_array_equal(got[key], want[key], err_msg=f"draw {count}, {key!r}")
            assert got[key].dtype == want[key].dtype, key
