"""Policies against closed forms and empirical frequencies."""

import numpy as np
import pytest

from r2d2kit.agent.r2d2.policies import apex_epsilons, boltzmann, epsilon_greedy, greedy


def test_apex_epsilons_closed_form():
    eps = apex_epsilons(8, epsilon=0.4, alpha=7.0)
    expected = [0.4 ** (1 + 7 * i / 7) for i in range(8)]
    np.testing.assert_allclose(eps, expected)
    assert eps[0] == pytest.approx(0.4) and eps[-1] == pytest.approx(0.4 ** 8)
    np.testing.assert_array_equal(apex_epsilons(1, 0.3), [0.3])


def test_greedy_and_epsilon_zero_agree():
    q = np.array([[0.0, 2.0, 1.0], [5.0, -1.0, 0.0]])
    np.testing.assert_array_equal(greedy(q), [1, 0])
    np.testing.assert_array_equal(epsilon_greedy(q, 0.0, np.random.default_rng(0)), [1, 0])


def test_epsilon_greedy_explores_at_the_given_rate_per_env():
    rng = np.random.default_rng(1)
    q = np.tile([[0.0, 1.0, 0.0, 0.0]], (2, 1))
    draws = np.array([epsilon_greedy(q, [0.0, 0.8], rng) for _ in range(20_000)])
    assert np.all(draws[:, 0] == 1)
    non_greedy = np.mean(draws[:, 1] != 1)
    assert non_greedy == pytest.approx(0.8 * 3 / 4, abs=0.015)  # random picks land on the greedy action 1/4 of the time


def test_boltzmann_frequencies_match_softmax():
    rng = np.random.default_rng(2)
    q = np.array([[1.0, 2.0, 0.0]])
    temperature = 0.5
    counts = np.bincount([boltzmann(q, temperature, rng)[0] for _ in range(30_000)], minlength=3)
    expected = np.exp(q[0] / temperature) / np.exp(q[0] / temperature).sum()
    np.testing.assert_allclose(counts / counts.sum(), expected, atol=0.01)


def test_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="q_values"):
        greedy(np.zeros(3))
    with pytest.raises(ValueError, match="epsilon"):
        epsilon_greedy(np.zeros((1, 2)), 1.5, np.random.default_rng(0))
    with pytest.raises(ValueError, match="temperature"):
        boltzmann(np.zeros((1, 2)), 0.0, np.random.default_rng(0))
