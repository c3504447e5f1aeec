"""What a training run from a YAML config is made of: the config schema, the builders that turn it
into envs and an agent, the :class:`Trainer` loop, checkpoints and the run log.

The entry points are ``python -m r2d2kit.train`` and ``python -m r2d2kit.evaluate``. Names are
loaded on first use, so importing this package does not start TensorFlow.
"""

from __future__ import annotations

from r2d2kit._lazy import lazy_exports

_HOMES = {
    "TrainConfig": "config", "ConfigError": "config", "load_config": "config", "build_config": "config",
    "save_config": "config",
    "Trainer": "trainer",
    "make_env": "builders", "build_run": "builders", "agent_builder": "agents",
    "CheckpointError": "checkpoint", "latest_checkpoint": "checkpoint",
}
__all__ = list(_HOMES)
__getattr__ = lazy_exports("r2d2kit.training", _HOMES)
