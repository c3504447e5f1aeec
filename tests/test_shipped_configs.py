"""Shipped configs by name: every file under configs/ is found, described and measured, a name or the
documented path finds it from any directory, and a wrong name gets a 'did you mean'."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomllib

from r2d2kit import train
from r2d2kit.training.config import ConfigError, load_config
from r2d2kit.training.shipped import RESULT_PREFIX, SPACES_FOLDER, config_directory, find_shipped, shipped_configs

ROOT = Path(__file__).resolve().parent.parent
ALL_YAML = sorted((ROOT / "configs").rglob("*.yaml"))
CONFIG_FILES = [path for path in ALL_YAML if path.parent.name != SPACES_FOLDER]  # tune/: the tuner's search spaces


def test_every_config_file_is_shipped_with_a_summary_and_a_result_line():
    configs = shipped_configs()
    assert config_directory().resolve() == (ROOT / "configs").resolve()
    assert sorted(config.path.resolve() for config in configs.values()) == [p.resolve() for p in CONFIG_FILES]
    for path in CONFIG_FILES:
        name = path.relative_to(ROOT / "configs").with_suffix("").as_posix()
        text = path.read_text()
        assert configs[name].summary == text.splitlines()[0].lstrip("# ").strip()
        assert sum(line.startswith(RESULT_PREFIX) for line in text.splitlines()) == 1, f"{name}: one '# result:' line"


def test_the_wheel_carries_every_config_folder():
    """pyproject lists the packages (configs/ maps to r2d2kit.configs): a new subpackage or config folder
    missing from the list would be missing from the wheel."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    code = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "r2d2kit").rglob("__init__.py")}
    data = {".".join(("r2d2kit", *p.relative_to(ROOT).parts)) for p in (ROOT / "configs").rglob("*")
            if p.is_dir()} | {"r2d2kit.configs"}
    assert set(setuptools["packages"]) == code | data | {"r2d2kit.examples"}
    assert setuptools["package-dir"] == {"r2d2kit.configs": "configs", "r2d2kit.examples": "agents"}
    assert (ROOT / "agents" / "__init__.py").is_file()  # agents/ is the one copy of r2d2kit.examples
    folders = {p.parent.relative_to(ROOT / "configs").as_posix() for p in ALL_YAML}
    patterns = set(setuptools["package-data"]["r2d2kit.configs"])
    assert {"*.yaml" if folder == "." else f"{folder}/*.yaml" for folder in folders} == patterns


@pytest.mark.parametrize("argument", ["minatar/breakout", "breakout", "configs/minatar/breakout.yaml",
                                      "minatar/breakout.yaml"])
def test_a_name_or_the_documented_path_finds_the_config_from_any_directory(argument, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no configs/ here
    assert find_shipped(argument).resolve() == (ROOT / "configs/minatar/breakout.yaml").resolve()
    assert load_config(argument).env.id == "MinAtar/Breakout-v1"


def test_a_file_that_exists_wins_over_a_shipped_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("cue_memory").write_text("env: {id: CartPole-v1}\n")
    assert load_config("cue_memory").env.id == "CartPole-v1"


def test_an_unknown_name_is_refused_with_the_nearest_shipped_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"no config file at 'minatar/breakot', and no shipped config of that name "
                                          r"\(did you mean 'minatar/breakout'\?\); python -m r2d2kit.train --list"):
        load_config("minatar/breakot")
    assert find_shipped("no_such_thing") is None


def test_list_prints_every_shipped_config_with_its_result(capsys):
    assert train.main(["--list"]) == 0
    printed = capsys.readouterr().out
    for name, config in shipped_configs().items():
        assert f"  {name} " in printed and f"result: {config.result}" in printed
