"""What a training run from a YAML config is made of: the config schema, the builders that turn it
into envs and networks, the :class:`Trainer` loop, checkpoints and the run log.

The entry points are ``python -m r2d2kit.train`` and ``python -m r2d2kit.evaluate``. Names are
loaded on first use, so importing this package does not start TensorFlow.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "TrainConfig": "config", "ConfigError": "config", "load_config": "config", "build_config": "config",
    "save_config": "config",
    "Trainer": "trainer",
    "build_network": "builders", "make_env": "builders",
    "CheckpointError": "checkpoint", "latest_checkpoint": "checkpoint",
}
__all__ = list(_HOMES)


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(f"r2d2kit.training.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'r2d2kit.training' has no attribute {name!r}")
