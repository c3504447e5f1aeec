"""R2D2 n-step double-Q targets with value rescaling, for whole ``[B, L]`` windows (numpy, Numba).

    y_t = h( sum_{k<m} gamma^k r_{t+k} + gamma^m (1 - terminated) h^-1( Q_target(s_{t+m}, argmax_a Q(s_{t+m}, a)) ) )

with ``m = min(n_step, transitions left in the episode from t)``. A truncated episode bootstraps
from its final observation (the row after its last transition); a terminated one does not.
Windows come from :class:`~r2d2kit.replay.SequenceBuilder`: the trained rows are
``burn_in .. burn_in + trace_length - 1`` and ``n_step`` extra rows follow them.

The learner's update computes the same targets on ``keras.ops`` (:func:`r2d2kit.agent.r2d2.losses.nstep_targets`,
every Keras backend); this numpy form checks it in the tests and serves numpy code.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from r2d2kit._validation import check_float, check_positive_int
from r2d2kit.agent.r2d2.rescale import DEFAULT_EPS
from r2d2kit.kernels.nstep import nstep_double_q_targets as _targets_kernel


def check_windows(reward, q_online, q_target, burn_in: int, trace_length: int, n_step: int) -> tuple[int, int, int]:
    """``burn_in``, ``trace_length``, ``n_step`` as ints, after checking that the ``[B, L]`` rows and ``[B, L, A]`` Q
    arrays (of any backend) have ``L = burn_in + trace_length + n_step`` rows; a ``ValueError`` names what does not."""
    burn_in = check_positive_int("burn_in", burn_in, minimum=0)
    trace_length = check_positive_int("trace_length", trace_length)
    n_step = check_positive_int("n_step", n_step)
    length = burn_in + trace_length + n_step
    if len(reward.shape) != 2 or reward.shape[1] != length:
        raise ValueError(f"reward must be [B, burn_in + trace_length + n_step] = [B, {length}], "
                         f"got {tuple(reward.shape)}")
    for name, q in (("q_online", q_online), ("q_target", q_target)):
        if tuple(q.shape[:2]) != tuple(reward.shape):
            raise ValueError(f"{name} must be [B, L, actions] with [B, L] = {tuple(reward.shape)}, "
                             f"got {tuple(q.shape)}")
    return burn_in, trace_length, n_step


def nstep_targets(reward: npt.ArrayLike, mask: npt.ArrayLike, terminated: npt.ArrayLike, q_online: npt.ArrayLike,
                  q_target: npt.ArrayLike, *, gamma: float, n_step: int, burn_in: int, trace_length: int,
                  eps: float = DEFAULT_EPS, rescale: bool = True) -> np.ndarray:
    """Numpy (Numba) targets ``[B, trace_length]``; rows that are not transitions get 0."""
    reward = np.asarray(reward, dtype=np.float64)
    q_online = np.asarray(q_online, dtype=np.float64)
    q_target = np.asarray(q_target, dtype=np.float64)
    burn_in, trace_length, n_step = check_windows(reward, q_online, q_target, burn_in, trace_length, n_step)
    gamma = check_float("gamma", gamma, 0.0, 1.0)
    eps = check_float("eps", eps, 0.0)
    mask = np.asarray(mask, dtype=np.bool_)
    terminated = np.asarray(terminated, dtype=np.bool_)
    return _targets_kernel(reward, mask, terminated, q_online, q_target, gamma, n_step, burn_in, trace_length,
                           eps, bool(rescale))
