"""Import a script by its path: ``agents/`` and ``benchmarks/`` are folders of scripts, not packages,
and a test must exercise this checkout's file, not whatever an installed copy or ``sys.path`` holds."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_script(module_name: str, path: Path) -> ModuleType:
    """Execute the script at ``path`` as a fresh module named ``module_name`` and return it (registered in
    ``sys.modules`` first, as an import does: a script's dataclasses look their module up there)."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module
