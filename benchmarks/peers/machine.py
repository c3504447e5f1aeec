"""The machine a benchmark ran on: one line with the CPU and package versions (every script prints it),
the load average and peak memory (shared here so that every script measures them the same way)."""

from __future__ import annotations

import math
import os
import platform
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Sequence

try:
    import resource
except ImportError:  # Windows: no getrusage, peak_rss_mb() is nan
    resource = None


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


def load_average() -> float:
    """The 1-minute load average, nan where the OS has none: other work on the machine skews timings."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):  # AttributeError: no os.getloadavg (Windows)
        return float("nan")


def format_load(load: float | None = None) -> str:
    """``load`` (default: the load now) as ``"%.2f"``, or ``"n/a"`` for nan (what scripts print and store)."""
    load = load_average() if load is None else load
    return "n/a" if math.isnan(load) else "%.2f" % load


def peak_rss_mb() -> float:
    """This process's peak resident set (``ru_maxrss``, kB on Linux) in MB, cumulative over its life.

    The figure never goes down: a script that does several runs in one process reports the highest
    so far, which is why bench_popgym and bench_goal_pomdp run each run in its own subprocess. On
    Linux a process started by fork/exec (subprocess, multiprocessing's spawn) also starts from its
    parent's peak at exec, so a child's figure is its own only where the child outgrows its parent;
    :func:`process_peak_rss_mb` (``VmHWM``) has no such floor.
    """
    if resource is None:
        return float("nan")
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def process_peak_rss_mb(pid: int | str) -> float:
    """Peak resident set (``VmHWM`` in /proc/<pid>/status) of any live process in MB, nan if unreadable.

    Reads another process (an actor) without its cooperation, and unlike ``ru_maxrss`` counts only
    the process's own memory since its exec. ``pid`` may be ``"self"``. Linux only: nan elsewhere or
    once the process has ended.
    """
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return float("nan")
