"""Shared test setup: make ``tests/reference.py`` importable as ``reference`` from every test folder.

Test folders have no ``__init__.py`` (pytest's default ``prepend`` import mode), so the brute-force
reference module is put on ``sys.path`` here, whatever import mode or working directory pytest uses.
"""

from __future__ import annotations

import sys
from pathlib import Path

_TESTS_DIR = str(Path(__file__).resolve().parent)
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)
