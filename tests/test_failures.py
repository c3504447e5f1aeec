"""Every stop on a failure is a clean stop: actors closed, nothing in /dev/shm, a final checkpoint
when the state is sound, one named error line, a documented exit status (r2d2kit/training/failures.py)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from r2d2kit.train import main as train_main
from r2d2kit.training.checkpoint import latest_checkpoint, list_checkpoints, verify_checkpoint
from r2d2kit.training.failures import EXIT_ACTORS, EXIT_DISK, EXIT_LEARNER
from tests.test_trainer import CUE, ROOT, mapped_segments, shm_segments

pytestmark = pytest.mark.slow  # every test here trains

QUICK = ["--set", "run.warmup_steps=200", "--set", "run.eval_every=0", "--set", "logging.progress=false",
         "--set", "logging.tensorboard=false", "--set", "checkpoints.every_env_steps=500"]


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error: ")]


def test_an_actor_that_dies_on_every_start_stops_the_run_within_a_minute_cleanly(tmp_path):
    """Actor 1's env raises on its first step (actor 0 trains): three failures in a row, each restarted as
    a fresh incarnation in the same process (no new process, no TensorFlow import), then exit 3 with one
    error line, a final checkpoint, and nothing left behind."""
    run_dir = tmp_path / "run"
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "r2d2kit.train", str(CUE), "--run-dir", str(run_dir), *QUICK,
         "--set", "env.id=tests.runners.failing_env:FailsInActorOne-v0", "--set", "env.num_envs=2",
         "--set", "actors.runner=processes", "--set", "run.total_env_steps=10000000"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    lines: list[tuple[float, str]] = []
    segments: set[str] = set()

    def read() -> None:
        for line in process.stderr:
            lines.append((time.monotonic(), line.rstrip("\n")))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 240
        while process.poll() is None and time.monotonic() < deadline:
            segments |= mapped_segments(process.pid)
            time.sleep(0.5)
        assert process.poll() is not None, "the crash loop did not stop the run within 240 s"
        reader.join(timeout=10)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, 9)
    ended = time.monotonic()
    stderr = "\n".join(line for _, line in lines)
    failures = [(when, line) for when, line in lines if line.startswith("actor 1 (pid ")]
    assert process.returncode == EXIT_ACTORS, stderr[-3000:]
    assert len(failures) == 2, stderr[-3000:]  # two restarts granted, the third failure stops
    raised = "failed: its code raised RuntimeError: FailsInActorOne: actor 1's env fails on its first step; "
    assert f"{raised}a fresh incarnation starts in its process in 1 s (restart 1 of 10 within 60 s; crash 1 in a " \
           f"row of 3)" in failures[0][1]
    assert f"{raised}a fresh incarnation starts in its process in 2 s" in failures[1][1]
    assert "crash 2 in a row of 3" in failures[1][1]
    pids = {line.split()[3].rstrip(")") for _, line in failures}
    assert len(pids) == 1 and "died of" not in stderr  # the same process throughout: no spawn, no TensorFlow import
    to_stop = ended - failures[0][0]  # back-offs 1 s and 2 s, two fresh incarnations, the final checkpoint
    total = ended - started
    print(f"crash loop: {total:.0f} s from the command to its exit, {to_stop:.0f} s from the first failure")
    assert to_stop < 45, f"{to_stop:.0f} s from the first failure to the exit"
    if os.getloadavg()[0] <= (os.cpu_count() or 1):  # on a machine not busy with other work
        assert total < 60, f"{total:.0f} s from the command to its exit"
    [line] = error_lines(stderr)
    assert line.startswith("error: training stopped, actors failure: actor 1 crashed (its code raised RuntimeError: "
                           "FailsInActorOne: actor 1's env fails on its first step) 3 time(s) in a row without "
                           "delivering an env step in between (actors.max_consecutive_failures=3)"), line
    checkpoint = latest_checkpoint(run_dir)
    assert checkpoint is not None and f"final checkpoint {checkpoint.name} written at" in line
    assert f"resume from {checkpoint.name} with: python -m r2d2kit.train --resume {run_dir}" in line
    state = verify_checkpoint(checkpoint)
    assert state["env_steps"] > 0 and state["actor_restarts"] == 2  # actor 0 trained meanwhile
    assert "ActorsFailed" not in stderr and "TrainingFailed" not in stderr  # no learner traceback
    assert "FailsInActorOne: actor 1's env fails on its first step" in stderr  # the actor's own report
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stopped_by"] == "failure: actors" and summary["error"] == line.removeprefix("error: ")
    assert len(segments) == 3 and not segments & shm_segments()  # every segment unlinked


@pytest.mark.parametrize("fail_at", ["optimizer.npz", "replay.npz"])
def test_a_full_disk_during_a_checkpoint_keeps_the_previous_one_for_resume(tmp_path, monkeypatch, capsys, fail_at):
    """The second checkpoint's optimizer or replay write half-writes its file and fails with ENOSPC:
    exit 5 with the named error, no trace of the half checkpoint, and --resume picks the first."""
    savez = np.savez
    calls = {"optimizer.npz": 0, "replay.npz": 0}

    def full_disk_savez(target, *args, **kwargs):
        name = "optimizer.npz" if str(getattr(target, "name", target)).endswith("optimizer.npz") else "replay.npz"
        calls[name] += 1
        if name == fail_at and calls[name] == 2:
            handle = open(target, "wb") if isinstance(target, (str, Path)) else target
            handle.write(b"PK\x03\x04 half a file")
            handle.flush()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return savez(target, *args, **kwargs)

    monkeypatch.setattr(np, "savez", full_disk_savez)
    run_dir = tmp_path / "run"
    code = train_main([str(CUE), "--run-dir", str(run_dir), *QUICK, "--set", "run.total_env_steps=1500",
                       "--set", "checkpoints.save_replay=true"])
    stderr = capsys.readouterr().err
    assert code == EXIT_DISK, stderr[-3000:]
    [line] = error_lines(stderr)
    assert line.startswith("error: training stopped, disk failure: could not write checkpoint ckpt-000001000 into "
                           f"{run_dir / 'checkpoints'} (No space left on device, errno 28); nothing of it was kept and "
                           "the newest complete checkpoint is still ckpt-000000500, the one --resume picks"), line
    assert line.endswith(f"no final checkpoint (the disk refused a write); resume from ckpt-000000500 with: "
                         f"python -m r2d2kit.train --resume {run_dir}")
    assert "Traceback" not in stderr
    assert [path.name for path in list_checkpoints(run_dir)] == ["ckpt-000000500"]
    assert sorted(path.name for path in (run_dir / "checkpoints").iterdir()) == ["ckpt-000000500"]  # no half dir
    verify_checkpoint(run_dir / "checkpoints" / "ckpt-000000500")
    monkeypatch.setattr(np, "savez", savez)  # space freed
    assert train_main(["--resume", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "resuming from ckpt-000000500 at 500 env steps" in out
    assert json.loads((run_dir / "summary.json").read_text())["env_steps"] >= 1500


def test_a_learner_error_stops_with_a_final_checkpoint_and_one_line_and_debug_adds_the_traceback(
        tmp_path, monkeypatch, capsys):
    from r2d2kit.agent.r2d2.learner import R2D2Learner

    train_from = R2D2Learner.train_from
    poison = {"weights": False}

    def failing(self, replay):
        if self.updates >= 100:  # past the periodic checkpoint at 500 env steps
            if poison["weights"]:
                self.online.model.weights[0].assign(np.full(self.online.model.weights[0].shape, np.nan))
            raise FloatingPointError("injected: the loss is not finite")
        return train_from(self, replay)

    monkeypatch.setattr(R2D2Learner, "train_from", failing)
    run_dir = tmp_path / "run"
    assert train_main([str(CUE), "--run-dir", str(run_dir), *QUICK, "--set", "run.total_env_steps=5000"]) \
        == EXIT_LEARNER
    stderr = capsys.readouterr().err
    [line] = error_lines(stderr)
    checkpoint = latest_checkpoint(run_dir)
    assert checkpoint is not None and verify_checkpoint(checkpoint)["updates"] == 100
    assert line == (f"error: training stopped, learner failure: FloatingPointError in an update: injected: the loss "
                    f"is not finite; final checkpoint {checkpoint.name} written at "
                    f"{verify_checkpoint(checkpoint)['env_steps']:,} env steps; resume from {checkpoint.name} with: "
                    f"python -m r2d2kit.train --resume {run_dir}")
    assert "Traceback" not in stderr
    # weights that are no longer finite are not a sound state: no final checkpoint; --debug shows the traceback
    poison["weights"] = True
    run_dir = tmp_path / "poisoned"
    assert train_main([str(CUE), "--run-dir", str(run_dir), *QUICK, "--set", "run.total_env_steps=5000",
                       "--debug"]) == EXIT_LEARNER
    stderr = capsys.readouterr().err
    [line] = error_lines(stderr)
    assert "no final checkpoint (the learner's weights are not finite: the state is not sound)" in line
    assert "resume from ckpt-000000500" in line  # the periodic one before the failure
    assert "Traceback" in stderr and "FloatingPointError: injected" in stderr
