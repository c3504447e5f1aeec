"""One source for every result number: the tables, summaries and ``# result:`` lines match benchmarks/results/."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs"))
import results  # noqa: E402


def test_every_generated_result_matches_the_json():
    assert results.stale() == [], "run python docs/results.py --write"


def test_every_page_block_is_filled_and_every_config_line_is_generated():
    for page in results.PAGES:
        blocks = list(results.BLOCK.finditer((ROOT / page).read_text()))
        assert blocks and all(block["body"].strip() for block in blocks), page
    for path in results.result_lines():
        assert "# result:" in (ROOT / path).read_text(), path


def test_a_changed_json_number_makes_the_check_fail(tmp_path, monkeypatch):
    """The check reads the data, not a copy of the pages: one changed final return is caught everywhere it shows."""
    data_dir = tmp_path / "results"
    shutil.copytree(results.RESULTS, data_dir)
    minatar = json.loads((data_dir / "minatar.json").read_text())
    run = next(r for r in minatar["runs"] if r["agent"] == "r2d2" and r["game"] == "breakout" and r["seed"] == 0)
    run["final"] += 3.0
    (data_dir / "minatar.json").write_text(json.dumps(minatar))
    monkeypatch.setattr(results, "RESULTS", data_dir)
    stale = results.stale()
    for path in ("README.md", "docs/performance.md", "docs/training.md", "configs/minatar/breakout.yaml"):
        assert path in stale


@pytest.mark.parametrize("page", ["README.md", "docs/training.md"])
def test_pages_that_retell_results_do_not_keep_the_old_numbers(page):
    text = (ROOT / page).read_text()
    for old in ("20.9", "31.3", "19.0", "250k-350k", "24.5 on MinAtar"):
        assert old not in text, f"{page} still quotes {old}"
