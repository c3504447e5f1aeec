"""Fixtures shared by the runner tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def ray_instance(monkeypatch):
    """A local 2-CPU Ray instance whose workers can import test modules by name (``tests.runners...``)."""
    ray = pytest.importorskip("ray", reason="the ray extra is part of the test extras; install r2d2kit[test]")
    # Ray workers import the test env and cell modules by name: give them the repository root
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    yield
    ray.shutdown()
