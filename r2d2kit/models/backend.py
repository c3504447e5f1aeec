"""What Keras' backend compiles: the one place a forward pass written on ``keras.ops`` becomes a compiled call.

Keras picks its backend when it is imported (``KERAS_BACKEND``: ``tensorflow``, the default, or ``jax``).
Everything that acts or measures (an actor's step, the numpy actor's weight read, the health check) is written
once on ``keras.ops`` and calls its Keras models statefully; :func:`compile_function` compiles it for the
backend: ``tf.function`` on TensorFlow, ``jax.jit`` on JAX. JAX compiles pure functions, so there the
variables the function reads are passed in as arguments and mapped onto the Keras variables with a
``keras.StatelessScope``: every call reads the live weights, as the TensorFlow function does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np

__all__ = ["SUPPORTED_BACKENDS", "backend_name", "compile_function", "describe_device", "has_accelerator"]

SUPPORTED_BACKENDS = ("tensorflow", "jax")


def backend_name() -> str:
    """Keras' backend, checked: ``tensorflow`` or ``jax`` (a ``ValueError`` naming ``KERAS_BACKEND`` otherwise)."""
    backend = keras.backend.backend()
    if backend not in SUPPORTED_BACKENDS:
        raise ValueError(f"Keras backend {backend!r}: r2d2kit compiles its steps for {list(SUPPORTED_BACKENDS)}; set "
                         "KERAS_BACKEND=tensorflow or KERAS_BACKEND=jax before Keras is imported")
    return backend


def compile_function(function: Callable[..., Any], variables: Sequence[keras.Variable],
                     signature: Sequence[Any] | None = None) -> Callable[..., Any]:
    """``function`` compiled for Keras' backend; every call reads the current values of ``variables``.

    Args:
        function: takes arrays (or tuples of them) and calls Keras models or reads ``variables``; it assigns
            nothing.
        variables: every Keras variable ``function`` reads (on JAX one it reads but is not given would be
            frozen into the compiled function at its first call's value).
        signature: shapes and dtypes of the arguments as ``(shape, dtype)`` pairs (a tuple of pairs for a
            tuple argument): TensorFlow traces once for them; JAX traces per argument shape anyway.

    Returns: a callable taking ``function``'s arguments and returning its outputs as backend arrays
    (``numpy.asarray`` reads them).
    """
    if backend_name() == "tensorflow":
        import tensorflow as tf

        def spec(entry: Any) -> Any:
            shape = entry[0] if len(entry) == 2 else None
            if isinstance(shape, tuple) and all(isinstance(size, int | np.integer) for size in shape):
                return tf.TensorSpec(shape, entry[1])  # a (shape, dtype) pair
            return tuple(spec(part) for part in entry)  # a tuple argument

        return tf.function(function, input_signature=None if signature is None else [spec(s) for s in signature],
                           autograph=False)

    import jax

    variables = list(variables)

    def pure(values: list[Any], *args: Any) -> Any:
        with keras.StatelessScope(state_mapping=list(zip(variables, values, strict=True))):
            return function(*args)

    compiled = jax.jit(pure)

    def call(*args: Any) -> Any:
        return compiled([variable.value for variable in variables], *args)

    return call


def describe_device() -> str:
    """Where the learner's compiled steps run: the backend and its accelerator, e.g. ``jax on gpu (NVIDIA H200)``
    or ``tensorflow on cpu``."""
    backend = backend_name()
    if backend == "tensorflow":
        import tensorflow as tf

        gpus = tf.config.list_logical_devices("GPU")
        return f"tensorflow on gpu ({len(gpus)} visible)" if gpus else "tensorflow on cpu"
    import jax

    device = jax.devices()[0]
    return f"jax on {device.platform}" + (f" ({device.device_kind})" if device.platform != "cpu" else "")


def has_accelerator() -> bool:
    """Whether Keras' backend sees a GPU (or another accelerator) in this process."""
    if backend_name() == "tensorflow":
        import tensorflow as tf

        return bool(tf.config.list_physical_devices("GPU"))
    import jax

    return jax.devices()[0].platform != "cpu"
