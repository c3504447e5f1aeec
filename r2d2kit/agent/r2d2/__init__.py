"""The R2D2 agent (``agent: r2d2``): the recurrent Q-network, the learner (its loss on ``keras.ops`` in ``losses``,
compiled per Keras backend), n-step double-Q targets, value rescaling, epsilon-greedy policies, its health
diagnostics and its builder.

``rescale``, ``targets`` and ``policies`` are numpy/Numba; the learner and the network import TensorFlow, so
names are loaded on first use: ``from r2d2kit.agent.r2d2 import greedy`` does not start TensorFlow.
"""

from __future__ import annotations

from r2d2kit._lazy import lazy_exports

_HOMES = {
    "R2D2Config": "config", "R2D2Learner": "learner", "QNetwork": "qnetwork", "StatefulActor": "qnetwork",
    "nstep_targets": "targets", "value_rescale": "rescale", "inverse_value_rescale": "rescale",
    "greedy": "policies", "epsilon_greedy": "policies", "apex_epsilons": "policies", "boltzmann": "policies",
    "EpsilonSchedule": "policies", "as_schedule": "policies", "GreedyPolicy": "policies",
    "EpsilonGreedyPolicy": "policies", "EpsilonGreedyFactory": "policies",
    "HealthCheck": "diagnostics", "R2D2Agent": "builder", "R2D2Builder": "builder", "build_q_network": "builder",
    "exploration_schedule": "builder",
}
__all__ = list(_HOMES)
__getattr__ = lazy_exports("r2d2kit.agent.r2d2", _HOMES)
