"""The reference pages cannot drift from the code.

* API: docs/reference/api.md is a list of ``::: dotted.name`` lines that mkdocstrings renders from
  the docstrings. Every public name of the modules it covers is on it, and every listed object (and
  each public method of a listed class) has a docstring.
* Config: docs/reference/config.md is generated from the dataclasses by docs/config_reference.py and
  committed; it must equal what the schema gives now, and every key needs a meaning (a trailing
  ``# comment`` on its field).
"""

import dataclasses
import importlib
import inspect
import re
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"
sys.path.insert(0, str(DOCS))
import config_reference  # noqa: E402

API_PAGE = DOCS / "reference" / "api.md"
# Packages whose ``__all__`` must be covered even though the page names their objects by the defining
# module (``r2d2kit.runners`` exports lazily from ``r2d2kit.runners.local``).
PACKAGES = ["r2d2kit", "r2d2kit.replay", "r2d2kit.models", "r2d2kit.runners", "r2d2kit.envs"]


def resolve(path: str) -> tuple[object, object]:
    """(module, object) for ``package.module.Name``: the longest importable prefix, then attributes."""
    parts = path.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        obj = module
        for name in parts[split:]:
            obj = getattr(obj, name)
        return module, obj
    raise ImportError(path)


def documented() -> dict[str, tuple[object, object]]:
    paths = re.findall(r"^:::\s*(\S+)\s*$", API_PAGE.read_text(), re.MULTILINE)
    assert paths, f"no ::: lines in {API_PAGE}"
    return {path: resolve(path) for path in paths}


def test_every_public_name_is_on_the_api_page():
    entries = documented()
    objects = {id(obj) for _, obj in entries.values()}
    modules = {module.__name__ for module, _ in entries.values()} | set(PACKAGES)
    missing = []
    for module_name in sorted(modules):
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", []):
            if not name.startswith("__") and id(getattr(module, name)) not in objects:
                missing.append(f"{module_name}.{name}")
    assert not missing, f"public names missing from {API_PAGE.name} (add a ::: line): {missing}"


def test_every_documented_name_and_method_has_a_docstring():
    undocumented = []
    for path, (_, obj) in documented().items():
        if not inspect.getdoc(obj):
            undocumented.append(path)
        if inspect.isclass(obj):
            for member_name, member in vars(obj).items():
                target = member.fget if isinstance(member, property) else member
                if not member_name.startswith("_") and inspect.isfunction(target) and not inspect.getdoc(target):
                    undocumented.append(f"{path}.{member_name}")
    assert not undocumented, f"public names without a docstring: {undocumented}"


def test_every_config_key_has_a_meaning():
    missing = [f"{section}.{key}" for section, cls in config_reference.sections().items()
               for key, meaning in config_reference.meanings(cls).items() if not meaning]
    assert not missing, f"add a trailing # comment saying what each of these means: {missing}"


def test_the_committed_config_page_is_what_the_schema_gives():
    committed = DOCS / config_reference.PAGE
    assert committed.read_text() == config_reference.render(), (
        f"{committed} is out of date: run python docs/config_reference.py --write")


def test_config_page_lists_every_key_with_its_default():
    page = config_reference.render()
    for section, cls in config_reference.sections().items():
        assert f"## `{section}`" in page
        for f in dataclasses.fields(cls):
            default = config_reference.as_yaml(config_reference.default_of(f))
            assert f"| `{f.name}` |" in page and f"`{default}`" in page, f"{section}.{f.name}"
