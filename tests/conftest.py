"""Shared test setup: make ``tests/reference.py`` importable as ``reference`` from every test folder, and the
``ray_instance`` fixture of the runner and agent tests.

Test folders have no ``__init__.py`` (pytest's default ``prepend`` import mode), so the brute-force
reference module is put on ``sys.path`` here, whatever import mode or working directory pytest uses.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

_TESTS_DIR = str(Path(__file__).resolve().parent)
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def ray_instance(monkeypatch):
    """A local 2-CPU Ray instance whose workers can import test modules by name (``tests.runners...``)."""
    ray = pytest.importorskip("ray", reason="the ray extra is part of the test extras; install r2d2kit[test]")
    # Ray workers import the test env and cell modules by name: give them the repository root
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    yield
    ray.shutdown()
