"""Multi-process runner, driven by the trainer as users run it: windows arrive from every actor,
weights advance, a killed actor is restarted under a new source id (its windows never join its
predecessor's rows), and nothing is left in /dev/shm."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

from r2d2kit.runners.callbacks import Callback
from r2d2kit.runners.pool import ActorPool
from r2d2kit.runners.shm import PREFIX
from r2d2kit.training.config import build_config
from r2d2kit.training.trainer import Trainer

pytestmark = pytest.mark.slow  # every test here trains, spawns processes or starts Ray

SMALL = {"model": {"hidden": [16], "core_units": 16, "head_units": 16},
         "replay": {"burn_in": 1, "trace_length": 6, "period": 6, "n_step": 1},
         "learner": {"gamma": 0.9, "batch_size": 16,
                     "target_update_period": 50, "learning_rate": 1e-3, "adam_epsilon": 1e-6},
         "logging": {"progress": False, "tensorboard": False}, "checkpoints": {"every_env_steps": 0}}


def our_segments():
    return [name for name in os.listdir("/dev/shm") if name.startswith(PREFIX)]


def two_actors_on_cue_memory(total_env_steps: int, updates_per_env_step: float):
    """2 actor processes x 2 CueMemory envs, no evaluation: the runs the actor fault tests disturb."""
    return build_config({**SMALL, "env": {"id": "CueMemory-v0", "num_envs": 2, "kwargs": {"delay": 3}},
                         "replay": {**SMALL["replay"], "capacity": 5_000},
                         "actors": {"runner": "processes", "num_actors": 2, "publish_every": 5, "ring_capacity": 16},
                         "run": {"total_env_steps": total_env_steps, "warmup_steps": 200,
                                 "updates_per_env_step": updates_per_env_step, "eval_every": 0}})


class SignalActorOnce(Callback):
    """Send ``signals`` (default SIGKILL) to actor 1's process alone once it has delivered
    ``after_windows`` windows; with ``stop_after``, stop the run once actor 1 has delivered that many more."""

    def __init__(self, after_windows: int, signals=(signal.SIGKILL,), stop_after: int | None = None) -> None:
        self.after_windows, self.signals, self.stop_after = after_windows, signals, stop_after
        self.sent: dict | None = None

    def on_step(self, trainer):
        pool = trainer.actors
        if self.sent is not None and self.stop_after is not None:
            return pool.windows_per_actor[1] < self.sent["windows"] + self.stop_after
        if self.sent is None and pool.windows_per_actor.get(1, 0) >= self.after_windows:
            pid = pool.actor_pids()[1]
            for number in self.signals:
                os.kill(pid, number)
            self.sent = {"pid": pid, "updates": trainer.counters["updates"], "segments": pool.segment_names,
                         "windows": pool.windows_per_actor[1]}


def test_actors_feed_the_learner_and_a_killed_actor_is_restarted(tmp_path):
    """The run stops once actor 1 has delivered 20 more windows, more than its ring (16) held when it was killed,
    so some came from the restarted process (on a loaded machine a restart, after its back-off, can take longer
    than the other actor needs for a fixed budget)."""
    config = two_actors_on_cue_memory(total_env_steps=200_000, updates_per_env_step=0.1)
    killer = SignalActorOnce(after_windows=20, stop_after=20)
    trainer = Trainer(config, tmp_path / "run", callbacks=[killer])
    summary = trainer.fit()
    pool = trainer.actors
    assert isinstance(pool, ActorPool)
    assert killer.sent, "the run ended before actor 1 could be killed"
    assert summary["stopped_by"].startswith("callback"), summary["stopped_by"]
    assert summary["actor_restarts"] >= 1 and pool.actor_pids()[1] != killer.sent["pid"]
    assert summary["updates"] > killer.sent["updates"] + 20  # the learner went on
    assert pool.windows_per_actor[1] > killer.sent["windows"]  # the restarted actor delivers again
    assert pool.weight_versions_seen[0] > 1, pool.weight_versions_seen  # actors act on published weights
    assert len(killer.sent["segments"]) == 3 and not set(killer.sent["segments"]) & set(our_segments())


def test_actors_ignore_the_stop_signals_and_leave_stopping_to_the_learner(tmp_path):
    config = two_actors_on_cue_memory(total_env_steps=2_000, updates_per_env_step=0.05)
    # SIGTERM and SIGINT to the actor alone, as a terminal's Ctrl-C or `timeout` reach every process of the group
    signaller = SignalActorOnce(after_windows=10, signals=(signal.SIGTERM, signal.SIGINT))
    trainer = Trainer(config, tmp_path / "run", callbacks=[signaller])
    summary = trainer.fit()
    pool = trainer.actors
    assert signaller.sent, "the run ended before actor 1 could be signalled"
    assert summary["actor_restarts"] == 0 and summary["stopped_by"] == "run.total_env_steps", summary
    assert pool.actor_pids()[1] == signaller.sent["pid"]  # the same process went on
    assert pool.windows_per_actor[1] > signaller.sent["windows"] + 5


def test_a_restarted_actor_never_extends_its_predecessors_windows(tmp_path):
    """Killed two windows into its first (100,000-step) episode, actor 1 restarts and cuts episode 0
    of its env again. Every sampled window must hold the rows of one incarnation (one reset seed),
    at consecutive steps. Before incarnations had their own source ids, replay joined the new
    incarnation's first 221-row window onto the rows of the dead one's last window (which started
    100 or 200 steps into the episode, inside the new window's span)."""
    config = build_config({**SMALL, "env": {"id": "tests.runners.long_episode_env:LongEpisode-v0", "num_envs": 1},
                           "model": {**SMALL["model"], "input_scale": [1e-4, 1e-4]},
                           "replay": {**SMALL["replay"], "burn_in": 20, "trace_length": 200, "period": 100,
                                      "capacity": 1_000_000},  # nothing overwritten
                           "actors": {"runner": "processes", "num_actors": 2, "ring_capacity": 2},
                           "run": {"total_env_steps": 200_000, "warmup_steps": 1_000_000, "eval_every": 0}})
    killer = SignalActorOnce(after_windows=2, stop_after=3)
    trainer = Trainer(config, tmp_path / "run", callbacks=[killer])
    summary = trainer.fit()
    assert killer.sent and trainer.actors.restarts == 1
    assert summary["stopped_by"] == "callback SignalActorOnce.on_step"
    batch = trainer.replay.sample(4_096)
    obs, valid = batch["obs"], batch["obs_mask"].astype(bool)  # [B, L, 2], [B, L]
    tokens = set()
    for rows, keep in zip(obs, valid):
        token, t = rows[keep, 0], rows[keep, 1]
        assert np.all(token == token[0]), f"a window mixes incarnations (reset seeds {np.unique(token)})"
        np.testing.assert_array_equal(np.diff(t), 1.0)
        tokens.add(float(token[0]))
    # actor 0 and both incarnations of actor 1: reset seeds 0, 1000 and 1001 (one restart)
    assert {0.0, 1000.0, 1001.0} <= tokens, tokens


def test_actors_that_stop_delivering_while_alive_are_an_error_not_a_hang():
    """Every actor stuck in env.step (alive, silent): collect() raises after stall_timeout, naming the pids."""
    import functools

    from r2d2kit.agent.r2d2 import QNetwork
    from r2d2kit.agent.r2d2.policies import EpsilonGreedyFactory, EpsilonSchedule
    from r2d2kit.agent.seam import WindowFields, WindowLayout
    from r2d2kit.models import MLPModel
    from r2d2kit.runners.pool import Incarnations
    from r2d2kit.runners.processes import ProcessActors
    from tests.runners.shm_workers import HangingCueMemory

    make_network = functools.partial(QNetwork, (2,), 2, MLPModel((16,)), core_units=16, head_units=16)
    layout = WindowLayout(burn_in=1, trace_length=6, period=6, n_step=1)
    start = time.monotonic()
    network = make_network()
    fields = WindowFields((2,), "float32", (), "int64", network.state_spec())
    policies = EpsilonGreedyFactory(make_network, EpsilonSchedule(np.array([0.1])), 1)
    with ProcessActors(HangingCueMemory, policies, layout, fields=fields, variables=network.variables, num_actors=1,
                       incarnations=Incarnations(), stall_timeout=20.0) as actors:
        with pytest.raises(RuntimeError, match=r"no env steps or windows from any of the 1 actor processes .*py-spy"):
            while time.monotonic() - start < 120:
                actors.collect()
                time.sleep(0.05)
        assert 20.0 <= time.monotonic() - start < 40.0
        segments = actors.segment_names
    assert not set(segments) & set(our_segments())
