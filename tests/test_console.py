"""A quiet console: TensorFlow's native log lines never reach the user's terminal from the command line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from r2d2kit.console import filter_native_lines

ROOT = Path(__file__).resolve().parents[1]
# what a native log line looks like, and the words of the lines TensorFlow 2.21 printed before the filter
NATIVE = re.compile(r"^[IWEF]\d{4} |oneDNN|cuda|cuInit|absl|cpu_feature_guard|AVX|To enable the following",
                    re.IGNORECASE | re.MULTILINE)

ONEDNN = (b"I0000 00:00:1795856059.645817    4950 port.cc:153] oneDNN custom operations are on. You may see "
          b"slightly different numerical results\n")
CUINIT = b"E0000 00:00:1795856064.022215    4950 cuda_platform.cc:52] failed call to cuInit: INTERNAL\n"
ABSL = b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
GUARD = (b"I0000 00:00:1795858177.480723   19411 cpu_feature_guard.cc:227] This TensorFlow binary is optimized.\n"
         b"To enable the following instructions: AVX2 AVX512F FMA, in other operations, rebuild TensorFlow with the "
         b"appropriate compiler flags.\n")
FATAL = b"F0000 00:00:1795856064.022215    4950 check.cc:1] Check failed: the process aborts\n"


@pytest.mark.parametrize("data, shown, held", [
    (ABSL + ONEDNN + b"warning: kept\n" + CUINIT, b"warning: kept\n", b""),
    (FATAL, FATAL, b""),  # fatal lines explain a crash: they pass
    (GUARD + b"kept\n", b"kept\n", b""),  # cpu_feature_guard's two-line message
    (b"\r 50%|#####     | 300/600" + ONEDNN, b"\r 50%|#####     | 300/600", b""),  # a bar keeps its part
    (b"\r 50%|#####", b"\r 50%|#####", b""),  # an incomplete bar is shown at once
    (ONEDNN[:60], b"", ONEDNN[:60]),  # a native line cut by the pipe is held until it ends
    (b"\x1b[36m(ActorBody pid=3928)\x1b[0m " + ONEDNN + b"Ray actor 1 failed\n", b"Ray actor 1 failed\n", b""),
], ids=["noise dropped", "fatal kept", "two-line message", "inside a bar", "bar without newline", "split native line",
        "from a Ray actor"])
def test_native_lines_are_dropped_and_everything_else_passes(data, shown, held):
    assert filter_native_lines(data) == (shown, held)


WRITER = """
import os, sys
from r2d2kit.console import quiet_native_logs
print(quiet_native_logs())
sys.stdout.flush()
os.write(2, {lines!r})
print("from python", file=sys.stderr)
"""


@pytest.mark.parametrize("user_level, expected", [(None, "from python\n"), ("0", None)], ids=["default", "user set"])
def test_the_filter_is_on_unless_the_user_chose_a_log_level(user_level, expected):
    env = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}
    if user_level is not None:
        env["TF_CPP_MIN_LOG_LEVEL"] = user_level
    lines = ABSL + ONEDNN + CUINIT
    done = subprocess.run([sys.executable, "-c", WRITER.format(lines=lines)], capture_output=True, text=True,
                          env={**env, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ("True\n" if user_level is None else "False\n")
    assert done.stderr == (expected if expected is not None else lines.decode() + "from python\n")


@pytest.mark.slow
@pytest.mark.parametrize("runner", ["local", "processes"])
def test_a_training_run_prints_no_native_log_line(tmp_path, runner):
    """TensorFlow 2.21 printed 8 such lines on a local run and about 20 with actor processes (issue 53)."""
    env = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}
    done = subprocess.run(
        [sys.executable, "-m", "r2d2kit.train", "cue_memory", "--run-dir", str(tmp_path / "run"),
         "--set", "run.total_env_steps=600", "--set", "run.warmup_steps=300", "--set", "run.eval_every=600",
         "--set", f"actors.runner={runner}", "--set", "actors.num_actors=2", "--set", "logging.tensorboard=false"],
        cwd=tmp_path, capture_output=True, text=True, env={**env, "PYTHONPATH": str(ROOT)}, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "stopped by run.total_env_steps" in done.stdout
    assert NATIVE.search(done.stderr) is None, done.stderr[-3000:]
