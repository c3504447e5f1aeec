"""Multi-process R2D2: N actor processes feed one learner through shared memory.

    learner process                                   actor process i (spawned, 1 TF thread)
    ---------------                                   ---------------------------------------
    WeightBroadcast.publish(weights) --------------->  read when the version changes
    SequenceReplayBuffer <- drain RecordRing i <-----  vector env -> the agent's policy -> SequenceBuilder
    train, update priorities                           -> ring.put(window) (waits when full)
    stats queue <------------------------------------  episode returns, env steps (small, pickled)

Faults: an actor that dies is logged and restarted with the same ring, a new seed and a new source
id (the windows it left in the ring are drained under its own source first, so replay never joins
the two incarnations' rows; :mod:`r2d2kit.runners.pool`); an actor whose acting code raises keeps
its process, reports the error and is sent the seed of its next incarnation (no new process, no
TensorFlow import); either after the back-off of a
:class:`~r2d2kit.runners.restarts.RestartPolicy`, which stops the run (:class:`~r2d2kit.runners.restarts.ActorsFailed`)
on a crash loop or too many restarts too fast; actors stop by themselves
when the learner's process disappears; actors ignore SIGINT and SIGTERM (Ctrl-C in a terminal and
``timeout`` signal the whole process group) so the learner alone decides how to stop; every segment
is created and unlinked by the learner (:meth:`ProcessActors.close` on every exit path), so Ctrl-C,
SIGTERM or an exception leaves nothing in ``/dev/shm``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import signal
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from r2d2kit.agent.seam import PolicyFactory
from r2d2kit.runners.acting import ActingLoop, limit_threads
from r2d2kit.runners.callbacks import Callback
from r2d2kit.runners.pool import Experience, Incarnations
from r2d2kit.runners.restarts import ActorsFailed, RestartPolicy, describe_exit, killed_from_outside
from r2d2kit.runners.shm import (
    RecordLayout,
    RecordRing,
    WeightBroadcast,
    stack_records,
    window_layout,
)
from r2d2kit.runners.weights import flatten_weights, weight_lag

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.process import BaseProcess
    from multiprocessing.queues import Queue
    from multiprocessing.synchronize import Event

    import gymnasium as gym
    import keras
    from numpy.typing import DTypeLike

    from r2d2kit.agent.seam import WindowFields, WindowLayout

# what an actor reports on its stats queue: (actor id, env steps, finished (return, length) episodes, weights version,
# None, or how its code failed: it then waits on its command pipe for a new incarnation's seed)
StatsMessage = tuple[int, int, list[tuple[float, int]], int, str | None]


@dataclass
class ActorSpec:
    """Everything an actor process needs, picklable (no TensorFlow objects)."""

    actor_id: int
    make_policy: PolicyFactory  # picklable: builds the agent's networks and policy in the actor process
    make_env: Callable[[], gym.Env]
    windows: WindowLayout  # the rows of a replay window
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


STALL_TIMEOUT_S = 600.0  # ProcessActors.collect: silence from every live actor for this long is an error


def actor_main(spec: ActorSpec, stats: Queue[StatsMessage], stop: Event, commands: Connection) -> None:
    """Body of an actor process: act with the newest weights, write windows into the ring.

    When its acting code raises (an env error), the process reports it and waits on ``commands`` for the
    learner's answer: a new incarnation's seed (fresh envs and acting loop in this process, without the
    seconds a new process and TensorFlow take) or ``None`` (the run stops).
    """
    for number in (signal.SIGINT, signal.SIGTERM):  # the learner stops us (Ctrl-C, `timeout` signal the whole group)
        signal.signal(number, signal.SIG_IGN)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    limit_threads(spec.threads)
    import r2d2kit.envs  # noqa: F401  (registers r2d2kit's env ids in this fresh process)
    from r2d2kit.models.process_setup import setup_process

    setup_process(threads=spec.threads, gpu=False)  # the GPU is the learner's
    weights = WeightBroadcast.attach(spec.weights_name, spec.weights_size)
    ring = RecordRing.attach(spec.ring_name, spec.layout, spec.ring_capacity)
    learner_alive = lambda: os.getppid() == spec.learner_pid  # noqa: E731  (reparented: the learner died)
    try:
        seed: int | None = spec.seed
        while seed is not None:
            if _act(spec, seed, weights, ring, stats, stop, learner_alive):
                break
            seed = _next_incarnation(commands, stop, learner_alive)
    finally:
        ring.close()
        weights.close()


def _act(spec: ActorSpec, seed: int, weights: WeightBroadcast, ring: RecordRing, stats: Queue[StatsMessage],
         stop: Event, learner_alive: Callable[[], bool]) -> bool:
    """One incarnation: a fresh policy and acting loop (their first step reads the newest weights); act until
    the run stops (True), or until its code raises (False, reported on ``stats`` with its traceback on stderr)."""
    record_names = list(spec.layout.to_spec())
    version, steps_since_report = -1, 0
    finished: list[tuple[float, int]] = []
    loop: ActingLoop | None = None
    try:
        policy = spec.make_policy(spec.actor_id, seed)
        loop = ActingLoop.build(spec.make_env, policy, spec.windows, seed, spec.extras, actor_id=spec.actor_id,
                                callbacks=spec.callbacks)
        while not stop.is_set() and learner_alive():
            latest = weights.read(newer_than=version)
            if latest is not None:
                version, vector = latest
                policy.load_weights(vector)
            windows, returns, lengths = loop.step()
            if windows is not None and not _deliver(windows, record_names, ring, stop, learner_alive):
                break  # stopping while the ring was full
            finished.extend(zip(returns.tolist(), lengths.tolist()))
            steps_since_report += loop.num_envs
            if steps_since_report >= 50 * loop.num_envs or finished:
                stats.put((spec.actor_id, steps_since_report, finished, version, None))
                steps_since_report, finished = 0, []
        loop.close()
        return True
    except Exception as error:  # noqa: BLE001  (reported; the learner's restart policy judges it)
        print(f"r2d2kit-actor-{spec.actor_id} (pid {os.getpid()}) raised:", file=sys.stderr)
        traceback.print_exc()
        sys.stderr.flush()
        if loop is not None:
            try:
                loop.close()
            except Exception as close_error:  # noqa: BLE001  (the first error is the one reported)
                print(f"actor {spec.actor_id}: closing its envs raised {type(close_error).__name__}: {close_error}",
                      file=sys.stderr, flush=True)
        how = " ".join(f"{type(error).__name__}: {error}".split())
        stats.put((spec.actor_id, steps_since_report, finished, version, how[:300]))
        return False


def _next_incarnation(commands: Connection, stop: Event, learner_alive: Callable[[], bool]) -> int | None:
    """Wait for the learner's answer to a failure: the seed of this actor's next incarnation, or None (stop)."""
    while not stop.is_set() and learner_alive():
        if commands.poll(0.2):
            try:
                seed: int | None = commands.recv()
            except EOFError:  # the learner closed the pipe: the run is over
                return None
            return seed
    return None


def actor_process(spec: ActorSpec, stats: Queue[StatsMessage], stop: Event, commands: Connection) -> None:
    """An actor process's target: :func:`actor_main`, then out at once with ``os._exit`` (status 1 on an error,
    its traceback printed first, as :mod:`multiprocessing` reports it).

    Why: the interpreter's teardown with TensorFlow loaded takes seconds on busy cores (3-4 s measured at a
    load of 9 on 2 cores), all of it between a crash and the learner seeing the process gone, and between a
    stop and the run's end. The actor owns nothing that needs it: its segments are closed by then and its
    stats queue is flushed here (what the teardown would have done for it).
    """
    code = 0
    try:
        actor_main(spec, stats, stop, commands)
    except BaseException:  # noqa: BLE001  (any error ends the process; the learner's restart policy judges it)
        code = 1
        print(f"Process {mp.current_process().name}:", file=sys.stderr)
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        stats.close()
        stats.join_thread()  # every report put so far reaches the learner
        os._exit(code)


def _deliver(windows: dict[str, np.ndarray], names: list[str], ring: RecordRing, stop: Event,
             learner_alive: Callable[[], bool]) -> bool:
    """Put every window into the ring, waiting while it is full (back-pressure: never drop).

    Returns False if the run stopped (or the learner died) while waiting.
    """
    for w in range(len(windows["env"])):
        record = {name: windows[name][w] for name in names}
        while not ring.put(record, timeout=0.5):
            if stop.is_set() or ring.closed or not learner_alive():
                return False
    return True


class ProcessActors:
    """An :class:`~r2d2kit.runners.pool.ActorPool` of ``num_actors`` spawned actor processes feeding this
    (learner) process through shared memory.

    Args:
        make_env: picklable factory of one env (each actor runs as many as its policy acts in).
        make_policy: picklable :class:`~r2d2kit.agent.seam.PolicyFactory`: each actor process builds its
            agent's networks and policy with it (exploration included).
        layout: the rows of a replay window (:class:`~r2d2kit.agent.seam.WindowLayout`).
        fields: what the windows hold (:class:`~r2d2kit.agent.seam.WindowFields`): sizes the shared-memory records.
        variables: the learner's :meth:`~r2d2kit.agent.seam.Learner.actor_variables` (the first broadcast).
        incarnations: source ids and seeds of every actor start (a restarted actor gets new ones).
        callbacks: actor hooks (pickled into every actor).
        extras: per-row ``info`` entries the actors store with each observation, ``{name: (shape, dtype)}``
            (a goal env's ``{"achieved_goal": ((goal_size,), "float32")}`` for hindsight relabelling).
        restart_policy: when a dead actor is restarted and when the run stops instead (default: the
            config's defaults, :class:`~r2d2kit.runners.restarts.RestartPolicy`).
        log: where restarts are reported (default: stderr).
        stall_timeout: seconds without any env step reported or window delivered, every actor alive,
            after which :meth:`collect` raises instead of waiting for ever (a stuck actor or queue).
    """

    def __init__(self, make_env: Callable[[], gym.Env], make_policy: PolicyFactory, layout: WindowLayout, *,
                 fields: WindowFields, variables: Sequence[keras.Variable], incarnations: Incarnations,
                 callbacks: Callback | None = None,
                 extras: Mapping[str, tuple[tuple[int, ...], DTypeLike]] | None = None, num_actors: int,
                 ring_capacity: int = 64, publish_every: int = 10, threads: int = 1,
                 restart_policy: RestartPolicy | None = None, log: Callable[[str], None] | None = None,
                 stall_timeout: float = STALL_TIMEOUT_S) -> None:
        self.make_policy, self.make_env, self.layout = make_policy, make_env, layout
        self.num_actors = num_actors
        self.ring_capacity, self.publish_every, self.threads = ring_capacity, publish_every, threads
        self.incarnations, self.callbacks = incarnations, callbacks
        self.restart_policy = restart_policy or RestartPolicy()
        self.log = log or (lambda message: print(message, file=sys.stderr, flush=True))
        self._restart_at: dict[int, float] = {}  # actor id -> when its back-off ends (it is dead until then)
        self.weight_versions_seen: dict[int, int] = {}  # actor id -> newest version it acted with
        self.windows_per_actor: dict[int, int] = {}
        self._published_at = self._version = 0
        self._processes: dict[int, BaseProcess] = {}
        self._commands: dict[int, Connection] = {}  # actor id -> the write end of its process's command pipe
        self._raised: dict[int, str] = {}  # actor id -> how its code failed (its process waits for a seed)
        self._waiting: set[int] = set()  # actors whose process waits, backing off, for its next incarnation
        self._context = mp.get_context("spawn")  # TensorFlow is not fork-safe
        self.extras = dict(extras or {})
        self.stall_timeout = stall_timeout
        self._last_heard = time.monotonic()
        self._held = Experience()  # what supervise() took between two collect() calls
        from r2d2kit.models.cores import state_fields  # the network is built: Keras is loaded already

        self._layout = window_layout(layout.length, fields.obs_shape, fields.obs_dtype, fields.action_dtype,
                                     state_fields(fields.state), self.extras, action_shape=fields.action_shape)
        initial = flatten_weights(variables)
        self._weights = WeightBroadcast.create(initial.size)
        self._rings: list[RecordRing] = []
        self._stats: Queue[StatsMessage] | None = None
        self._stop: Event | None = None
        try:
            self._rings = [RecordRing.create(self._layout, ring_capacity) for _ in range(num_actors)]
            self._stats, self._stop = self._context.Queue(), self._context.Event()
            self._version = self._weights.publish(initial)
            for actor_id in range(num_actors):
                self._spawn(actor_id)
        except BaseException:
            self.close()
            raise

    def _spawn(self, actor_id: int, restart: bool = False) -> None:
        _, seed = self.incarnations.start(actor_id, restart)
        spec = ActorSpec(actor_id, self.make_policy, self.make_env, self.layout, self._weights.name, self._weights.size,
                         self._rings[actor_id].name, self._layout, self.ring_capacity, os.getpid(), seed=seed,
                         threads=self.threads, callbacks=self.callbacks, extras=tuple(self.extras))
        receive, send = self._context.Pipe(duplex=False)
        # daemon: if this process is killed outright, the OS still reaps the actors
        process = self._context.Process(target=actor_process, args=(spec, self._stats, self._stop, receive),
                                        daemon=True, name=f"r2d2kit-actor-{actor_id}")
        process.start()
        receive.close()  # the actor's end
        if actor_id in self._commands:
            self._commands[actor_id].close()
        self._processes[actor_id], self._commands[actor_id] = process, send

    def actor_pids(self) -> dict[int, int]:
        """Process id of every actor's current process."""
        pids = {}
        for actor_id, process in self._processes.items():
            if process.pid is None:  # never: a process is started as soon as it is made (_spawn)
                raise RuntimeError(f"actor {actor_id}'s process was never started")
            pids[actor_id] = process.pid
        return pids

    def _drain(self, actor_id: int, experience: Experience) -> None:
        """Move the windows waiting in an actor's ring into ``experience``, under its incarnation's source."""
        ring = self._rings[actor_id]
        torn_before = ring.torn
        records = ring.drain()
        if ring.torn > torn_before:
            self.log(f"skipped {ring.torn - torn_before} torn window record(s) from actor {actor_id}: their sequence "
                     f"number or checksum did not match (never trained on)")
        if records:
            experience.windows.append((stack_records(records), self.incarnations.source_of[actor_id]))
            self.windows_per_actor[actor_id] = self.windows_per_actor.get(actor_id, 0) + len(records)

    @property
    def restarts(self) -> int:
        """Actor restarts granted so far (each death that did not stop the run)."""
        return self.restart_policy.restarts

    def _restart_dead(self, experience: Experience) -> None:
        now = time.monotonic()
        for actor_id, process in list(self._processes.items()):
            if actor_id in self._restart_at:  # failed, backing off
                if now >= self._restart_at[actor_id]:
                    del self._restart_at[actor_id]
                    self._last_heard = now  # a restarted actor gets the full start-up time
                    if actor_id in self._waiting and process.is_alive():
                        self._waiting.discard(actor_id)
                        _, seed = self.incarnations.start(actor_id, restart=True)
                        self._commands[actor_id].send(seed)  # a fresh incarnation in the same process
                    else:
                        self._waiting.discard(actor_id)
                        self._spawn(actor_id, restart=True)
                continue
            if actor_id in self._raised:  # its code raised: the process waits for its next incarnation
                self._drain(actor_id, experience)  # under the failed incarnation's source
                how = self._raised.pop(actor_id)
                restart = self.restart_policy.failed(actor_id, how, crashed=True)  # raises ActorsFailed: stop
                self.log(f"actor {actor_id} (pid {process.pid}) failed: {how}; a fresh incarnation starts in its "
                         f"process in {restart.delay_s:g} s ({restart.budget})")
                self._restart_at[actor_id] = now + restart.delay_s
                self._waiting.add(actor_id)
                continue
            if process.is_alive():
                continue
            # the dead incarnation's windows keep its source; the next one writes under a new source
            self._drain(actor_id, experience)
            how = describe_exit(process.exitcode)
            crashed = not killed_from_outside(process.exitcode)
            restart = self.restart_policy.failed(actor_id, how, crashed)  # raises ActorsFailed: the run stops
            self.log(f"actor {actor_id} (pid {process.pid}) died of {how}; restarting it in {restart.delay_s:g} s "
                     f"({restart.budget})")
            self._restart_at[actor_id] = now + restart.delay_s

    def _take_stats(self, experience: Experience) -> None:
        """Move every stats message waiting into ``experience``; an actor that reported env steps made progress."""
        stats = self._stats
        if stats is None:
            raise RuntimeError("the actor processes are closed")
        try:
            while True:
                actor_id, steps, finished, version, failure = stats.get_nowait()
                if failure is not None:
                    self._raised[actor_id] = f"its code raised {failure}"
                experience.env_steps += steps
                experience.episodes.extend(finished)
                self.weight_versions_seen[actor_id] = max(version, self.weight_versions_seen.get(actor_id, -1))
                if steps:
                    self.restart_policy.progress(actor_id)
        except queue.Empty:
            pass

    def supervise(self) -> None:
        """Between updates: notice the actors that died and restart them (or stop the run) on time.

        The live actors' rings are left alone: the learner drains them in :meth:`collect` only, so a
        full ring still holds its actor back while the learner trains (env steps stay in step with
        updates). What this takes (stats, a dead actor's last windows) the next :meth:`collect` returns.

        Raises:
            ActorsFailed: as :meth:`collect`.
        """
        self._take_stats(self._held)  # stats first: a dead actor's last reports count before its death is judged
        self._restart_dead(self._held)

    def collect(self) -> Experience:
        """Take every stats message and finished window waiting, then restart the actors that died.

        Raises:
            ActorsFailed: an actor died and the restart policy stops the run (a crash loop, too many
                restarts too fast), or no actor reported anything for ``stall_timeout`` seconds while
                all were alive.
        """
        experience, self._held = self._held, Experience()
        self._take_stats(experience)  # stats first: a dead actor's last reports count before its death is judged
        self._restart_dead(experience)
        for actor_id in range(self.num_actors):
            self._drain(actor_id, experience)
        now = time.monotonic()
        if experience.env_steps or experience.windows:
            self._last_heard = now
        elif now - self._last_heard > self.stall_timeout and not self._restart_at:
            pids = ", ".join(str(process.pid) for process in self._processes.values())
            raise ActorsFailed(f"no env steps or windows from any of the {self.num_actors} actor processes for "
                               f"{now - self._last_heard:.0f} s although all are alive (pids {pids}); an actor or "
                               f"its stats queue is stuck: see what they run with `py-spy dump --pid PID`, and "
                               f"please report it")
        return experience

    def publish(self, variables: Sequence[keras.Variable], updates: int) -> None:
        """Broadcast the weights if ``publish_every`` updates passed since the last broadcast."""
        if updates - self._published_at >= self.publish_every:
            self._version = self._weights.publish(flatten_weights(variables))
            self._published_at = updates

    @property
    def segment_names(self) -> list[str]:
        """Names of the shared-memory segments this pool created (all unlinked by :meth:`close`)."""
        return [self._weights.name] + [ring.name for ring in self._rings]

    @property
    def weight_lag(self) -> float:
        """Updates the most out-of-date live actor's weights are behind the newest (publishes x ``publish_every``)."""
        return weight_lag(self._version, self.weight_versions_seen, self.publish_every)

    @property
    def weights_version(self) -> int:
        """Version of the newest broadcast (kept here: still readable after :meth:`close` unlinked it)."""
        return self._version

    def close(self) -> None:
        """Stop and reap every actor, then unlink every segment (safe to call twice)."""
        if self._stop is not None:
            self._stop.set()
        for ring in self._rings:
            ring.close_for_writing()
        for send in self._commands.values():
            send.close()  # an actor waiting for its next incarnation reads the end of the pipe and stops
        for process in self._processes.values():
            process.join(timeout=10)
            if process.is_alive():
                process.kill()  # it ignores SIGTERM; it owns no segment, so nothing is left behind
                process.join(timeout=5)
        if self._stats is not None:
            self._stats.close()
            self._stats.join_thread()
            self._stats = None
        for ring in self._rings:
            ring.close()
        self._weights.close()

    def __enter__(self) -> ProcessActors:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
