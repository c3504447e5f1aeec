"""Multi-process runner: windows arrive from every actor, weights advance, a killed actor is
restarted, and nothing is left in /dev/shm."""

import functools
import os
import signal

from r2d2kit.agent.learner import R2D2Config
from r2d2kit.envs.memory import CueMemoryEnv
from r2d2kit.models import MLPModel, QNetwork
from r2d2kit.runners.processes import ProcessRunConfig, train_processes
from r2d2kit.runners.shm import PREFIX

CONFIG = R2D2Config(burn_in=1, trace_length=6, period=6, n_step=1, gamma=0.9, batch_size=16,
                    target_update_period=50, learning_rate=1e-3, adam_epsilon=1e-6)
MAKE_NETWORK = functools.partial(QNetwork, (2,), 2, MLPModel((16,)), lstm_units=16, head_units=16)
MAKE_ENV = functools.partial(CueMemoryEnv, delay=3)


def our_segments():
    return [name for name in os.listdir("/dev/shm") if name.startswith(PREFIX)]


def test_actors_feed_the_learner_and_a_killed_actor_is_restarted():
    killed, updates_at_kill = [], []

    def kill_actor_once(progress):
        if not killed and progress.windows_per_actor.get(1, 0) >= 20:
            os.kill(progress.actor_pids[1], signal.SIGKILL)
            killed.append(progress.actor_pids[1])
            updates_at_kill.append(progress.updates)

    run = ProcessRunConfig(total_env_steps=4_000, num_actors=2, envs_per_actor=2, replay_capacity=5_000,
                           warmup_steps=200, updates_per_env_step=0.1, publish_every=5, ring_capacity=16, seed=0)
    result = train_processes(MAKE_NETWORK, MAKE_ENV, CONFIG, run, on_progress=kill_actor_once)
    assert killed, "the run ended before actor 1 could be killed"
    assert result.restarts >= 1 and result.actor_pids[1] != killed[0]
    assert result.env_steps >= 4_000 and result.updates > updates_at_kill[0] + 20  # the learner went on
    assert all(result.windows_per_actor.get(actor, 0) > 0 for actor in (0, 1))
    assert result.weight_versions_seen[0] > 1, result.weight_versions_seen  # actors act on published weights
    assert len(result.segments) == 3 and not set(result.segments) & set(our_segments())  # all unlinked


def test_actors_that_stop_delivering_while_alive_are_an_error_not_a_hang():
    """Every actor stuck in env.step (alive, silent): collect() raises after stall_timeout, naming the pids."""
    import time

    import numpy as np
    import pytest

    from r2d2kit.runners.processes import ProcessActors
    from tests.runners.shm_workers import HangingCueMemory

    network = MAKE_NETWORK()
    start = time.monotonic()
    with ProcessActors(MAKE_NETWORK, HangingCueMemory, CONFIG, network, num_actors=1, envs_per_actor=1,
                       epsilons=np.array([0.1]), stall_timeout=20.0) as actors:
        with pytest.raises(RuntimeError, match=r"no env steps or windows from any of the 1 actor processes .*py-spy"):
            while time.monotonic() - start < 120:
                actors.collect()
                time.sleep(0.05)
        assert 20.0 <= time.monotonic() - start < 40.0
        segments = actors.segment_names
    assert not set(segments) & set(our_segments())
