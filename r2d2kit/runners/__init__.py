"""Where actors run: pools behind one interface (:class:`~r2d2kit.runners.pool.ActorPool`).

``local`` acts in the learner's process, ``processes`` in spawned processes on shared memory,
``ray_actors`` on a Ray cluster; all run :class:`~r2d2kit.runners.acting.ActingLoop`. The one
training loop that drives them is :class:`r2d2kit.training.trainer.Trainer`. Names are loaded on
first use, so a process needing only :mod:`r2d2kit.runners.shm` does not load TensorFlow.
"""

from __future__ import annotations

from r2d2kit._lazy import lazy_exports

_HOMES = {
    "ActorPool": "pool", "Experience": "pool", "Incarnations": "pool",
    "ActingLoop": "acting",
    "LocalActors": "local", "ProcessActors": "processes", "RayActors": "ray_actors",
    "Callback": "callbacks", "CallbackList": "callbacks",
    "Evaluation": "evaluation", "evaluate": "evaluation",
}
__all__ = list(_HOMES)
__getattr__ = lazy_exports("r2d2kit.runners", _HOMES)
