"""The R2D2 agent: learner (``tf.function`` train step), n-step double-Q targets, value rescaling
and action selection.

``rescale``, ``targets`` and ``policies`` are numpy/Numba; only the learner imports TensorFlow, so
names are loaded on first use: ``from r2d2kit.agent import greedy`` does not start TensorFlow.
"""

from __future__ import annotations

from r2d2kit._lazy import lazy_exports

_HOMES = {
    "R2D2Config": "config", "R2D2Learner": "learner",
    "tf_sequence_priorities": "learner",
    "nstep_targets": "targets", "tf_nstep_targets": "targets",
    "value_rescale": "rescale", "inverse_value_rescale": "rescale", "tf_value_rescale": "rescale",
    "tf_inverse_value_rescale": "rescale",
    "greedy": "policies", "epsilon_greedy": "policies", "apex_epsilons": "policies", "boltzmann": "policies",
    "EpsilonSchedule": "policies", "as_schedule": "policies",
}
__all__ = list(_HOMES)
__getattr__ = lazy_exports("r2d2kit.agent", _HOMES)
