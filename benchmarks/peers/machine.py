"""One line describing the machine and the package versions a benchmark ran with (every script prints it)."""

from __future__ import annotations

import os
import platform
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Sequence


def dist_version(name: str) -> str:
    """Installed version of a distribution, or "not installed"."""
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def cpu_name() -> str:
    """The CPU model from /proc/cpuinfo (Linux), else what platform knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_line(dists: Sequence[str]) -> str:
    """``machine: <cpu>, <n> cores (<arch>, <os>); python X, dist Y, ...`` (cores this process may use)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    versions = ", ".join(f"{dist} {dist_version(dist)}" for dist in dists)
    return (f"machine: {cpu_name()}, {cores} cores ({platform.machine()}, {platform.system()}); "
            f"python {platform.python_version()}, {versions}")
