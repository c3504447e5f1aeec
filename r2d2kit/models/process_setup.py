"""Process set-up for Keras' backend: the learner keeps the GPU, actor processes never open it.

Call :func:`setup_process` at the start of every process that builds Keras models (learner, actors,
evaluation). On TensorFlow it enables GPU memory growth (without it the first process to touch a GPU reserves
all of it), quiets the logs and can limit the CPU threads; on JAX it keeps an actor on the CPU platform. Actor
processes pass ``gpu=False``: they act on the CPU, and on a one-GPU H200 machine actors that touched the GPU
each opened a CUDA context, which slowed start-up (4 actors: 27 s against 16 s for one) and, from 8 actors,
failed (``cudaSetDevice() ... out of memory``).
"""

from __future__ import annotations

import os

_DONE = False


def setup_process(threads: int | None = None, gpu: bool = True) -> None:
    """Set up this process for Keras' backend (``gpu=False``: hide the GPUs from it) and, on TensorFlow, limit its
    CPU threads if ``threads`` is given. Idempotent; call it before the process's first backend op."""
    global _DONE
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if _DONE:
        return
    import keras

    if keras.backend.backend() == "jax":
        _setup_jax(gpu)
    else:
        _setup_tensorflow(threads, gpu)
    _DONE = True


def _setup_jax(gpu: bool) -> None:
    """An actor's JAX stays on the CPU (JAX preallocates most of a GPU's memory in the first process to use it)."""
    import jax

    if not gpu:
        try:
            jax.config.update("jax_platforms", "cpu")
        except RuntimeError:  # a backend already started: the platform can no longer change
            pass


def _setup_tensorflow(threads: int | None, gpu: bool) -> None:
    import tensorflow as tf

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
