"""The package's one lazy-import mechanism: names re-exported by a room, imported on first use.

``from r2d2kit.agent.r2d2 import greedy`` must not start TensorFlow just because the same room also
holds the learner, so a room's ``__init__`` names where each export lives and imports it only
when it is read (PEP 562's module ``__getattr__``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, homes: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` returning ``package.<homes[name]>.<name>``, imported when first read."""

    def __getattr__(name: str) -> Any:
        if name in homes:
            return getattr(importlib.import_module(f"{package}.{homes[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
