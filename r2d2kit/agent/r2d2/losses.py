"""R2D2's loss maths on ``keras.ops``: one function per formula, for every Keras backend.

The learner traces these into its Keras backend's compiled update (``tf.function`` on TensorFlow,
``jax.jit`` on JAX), so the loss is written once. The numpy forms of value rescaling and of the targets
(:mod:`~r2d2kit.agent.r2d2.rescale`, :mod:`~r2d2kit.agent.r2d2.targets`; same names and formulas) serve numpy
code and check these in the tests. The op order here is the order the recorded loss traces were made with
(``benchmarks/loss_trace.py``): reordering an addition changes the last bits of every later update.
"""

from __future__ import annotations

from typing import Any

import keras

from r2d2kit.agent.r2d2.rescale import DEFAULT_EPS
from r2d2kit.agent.r2d2.targets import check_windows

__all__ = ["value_rescale", "inverse_value_rescale", "nstep_targets", "taken", "row_loss"]


def value_rescale(x: Any, eps: float = DEFAULT_EPS) -> Any:
    """``h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x`` in its cancellation-free form (differentiable)."""
    magnitude = keras.ops.abs(x)
    return keras.ops.sign(x) * magnitude / (keras.ops.sqrt(magnitude + 1.0) + 1.0) + eps * x


def inverse_value_rescale(x: Any, eps: float = DEFAULT_EPS) -> Any:
    """The exact closed-form inverse of :func:`value_rescale` (see :mod:`~r2d2kit.agent.r2d2.rescale`)."""
    magnitude = keras.ops.abs(x)
    if eps == 0.0:
        return keras.ops.sign(x) * magnitude * (magnitude + 2.0)
    root = keras.ops.sqrt(1.0 + 4.0 * eps * (magnitude + 1.0 + eps))
    d = 2.0 * magnitude / (root + 1.0 + 2.0 * eps)
    return keras.ops.sign(x) * d * (d + 2.0)


def taken(q: Any, actions: Any) -> Any:
    """``q[b, t, actions[b, t]]``: the Q ``[B, T]`` of integer actions ``[B, T]`` from ``q`` ``[B, T, A]``."""
    return keras.ops.take_along_axis(q, keras.ops.expand_dims(actions, -1), axis=2)[..., 0]


def nstep_targets(reward: Any, mask: Any, terminated: Any, q_online: Any, q_target: Any, *, gamma: float, n_step: int,
                  burn_in: int, trace_length: int, eps: float = DEFAULT_EPS, rescale: bool = True) -> Any:
    """Value-rescaled n-step double-Q targets ``[B, trace_length]`` of ``[B, L]`` windows (0 on rows that are not
    transitions): the formula of :mod:`~r2d2kit.agent.r2d2.targets`, in ``q_target``'s dtype.

    Loops over the ``n_step`` offsets (a static Python loop), each a ``[B, T]`` slice, so the
    whole batch is computed with a handful of vector ops.
    """
    burn_in, trace_length, n_step = check_windows(reward, q_online, q_target, burn_in, trace_length, n_step)
    dtype = q_target.dtype
    reward = keras.ops.cast(reward, dtype)
    mask = keras.ops.cast(mask, dtype)
    not_terminated = 1.0 - keras.ops.cast(terminated, dtype)
    window = slice(burn_in, burn_in + trace_length)
    total = keras.ops.zeros_like(reward[:, window])  # [B, T]
    discount = keras.ops.ones_like(total)
    alive = mask[:, window]
    offset = keras.ops.zeros_like(total)
    for k in range(n_step):
        rows = slice(burn_in + k, burn_in + k + trace_length)
        valid = alive * mask[:, rows]  # row t + k is a transition of t's episode, reached without an end
        total = total + valid * discount * reward[:, rows]
        discount = valid * discount * gamma * not_terminated[:, rows] + (1.0 - valid) * discount
        offset = offset + valid
        alive = valid
    chosen = taken(q_target, keras.ops.argmax(q_online, axis=-1))  # [B, L]: Q_target at the online argmax
    bootstrap_row = (burn_in + keras.ops.arange(trace_length, dtype="int32")[None, :]
                     + keras.ops.cast(offset, "int32"))  # [B, T]
    bootstrap = keras.ops.take_along_axis(chosen, bootstrap_row, axis=1)  # [B, T]
    if rescale:
        targets = value_rescale(total + discount * inverse_value_rescale(bootstrap, eps), eps)
    else:
        targets = total + discount * bootstrap
    return targets * mask[:, window]


def row_loss(td: Any, loss: str) -> Any:
    """Per-row loss of TD errors: ``0.5 td^2`` (``"squared"``), or Huber's with delta 1 (``"huber"``: equal to it
    for ``|td| <= 1``, linear beyond, so a row's gradient is clipped to 1)."""
    if loss == "huber":
        magnitude = keras.ops.abs(td)
        quadratic = keras.ops.minimum(magnitude, 1.0)
        return 0.5 * keras.ops.square(quadratic) + (magnitude - quadratic)
    return 0.5 * keras.ops.square(td)
