"""Old import paths of modules that moved into the ``agent/``, ``training/``, ``runners/`` and
``models/`` rooms keep working, with a ``DeprecationWarning`` naming the new path.

``import r2d2kit.learner`` gets a small module that forwards every attribute to
``r2d2kit.agent.learner``; classes and functions are the same objects, so ``isinstance`` and
callbacks written against the old paths behave as before. No file is left at the old place.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings

MOVED = {
    "r2d2kit.learner": "r2d2kit.agent.learner",
    "r2d2kit.targets": "r2d2kit.agent.targets",
    "r2d2kit.rescale": "r2d2kit.agent.rescale",
    "r2d2kit.policies": "r2d2kit.agent.policies",
    "r2d2kit.trainer": "r2d2kit.training.trainer",
    "r2d2kit.config": "r2d2kit.training.config",
    "r2d2kit.builders": "r2d2kit.training.builders",
    "r2d2kit.checkpoint": "r2d2kit.training.checkpoint",
    "r2d2kit.run_log": "r2d2kit.training.run_log",
    "r2d2kit.callbacks": "r2d2kit.runners.callbacks",
    "r2d2kit.tf_setup": "r2d2kit.models.tf_setup",
}


class MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old names in :data:`MOVED` and loads each as a forwarder to its new module."""

    def find_spec(self, fullname: str, path=None, target=None):
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec):
        return None  # the default empty module; exec_module fills it

    def exec_module(self, module: types.ModuleType) -> None:
        new_name = MOVED[module.__name__]
        warnings.warn(f"{module.__name__} moved to {new_name}; import it from there "
                      f"(the old path will be removed in a later release)", DeprecationWarning, stacklevel=2)
        target = importlib.import_module(new_name)
        module.__getattr__ = lambda name: getattr(target, name)  # PEP 562: attributes come from the new module
        module.__dir__ = lambda: dir(target)
        module.__doc__ = target.__doc__


def install() -> None:
    """Put the finder on ``sys.meta_path`` once (idempotent across reloads)."""
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(MovedModuleFinder())
