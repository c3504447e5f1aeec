"""Agents behind one seam (:mod:`r2d2kit.agent.seam`): R2D2 (``r2d2kit.agent.r2d2``, discrete actions) and
recurrent SAC (``r2d2kit.agent.sac``, continuous actions). A config picks one with ``agent:``.

Names are loaded on first use: ``from r2d2kit.agent import WindowLayout`` does not start TensorFlow.
"""

from __future__ import annotations

from r2d2kit._lazy import lazy_exports

_HOMES = {name: "seam" for name in ("Agent", "Diagnostics", "EnvSpaces", "Learner", "LearnerSection", "Policy",
                                    "PolicyFactory", "UPDATE_OUTPUTS", "WindowFields", "WindowLayout")}
__all__ = list(_HOMES)
__getattr__ = lazy_exports("r2d2kit.agent", _HOMES)
