"""Griffe extension for the API pages: read r2d2kit's docstrings the way their authors wrote them.

mkdocs.yml loads it for mkdocstrings. It changes what is rendered, never the source:

* Sphinx roles become code: ``:class:`~r2d2kit.replay.SequenceBuilder``` -> ``SequenceBuilder``,
  ``:func:`value_rescale``` -> ``value_rescale`` (Markdown has no roles; left alone they show as
  ``:class:`` text).
* An ``Args:`` entry naming several parameters (``burn_in, trace_length, n_step: the window layout``)
  becomes one entry per parameter with the same text, so each gets its row and its type from the
  signature, and griffe's check that every documented parameter exists stays on.
"""

from __future__ import annotations

import re

import griffe

ROLE = re.compile(r":(?:class|func|meth|mod|attr|exc|obj|data):`(~?)([^`]+)`")
SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Returns|Raises|Yields|Example|Examples|Note|Notes|"
                     r"Attributes|Warning|Warnings|See Also):\s*$")
GROUPED_ENTRY = re.compile(r"^(\s+)(\w+(?:\s*,\s*\w+)+):(.*)$")


def _role_to_code(match: re.Match) -> str:
    shortened, target = match.group(1), match.group(2)
    return f"`{target.rsplit('.', 1)[-1] if shortened else target}`"


def split_grouped_args(text: str) -> str:
    """Give each name of an ``a, b, c: text`` entry under ``Args:`` its own entry with the same text."""
    lines = text.split("\n")
    out: list[str] = []
    in_args, entry_indent, i = False, None, 0
    while i < len(lines):
        line = lines[i]
        section = SECTION.match(line)
        if section:
            in_args, entry_indent = section.group(1) in ("Args", "Arguments", "Parameters"), None
            out.append(line)
            i += 1
            continue
        indent = len(line) - len(line.lstrip())
        if in_args and line.strip() and entry_indent is None:
            entry_indent = indent  # the first entry sets the indentation of every entry
        grouped = GROUPED_ENTRY.match(line) if in_args and indent == entry_indent else None
        if not grouped:
            out.append(line)
            i += 1
            continue
        names, first = grouped.group(2), grouped.group(3)
        continuation = []
        i += 1
        while i < len(lines) and lines[i].strip() and len(lines[i]) - len(lines[i].lstrip()) > indent:
            continuation.append(lines[i])
            i += 1
        for name in (name.strip() for name in names.split(",")):
            out.append(f"{grouped.group(1)}{name}:{first}")
            out.extend(continuation)
    return "\n".join(out)


def rewrite(text: str) -> str:
    """Both rewrites, in order."""
    return split_grouped_args(ROLE.sub(_role_to_code, text))


class R2D2KitDocstrings(griffe.Extension):
    """Rewrites each docstring once, when griffe loads its object."""

    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = rewrite(obj.docstring.value)
