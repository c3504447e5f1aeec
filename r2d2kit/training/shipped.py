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

__all__ = ["ShippedConfig", "config_directory", "find_shipped", "find_shipped_space", "nearest_shipped",
           "nearest_shipped_space", "shipped_configs", "shipped_spaces"]

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


def shipped_spaces() -> dict[str, Path]:
    """Every shipped search space for ``python -m r2d2kit.tune --space`` by name (``tune/cue_memory_space``)."""
    directory = config_directory()
    return {path.relative_to(directory).with_suffix("").as_posix(): path
            for path in sorted((directory / SPACES_FOLDER).glob("*.yaml"))}


def find_shipped(argument: str) -> Path | None:
    """The shipped config ``argument`` names (``breakout`` alone if unique, ``minatar/breakout``, or the
    documented ``configs/minatar/breakout.yaml``), else None."""
    return _find(argument, {name: config.path for name, config in shipped_configs().items()})


def find_shipped_space(argument: str) -> Path | None:
    """The shipped search space ``argument`` names (``cue_memory_space``, ``tune/cue_memory_space`` or the
    documented ``configs/tune/cue_memory_space.yaml``), else None."""
    return _find(argument, shipped_spaces())


def nearest_shipped(argument: str) -> str | None:
    """The shipped config name closest to ``argument`` (for a 'did you mean'), or None."""
    return _nearest(argument, list(shipped_configs()))


def nearest_shipped_space(argument: str) -> str | None:
    """The shipped search-space name closest to ``argument`` (for a 'did you mean'), or None."""
    return _nearest(argument, list(shipped_spaces()))


def _find(argument: str, files: dict[str, Path]) -> Path | None:
    """``files[name]`` for the name ``argument`` gives, or the one file whose last name part it is, else None."""
    name = _shipped_name(argument)
    if name in files:
        return files[name]
    by_leaf = [path for key, path in files.items() if key.rsplit("/", 1)[-1] == name]
    return by_leaf[0] if len(by_leaf) == 1 else None


def _nearest(argument: str, names: list[str]) -> str | None:
    name = _shipped_name(argument)
    leaves = {key.rsplit("/", 1)[-1]: key for key in names}  # 'cue_memory_spce' is near the leaf, not the path
    close = difflib.get_close_matches(name, names + list(leaves), n=1, cutoff=0.6)
    return leaves.get(close[0], close[0]) if close else None


def _shipped_name(argument: str) -> str:
    """``argument`` as a shipped name: the documented ``configs/...yaml`` path loses its folder and suffix."""
    return argument.replace("\\", "/").removeprefix("./").removeprefix("configs/").removesuffix(".yaml")


def _describe(name: str, path: Path) -> ShippedConfig:
    comments = [line.strip() for line in path.read_text().splitlines() if line.startswith("#")]
    summary = comments[0].lstrip("# ").strip() if comments else ""
    results = [line[len(RESULT_PREFIX):].strip() for line in comments if line.startswith(RESULT_PREFIX)]
    return ShippedConfig(name, path, summary, results[0] if results else "not measured")
