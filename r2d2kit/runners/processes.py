"""Multi-process R2D2: N actor processes feed one learner through shared memory.

    learner process                                   actor process i (spawned, 1 TF thread)
    ---------------                                   ---------------------------------------
    WeightBroadcast.publish(weights) --------------->  read when the version changes
    SequenceReplayBuffer <- drain RecordRing i <-----  vector env -> stateful actor -> SequenceBuilder
    train, update priorities                           -> ring.put(window) (waits when full)
    stats queue <------------------------------------  episode returns, env steps (small, pickled)

Faults: an actor that dies is logged and restarted with the same ring; actors stop by themselves
when the learner's process disappears; actors ignore SIGINT (Ctrl-C in a terminal reaches the whole
process group) so the learner alone decides how to stop; every segment is created and unlinked by
the learner (:meth:`ProcessActors.close` on every exit path), so Ctrl-C or an exception leaves
nothing in ``/dev/shm``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from r2d2kit.runners.callbacks import Callback
from r2d2kit.runners.experience import ActingLoop, Experience
from r2d2kit.runners.shm import (
    RecordLayout,
    RecordRing,
    WeightBroadcast,
    stack_records,
    window_layout,
)


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


def load_published_weights(actor: Any, vector: np.ndarray) -> None:
    """Load a broadcast weight vector into an actor's network and tell the actor (so no copy goes stale).

    The one way actor processes (and Ray actors) take new weights: an actor acting on a numpy copy
    of the weights (``follow_weights=False``) reads them again before its next step.
    """
    assign_flat_weights(actor.network.variables, vector)
    actor.refresh_weights()


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
    callbacks: Callback | None = None  # actor hooks, run in the actor process
    extras: tuple[str, ...] = ()  # info entries stored per row (ActingLoop), e.g. ("achieved_goal",)


THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
STALL_TIMEOUT_S = 600.0  # ProcessActors.collect: silence from every live actor for this long is an error


def limit_threads(threads: int) -> None:
    """Cap BLAS/OpenMP threads before numpy or TensorFlow start their pools."""
    for name in THREAD_VARIABLES:
        os.environ[name] = str(threads)


def actor_main(spec: ActorSpec, stats: mp.Queue, stop: mp.Event) -> None:
    """Body of an actor process: act with the newest weights, write windows into the ring."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the learner stops us (Ctrl-C reaches the whole group)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    limit_threads(spec.threads)
    import gymnasium as gym

    import r2d2kit.envs  # noqa: F401  (registers r2d2kit's env ids in this fresh process)
    from r2d2kit.models.tf_setup import setup_tensorflow
    from r2d2kit.replay import SequenceBuilder

    setup_tensorflow(threads=spec.threads)
    callbacks = spec.callbacks or Callback()
    weights = WeightBroadcast.attach(spec.weights_name, spec.weights_size)
    ring = RecordRing.attach(spec.ring_name, spec.layout, spec.ring_capacity)
    record_names = [name for name in spec.layout.to_spec() if name != "priority"]
    learner_alive = lambda: os.getppid() == spec.learner_pid  # noqa: E731  (reparented: the learner died)
    try:
        network = spec.make_network()
        envs = gym.vector.SyncVectorEnv([spec.make_env] * spec.num_envs)
        builder = SequenceBuilder(spec.num_envs, spec.burn_in, spec.trace_length, spec.n_step, spec.period)
        # weights change only below (load_published_weights), so the actor need not read them every step
        actor = network.actor(spec.num_envs, follow_weights=False)
        loop = ActingLoop(envs, actor, builder, spec.epsilons, spec.seed, spec.extras)
        callbacks.on_actor_begin(spec.actor_id)
        version, steps_since_report, finished = -1, 0, []
        while not stop.is_set() and learner_alive():
            latest = weights.read(newer_than=version)
            if latest is not None:
                version, vector = latest
                load_published_weights(actor, vector)
            windows, returns, lengths = loop.step()
            if windows is not None and not _deliver(windows, record_names, ring, stop, learner_alive):
                break  # stopping while the ring was full
            for episode_return, length in zip(returns.tolist(), lengths.tolist()):
                callbacks.on_actor_episode(spec.actor_id, episode_return, length)
                finished.append((episode_return, length))
            steps_since_report += spec.num_envs
            if steps_since_report >= 50 * spec.num_envs or finished:
                stats.put((spec.actor_id, steps_since_report, finished, version))
                steps_since_report, finished = 0, []
        callbacks.on_actor_end(spec.actor_id)
        envs.close()
    finally:
        ring.close()
        weights.close()


def _deliver(windows: dict[str, np.ndarray], names: list[str], ring: RecordRing, stop: Any,
             learner_alive: Callable[[], bool]) -> bool:
    """Put every window into the ring, waiting while it is full (back-pressure: never drop).

    Returns False if the run stopped (or the learner died) while waiting.
    """
    for w in range(len(windows["env"])):
        record = {name: windows[name][w] for name in names}
        record["priority"] = -1.0  # the learner gives new windows its max priority
        while not ring.put(record, timeout=0.5):
            if stop.is_set() or ring.closed or not learner_alive():
                return False
    return True


class ProcessActors:
    """``num_actors`` spawned actor processes feeding this (learner) process through shared memory.

    Args:
        make_network: picklable factory of the Q-network (each actor builds its own copy).
        make_env: picklable factory of one env (each actor runs ``envs_per_actor`` of them).
        config: the learner's :class:`~r2d2kit.agent.learner.R2D2Config` (window layout).
        network: the learner's online network (weight layout and the first broadcast).
        epsilons: per-env epsilons over all actors' envs, actor-major.
        callbacks: actor hooks (pickled into every actor process).
        log: where restarts are reported (default: stderr).
        extras: per-row ``info`` entries the actors store with each observation, ``{name: (shape, dtype)}``
            (a goal env's ``{"achieved_goal": ((goal_size,), "float32")}`` for hindsight relabelling).
        stall_timeout: seconds without any env step reported or window delivered, every actor alive,
            after which :meth:`collect` raises instead of waiting for ever (a stuck actor or queue).
    """

    def __init__(self, make_network: Callable[[], Any], make_env: Callable[[], Any], config: Any, network: Any, *,
                 num_actors: int, envs_per_actor: int, epsilons: np.ndarray, ring_capacity: int = 64,
                 publish_every: int = 10, threads: int = 1, max_restarts: int = 10, seed: int = 0,
                 callbacks: Callback | None = None, log: Callable[[str], None] | None = None,
                 extras: Mapping[str, tuple[tuple[int, ...], Any]] | None = None,
                 stall_timeout: float = STALL_TIMEOUT_S) -> None:
        self.make_network, self.make_env, self.config = make_network, make_env, config
        self.num_actors, self.envs_per_actor = num_actors, envs_per_actor
        self.epsilons = np.asarray(epsilons)
        self.ring_capacity, self.publish_every, self.threads = ring_capacity, publish_every, threads
        self.max_restarts, self.seed, self.callbacks = max_restarts, seed, callbacks
        self.log = log or (lambda message: print(message, file=sys.stderr, flush=True))
        self.restarts = 0
        self.weight_versions_seen: dict[int, int] = {}  # actor id -> newest version it acted with
        self.windows_per_actor: dict[int, int] = {}
        self.actor_pids: dict[int, int] = {}
        self._published_at = 0
        self._processes: dict[int, Any] = {}
        self._context = mp.get_context("spawn")  # TensorFlow is not fork-safe
        self.extras = dict(extras or {})
        self.stall_timeout = stall_timeout
        self._last_heard = time.monotonic()
        self._layout = window_layout(config.length, network.obs_shape, network.obs_dtype, np.int64, network.lstm_units,
                                     self.extras)
        initial = flatten_weights(network.variables)
        self._weights = WeightBroadcast.create(initial.size)
        self._rings: list[RecordRing] = []
        self._stats = self._stop = None
        try:
            self._rings = [RecordRing.create(self._layout, ring_capacity) for _ in range(num_actors)]
            self._stats, self._stop = self._context.Queue(), self._context.Event()
            self._weights.publish(initial)
            for actor_id in range(num_actors):
                self._spawn(actor_id, attempt=0)
        except BaseException:
            self.close()
            raise

    def _spawn(self, actor_id: int, attempt: int) -> None:
        n = self.envs_per_actor
        spec = ActorSpec(actor_id, self.make_network, self.make_env, n, self.epsilons[actor_id * n:(actor_id + 1) * n],
                         self.config.burn_in, self.config.trace_length, self.config.n_step, self.config.period,
                         self._weights.name, self._weights.size, self._rings[actor_id].name, self._layout,
                         self.ring_capacity, os.getpid(), seed=self.seed + 1000 * actor_id + attempt,
                         threads=self.threads, callbacks=self.callbacks, extras=tuple(self.extras))
        # daemon: if this process is killed outright, the OS still reaps the actors
        process = self._context.Process(target=actor_main, args=(spec, self._stats, self._stop), daemon=True,
                                        name=f"r2d2kit-actor-{actor_id}")
        process.start()
        self._processes[actor_id] = process
        self.actor_pids[actor_id] = process.pid

    def _restart_dead(self) -> None:
        for actor_id, process in list(self._processes.items()):
            if process.is_alive():
                continue
            self._last_heard = time.monotonic()  # a restarted actor gets the full start-up time
            if self.restarts >= self.max_restarts:
                raise RuntimeError(f"actor {actor_id} died (exit code {process.exitcode}) and the restart budget "
                                   f"(actors.max_restarts={self.max_restarts}) is spent; see its traceback above")
            self.restarts += 1
            self.log(f"actor {actor_id} (pid {process.pid}) died with exit code {process.exitcode}; restarting it "
                     f"(restart {self.restarts} of at most {self.max_restarts})")
            self._spawn(actor_id, self.restarts)

    def collect(self) -> Experience:
        """Restart dead actors, then take every finished window and stats message waiting.

        Raises:
            RuntimeError: an actor died and the restart budget is spent, or no actor reported
                anything for ``stall_timeout`` seconds while all were alive.
        """
        self._restart_dead()
        experience = Experience()
        try:
            while True:
                actor_id, steps, finished, version = self._stats.get_nowait()
                experience.env_steps += steps
                experience.episodes.extend(finished)
                self.weight_versions_seen[actor_id] = max(version, self.weight_versions_seen.get(actor_id, -1))
        except queue.Empty:
            pass
        for actor_id, ring in enumerate(self._rings):
            records = ring.drain()
            if records:
                experience.windows.append((stack_records(records), actor_id))
                self.windows_per_actor[actor_id] = self.windows_per_actor.get(actor_id, 0) + len(records)
        now = time.monotonic()
        if experience.env_steps or experience.windows:
            self._last_heard = now
        elif now - self._last_heard > self.stall_timeout:
            pids = ", ".join(str(process.pid) for process in self._processes.values())
            raise RuntimeError(f"no env steps or windows from any of the {self.num_actors} actor processes for "
                               f"{now - self._last_heard:.0f} s although all are alive (pids {pids}); an actor or "
                               f"its stats queue is stuck: see what they run with `py-spy dump --pid PID`, and "
                               f"please report it")
        return experience

    def publish(self, network: Any, updates: int) -> None:
        """Broadcast the weights if ``publish_every`` updates passed since the last broadcast."""
        if updates - self._published_at >= self.publish_every:
            self._weights.publish(flatten_weights(network.variables))
            self._published_at = updates

    @property
    def segment_names(self) -> list[str]:
        """Names of the shared-memory segments this pool created (all unlinked by :meth:`close`)."""
        return [self._weights.name] + [ring.name for ring in self._rings]

    @property
    def weights_version(self) -> int:
        """Version of the newest broadcast."""
        return self._weights.version

    def close(self) -> None:
        """Stop and reap every actor, then unlink every segment (safe to call twice)."""
        if self._stop is not None:
            self._stop.set()
        for ring in self._rings:
            ring.close_for_writing()
        for process in self._processes.values():
            process.join(timeout=10)
            if process.is_alive():
                process.terminate()
                process.join(timeout=5)
        self._processes = {}
        if self._stats is not None:
            self._stats.close()
            self._stats.join_thread()
            self._stats = None
        for ring in self._rings:
            ring.close()
        self._weights.close()

    def __enter__(self) -> "ProcessActors":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


@dataclass
class ProcessRunConfig:
    """Budget and plumbing of :func:`train_processes`."""

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
    segments: list = field(default_factory=list)  # shared-memory segment names the run created


def train_processes(make_network: Callable[[], Any], make_env: Callable[[], Any], config, run: ProcessRunConfig,
                    on_progress: Callable[[ProcessRunResult], None] | None = None) -> ProcessRunResult:
    """Train with ``run.num_actors`` spawned actor processes and the learner in this process.

    The bare loop (no evaluation, logging or checkpoints): :class:`r2d2kit.training.trainer.Trainer` adds those.
    """
    from r2d2kit.agent.learner import R2D2Learner, make_sequence_replay
    from r2d2kit.agent.policies import apex_epsilons

    network = make_network()
    learner = R2D2Learner(network, config)
    replay = make_sequence_replay(network, config, run.replay_capacity, seed=run.seed)
    epsilons = apex_epsilons(run.num_actors * run.envs_per_actor, run.epsilon, run.epsilon_alpha)
    result = ProcessRunResult()
    start = time.perf_counter()
    with ProcessActors(make_network, make_env, config, network, num_actors=run.num_actors,
                       envs_per_actor=run.envs_per_actor, epsilons=epsilons, ring_capacity=run.ring_capacity,
                       publish_every=run.publish_every, max_restarts=run.max_restarts, seed=run.seed) as actors:
        result.segments = actors.segment_names
        credit = 0.0
        while result.env_steps < run.total_env_steps:
            experience = actors.collect()
            result.env_steps += experience.env_steps
            result.episode_returns.extend(episode_return for episode_return, _ in experience.episodes)
            if replay.steps_stored >= run.warmup_steps:
                credit += run.updates_per_env_step * experience.env_steps
            for windows, actor_id in experience.windows:
                replay.add_sequences(windows, source=actor_id)
                result.windows += len(windows["env"])
            trained = False
            while credit >= 1.0 and len(replay):
                learner.train_from(replay)
                credit -= 1.0
                trained = True
                actors.publish(network, learner.updates)
            result.updates = learner.updates
            result.restarts = actors.restarts
            result.weight_versions_seen = dict(actors.weight_versions_seen)
            result.windows_per_actor = dict(actors.windows_per_actor)
            result.actor_pids = dict(actors.actor_pids)
            if on_progress is not None:
                on_progress(result)
            if not experience.windows and not trained:
                time.sleep(0.002)
    result.seconds = time.perf_counter() - start
    return result
