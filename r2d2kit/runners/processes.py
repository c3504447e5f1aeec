"""Multi-process R2D2: N actor processes feed one learner through shared memory.

    learner process                                   actor process i (spawned, 1 TF thread)
    ---------------                                   ---------------------------------------
    WeightBroadcast.publish(weights) --------------->  read when the version changes
    SequenceReplayBuffer <- drain RecordRing i <-----  vector env -> stateful actor -> SequenceBuilder
    train, update priorities                           -> ring.put(window) (waits when full)
    stats queue <------------------------------------  episode returns, env steps (small, pickled)

Faults: an actor that dies is restarted with the same ring; actors stop by themselves when the
learner's process disappears; every segment is created and unlinked by the learner (``with``
blocks), so Ctrl-C or an exception leaves nothing in ``/dev/shm``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from r2d2kit.runners.shm import RecordLayout, RecordRing, WeightBroadcast, stack_records, window_layout


def flatten_weights(variables) -> np.ndarray:
    """All variables as one float32 vector (the broadcast payload)."""
    return np.concatenate([np.asarray(v.numpy(), np.float32).ravel() for v in variables])


def assign_flat_weights(variables, vector: np.ndarray) -> None:
    """Inverse of :func:`flatten_weights`."""
    offset = 0
    for variable in variables:
        size = int(np.prod(variable.shape))
        variable.assign(vector[offset:offset + size].reshape(variable.shape))
        offset += size
    if offset != vector.size:
        raise ValueError(f"weight vector has {vector.size} values, the network {offset}")


@dataclass
class ActorSpec:
    """Everything an actor process needs, picklable (no TensorFlow objects)."""

    actor_id: int
    make_network: Callable[[], Any]  # returns a QNetwork; a module-level function or functools.partial
    make_env: Callable[[], Any]
    num_envs: int
    epsilons: np.ndarray
    burn_in: int
    trace_length: int
    n_step: int
    period: int
    weights_name: str
    weights_size: int
    ring_name: str
    layout: RecordLayout
    ring_capacity: int
    learner_pid: int
    seed: int
    threads: int = 1


def actor_main(spec: ActorSpec, stats: mp.Queue, stop: mp.Event) -> None:
    """Body of an actor process: act with the newest weights, write windows into the ring."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = str(spec.threads)
    import gymnasium as gym

    import r2d2kit.envs  # noqa: F401  (registers r2d2kit's env ids in this fresh process)
    from r2d2kit.policies import epsilon_greedy
    from r2d2kit.replay import SequenceBuilder
    from r2d2kit.tf_setup import setup_tensorflow

    setup_tensorflow(threads=spec.threads)
    weights = WeightBroadcast.attach(spec.weights_name, spec.weights_size)
    ring = RecordRing.attach(spec.ring_name, spec.layout, spec.ring_capacity)
    try:
        network = spec.make_network()
        actor = network.actor(spec.num_envs)
        version = -1
        envs = gym.vector.SyncVectorEnv([spec.make_env] * spec.num_envs)
        builder = SequenceBuilder(spec.num_envs, spec.burn_in, spec.trace_length, spec.n_step, spec.period)
        rng = np.random.default_rng(spec.seed)
        obs, _ = envs.reset(seed=spec.seed)
        prev_action = np.zeros(spec.num_envs, np.int32)
        prev_reward = np.zeros(spec.num_envs, np.float32)
        in_autoreset = np.zeros(spec.num_envs, bool)
        running = np.zeros(spec.num_envs)
        finished: list[float] = []
        steps_since_report = 0
        while not stop.is_set():
            if os.getppid() != spec.learner_pid:  # the learner died: nobody will read our windows
                break
            latest = weights.read(newer_than=version)
            if latest is not None:
                version, vector = latest
                assign_flat_weights(network.variables, vector)
            state = actor.get_state()
            action = epsilon_greedy(actor.q_values(obs, prev_action, prev_reward), spec.epsilons, rng)
            next_obs, reward, terminated, truncated, _ = envs.step(action)
            windows = builder.step(obs, action, reward, terminated, truncated, state)
            if windows is not None:
                for w in range(len(windows["env"])):
                    record = {name: windows[name][w] for name in spec.layout.to_spec() if name != "priority"}
                    record["priority"] = -1.0  # the learner gives new windows its max priority
                    while not ring.put(record, timeout=0.5):  # back-pressure: wait, never drop
                        if stop.is_set() or ring.closed or os.getppid() != spec.learner_pid:
                            return
            running += np.where(in_autoreset, 0.0, reward)
            ended = (terminated | truncated) & ~in_autoreset
            finished.extend(running[ended].tolist())
            running[ended] = 0.0
            prev_action = np.where(in_autoreset, 0, action).astype(np.int32)
            prev_reward = np.where(in_autoreset, 0.0, reward).astype(np.float32)
            actor.reset(in_autoreset)
            in_autoreset, obs = ended, next_obs
            steps_since_report += spec.num_envs
            if steps_since_report >= 50 * spec.num_envs or finished:
                stats.put((spec.actor_id, steps_since_report, finished, version))
                steps_since_report, finished = 0, []
        envs.close()
    finally:
        ring.close()
        weights.close()


@dataclass
class ProcessRunConfig:
    """Budget and plumbing of the multi-process runner."""

    total_env_steps: int = 100_000
    num_actors: int = 2
    envs_per_actor: int = 2
    replay_capacity: int = 100_000
    warmup_steps: int = 2_000
    updates_per_env_step: float = 0.25  # the learner waits for data beyond this ratio (samples per insert)
    publish_every: int = 10  # updates between weight broadcasts
    ring_capacity: int = 64  # windows per actor ring
    epsilon: float = 0.4
    epsilon_alpha: float = 7.0
    seed: int = 0
    max_restarts: int = 10


@dataclass
class ProcessRunResult:
    """What the multi-process run measured."""

    env_steps: int = 0
    updates: int = 0
    seconds: float = 0.0
    restarts: int = 0
    windows: int = 0
    weight_versions_seen: dict = field(default_factory=dict)  # actor id -> newest version it acted with
    windows_per_actor: dict = field(default_factory=dict)
    episode_returns: list = field(default_factory=list)
    actor_pids: dict = field(default_factory=dict)  # actor id -> pid of its current process


def train_processes(make_network: Callable[[], Any], make_env: Callable[[], Any], config, run: ProcessRunConfig,
                    on_progress: Callable[[ProcessRunResult], None] | None = None) -> ProcessRunResult:
    """Train with ``run.num_actors`` spawned actor processes and the learner in this process."""
    from r2d2kit.learner import R2D2Learner
    from r2d2kit.policies import apex_epsilons
    from r2d2kit.replay import SequenceReplayBuffer

    context = mp.get_context("spawn")  # TensorFlow is not fork-safe
    network = make_network()
    learner = R2D2Learner(network, config)
    units = network.lstm_units
    layout = window_layout(config.length, network.obs_shape, network.obs_dtype, np.int64, units)
    replay = SequenceReplayBuffer(
        run.replay_capacity, {"obs": (network.obs_shape, network.obs_dtype), "action": ((), "int64")},
        {"state_h": ((units,), "float32"), "state_c": ((units,), "float32")}, burn_in=config.burn_in,
        trace_length=config.trace_length, n_step=config.n_step, period=config.period,
        alpha=config.priority_exponent, seed=run.seed)
    epsilons = apex_epsilons(run.num_actors * run.envs_per_actor, run.epsilon, run.epsilon_alpha)
    initial = flatten_weights(network.variables)
    result = ProcessRunResult()
    start = time.perf_counter()

    with WeightBroadcast.create(initial.size) as weights:
        rings = [RecordRing.create(layout, run.ring_capacity) for _ in range(run.num_actors)]
        stats = context.Queue()
        stop = context.Event()
        processes: dict[int, Any] = {}
        try:
            weights.publish(initial)

            def spawn(actor_id: int, attempt: int) -> None:
                spec = ActorSpec(
                    actor_id, make_network, make_env, run.envs_per_actor,
                    epsilons[actor_id * run.envs_per_actor:(actor_id + 1) * run.envs_per_actor],
                    config.burn_in, config.trace_length, config.n_step, config.period, weights.name, initial.size,
                    rings[actor_id].name, layout, run.ring_capacity, os.getpid(),
                    seed=run.seed + 1000 * actor_id + attempt)
                # daemon: if this process is killed outright, the OS still reaps the actors
                process = context.Process(target=actor_main, args=(spec, stats, stop), daemon=True,
                                          name=f"r2d2kit-actor-{actor_id}")
                process.start()
                processes[actor_id] = process
                result.actor_pids[actor_id] = process.pid

            for actor_id in range(run.num_actors):
                spawn(actor_id, 0)
            credit = 0.0
            while result.env_steps < run.total_env_steps:
                # --- faults: restart actors that died (their ring is kept; its windows are whole records)
                for actor_id, process in list(processes.items()):
                    if not process.is_alive():
                        if result.restarts >= run.max_restarts:
                            raise RuntimeError(f"actor {actor_id} died (exit code {process.exitcode}) and the "
                                               f"restart budget ({run.max_restarts}) is spent")
                        result.restarts += 1
                        spawn(actor_id, result.restarts)
                # --- stats
                try:
                    while True:
                        actor_id, steps, returns, version = stats.get_nowait()
                        result.env_steps += steps
                        result.episode_returns.extend(returns)
                        result.weight_versions_seen[actor_id] = max(version, result.weight_versions_seen.get(actor_id, -1))
                        credit += run.updates_per_env_step * steps if replay.steps_stored >= run.warmup_steps else 0.0
                except queue.Empty:
                    pass
                # --- drain rings into replay
                drained = 0
                for actor_id, ring in enumerate(rings):
                    records = ring.drain()
                    if records:
                        windows = stack_records(records)
                        replay.add_sequences(windows, source=actor_id)
                        result.windows_per_actor[actor_id] = result.windows_per_actor.get(actor_id, 0) + len(records)
                        drained += len(records)
                result.windows += drained
                # --- learn at the configured ratio, publish weights now and then
                trained = False
                while credit >= 1.0 and len(replay):
                    batch = replay.sample(config.batch_size, beta=config.importance_exponent)
                    out = learner.train(batch)
                    replay.update_priorities(batch["indices"], out["priorities"])
                    credit -= 1.0
                    trained = True
                    if learner.updates % run.publish_every == 0:
                        weights.publish(flatten_weights(network.variables))
                result.updates = learner.updates
                if on_progress is not None:
                    on_progress(result)
                if not drained and not trained:
                    time.sleep(0.002)
        finally:
            # --- shutdown on every path: stop actors, unblock them, reap them, unlink segments
            stop.set()
            for ring in rings:
                ring.close_for_writing()
            for process in processes.values():
                process.join(timeout=10)
                if process.is_alive():
                    process.terminate()
                    process.join(timeout=5)
            stats.close()
            stats.join_thread()
            for ring in rings:
                ring.close()
    result.seconds = time.perf_counter() - start
    return result
