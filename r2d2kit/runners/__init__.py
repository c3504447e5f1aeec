"""Where actors and learners run: ``local`` (one process) and ``processes`` (shared memory).

Imports are lazy so that a process needing only :mod:`r2d2kit.runners.shm` does not load TensorFlow.
"""

from __future__ import annotations

from typing import Any

__all__ = ["LocalRunConfig", "RunResult", "evaluate", "train_local"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from r2d2kit.runners import local

        return getattr(local, name)
    raise AttributeError(f"module 'r2d2kit.runners' has no attribute {name!r}")
