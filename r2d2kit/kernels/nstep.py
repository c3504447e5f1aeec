"""Numba kernel for R2D2 n-step double-Q targets over whole windows (numpy side; see r2d2kit.agent.r2d2.targets)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _rescale(x, eps):
    magnitude = abs(x)
    sign = 1.0 if x > 0 else (-1.0 if x < 0 else 0.0)
    return sign * magnitude / (np.sqrt(magnitude + 1.0) + 1.0) + eps * x


@njit(cache=True)
def _inverse_rescale(x, eps):
    magnitude = abs(x)
    sign = 1.0 if x > 0 else (-1.0 if x < 0 else 0.0)
    if eps == 0.0:
        return sign * magnitude * (magnitude + 2.0)
    root = np.sqrt(1.0 + 4.0 * eps * (magnitude + 1.0 + eps))
    d = 2.0 * magnitude / (root + 1.0 + 2.0 * eps)
    return sign * d * (d + 2.0)


@njit(cache=True)
def nstep_double_q_targets(reward, mask, terminated, q_online, q_target, gamma, n_step, burn_in, trace_length,
                           eps, rescale):
    """Targets ``[B, T]`` for the trace rows ``burn_in .. burn_in + T - 1`` of ``[B, L]`` windows.

    For row t: sum rewards of the transitions t, t+1, ... (at most ``n_step``, stopping at the
    first row that is not a transition), discounting by ``gamma`` and cutting the bootstrap after a
    termination; bootstrap from the row j after the last summed one with
    ``Q_target(s_j, argmax_a Q_online(s_j, a))``. With ``rescale``:
    ``y = h(G + gamma^m (1 - terminated) h^-1(Q))``. Rows that are not transitions get 0.
    """
    batch = reward.shape[0]
    targets = np.zeros((batch, trace_length), dtype=np.float64)
    for b in range(batch):
        for i in range(trace_length):
            t = burn_in + i
            if not mask[b, t]:
                continue
            total = 0.0
            discount = 1.0
            j = t
            for k in range(n_step):
                row = t + k
                if not mask[b, row]:
                    break
                total += discount * reward[b, row]
                discount *= gamma * (0.0 if terminated[b, row] else 1.0)
                j = row + 1
            best = 0
            for a in range(q_online.shape[2]):
                if q_online[b, j, a] > q_online[b, j, best]:
                    best = a
            bootstrap = q_target[b, j, best]
            if rescale:
                targets[b, i] = _rescale(total + discount * _inverse_rescale(bootstrap, eps), eps)
            else:
                targets[b, i] = total + discount * bootstrap
    return targets
