"""Issue-5 experiment: near-greedy actors explore by Boltzmann sampling instead of epsilon-greedy.

    BOLTZ_T=0.02 python benchmarks/experiments/boltzmann_actors.py --without recurrent-ppo \
        --seed 0 --stop-on-miss --set learner.priority_exponent=0.0 ...

Runs ``bench_r2d2_cartpole.py`` unchanged except for the actors' policy: envs whose Ape-X epsilon
is at least ``BOLTZ_KEEP_EPS`` stay epsilon-greedy (broad exploration); the others sample
``a ~ softmax(Q / BOLTZ_T)`` on the network's (value-rescaled) Q-values. The idea: the greedy
policy fails by drift, decided in states where the two actions' values are close; epsilon-greedy
explores those states no more than any other, Boltzmann sampling explores exactly there, so the
replay gets the data that separates the two actions where it matters.

A prototype, not a library feature: it patches ``r2d2kit.runners.experience``.
"""

import os
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(BENCH_DIR), str(BENCH_DIR.parent)]  # the benchmark and the checkout it measures

import bench_r2d2_cartpole as bench
import numpy as np

from r2d2kit import policies
from r2d2kit.runners import experience

TEMPERATURE = float(os.environ.get("BOLTZ_T", "0.02"))
KEEP_EPS = float(os.environ.get("BOLTZ_KEEP_EPS", "0.1"))


def epsilon_or_boltzmann(q_values, epsilons, rng):
    """Epsilon-greedy where epsilon >= KEEP_EPS, Boltzmann at TEMPERATURE elsewhere (one draw set per env)."""
    epsilons = np.asarray(epsilons)
    action = policies.epsilon_greedy(q_values, epsilons, rng)
    soft = epsilons < KEEP_EPS
    if soft.any():
        action[soft] = policies.boltzmann(np.asarray(q_values)[soft], TEMPERATURE, rng)
    return action


experience.epsilon_greedy = epsilon_or_boltzmann

if __name__ == "__main__":
    print(f"boltzmann: temperature {TEMPERATURE} where epsilon < {KEEP_EPS}", flush=True)
    bench.main(sys.argv[1:])
