"""The package's shape: no import cycle between its modules, benchmarks and agents use public
names only, and only ``r2d2kit/sumtree.py`` touches a tree's private attributes."""

from __future__ import annotations

import ast
import re
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "r2d2kit"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path, known: set[str]) -> set[str]:
    """Every r2d2kit module ``path`` imports, at top level, inside functions (a lazy import still
    closes a cycle) or under ``if TYPE_CHECKING`` (a dependency for the reader, if not for Python)."""
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)  # a submodule imported by name
    return {name for name in found if name in known}


def import_graph() -> dict[str, set[str]]:
    paths = sorted(PACKAGE.rglob("*.py"))
    known = {module_name(p) for p in paths}
    return {module_name(p): imported_modules(p, known) - {module_name(p)} for p in paths}


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's algorithm: the components with more than one module are import cycles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            components.append(component)

    for node in graph:
        if node not in index:
            visit(node)
    return components


def test_tarjan_finds_a_planted_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert [c for c in strongly_connected(graph) if len(c) > 1] == [{"a", "b", "c"}]


def test_the_import_graph_sees_lazy_and_type_checking_imports(tmp_path):
    graph = import_graph()
    assert "r2d2kit.runners.weights" in graph["r2d2kit.agent.r2d2.policies"]  # imported inside a method only
    sample = tmp_path / "sample.py"
    sample.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from r2d2kit.agent.r2d2 import "
                      "qnetwork\n")
    assert imported_modules(sample, {"r2d2kit.agent.r2d2", "r2d2kit.agent.r2d2.qnetwork"}) == {
        "r2d2kit.agent.r2d2", "r2d2kit.agent.r2d2.qnetwork"}


def test_no_import_cycle_in_the_package():
    cycles = [sorted(c) for c in strongly_connected(import_graph()) if len(c) > 1]
    assert cycles == []


def private_uses(path: Path) -> list[str]:
    """Underscore modules or names imported from r2d2kit, and ``obj._attr`` on anything but self/cls."""
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("r2d2kit"):
            names = node.module.split(".") + [alias.name for alias in node.names]
            found += [f"{path.name}:{node.lineno} imports {n}" for n in names if n.startswith("_")]
        elif isinstance(node, ast.Import):
            found += [f"{path.name}:{node.lineno} imports {a.name}" for a in node.names
                      if a.name.startswith("r2d2kit") and any(p.startswith("_") for p in a.name.split("."))]
        elif (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
              and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
            found.append(f"{path.name}:{node.lineno} uses .{node.attr}")
    return found


def test_private_use_check_catches_examples(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("from r2d2kit._validation import x\nfrom r2d2kit.agent import _hidden\n"
                      "buf._tree.total()\nself._ok = 1\nobj.__class__\n")
    assert private_uses(sample) == ["sample.py:1 imports _validation", "sample.py:2 imports _hidden",
                                    "sample.py:3 uses ._tree"]


@pytest.mark.parametrize("folder", ["benchmarks", "agents"])
def test_benchmarks_and_agents_use_public_names_only(folder):
    uses = [use for path in sorted((ROOT / folder).rglob("*.py")) for use in private_uses(path)]
    assert uses == []


TREE_MODULE = PACKAGE / "sumtree.py"


def tree_private_names() -> set[str]:
    """The private attributes ``SumTree`` and ``MinTree`` assign on ``self``."""
    module = ast.parse(TREE_MODULE.read_text())
    names = set()
    for cls in (node for node in module.body if isinstance(node, ast.ClassDef) and node.name in ("SumTree", "MinTree")):
        for node in ast.walk(cls):
            if (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                    and isinstance(node.value, ast.Name) and node.value.id == "self"
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                names.add(node.attr)
    return names


def tree_private_reads(path: Path, names: set[str]) -> list[str]:
    """``obj.<name>`` (obj not self/cls) and ``getattr(obj, "<name>")`` for the given private names."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (isinstance(node, ast.Attribute) and node.attr in names
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
            found.append(f"{path.name}:{node.lineno} reads .{node.attr}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
              and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value in names):
            found.append(f"{path.name}:{node.lineno} reads .{node.args[1].value}")
    return found


def test_tree_private_read_check_catches_examples(tmp_path):
    names = tree_private_names()
    assert {"_sum", "_min", "_offsets", "_leaf_offset"} <= names
    sample = tmp_path / "sample.py"
    sample.write_text("t = buf.tree\nk(t._sum, t._leaf_offset)\nself._min = 1\ngetattr(t, '_min')\nt.arrays.sum_tree\n")
    assert sorted(tree_private_reads(sample, names)) == ["sample.py:2 reads ._leaf_offset", "sample.py:2 reads ._sum",
                                                         "sample.py:4 reads ._min"]


def test_only_the_tree_module_reads_a_trees_private_attributes():
    """Buffers and kernels reach a tree's arrays through ``SumTree.arrays`` (``TreeArrays``): the
    layout can change inside ``r2d2kit/sumtree.py`` and ``r2d2kit/kernels/sumtree.py`` alone."""
    names = tree_private_names()
    uses = [use for path in sorted(PACKAGE.rglob("*.py")) if path != TREE_MODULE
            for use in tree_private_reads(path, names)]
    assert uses == []


def test_new_rooms_re_export_without_starting_tensorflow():
    code = ("import sys, r2d2kit.agent.r2d2 as a, r2d2kit.training as t; a.greedy; a.value_rescale; "
            "print('tensorflow' in sys.modules)")
    import subprocess

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "False"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new paths never warn
        from r2d2kit.agent.r2d2 import R2D2Learner
        from r2d2kit.agent.r2d2.learner import R2D2Learner as same
    assert R2D2Learner is same


# --- the window record and the recurrent state, each described in one place
RECORD_NAMES = {"reward", "prev_reward", "terminated", "truncated", "mask", "obs_mask", "prev_action", "env",
                "episode", "start"}
RECORD_MODULE = PACKAGE / "replay" / "window_record.py"
STATE_MODULE = PACKAGE / "models" / "cores.py"


def declarations(tree: ast.Module) -> list[ast.AST]:
    """The values assigned at module and class level: where a module declares what it knows."""
    scopes = [tree.body] + [node.body for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    return [statement.value for body in scopes for statement in body
            if isinstance(statement, (ast.Assign, ast.AnnAssign)) and statement.value is not None]


def record_listings(path: Path) -> list[int]:
    """Lines of module- or class-level constants in ``path`` (literal tuples, lists, sets, dict keys) naming three
    or more of the window record's fields: a restatement of the record (reading fields by name is not)."""
    lines = []
    for node in (inner for value in declarations(ast.parse(path.read_text())) for inner in ast.walk(value)):
        items = node.keys if isinstance(node, ast.Dict) else node.elts if isinstance(node, (ast.Tuple, ast.List,
                                                                                             ast.Set)) else []
        names = {item.value for item in items if isinstance(item, ast.Constant) and isinstance(item.value, str)}
        if len(names & RECORD_NAMES) >= 3:
            lines.append(node.lineno)
    return lines


def state_restatements(path: Path) -> list[int]:
    """Lines in ``path`` (outside docstrings and comments) that name a core's state fields or the LSTM's two
    tensors in code: ``"state_h"``, ``"state_c"``, ``lstm_units``, ``h, c = ...``."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and node.value in ("state_h", "state_c", "h0", "c0"):
            lines.append(node.lineno)
        elif isinstance(node, (ast.Name, ast.Attribute)) and "lstm_units" in ast.unparse(node):
            lines.append(node.lineno)
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Tuple) and [ast.unparse(e) for e in t.elts] ==
                                                  ["h", "c"] for t in node.targets):
            lines.append(node.lineno)
    return lines


def test_the_restatement_checks_catch_examples(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text('KEYS = ("obs", "reward", "terminated", "obs_mask")\nh, c = state\nkey = "state_h"\n'
                       'read = batch["reward"], batch["mask"]\nclass Learner:\n    ROWS = ["mask", "reward", "env"]\n'
                       'def inputs(batch):\n    return {"reward": 0, "mask": 1, "obs_mask": 2}\n')
    assert record_listings(planted) == [1, 6]  # constants; a function's own dict is not a declaration
    assert state_restatements(planted) == [2, 3]


def test_the_window_record_and_the_recurrent_state_are_each_described_once():
    """Only ``replay/window_record.py`` lists the window's fields, and only ``models/cores.py`` says what the
    recurrent state is; every other module reads them from there."""
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(ROOT)
        if path != RECORD_MODULE:
            assert record_listings(path) == [], f"{where} lists window-record fields: read replay/window_record.py"
        if path != STATE_MODULE:
            assert state_restatements(path) == [], f"{where} names the LSTM's state: read the network's state_spec()"
    assert record_listings(RECORD_MODULE) and "state_spec" in STATE_MODULE.read_text()


# --- agents behind one seam: R2D2 lives in its package; the loop, pools and checkpoints know no agent
R2D2_PACKAGE = PACKAGE / "agent" / "r2d2"
R2D2_NAME = re.compile(r"R2D2|QNetwork|q_values|[Ee]psilon|Greedy|HealthCheck")
AGENT_FREE = [PACKAGE / "training" / "trainer.py", PACKAGE / "training" / "checkpoint.py",
              PACKAGE / "training" / "builders.py", PACKAGE / "training" / "networks.py",
              PACKAGE / "training" / "startup.py", PACKAGE / "evaluate.py",
              *sorted((PACKAGE / "runners").glob("*.py"))]


def agent_imports(path: Path) -> list[str]:
    """Imports of the R2D2 package, or of a name that is R2D2's (a Q-network, an epsilon, a greedy policy)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found += [f"{path.name}:{node.lineno} imports {name}" for name in names
                  if name.startswith("r2d2kit.agent.r2d2") or R2D2_NAME.search(name.rpartition(".")[2])]
    return found


def identifiers(path: Path) -> set[str]:
    """Every name a module's code uses or binds (variables, attributes, arguments, functions, classes)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
    return names


def test_the_agent_import_check_catches_examples(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("from r2d2kit.agent.r2d2.learner import X\nfrom r2d2kit.agent.seam import Policy\n"
                      "from r2d2kit.agent.sac.policy import make_epsilons\nimport r2d2kit.agent.r2d2.qnetwork\n")
    assert [line.split(" imports ")[1] for line in agent_imports(sample)] == [
        "r2d2kit.agent.r2d2.learner", "make_epsilons", "r2d2kit.agent.r2d2.qnetwork"]


def test_no_module_outside_the_r2d2_package_imports_r2d2():
    """The trainer, builders, pools, checkpoints, evaluation, tuner and SAC reach R2D2 only through the seam
    (``agent: r2d2`` names its builder as a string in ``training.config.AGENTS``)."""
    uses = [use for path in sorted(PACKAGE.rglob("*.py")) if R2D2_PACKAGE not in path.parents
            for use in agent_imports(path)]
    assert uses == []


@pytest.mark.parametrize("path", AGENT_FREE, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_loop_pools_and_checkpoints_use_no_r2d2_name(path):
    assert sorted(name for name in identifiers(path) if R2D2_NAME.search(name)) == []
