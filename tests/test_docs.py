"""Every public name is documented, and docs/api.md is what docs/build_api.py generates."""

import importlib
import inspect
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"
sys.path.insert(0, str(DOCS))
import build_api  # noqa: E402


def test_every_public_name_and_method_has_a_docstring():
    undocumented = []
    for module_name in build_api.MODULES:
        module = importlib.import_module(module_name)
        for name in build_api.public_names(module):
            if name.startswith("__"):
                continue
            obj = getattr(module, name)
            if not inspect.getdoc(obj):
                undocumented.append(f"{module_name}.{name}")
            if inspect.isclass(obj):
                for member_name, member in vars(obj).items():
                    target = member.fget if isinstance(member, property) else member
                    if not member_name.startswith("_") and inspect.isfunction(target) and not inspect.getdoc(target):
                        undocumented.append(f"{module_name}.{name}.{member_name}")
    assert not undocumented, f"public names without a docstring: {undocumented}"


def test_api_reference_is_up_to_date():
    assert (DOCS / "api.md").read_text() == build_api.render(), "run: python docs/build_api.py"
