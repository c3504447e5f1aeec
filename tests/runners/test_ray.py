"""Ray runner on a local Ray instance: sequences arrive from every actor, weights advance, a killed
actor process is restarted by Ray and training goes on (one run checks all of it: each Ray start costs CI
tens of seconds)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from r2d2kit.runners.callbacks import Callback
from r2d2kit.runners.pool import ActorPool
from r2d2kit.training.config import load_config
from r2d2kit.training.trainer import Trainer

pytestmark = pytest.mark.slow  # every test here trains, spawns processes or starts Ray

ray = pytest.importorskip("ray", reason="the ray extra is part of the test extras; install r2d2kit[test]")

ROOT = Path(__file__).resolve().parents[2]
TINY = ["actors.runner=ray", "actors.num_actors=2", "actors.steps_per_batch=25", "actors.publish_every=5",
        "run.warmup_steps=200", "run.eval_every=0", "logging.progress=false", "logging.tensorboard=false",
        "checkpoints.every_env_steps=0"]


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    yield
    ray.shutdown()


class KillActorTwice(Callback):
    """SIGKILL Ray actor 1's process after the 30th update, then the process Ray starts in its place as soon as
    Ray's actor table names it; end the run once the restarted actor has delivered again and the learner has gone
    50 updates on (under load Ray's restart can outlast a fixed step budget)."""

    def __init__(self, trainer_box: list) -> None:
        self.box = trainer_box
        self.killed_at: dict | None = None
        self.restarted_at: dict | None = None

    def on_learner_step(self, learner, metrics):
        pool = self.box[0].actors
        if self.killed_at is None and metrics["updates"] == 30:
            pid = pool.actor_pids()[1]
            self.killed_at = {"updates": metrics["updates"], "windows": pool.windows_per_actor.get(1, 0), "pid": pid}
            os.kill(pid, signal.SIGKILL)
            os.kill(next_process_of(pool._actors[1], pid), signal.SIGKILL)
            return None
        if self.killed_at is None or pool.restarts == 0:
            return None
        if self.restarted_at is None:  # windows in flight at the kill may still arrive before the pool sees it
            self.restarted_at = {"windows": pool.windows_per_actor.get(1, 0)}
        delivered_again = pool.windows_per_actor[1] > self.restarted_at["windows"]
        if delivered_again and metrics["updates"] > self.killed_at["updates"] + 50:
            return False
        return None


def test_ray_actors_deliver_act_on_new_weights_and_a_killed_one_is_restarted(local_ray, tmp_path):
    """Both Ray actors deliver and act on published weights; a SIGKILL of actor 1's process, then of the process
    Ray starts in its place before it answers any request: each kill counted once, the restarted actor delivers
    again, the learner goes on, and the pool leaves alone the Ray instance it did not start."""
    box: list = []
    killer = KillActorTwice(box)
    trainer = Trainer(load_config(ROOT / "configs" / "cue_memory.yaml", TINY + ["run.total_env_steps=40000"]),
                      tmp_path, callbacks=[killer])
    box.append(trainer)
    summary = trainer.fit()
    assert killer.killed_at is not None, "the run ended before the kill"
    pool = trainer.actors
    assert summary["actor_restarts"] == pool.restarts == 2
    assert summary["updates"] > killer.killed_at["updates"] + 50  # the learner went on
    assert killer.restarted_at is not None
    assert pool.windows_per_actor[1] > killer.restarted_at["windows"]  # the restarted actor delivers again
    assert summary["stopped_by"] == "callback KillActorTwice.on_learner_step", summary["stopped_by"]
    assert isinstance(pool, ActorPool) and summary["runner"] == "ray"
    assert set(pool.windows_per_actor) == {0, 1} and min(pool.windows_per_actor.values()) > 0
    assert pool.weights_version > 5 and min(pool.weight_versions_seen.values()) > 0  # actors acted on new weights
    assert ray.is_initialized()  # the pool did not shut down an instance it did not start


def next_process_of(handle, dead_pid: int, timeout_s: float = 60.0) -> int:
    """The pid of the process Ray starts for ``handle``'s actor after ``dead_pid`` died (from Ray's actor table)."""
    from ray._private import state

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pid = state.actors(handle._actor_id.hex())["Pid"]
        if pid and pid != dead_pid:
            return pid
        time.sleep(0.02)
    raise AssertionError(f"Ray started no process in place of {dead_pid} within {timeout_s:g} s")
