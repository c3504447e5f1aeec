"""Action selection from Q-values ``[num_envs, A]``: greedy, epsilon-greedy, Ape-X epsilons, Boltzmann.

Randomness comes from the caller's ``np.random.Generator`` so runs reproduce from a seed.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from r2d2kit._validation import check_float, check_positive_int


def _q_matrix(q_values: npt.ArrayLike) -> np.ndarray:
    q = np.asarray(q_values, dtype=np.float64)
    if q.ndim != 2 or q.shape[1] < 1:
        raise ValueError(f"q_values must be [num_envs, num_actions], got shape {q.shape}")
    return q


def greedy(q_values: npt.ArrayLike) -> np.ndarray:
    """``argmax_a Q`` per env (evaluation)."""
    return _q_matrix(q_values).argmax(axis=1)


def epsilon_greedy(q_values: npt.ArrayLike, epsilon: npt.ArrayLike, rng: np.random.Generator) -> np.ndarray:
    """Random action with probability ``epsilon`` (a scalar or one per env), else greedy."""
    q = _q_matrix(q_values)
    epsilon = np.broadcast_to(np.asarray(epsilon, dtype=np.float64), (q.shape[0],))
    if np.any((epsilon < 0) | (epsilon > 1)):
        raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
    explore = rng.random(q.shape[0]) < epsilon
    random_actions = rng.integers(0, q.shape[1], size=q.shape[0])
    return np.where(explore, random_actions, q.argmax(axis=1))


def apex_epsilons(num_actors: int, epsilon: float = 0.4, alpha: float = 7.0) -> np.ndarray:
    """Ape-X per-actor exploration: ``eps_i = epsilon ** (1 + alpha * i / (N - 1))`` (Horgan et al. 2018).

    A single actor gets ``epsilon`` itself.
    """
    num_actors = check_positive_int("num_actors", num_actors)
    epsilon = check_float("epsilon", epsilon, 0.0, 1.0)
    alpha = check_float("alpha", alpha, 0.0)
    if num_actors == 1:
        return np.array([epsilon])
    return epsilon ** (1.0 + alpha * np.arange(num_actors) / (num_actors - 1))


def boltzmann(q_values: npt.ArrayLike, temperature: float, rng: np.random.Generator) -> np.ndarray:
    """Sample ``a ~ softmax(Q / temperature)`` per env."""
    q = _q_matrix(q_values)
    temperature = check_float("temperature", temperature, 0.0, low_inclusive=False)
    logits = (q - q.max(axis=1, keepdims=True)) / temperature
    probabilities = np.exp(logits)
    probabilities /= probabilities.sum(axis=1, keepdims=True)
    cumulative = probabilities.cumsum(axis=1)
    draws = rng.random((q.shape[0], 1))
    return np.minimum((draws > cumulative).sum(axis=1), q.shape[1] - 1)
