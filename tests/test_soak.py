"""The soak's short run (benchmarks/soak.py): a minute of actor SIGKILLs on actor processes, then SIGTERM."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_actor_kills_for_forty_seconds_stop_nothing_leak_nothing_and_lose_no_metrics(tmp_path):
    # 42 s of chaos, kills every 8-12 s until the last 15 s: two or three kills
    out = tmp_path / "soak.json"
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "soak.py"), "--minutes", "0.7",
                             "--learner-kill-at", "0", "--kill-every", "8", "12", "--sample-every", "2",
                             "--eval-every", "1000", "--checkpoint-every", "1000", "--seed", "1",
                             "--work-dir", str(tmp_path / "work"), "--json", str(out)],
                            cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert out.is_file(), result.stdout[-3000:] + result.stderr[-3000:]
    soak = json.loads(out.read_text())
    assert soak["checks"] == {"no unplanned stop": True, "every kill counted": True, "nothing left in /dev/shm": True,
                              "no orphan process": True, "metrics continuous": True, "checkpoints verify": True}, \
        result.stdout[-3000:]
    assert soak["actor_kills"] >= 2 and soak["kills_counted"] == soak["actor_kills"]
    assert soak["summary_actor_restarts"] == soak["actor_kills"] and soak["stopped_by"] == "SIGTERM"
    assert soak["metrics_rows"] >= 1 and result.returncode == 0


def test_a_config_the_learner_would_refuse_is_named_before_any_learner_starts(tmp_path):
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "soak.py"), "--config", "no_such_config",
                             "--work-dir", str(tmp_path / "work")], capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    assert "--config 'no_such_config': no config file at 'no_such_config'" in result.stderr
    assert "python -m r2d2kit.train --list" in result.stderr
    assert not (tmp_path / "work").exists()  # nothing started, nothing written
