"""Inputs refused before TensorFlow loads: a mistyped path costs well under a second, not the framework's import.

Each case runs the entry point in a fresh interpreter and asserts that TensorFlow was never imported,
which is what keeps the refusal fast (importing TensorFlow takes 5-10 s on a small machine).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CUE = ROOT / "configs" / "cue_memory.yaml"

PROBE = """
import sys
from r2d2kit.{module} import main
status = main(sys.argv[1:])
assert status == 2, status
assert "tensorflow" not in sys.modules, "TensorFlow was imported before the input was refused"
"""


def refuse(module: str, *args: str, cwd: Path) -> str:
    """stderr of ``r2d2kit.<module>.main(args)`` in a fresh interpreter, which must refuse without TensorFlow."""
    done = subprocess.run([sys.executable, "-c", PROBE.format(module=module), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    return done.stderr


@pytest.fixture
def old_run(tmp_path) -> Path:
    """A directory that looks like a finished run to the refusals: its config and an evaluation log."""
    run = tmp_path / "old"
    run.mkdir()
    (run / "config.yaml").write_text(CUE.read_text())
    (run / "metrics.csv").write_text("env_steps,eval_mean\n")
    return run


@pytest.mark.parametrize("module, args, message", [
    ("evaluate", ["runs/nope"], "runs/nope: no such directory"),
    ("train", ["--resume", "runs/nope"], "--resume runs/nope: no such directory"),
    ("train", ["--resume", "old"], "--resume old: no checkpoint under old/checkpoints"),
    ("train", [str(CUE), "--run-dir", "old"], "run directory old already holds a run; continue it with --resume old"),
], ids=["evaluate-missing-run", "resume-missing-run", "resume-without-checkpoint", "train-into-an-old-run"])
def test_a_bad_path_is_refused_before_tensorflow_loads(old_run, module, args, message):
    assert message in refuse(module, *args, cwd=old_run.parent)
