"""TensorFlow process set-up: GPU memory growth (or no GPU at all), quiet logs, optional thread limits.

Call :func:`setup_tensorflow` at the start of every process that builds Keras models (learner,
actors, evaluation). Without memory growth the first process to touch a GPU reserves all of it.
Actor processes pass ``gpu=False``: they act on the CPU, and on a one-GPU H200 machine actors that
touched the GPU each opened a CUDA context, which slowed start-up (4 actors: 27 s against 16 s for
one) and, from 8 actors, failed (``cudaSetDevice() ... out of memory``).
"""

from __future__ import annotations

import os

_DONE = False


def setup_tensorflow(threads: int | None = None, gpu: bool = True) -> None:
    """Enable GPU memory growth (``gpu=False``: hide the GPUs from this process) and, if given, limit
    TensorFlow's CPU threads. Idempotent; call it before the process's first TensorFlow op."""
    global _DONE
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    if _DONE:
        return
    gpus = tf.config.list_physical_devices("GPU")
    try:
        if not gpu and gpus:
            tf.config.set_visible_devices([], "GPU")
        for device in gpus if gpu else ():
            tf.config.experimental.set_memory_growth(device, True)
    except RuntimeError:  # already initialised: visibility and growth can no longer change
        pass
    if threads is not None:
        try:
            tf.config.threading.set_intra_op_parallelism_threads(threads)
            tf.config.threading.set_inter_op_parallelism_threads(threads)
        except RuntimeError:
            pass
    _DONE = True
