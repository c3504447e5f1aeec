"""The config reference page, ``docs/reference/config.md``, generated from the schema and committed.

Committed so that the docs read as Markdown without a build; ``python docs/config_reference.py
--write`` regenerates it, and tests/test_docs.py fails while the committed page differs from what
the schema gives.

The schema is the dataclasses of ``r2d2kit/training/config.py`` (one per YAML section) and each agent's
``learner`` section (``R2D2Config`` in ``r2d2kit/agent/r2d2/config.py``, ``SACConfig`` in
``r2d2kit/agent/sac/config.py``), one table per agent. Each key's type and default come from the
dataclass field; its meaning is the field's trailing ``# comment`` in the source, and a ``# --- name``
comment line inside a class starts a group. tests/test_docs.py also checks that every key has a
meaning.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import json
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = "reference/config.md"


def sections() -> dict[str, type]:
    """``{section name: dataclass}`` in the order of ``TrainConfig``; a mapping inside a section
    (``replay.her``) follows its section, and the ``learner`` section has one entry per agent
    (``learner (agent: sac)``)."""
    from r2d2kit.training.config import AGENTS, HerConfig, TrainConfig, section_class

    out = {}
    for f in dataclasses.fields(TrainConfig):
        if f.name == "agent":
            continue
        if f.name == "learner":
            for agent in AGENTS:
                out[f"learner (agent: {agent})"] = section_class("learner", agent)
            continue
        out[f.name] = section_class(f.name)
        if f.name == "replay":
            out["replay.her"] = HerConfig
    return out


def source_comments(cls: type) -> tuple[dict[str, str], dict[str, str]]:
    """``({field: trailing comment}, {field: group})`` read from the class's source."""
    source = inspect.getsource(sys.modules[cls.__module__])
    comments = {token.start[0]: (token.string.lstrip("#").strip(), token.line.strip().startswith("#"))
                for token in tokenize.generate_tokens(io.StringIO(source).readline)
                if token.type == tokenize.COMMENT}
    node = next(node for node in ast.walk(ast.parse(source))
                if isinstance(node, ast.ClassDef) and node.name == cls.__name__)
    trailing, groups, group = {}, {}, ""
    fields = [stmt for stmt in node.body if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)]
    for line in range(node.lineno, node.end_lineno + 1):
        text, own_line = comments.get(line, ("", False))
        if own_line and text.startswith("---"):
            group = text.strip("- ").strip()
        for stmt in fields:
            if stmt.lineno == line:
                groups[stmt.target.id] = group
        for stmt in fields:
            if stmt.lineno <= line <= stmt.end_lineno and text and not own_line:
                trailing[stmt.target.id] = text
    return trailing, groups


def meanings(cls: type) -> dict[str, str]:
    """Meaning of every field ("" where none is written down)."""
    trailing, _ = source_comments(cls)
    return {f.name: trailing.get(f.name, "") for f in dataclasses.fields(cls)}


def default_of(f: dataclasses.Field) -> object:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def as_yaml(value: object) -> str:
    """A default as it would be written in the YAML file (JSON is YAML's flow style)."""
    return json.dumps(value)


def cell(text: str) -> str:
    """Text for a table cell, shown as written: no emphasis from ``*``, no HTML from ``<name>``."""
    for raw, escaped in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ("|", "\\|"), ("*", "\\*")):
        text = text.replace(raw, escaped)
    return text


def render() -> str:
    """The whole page as Markdown."""
    lines = [
        "# Config reference",
        "",
        "Every key of a `python -m r2d2kit.train` config, generated from the schema (the dataclasses in",
        "`r2d2kit/training/config.py` and each agent's learner section) by",
        "`python docs/config_reference.py --write`; a test fails while this page differs from the schema. Every",
        "key is optional; an omitted key keeps the default shown. Defaults are written as in the YAML file.",
        "Override any key from the command line with `--set section.key=value` (the value is parsed as",
        "YAML), e.g. `--set replay.burn_in=10`. How to write and run a config:",
        "[Train from a config](../training.md).",
        "",
        "## `agent`",
        "",
        "A top-level value, not a section: the agent the config trains, `r2d2` (the default; one `Discrete`",
        "action, possibly a `MultiDiscrete` flattened) or `sac` (recurrent SAC; a `Box` action with finite",
        "bounds). It chooses the `learner` section's keys (one table per agent below) and how the actors",
        "explore: R2D2's actors read `actors.exploration` and the epsilons, SAC's sample from their policy.",
        "Override it with `--set agent=sac`.",
        "",
    ]
    for name, cls in sections().items():
        doc = inspect.cleandoc(cls.__doc__ or "").split("\n\n")[0].replace("\n", " ")
        lines += [f"## `{name}`", "", f"`{cls.__module__}.{cls.__name__}`: {doc}", ""]
        meaning = meanings(cls)
        _, groups = source_comments(cls)
        current = None
        for f in dataclasses.fields(cls):
            group = groups.get(f.name, "")
            if group != current:
                if current is not None:
                    lines.append("")  # a blank line ends the previous table
                if group:
                    lines += [f"**{group}**", ""]
                lines += ["| key | type | default | meaning |", "|---|---|---|---|"]
                current = group
            type_name = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
            # code spans need no escaping: Python-Markdown splits no table cell inside backticks
            lines.append(f"| `{f.name}` | `{type_name}` | `{as_yaml(default_of(f))}` | {cell(meaning[f.name])} |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    if sys.argv[1:] == ["--write"]:
        (ROOT / "docs" / PAGE).write_text(render())
        print(f"wrote docs/{PAGE}")
    else:
        print(render(), end="")
