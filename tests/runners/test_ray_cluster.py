"""The Ray pool beyond one node: a two-node cluster on this machine (``ray.cluster_utils.Cluster``),
a head without CPUs for actors, so every actor is placed on the second node; windows arrive from
each actor, and an actor killed there is restarted and delivers again."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from r2d2kit.runners.callbacks import Callback
from r2d2kit.training.config import load_config
from r2d2kit.training.trainer import Trainer

pytestmark = pytest.mark.slow  # every test here trains, spawns processes or starts Ray

ray = pytest.importorskip("ray", reason="the ray extra is part of the test extras; install r2d2kit[test]")
cluster_utils = pytest.importorskip("ray.cluster_utils")

ROOT = Path(__file__).resolve().parents[2]


class KillOnSecondNode(Callback):
    """Note where the actors run, then SIGKILL actor 1 after the 20th update; stop once its next
    incarnation (after the pool saw the failure) has delivered windows."""

    def __init__(self, box: list) -> None:
        self.box = box
        self.nodes: dict[int, str] = {}
        self.killed: dict | None = None
        self.windows_at_restart: int | None = None

    def on_learner_step(self, learner, metrics):
        pool = self.box[0].actors
        if self.killed is None and metrics["updates"] == 20:
            self.nodes = pool.actor_nodes()
            pid = pool.actor_pids()[1]
            self.killed = {"pid": pid, "windows": pool.windows_per_actor.get(1, 0)}
            os.kill(pid, signal.SIGKILL)
        if self.killed is not None and pool.restarts and self.windows_at_restart is None:
            self.windows_at_restart = pool.windows_per_actor[1]
        if self.windows_at_restart is not None:
            return pool.windows_per_actor[1] == self.windows_at_restart
        return None


def test_actors_on_a_second_node_deliver_and_a_killed_one_restarts(tmp_path):
    cluster = cluster_utils.Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    worker = cluster.add_node(num_cpus=2)
    try:
        cluster.wait_for_nodes()
        config = load_config(ROOT / "configs" / "cue_memory.yaml", [
            "actors.runner=ray", "actors.num_actors=2", "actors.steps_per_batch=25", "actors.publish_every=5",
            f"actors.ray_address={cluster.address}", "run.warmup_steps=200", "run.eval_every=0",
            "run.total_env_steps=200000", "logging.progress=false", "logging.tensorboard=false",
            "checkpoints.every_env_steps=0"])
        box: list = []
        killer = KillOnSecondNode(box)
        trainer = Trainer(config, tmp_path / "run", callbacks=[killer])
        box.append(trainer)
        summary = trainer.fit()
    finally:
        ray.shutdown()
        cluster.shutdown()
    assert killer.killed is not None, "the run ended before the kill"
    assert set(killer.nodes.values()) == {worker.node_id}  # both actors on the second node
    pool = trainer.actors
    assert summary["actor_restarts"] == 1 and summary["stopped_by"] == "callback KillOnSecondNode.on_learner_step"
    assert min(pool.windows_per_actor.values()) > 0
    assert pool.windows_per_actor[1] > killer.windows_at_restart  # the restarted actor delivers again
    assert pool.incarnations.next_source == 3  # two first starts and one restart, each its own source
