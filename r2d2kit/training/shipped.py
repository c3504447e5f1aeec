"""The configs that ship with r2d2kit, by name: ``python -m r2d2kit.train minatar/breakout`` from anywhere.

They live in the checkout's ``configs/`` (where every page's commands point) and travel in the wheel
as the data package ``r2d2kit.configs``; a name is the path under that folder without ``.yaml``.
Each config's first comment line says what it is and its ``# result:`` line what it measured, so
``--list`` reads both from the file itself.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ShippedConfig", "config_directory", "find_shipped", "shipped_configs"]

RESULT_PREFIX = "# result:"
SPACES_FOLDER = "tune"  # configs/tune/ holds search spaces for python -m r2d2kit.tune, not configs to train


@dataclass(frozen=True)
class ShippedConfig:
    """One shipped config: its name, file, first comment line and measured result."""

    name: str
    path: Path
    summary: str
    result: str


def config_directory() -> Path:
    """Where the shipped configs are: inside the installed package, else the checkout's ``configs/``."""
    package = Path(__file__).resolve().parents[1]  # r2d2kit/
    installed = package / "configs"
    return installed if installed.is_dir() else package.parent / "configs"


def shipped_configs() -> dict[str, ShippedConfig]:
    """Every shipped config by name (``cue_memory``, ``minatar/breakout``, ...), in name order."""
    directory = config_directory()
    found = {}
    for path in sorted(directory.rglob("*.yaml")):
        name = path.relative_to(directory).with_suffix("").as_posix()
        if not name.startswith(f"{SPACES_FOLDER}/"):
            found[name] = _describe(name, path)
    return found


def find_shipped(argument: str) -> Path | None:
    """The shipped config ``argument`` names (``breakout`` alone if unique, ``minatar/breakout``, or the
    documented ``configs/minatar/breakout.yaml``), else None."""
    name = _shipped_name(argument)
    configs = shipped_configs()
    if name in configs:
        return configs[name].path
    by_leaf = [config for key, config in configs.items() if key.rsplit("/", 1)[-1] == name]
    return by_leaf[0].path if len(by_leaf) == 1 else None


def nearest_shipped(argument: str) -> str | None:
    """The shipped name closest to ``argument`` (for a 'did you mean'), or None."""
    close = difflib.get_close_matches(_shipped_name(argument), list(shipped_configs()), n=1, cutoff=0.6)
    return close[0] if close else None


def _shipped_name(argument: str) -> str:
    """``argument`` as a shipped name: the documented ``configs/...yaml`` path loses its folder and suffix."""
    return argument.replace("\\", "/").removeprefix("./").removeprefix("configs/").removesuffix(".yaml")


def _describe(name: str, path: Path) -> ShippedConfig:
    comments = [line.strip() for line in path.read_text().splitlines() if line.startswith("#")]
    summary = comments[0].lstrip("# ").strip() if comments else ""
    results = [line[len(RESULT_PREFIX):].strip() for line in comments if line.startswith(RESULT_PREFIX)]
    return ShippedConfig(name, path, summary, results[0] if results else "not measured")
