"""TensorFlow process set-up: GPU memory growth, quiet logs, optional thread limits.

Call :func:`setup_tensorflow` at the start of every process that builds Keras models (learner,
actors, evaluation). Without memory growth the first process to touch a GPU reserves all of it.
"""

from __future__ import annotations

import os

_DONE = False


def setup_tensorflow(threads: int | None = None) -> None:
    """Enable GPU memory growth and, if given, limit TensorFlow's CPU threads. Idempotent."""
    global _DONE
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    if _DONE:
        return
    for gpu in tf.config.list_physical_devices("GPU"):
        try:
            tf.config.experimental.set_memory_growth(gpu, True)
        except RuntimeError:  # already initialised: growth can no longer change
            pass
    if threads is not None:
        try:
            tf.config.threading.set_intra_op_parallelism_threads(threads)
            tf.config.threading.set_inter_op_parallelism_threads(threads)
        except RuntimeError:
            pass
    _DONE = True
