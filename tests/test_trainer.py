"""The trainer as users run it: checkpoints and --resume, Ctrl-C, callbacks, TensorBoard, bad input."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from trainer_helpers import Recorder

from r2d2kit.runners.callbacks import Callback
from r2d2kit.runners.shm import PREFIX
from r2d2kit.train import main as train_main
from r2d2kit.training.checkpoint import (
    CheckpointError,
    list_checkpoints,
    verify_checkpoint,
)
from r2d2kit.training.config import ConfigError, load_config
from r2d2kit.training.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]
CUE = ROOT / "configs" / "cue_memory.yaml"
TINY = ["run.warmup_steps=200", "run.eval_every=500", "run.eval_episodes=8", "logging.progress=false",
        "logging.log_every=250", "checkpoints.every_env_steps=500", "checkpoints.keep=2"]


def tiny(total: int, *extra: str):
    return load_config(CUE, TINY + [f"run.total_env_steps={total}", *extra])


def shm_segments() -> set[str]:
    return {name for name in os.listdir("/dev/shm") if name.startswith(PREFIX)}


def mapped_segments(pid: int) -> set[str]:
    """r2d2kit segments mapped by process ``pid`` (other runs on the machine may hold their own)."""
    maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
    return {line.rsplit("/", 1)[1] for line in maps if f"/dev/shm/{PREFIX}" in line}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A 1000-step local run with a recording callback, then resumed to 1500 steps."""
    run_dir = tmp_path_factory.mktemp("run")
    first = Recorder()
    summary = Trainer(tiny(1000), run_dir, callbacks=[first]).fit()
    first_checkpoints = [path.name for path in list_checkpoints(run_dir)]
    resumed = Trainer(tiny(1500), run_dir, resume=True)
    restored = {"env_steps": resumed.counters["env_steps"], "updates": resumed.learner.updates,
                "iterations": int(resumed.learner.optimizer.iterations.numpy()),
                "next_source": resumed.counters["next_source"]}
    second = resumed.fit()
    return dict(run_dir=run_dir, first=summary, recorder=first, first_checkpoints=first_checkpoints,
                restored=restored, second=second)


@pytest.mark.slow
def test_a_run_writes_checkpoints_and_resume_continues_the_counts(finished_run):
    first, second, restored = finished_run["first"], finished_run["second"], finished_run["restored"]
    assert first["env_steps"] == 1000 and first["updates"] > 0
    assert finished_run["first_checkpoints"] == ["ckpt-000000500", "ckpt-000001000"]
    # the restored learner is exactly where the first run ended: counters and the optimizer's step;
    # the resumed run's actors write under source ids the first run's (0, one local actor) did not use
    assert restored == {"env_steps": 1000, "updates": first["updates"], "iterations": first["updates"],
                        "next_source": 1}
    assert second["env_steps"] == 1500 and second["updates"] > first["updates"]
    assert second["resumed_from"] == "checkpoints/ckpt-000001000"
    run_dir = finished_run["run_dir"]
    steps = [int(line.split(",")[0]) for line in (run_dir / "metrics.csv").read_text().splitlines()[1:]]
    assert steps == [500, 1000, 1500]  # one metrics file across the resume
    assert [path.name for path in list_checkpoints(run_dir)] == ["ckpt-000001000", "ckpt-000001500"]  # keep=2
    state = verify_checkpoint(run_dir / "checkpoints" / "ckpt-000001500")
    assert state["env_steps"] == 1500 and state["updates"] == second["updates"] and state["next_source"] == 2
    for name in ("config.yaml", "learning_curve.png", "weights.weights.h5", "summary.json"):
        assert (run_dir / name).is_file(), name


@pytest.mark.slow
@pytest.mark.parametrize("sampler", ["uniform", "rank"])
def test_every_sampler_trains_and_its_state_comes_back_on_resume(tmp_path, sampler):
    settings = [f"replay.sampler={sampler}", "checkpoints.save_replay=true"]
    trainer = Trainer(tiny(600, *settings), tmp_path / "run")
    assert trainer.fit()["updates"] > 0
    before = trainer.replay
    resumed = Trainer(tiny(800, *settings), tmp_path / "run", resume=True)
    after = resumed.replay
    assert after.sampler.name == sampler and len(after) == len(before) > 0
    np.testing.assert_array_equal(after.sampler.alive, before.sampler.alive)
    if sampler == "rank":  # the priorities the learner wrote, and the heap order over them
        np.testing.assert_array_equal(after.sampler.priorities, before.sampler.priorities)
        slots = np.flatnonzero(before.sampler.alive)
        np.testing.assert_array_equal(after.sampler.ranks(slots), before.sampler.ranks(slots))
        assert len(set(before.sampler.priorities[slots].tolist())) > 1


def test_callbacks_run_in_order_with_the_run_counts(finished_run):
    recorder, first = finished_run["recorder"], finished_run["first"]
    assert recorder.calls[0] == "train_begin" and recorder.calls[1] == "learner_begin@0"
    assert recorder.calls[-2:] == ["learner_end", "train_end"]
    assert [call for call in recorder.calls if call.startswith("evaluation")] == ["evaluation@500", "evaluation@1000"]
    assert recorder.steps == first["updates"] and recorder.episodes == first["episodes"] > 0
    assert recorder.summary == first


def test_the_best_evaluations_weights_are_kept_across_a_resume(finished_run):
    """best.weights.h5 replays the best evaluation exactly: the same greedy episodes (the trainer's
    evaluation seed at that env step) give the best mean, also when the best came before the resume."""
    from r2d2kit.evaluate import evaluate_run
    from r2d2kit.training.trainer import EVAL_SEED_OFFSET

    run_dir, second = finished_run["run_dir"], finished_run["second"]
    rows = list(csv.DictReader(open(run_dir / "metrics.csv")))
    best = max(rows, key=lambda row: float(row["eval_mean"]))  # the first of equal bests, as the trainer keeps
    assert second["best_weights"] == "best.weights.h5" and second["best_eval_env_steps"] == int(best["env_steps"])
    config = tiny(1500)
    replay = evaluate_run(run_dir, episodes=config.run.eval_episodes, best=True,
                          seed=config.run.seed + EVAL_SEED_OFFSET + int(best["env_steps"]))
    assert replay["weights"].endswith("best.weights.h5")
    assert replay["mean"] == pytest.approx(float(best["eval_mean"])) == pytest.approx(second["best_eval"])


def test_a_misspelled_hook_is_an_error_when_the_class_is_defined():
    with pytest.raises(TypeError, match=r"Late.on_evaluate is not a callback hook.*did you mean 'on_evaluation'"):
        class Late(Callback):  # noqa: F841
            def on_evaluate(self, trainer, row):
                pass


class StopAtUpdate(Callback):
    def __init__(self, updates: int) -> None:
        self.updates = updates

    def on_learner_step(self, learner, metrics):
        return metrics["updates"] < self.updates


@pytest.mark.slow
def test_a_hook_returning_false_ends_the_run_with_a_final_checkpoint_and_says_so(tmp_path):
    run_dir = tmp_path / "run"
    summary = Trainer(tiny(5000), run_dir, callbacks=[StopAtUpdate(10)]).fit()
    # cue_memory: 4 envs x 0.25 updates per env step = one update per loop round, so it stops at 10
    assert summary["stopped_by"] == "callback StopAtUpdate.on_learner_step" and summary["updates"] == 10
    assert summary["env_steps"] < 5000
    state = verify_checkpoint(run_dir / summary["checkpoint"])
    assert state["updates"] == 10 and state["env_steps"] == summary["env_steps"]


class SignalAtUpdate(Callback):
    """Sends this process ``signals`` at update ``update``, as `kill` or a scheduler would."""

    def __init__(self, update: int, *signals: int) -> None:
        self.update, self.signals = update, signals

    def on_learner_step(self, learner, metrics):
        if metrics["updates"] == self.update:
            for number in self.signals:
                os.kill(os.getpid(), number)


@pytest.mark.slow
def test_sigterm_ends_the_run_with_a_final_checkpoint_and_a_second_signal_aborts(tmp_path):
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    summary = Trainer(tiny(5000), tmp_path / "run", callbacks=[SignalAtUpdate(10, signal.SIGTERM)]).fit()
    assert summary["stopped_by"] == "SIGTERM" and summary["updates"] == 10  # one update per loop round
    assert verify_checkpoint(tmp_path / "run" / summary["checkpoint"])["updates"] == 10
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
    with pytest.raises(KeyboardInterrupt):
        Trainer(tiny(5000), tmp_path / "aborted", callbacks=[SignalAtUpdate(10, signal.SIGTERM, signal.SIGINT)]).fit()
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_a_stop_request_is_honoured_between_two_updates_of_one_round(tmp_path):
    """With a million updates owed per env step, Ctrl-C used to wait for the whole round to be trained."""
    class SignalOnceThenWatch(SignalAtUpdate):
        def on_learner_step(self, learner, metrics):
            assert metrics["updates"] <= self.update, "an update ran after the stop request"
            super().on_learner_step(learner, metrics)

    summary = Trainer(tiny(5000, "run.updates_per_env_step=1000000"), tmp_path / "run",
                      callbacks=[SignalOnceThenWatch(20, signal.SIGINT)]).fit()
    assert summary["stopped_by"] == "Ctrl-C" and summary["updates"] == 20
    assert verify_checkpoint(tmp_path / "run" / summary["checkpoint"])["updates"] == 20


def test_tensorboard_holds_the_promised_scalars(finished_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(finished_run["run_dir"] / "tensorboard"))
    accumulator.Reload()
    tags = set(accumulator.Tags()["tensors"]) | set(accumulator.Tags()["scalars"])
    expected = {"train/episode_return", "learner/loss", "learner/q_mean", "learner/priority_mean", "replay/sequences",
                "replay/steps", "actors/env_steps_per_s", "learner/updates_per_s", "eval/return_mean"}
    assert expected <= tags, sorted(tags)


def test_health_csv_has_a_row_per_log_interval_across_a_resume(finished_run):
    from r2d2kit.training.run_log import HEALTH_FIELDS, read_rows

    run_dir = finished_run["run_dir"]
    with open(run_dir / "health.csv", newline="") as handle:
        assert tuple(next(csv.reader(handle))) == HEALTH_FIELDS
    rows = read_rows(run_dir / "health.csv")
    assert [row["env_steps"] for row in rows] == sorted(row["env_steps"] for row in rows)
    assert rows[-1]["env_steps"] >= 1500 - 4 and len(rows) >= 1500 // 250 - 1  # both runs' intervals
    learning = [row for row in rows if row["updates"] > 0]
    assert len(learning) >= 4
    config = tiny(1500)
    most_rows = config.run.updates_per_env_step * config.learner.batch_size * config.replay.trace_length
    for row in learning[1:]:  # the first interval with updates started mid-way
        for name in ("learner/gradient_norm", "learner/td_p90", "replay/is_weight_min", "health/priority_spread",
                     "health/dead_relu_share", "health/gate_saturation", "health/cost_share",
                     "health/return_known_share"):
            assert np.isfinite(row[name]), (name, row)
        assert 0.0 < row["replay/replay_ratio"] <= 1.5 * most_rows
        assert 0.0 <= row["learner/clipped_share"] <= 1.0
        assert row["learner/td_p50"] <= row["learner/td_p90"] <= row["learner/td_max"]
    assert (run_dir / "health.png").is_file()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(run_dir / "tensorboard"))
    accumulator.Reload()
    tags = set(accumulator.Tags()["tensors"]) | set(accumulator.Tags()["scalars"])
    assert {"health/dead_relu_share", "learner/gradient_norm", "replay/replay_ratio"} <= tags


def test_the_health_command_draws_runs_side_by_side_and_names_bad_input(finished_run, tmp_path, capsys):
    from r2d2kit.health import main as health_main

    run_dir = finished_run["run_dir"]
    out = tmp_path / "both.png"
    assert health_main([str(run_dir), str(run_dir), "--out", str(out), "--labels", "a", "b"]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert health_main([str(tmp_path)]) == 2
    assert f"no health.csv in {tmp_path}" in capsys.readouterr().err
    assert health_main([str(run_dir), "--labels", "a", "b"]) == 2
    assert "2 labels for 1 runs" in capsys.readouterr().err


def test_diagnostics_leave_training_as_it_was_and_off_measure_no_health(tmp_path):
    """Same seed, local runner: the losses and evaluations with the health checks on and off are identical."""
    with_health = Trainer(tiny(1000), tmp_path / "on")
    with_health.fit()
    without = Trainer(tiny(1000, "logging.diagnostics=false"), tmp_path / "off")
    without.fit()
    on = list(csv.DictReader(open(tmp_path / "on" / "metrics.csv")))
    off = list(csv.DictReader(open(tmp_path / "off" / "metrics.csv")))
    assert [(row["loss"], row["eval_mean"]) for row in on] == [(row["loss"], row["eval_mean"]) for row in off]
    for mine, theirs in zip(with_health.learner.online.variables, without.learner.online.variables, strict=True):
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
    rows = list(csv.DictReader(open(tmp_path / "off" / "health.csv")))
    assert rows and all(row["health/dead_relu_share"] == "" for row in rows)
    assert all(row["learner/gradient_norm"] != "" for row in rows if float(row["updates"]) > 0)
    measured = [row for row in csv.DictReader(open(tmp_path / "on" / "health.csv")) if float(row["updates"]) > 0]
    assert measured and all(row["health/dead_relu_share"] != "" for row in measured)


def test_resume_of_a_corrupted_checkpoint_names_the_file(finished_run, tmp_path, capsys):
    import shutil

    run_dir = tmp_path / "copy"
    shutil.copytree(finished_run["run_dir"], run_dir)
    newest = list_checkpoints(run_dir)[-1]
    weights = newest / "online.weights.h5"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))
    assert train_main(["--resume", str(run_dir)]) == 2
    error = capsys.readouterr().err
    assert f"checkpoint {newest}: online.weights.h5 is corrupted" in error and "delete" in error
    with pytest.raises(CheckpointError, match="is corrupted"):
        Trainer(tiny(2000), run_dir, resume=True)


def test_resume_needs_a_checkpoint_and_a_fresh_run_refuses_an_old_directory(finished_run, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.yaml").write_text(CUE.read_text())
    assert train_main(["--resume", str(empty)]) == 2
    assert "no checkpoint under" in capsys.readouterr().err
    assert train_main([str(CUE), "--run-dir", str(finished_run["run_dir"])]) == 2
    assert "already holds a run; continue it with --resume" in capsys.readouterr().err


@pytest.mark.parametrize("override, message", [
    ("actors.runner=gpu", r"runner must be one of \['local', 'processes', 'ray'\], got 'gpu'"),
    ("actors.num_actors=0", r"num_actors must be >= 1, got 0"),
    ("actors.num_actor=2", r"unknown key actors\.num_actor; did you mean 'num_actors'"),
    ("checkpoints.keep=0", r"keep >= 1"),
    ("model.input_scale=fast", r"model\.input_scale must be float or list or NoneType, got 'fast'"),
])
def test_bad_runner_settings_produce_the_promised_messages(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(CUE, [override])


@pytest.mark.slow
@pytest.mark.parametrize("number, reason", [(signal.SIGINT, "Ctrl-C"), (signal.SIGTERM, "SIGTERM")])
def test_a_stop_signal_ends_a_process_run_cleanly_with_a_final_checkpoint(tmp_path, number, reason):
    """SIGINT (Ctrl-C) or SIGTERM (`timeout`, `kill`) to the process group of `python -m r2d2kit.train` with
    actor processes: exit 0, checkpoint, nothing in /dev/shm."""
    run_dir, actor_logs = tmp_path / "run", tmp_path / "actors"
    actor_logs.mkdir()
    process = subprocess.Popen(
        [sys.executable, "-m", "r2d2kit.train", str(CUE), "--run-dir", str(run_dir), "--set", "actors.runner=processes",
         "--set", "run.total_env_steps=10000000", "--set", "run.warmup_steps=200", "--set", "run.eval_every=500",
         "--set", "run.eval_episodes=8", "--set", "logging.progress=false", "--set", "logging.tensorboard=false"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while not (run_dir / "metrics.csv").exists() and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.5)
        assert (run_dir / "metrics.csv").exists(), "no evaluation within 240 s"
        ours = mapped_segments(process.pid)
        assert len(ours) == 3 and ours <= shm_segments()  # the weight broadcast and two actor rings
        os.killpg(process.pid, number)  # the learner and its actors, as a terminal or `timeout` signals them
        stdout, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr[-3000:]
    assert f"stopping on {reason}: finishing the current step and writing a final checkpoint" in stderr
    assert "restart" not in stderr  # no actor died of the signal
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stopped_by"] == reason and summary["runner"] == "processes" and summary["actor_restarts"] == 0
    state = verify_checkpoint(run_dir / summary["checkpoint"])
    assert state["env_steps"] == summary["env_steps"] >= 500
    assert not ours & shm_segments()  # every segment of the run was unlinked


@pytest.mark.slow
def test_actor_callbacks_run_inside_the_actor_processes(tmp_path):
    recorder = Recorder(str(tmp_path))
    summary = Trainer(tiny(1200, "actors.runner=processes", "run.eval_every=0"), tmp_path / "run",
                      callbacks=[recorder]).fit()
    logs = sorted(tmp_path.glob("actor-*.log"))
    assert {path.name.split("-")[1] for path in logs} == {"0", "1"}  # both actors, in their own processes
    assert all(int(path.stem.split("-")[2]) != os.getpid() for path in logs)
    lines = [path.read_text().splitlines() for path in logs]
    assert all(entries[0] == "begin" and entries[-1] == "end" for entries in lines)
    episodes = [json.loads(line) for entries in lines for line in entries[1:-1]]
    assert recorder.episodes == 0  # none of the actor hooks ran in the learner process
    assert episodes and all(length == 8 and reward in (-1.0, 1.0) for reward, length in episodes)  # delay 6 + 2
    assert summary["episodes"] <= len(episodes)  # the learner heard of no episode the actors did not report
    assert np.isfinite(summary["train_seconds"])


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
def test_actors_exit_by_themselves_when_the_learner_is_killed(tmp_path):
    """SIGKILL the learner: its actors notice and leave, and no segment outlives the run."""
    run_dir = tmp_path / "run"
    learner = subprocess.Popen(
        [sys.executable, "-m", "r2d2kit.train", str(CUE), "--run-dir", str(run_dir), "--set", "actors.runner=processes",
         "--set", "run.total_env_steps=10000000", "--set", "run.warmup_steps=200", "--set", "run.eval_every=500",
         "--set", "run.eval_episodes=8", "--set", "logging.progress=false", "--set", "logging.tensorboard=false"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while not (run_dir / "metrics.csv").exists() and time.monotonic() < deadline and learner.poll() is None:
            time.sleep(0.5)
        assert (run_dir / "metrics.csv").exists(), "no evaluation within 240 s"
        actors = [pid for pid in _children(learner.pid) if "spawn_main" in Path(f"/proc/{pid}/cmdline").read_text()]
        ours = mapped_segments(learner.pid)
        assert len(actors) == 2 and len(ours) == 3
        learner.kill()
        learner.wait(timeout=30)
        deadline = time.monotonic() + 60
        while any(_alive(pid) for pid in actors) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_alive(pid) for pid in actors), "actors outlived their learner"
        # the learner could not unlink its segments; the resource tracker it started does so when it dies
        while ours & shm_segments() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not ours & shm_segments()
    finally:
        if learner.poll() is None:
            learner.kill()


def copy_run(finished_run, tmp_path) -> Path:
    import shutil

    run_dir = tmp_path / "copy"
    shutil.copytree(finished_run["run_dir"], run_dir)
    return run_dir


def rewrite_manifest(checkpoint: Path) -> None:
    """Make the manifest match altered files again, as an attacker or a bad copy tool could."""
    import hashlib

    manifest = json.loads((checkpoint / "MANIFEST.json").read_text())
    for name in manifest["files"]:
        data = (checkpoint / name).read_bytes()
        manifest["files"][name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (checkpoint / "MANIFEST.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("name", ["summary.json", "weights.weights.h5", "metrics.csv", "config.yaml", "checkpoints"])
def test_a_link_out_of_the_run_is_never_followed(finished_run, tmp_path, capsys, name):
    """A run file linked to a file elsewhere used to have --resume overwrite that file."""
    import shutil

    run_dir = copy_run(finished_run, tmp_path)
    victim = tmp_path / "elsewhere" / name
    victim.parent.mkdir()
    shutil.move(run_dir / name, victim)
    (run_dir / name).symlink_to(victim)
    before = {path: path.read_bytes() for path in [victim, *victim.rglob("*")] if path.is_file()}
    assert train_main(["--resume", str(run_dir), "--set", "run.total_env_steps=2000"]) == 2
    error = capsys.readouterr().err
    assert f"run directory error: {run_dir / name} is a symbolic link to {victim}, outside the run directory" in error
    assert {path: path.read_bytes() for path in before} == before


def test_a_checkpoint_linked_in_from_elsewhere_is_ignored_and_refused(finished_run, tmp_path):
    import shutil

    run_dir = copy_run(finished_run, tmp_path)
    newest = list_checkpoints(run_dir)[-1]
    outside = tmp_path / "ckpt-999999999"
    shutil.copytree(newest, outside)
    (run_dir / "checkpoints" / outside.name).symlink_to(outside)
    assert list_checkpoints(run_dir)[-1] == newest
    with pytest.raises(CheckpointError, match="is a symbolic link"):
        verify_checkpoint(run_dir / "checkpoints" / outside.name)
    (newest / "state.json").unlink()
    (newest / "state.json").symlink_to(outside / "state.json")
    with pytest.raises(CheckpointError, match=r"state\.json is a symbolic link"):
        verify_checkpoint(newest)


@pytest.mark.parametrize("name, content, message", [
    ("online.weights.h5", b"not hdf5 at all", r"online\.weights\.h5 is not a readable weights file"),
    ("optimizer.npz", "object", r"optimizer\.npz is not an optimizer state r2d2kit wrote"),
    ("optimizer.npz", "text", r"optimizer state .* does not fit this optimizer"),
    ("state.json", b"{not json", r"state\.json is not JSON"),
    ("state.json", b"[1, 2]", r"state\.json holds list, not the run's counters"),
])
def test_bad_contents_behind_a_matching_manifest_are_named(finished_run, tmp_path, capsys, name, content, message):
    """Checkpoint files that pass the manifest used to escape as raw h5py, numpy and json tracebacks."""
    run_dir = copy_run(finished_run, tmp_path)
    newest = list_checkpoints(run_dir)[-1]
    if content in ("object", "text"):
        with np.load(newest / name) as saved:
            arrays = {key: saved[key] for key in saved.files}
        first = sorted(arrays)[0]
        arrays[first] = np.array([{"a": 1}], dtype=object) if content == "object" else np.array(["x"] * 3)
        np.savez(newest / name, **arrays)
    else:
        (newest / name).write_bytes(content)
    rewrite_manifest(newest)
    assert train_main(["--resume", str(run_dir), "--set", "run.total_env_steps=2000"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("checkpoint error: ") and "Traceback" not in error
    assert re.search(message, error), error


def test_a_resume_onto_another_env_is_refused(finished_run, tmp_path, capsys):
    """Another env with the same spaces used to continue silently and rewrite the run's config."""
    import gymnasium

    if "CueMemoryTwin-v0" not in gymnasium.envs.registry:
        gymnasium.register("CueMemoryTwin-v0", entry_point=gymnasium.spec("CueMemory-v0").entry_point)
    run_dir = copy_run(finished_run, tmp_path)
    config_before = (run_dir / "config.yaml").read_text()
    assert train_main(["--resume", str(run_dir), "--set", "env.id=CueMemoryTwin-v0"]) == 2
    error = capsys.readouterr().err
    assert "was trained on 'CueMemory-v0', not 'CueMemoryTwin-v0'" in error
    assert (run_dir / "config.yaml").read_text() == config_before


@pytest.mark.parametrize("encoder, message", [
    ("trainer_helpers:EncoderNeedingArguments", r"cannot be built without arguments .*give every constructor "
                                                r"argument a default"),
    ("trainer_helpers:ConvolutionOnVectors", r"failed on env\.id 'CueMemory-v0'.s observations \(shape \(\d+,\), "
                                             r"float32\): ValueError: .*a convolution needs an image"),
])
def test_a_users_encoder_that_cannot_be_built_is_named_and_leaves_no_run_directory(tmp_path, capsys, encoder,
                                                                                   message):
    """It used to escape as a raw traceback (exit 1) and leave an empty run directory."""
    run_dir = tmp_path / "run"
    assert train_main([str(CUE), "--run-dir", str(run_dir), "--set", f"model.encoder={encoder}"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("config error: model.encoder ") and "Traceback" not in error
    assert re.search(message, error), error
    assert not run_dir.exists()


@pytest.mark.parametrize("core, message", [
    ("no_such_module:make", r"^config error: model\.core 'no_such_module:make' cannot be imported: No module named"),
    ("trainer_helpers:not_there", r"^config error: model\.core 'trainer_helpers:not_there' cannot be imported"),
    ("trainer_helpers:core_returning_a_dense_layer", r"^config error: model\.core .* failed on env\.id "
                                                     r"'CueMemory-v0'.s observations .*not a Keras RNN cell"),
    ("trainer_helpers:cell_with_a_wrong_state_size", r"^config error: model\.core .* failed on env\.id "
                                                     r".*one step of its cell failed .*one tensor per state_size entry "
                                                     r"\[\(32,\), \(3,\)\]"),
])
def test_a_users_core_that_cannot_be_built_is_named_and_leaves_no_run_directory(tmp_path, capsys, core, message):
    run_dir = tmp_path / "run"
    assert train_main([str(CUE), "--run-dir", str(run_dir), "--set", f"model.core={core}"]) == 2
    error = capsys.readouterr().err
    assert "Traceback" not in error and re.search(message, error), error
    assert not run_dir.exists()


@pytest.mark.parametrize("her", [False, True])
def test_building_a_run_enters_the_builders_once_and_makes_one_env(tmp_path, her):
    """``Trainer.__init__`` turns the config into its parts with one call into ``training/builders.py``
    (``build_run``), which makes one env to read the spaces, also the goal env under ``replay.her``."""
    import r2d2kit.training.builders as builders

    builders_file = builders.__file__
    entries, envs = [], []

    def profile(frame, event, _arg):
        if event == "call" and frame.f_code.co_filename == builders_file:
            caller = frame.f_back.f_code.co_filename if frame.f_back else ""
            if caller != builders_file:
                entries.append(frame.f_code.co_name)
            if frame.f_code.co_name == "make_env":
                envs.append(caller)

    if her:
        config = load_config(ROOT / "configs" / "point_goal_her.yaml", TINY + ["run.total_env_steps=200"])
    else:
        config = tiny(200)
    sys.setprofile(profile)
    try:
        trainer = Trainer(config, tmp_path / "run")
    finally:
        sys.setprofile(None)
    assert entries == ["build_run"] and len(envs) == 1
    assert (trainer.goal is not None) == her
    if her:
        assert trainer.goal.env is not None and trainer.goal.compute_reward is not None
        trainer.goal.close()


def test_env_kwargs_the_env_does_not_take_are_a_config_error(tmp_path):
    config = load_config(CUE, ["env.kwargs={speed: 3}", "logging.progress=false"])
    with pytest.raises(ConfigError, match=r"env.kwargs \{'speed': 3\} do not fit env.id 'CueMemory-v0'.*speed"):
        Trainer(config, tmp_path / "run")
