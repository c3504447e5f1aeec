"""Actors as Ray actors, for more than one machine (``actors.runner: ray``; ``pip install r2d2kit[ray]``).

    learner (this process, the Ray driver)               Ray actor i (any node of the cluster)
    --------------------------------------               ------------------------------------
    ray.put(weights) once per publish  ----------------> ray.get only when the version changed
    SequenceReplayBuffer <- batches of windows <-------  ActingLoop: vector env -> stateful actor
                            + env steps, episodes          -> SequenceBuilder, ``steps_per_batch`` steps

The same acting code as the processes runner (:class:`~r2d2kit.runners.acting.ActingLoop`);
only the transport differs. Each actor has one batch request in flight at a time, so an actor
that runs ahead of the learner waits for its next request (back-pressure, nothing dropped). Replay
stays in the learner's process. ``ray.init(address=...)`` connects to an existing cluster when an
address is configured (``actors.ray_address`` or the ``RAY_ADDRESS`` environment variable) and
starts a local instance otherwise.

Failures, each one failure of the actor's incarnation for the pool's
:class:`~r2d2kit.runners.restarts.RestartPolicy` (the processes runner's): the batch it was working
on is lost, the failure is counted in ``restarts`` and the actor is asked again after the policy's
back-off, or the run stops with :class:`~r2d2kit.runners.restarts.ActorsFailed`:

* its code raised (an env error: ``RayTaskError``): a crash. The actor starts a fresh incarnation
  in the same process (new envs, seed and source id) on its next request, without the seconds a new
  process and TensorFlow take, so an env that raises on its first step is a crash loop within seconds;
* its constructor raised (``ActorDiedError`` with ``actor_init_failed``): a crash. Ray never restarts
  such an actor (nor any ``ActorDiedError``: dead for good); the pool creates a new one after the back-off;
* its process died (Ray says ``ActorUnavailableError``: the same words for a SIGKILL, a segfault and
  ``os._exit``): Ray restarts it. Each death counts against the rate budget and the back-off, never as
  a crash, as the processes runner counts a SIGKILL, since Ray does not say which it was. Deaths are
  counted from Ray's own restart count of the actor (its GCS actor table), so a process killed again
  while Ray is still restarting it (no request ever reaches it) is counted too; where that table cannot
  be read, a death counts once when a request first fails. A process that dies at every start is
  stopped by ``RESTART_TIMEOUT_S`` instead: no answer for that long after a failure.
The driver hands every incarnation its seed with its first request and files its windows under a
new source id (:mod:`r2d2kit.runners.pool`), so a restarted actor neither replays its predecessor's
episodes nor has its windows joined to its predecessor's rows.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np

from r2d2kit.agent.seam import PolicyFactory
from r2d2kit.runners.acting import THREAD_VARIABLES, ActingLoop, limit_threads
from r2d2kit.runners.callbacks import Callback
from r2d2kit.runners.pool import Experience, Incarnations
from r2d2kit.runners.restarts import ActorsFailed, RestartPolicy
from r2d2kit.runners.weights import flatten_weights, weight_lag

if TYPE_CHECKING:
    import gymnasium as gym
    import keras
    from numpy.typing import DTypeLike
    from ray import ObjectRef

    from r2d2kit.agent.seam import WindowLayout

# ActorBody.collect's answer: (windows or None, env steps, finished (return, length) episodes, weights version)
Batch = tuple[dict[str, np.ndarray] | None, int, list[tuple[float, int]], int]

RESTART_TIMEOUT_S = 300.0  # a failed actor that has not answered a request since, for this long, stops the run
RETRY_S = 0.5  # a request that reached a process Ray is still restarting is sent again this much later
RESTARTING = "restarting"  # in the ActorUnavailableError of a request sent while Ray restarts the process (Ray 2.x)


class ActorBody:
    """What runs inside one Ray actor: an acting loop returning batches of windows.

    The policy and the loop are built on the first request of each incarnation, with the seed the driver
    sends: a restarted process (Ray runs ``__init__`` again) gets its incarnation's seed, not its
    predecessor's, and a request with a new seed (the driver's restart after the loop raised) closes the
    old loop and builds a fresh policy and loop in this process.
    """

    def __init__(self, actor_id: int, make_policy: PolicyFactory, make_env: Callable[[], gym.Env],
                 layout: WindowLayout, threads: int = 1, callbacks: Callback | None = None,
                 extras: tuple[str, ...] = ()) -> None:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        limit_threads(threads)
        from r2d2kit.models.process_setup import setup_process

        setup_process(threads=threads, gpu=False)  # the GPU is the learner's
        self.actor_id, self.make_env, self.layout, self.make_policy = actor_id, make_env, layout, make_policy
        self.callbacks, self.extras = callbacks, extras
        self.loop: ActingLoop | None = None
        self.seed: int | None = None  # the incarnation the loop was built for
        self.version = -1

    def pid(self) -> int:
        """The actor's process id (for tests and fault drills)."""
        return os.getpid()

    def node_id(self) -> str:
        """The Ray node the actor runs on (for placement checks)."""
        import ray

        return ray.get_runtime_context().get_node_id()

    def collect(self, weights: list[ObjectRef[np.ndarray]], version: int, steps: int, seed: int) -> Batch:
        """Act ``steps`` vector steps with weights ``version``; return (windows, env steps, episodes, version).

        ``weights`` is ``[ObjectRef]``: wrapped in a list so Ray does not fetch it unless the version changed.
        ``seed`` names the incarnation: a new one builds a fresh acting loop with it (new envs).
        """
        import ray

        loop = self.loop
        if loop is None or seed != self.seed:
            if loop is not None:
                self.loop = None
                self._close_failed(loop)
            self.version = -1  # a fresh policy has no published weights yet
            loop = ActingLoop.build(self.make_env, self.make_policy(self.actor_id, seed), self.layout, seed,
                                    self.extras, actor_id=self.actor_id, callbacks=self.callbacks)
            self.loop, self.seed = loop, seed
        if version != self.version:
            loop.policy.load_weights(ray.get(weights[0]))
            self.version = version
        batches: list[dict[str, np.ndarray]] = []
        episodes: list[tuple[float, int]] = []
        for _ in range(steps):
            windows, returns, lengths = loop.step()
            if windows is not None:
                batches.append(windows)
            episodes.extend(zip(returns.tolist(), lengths.tolist()))
        stacked = {name: np.concatenate([b[name] for b in batches]) for name in batches[0]} if batches else None
        return stacked, steps * loop.num_envs, episodes, self.version

    def _close_failed(self, loop: ActingLoop) -> None:
        """Close the loop of an incarnation whose code raised, as well as it can: a second error of that
        incarnation must not count against the new one."""
        try:
            loop.close()
        except Exception as error:  # noqa: BLE001  (reported; the fresh incarnation goes on)
            print(f"Ray actor {self.actor_id}: closing the failed incarnation's envs raised "
                  f"{type(error).__name__}: {error}", file=sys.stderr, flush=True)

    def close(self) -> None:
        """End hook and envs."""
        if self.loop is not None:
            self.loop.close()


class RayActors:
    """An :class:`~r2d2kit.runners.pool.ActorPool` of ``num_actors`` Ray actors feeding this (learner) process.

    Args:
        make_env: picklable factory of one env (Ray ships it to the actors).
        make_policy: picklable :class:`~r2d2kit.agent.seam.PolicyFactory`: each Ray actor builds its agent's
            networks and policy with it (exploration included).
        layout: the rows of a replay window (:class:`~r2d2kit.agent.seam.WindowLayout`).
        variables: the learner's :meth:`~r2d2kit.agent.seam.Learner.actor_variables` (the first broadcast).
        incarnations: source ids and seeds of every actor start (a restarted actor gets new ones).
        callbacks: actor hooks (pickled into every actor).
        extras: per-row ``info`` entries the actors store with each observation, ``{name: (shape, dtype)}``
            (a goal env's ``{"achieved_goal": ((goal_size,), "float32")}`` for hindsight relabelling).
        steps_per_batch: vector steps an actor takes per request.
        address: Ray cluster address; None: ``RAY_ADDRESS`` if set, else a local instance.
        num_cpus: CPUs of a local instance (None: all of this machine).
        cpus_per_actor: Ray CPU resources reserved per actor (placement).
        restart_policy: when a failed actor is asked for batches again and when the run stops instead
            (default: :class:`~r2d2kit.runners.restarts.RestartPolicy`'s defaults, the config's).
        log: where failures are reported (default: stderr).
    """

    def __init__(self, make_env: Callable[[], gym.Env], make_policy: PolicyFactory, layout: WindowLayout, *,
                 variables: Sequence[keras.Variable], incarnations: Incarnations,
                 callbacks: Callback | None = None,
                 extras: Mapping[str, tuple[tuple[int, ...], DTypeLike]] | None = None, num_actors: int,
                 steps_per_batch: int = 50, publish_every: int = 10, threads: int = 1,
                 restart_policy: RestartPolicy | None = None, address: str | None = None,
                 num_cpus: int | None = None, cpus_per_actor: float = 1.0,
                 log: Callable[[str], None] | None = None) -> None:
        try:
            import ray
        except ImportError as error:
            raise ImportError(f"actors.runner 'ray' needs Ray: pip install 'r2d2kit[ray]' ({error})") from None
        self._ray = ray
        self.log = log or (lambda message: print(message, file=sys.stderr, flush=True))
        self.publish_every, self.steps_per_batch = publish_every, steps_per_batch
        self.restart_policy = restart_policy or RestartPolicy()
        self.incarnations = incarnations
        self.windows_per_actor: dict[int, int] = {}
        self.weight_versions_seen: dict[int, int] = {}
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            address = address or os.environ.get("RAY_ADDRESS") or None
            with _keeping_signal_handlers():
                ray.init(address=address, num_cpus=None if address else num_cpus, include_dashboard=False,
                         log_to_driver=True, configure_logging=False)
        self._version = 0
        self._weights = ray.put(flatten_weights(variables))
        self._published_at = 0
        # set before the worker imports TensorFlow (unpickling make_policy already does)
        env_vars = {"TF_CPP_MIN_LOG_LEVEL": "2", **{name: str(threads) for name in THREAD_VARIABLES}}
        # Ray restarts a dead actor without limit; the restart policy decides when the run stops
        self._remote = ray.remote(num_cpus=cpus_per_actor, max_restarts=-1, max_task_retries=0,
                                  runtime_env={"env_vars": env_vars})(ActorBody)
        self._arguments = [(i, make_policy, make_env, layout, threads, callbacks, tuple(extras or {}))
                           for i in range(num_actors)]
        # handles, typed Any: mypy cannot see the .remote() of a handle's methods (Ray types them through
        # @ray.method, which this module cannot apply without importing Ray)
        self._actors: list[Any] = [self._remote.remote(*arguments) for arguments in self._arguments]
        self._seeds = {i: incarnations.start(i)[1] for i in range(num_actors)}  # sent with each request
        self._pending: dict[ObjectRef[Batch], int] = {}
        self._retry_at: dict[int, float] = {}  # actor id -> when to ask it again (its back-off ends)
        self._down_since: dict[int, float] = {}  # actor id -> when its failure was seen (until it answers)
        self._recreate: set[int] = set()  # actors whose constructor raised: Ray will not restart them
        self._unasked: set[int] = set()  # actors whose batch supervise() took: asked again by collect()
        self._deaths_counted = dict.fromkeys(range(num_actors), 0)  # process deaths of each handle counted so far
        self._held = Experience()  # what supervise() took between two collect() calls
        for actor_id in range(num_actors):
            self._request(actor_id)


    def _request(self, actor_id: int) -> None:
        ref: ObjectRef[Batch] = self._actors[actor_id].collect.remote(
            [self._weights], self._version, self.steps_per_batch, self._seeds[actor_id])
        self._pending[ref] = actor_id

    def actor_pids(self) -> dict[int, int]:
        """Process id of every actor (blocks until each answers)."""
        pids = {}
        for i, actor in enumerate(self._actors):
            ref: ObjectRef[int] = actor.pid.remote()
            pids[i] = self._ray.get(ref)
        return pids

    def actor_nodes(self) -> dict[int, str]:
        """Ray node id of every actor (blocks until each answers)."""
        nodes = {}
        for i, actor in enumerate(self._actors):
            ref: ObjectRef[str] = actor.node_id.remote()
            nodes[i] = self._ray.get(ref)
        return nodes

    @property
    def restarts(self) -> int:
        """Actor failures recovered from so far (restarts granted by the restart policy)."""
        return self.restart_policy.restarts

    def supervise(self) -> None:
        """Between updates: judge the failed requests and ask restarted actors again, on time.

        A finished batch is held for the next :meth:`collect` and its actor is not asked for another
        until then: an actor has one request in flight and waits for the learner (env steps stay in step
        with updates).

        Raises:
            ActorsFailed: as :meth:`collect`.
        """
        self._poll(self._held, ask_again=False)

    def collect(self) -> Experience:
        """Take every finished batch and ask its actor for the next one.

        Raises:
            ActorsFailed: an actor failed and the restart policy stops the run, or a failed actor did not
                answer a request within ``RESTART_TIMEOUT_S`` of failing.
        """
        experience, self._held = self._held, Experience()
        for actor_id in sorted(self._unasked):
            self._request(actor_id)
        self._unasked.clear()
        if not self._poll(experience, ask_again=True):  # nothing yet: wait briefly rather than spin
            if self._pending:
                self._ray.wait(list(self._pending), num_returns=1, timeout=0.01)
            else:
                time.sleep(0.01)
        return experience

    def _poll(self, experience: Experience, ask_again: bool) -> bool:
        """Ask the actors whose back-off ended, then take every finished request: a batch into ``experience``
        (its actor asked for the next one if ``ask_again``), a failure to :meth:`_failed`. True if any finished."""
        ray = self._ray
        now = time.monotonic()
        for actor_id, when in list(self._retry_at.items()):  # back-off over: ask again (a new actor if needed)
            if now >= when:
                del self._retry_at[actor_id]
                if actor_id in self._recreate:
                    self._recreate.discard(actor_id)
                    self._ray.kill(self._actors[actor_id], no_restart=True)
                    self._actors[actor_id] = self._remote.remote(*self._arguments[actor_id])
                self._request(actor_id)
        if not self._pending:
            return False
        ready, _ = ray.wait(list(self._pending), num_returns=len(self._pending), timeout=0)
        for ref in ready:
            actor_id = self._pending.pop(ref)
            try:
                windows, steps, episodes, version = ray.get(ref)
            except (ray.exceptions.RayTaskError, ray.exceptions.RayActorError) as error:
                self._failed(actor_id, error)
                continue
            if self._down_since.pop(actor_id, None) is not None:
                self._count_unseen_deaths(actor_id, "its process died again while Ray restarted it")
                self.log(f"Ray actor {actor_id} is back")
            if steps:
                self.restart_policy.progress(actor_id)
            experience.env_steps += steps
            experience.episodes.extend(episodes)
            if windows is not None:
                experience.windows.append((windows, self.incarnations.source_of[actor_id]))
                self.windows_per_actor[actor_id] = self.windows_per_actor.get(actor_id, 0) + len(windows["env"])
            self.weight_versions_seen[actor_id] = max(version, self.weight_versions_seen.get(actor_id, -1))
            if ask_again:
                self._request(actor_id)
            else:
                self._unasked.add(actor_id)
        return bool(ready)

    def _failed(self, actor_id: int, error: Exception) -> None:
        """A request failed: judge it (:func:`classify_failure`), count a new failure with the restart policy
        (which may stop the run) and ask again after its back-off; a request that reached a process Ray is
        still restarting is the death's first sign when none was seen (a kill between two requests: counted,
        and the restarted process gets a new incarnation, so replay never joins its rows to its
        predecessor's), else no new failure but the deaths Ray's table shows beyond those counted (a kill of
        the restarting process): ask again shortly, for at most ``RESTART_TIMEOUT_S``."""
        how, crashed, new = classify_failure(error, self._ray.exceptions)
        now = time.monotonic()
        if not new and actor_id in self._down_since:  # its death was counted when first seen
            down_since = self._down_since.setdefault(actor_id, now)
            if now - down_since > RESTART_TIMEOUT_S:
                raise ActorsFailed(f"Ray actor {actor_id} did not answer within {RESTART_TIMEOUT_S:.0f} s of failing "
                                   f"(its process dies at every start, or Ray cannot start it): {how}") from None
            self._count_unseen_deaths(actor_id, "its process died again while Ray restarted it")
            self._retry_at[actor_id] = now + RETRY_S
            return
        if not crashed:  # a process death: first the deaths only Ray's table has seen (killed while restarting)
            self._count_unseen_deaths(actor_id, "its process died while Ray restarted it", proven=1)
        restart = self.restart_policy.failed(actor_id, how, crashed)  # raises ActorsFailed: the run stops
        self._down_since.setdefault(actor_id, now)
        _, self._seeds[actor_id] = self.incarnations.start(actor_id, restart=True)
        if isinstance(error, self._ray.exceptions.ActorDiedError):  # dead for good (its constructor raised)
            self._recreate.add(actor_id)
            self._deaths_counted[actor_id] = 0  # the new handle's restarts count from zero
            what = "a new actor is created"
        elif crashed:
            what = "it starts a fresh incarnation"
        else:
            self._deaths_counted[actor_id] += 1
            what = "Ray restarts its process"
        self.log(f"Ray actor {actor_id} failed ({how}); {what} and is asked again in {restart.delay_s:g} s "
                 f"({restart.budget})")
        self._retry_at[actor_id] = now + restart.delay_s

    def _count_unseen_deaths(self, actor_id: int, how: str, proven: int = 0) -> None:
        """Count with the restart policy the deaths of ``actor_id``'s process that Ray restarted but no request
        showed (Ray's restart count beyond those counted and the ``proven`` one a failed request is about to
        count), each with a log line.

        Raises:
            ActorsFailed: the policy stops the run.
        """
        restarted = ray_restart_count(self._ray, self._actors[actor_id])
        if restarted is None:
            return
        for _ in range(restarted - self._deaths_counted[actor_id] - proven):
            restart = self.restart_policy.failed(actor_id, how, crashed=False)
            self._deaths_counted[actor_id] += 1
            self.log(f"Ray actor {actor_id} failed ({how}; Ray has restarted it {restarted} time(s)); Ray restarts "
                     f"its process ({restart.budget})")

    def publish(self, variables: Sequence[keras.Variable], updates: int) -> None:
        """One ``ray.put`` of the weights every ``publish_every`` updates; actors fetch it on their next batch."""
        if updates - self._published_at >= self.publish_every:
            self._weights = self._ray.put(flatten_weights(variables))
            self._version += 1
            self._published_at = updates

    @property
    def weight_lag(self) -> float:
        """Updates the most out-of-date live actor's weights are behind the newest (publishes x ``publish_every``)."""
        return weight_lag(self._version, self.weight_versions_seen, self.publish_every)

    @property
    def weights_version(self) -> int:
        """Version of the newest published weights."""
        return self._version

    def close(self) -> None:
        """Stop the actors (their end hooks run) and shut down a Ray instance this pool started."""
        ray = self._ray
        for actor in getattr(self, "_actors", []):
            try:
                ray.get(actor.close.remote(), timeout=30)
            except Exception:  # noqa: BLE001  (a dead actor has nothing left to close)
                pass
            ray.kill(actor, no_restart=True)
        self._actors, self._pending, self._retry_at, self._recreate = [], {}, {}, set()
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()


@contextmanager
def _keeping_signal_handlers() -> Iterator[None]:
    """Put back this process's SIGINT and SIGTERM handlers after the block (``ray.init``).

    Why: Ray's core worker installs a native SIGTERM handler in the driver that prints a stack and aborts
    the process (exit -6: the trainer's clean stop on SIGTERM, its final checkpoint and ``summary.json``
    never ran; seen at the end of a Ray soak). Python's own handlers are kept; only the main thread can
    set them.
    """
    main_thread = threading.current_thread() is threading.main_thread()
    handlers = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)} if main_thread else {}
    try:
        yield
    finally:
        for number, handler in handlers.items():
            if handler is not None:
                signal.signal(number, handler)


def ray_restart_count(ray: Any, handle: Any) -> int | None:
    """How many times Ray has restarted the actor behind ``handle`` (its GCS actor table's ``NumRestarts``),
    or None where that cannot be read.

    Why: a process killed while Ray is still restarting it answers no request, so the pool's requests alone
    see two quick deaths as one. Ray's public state API needs the dashboard, which the pool does not start;
    the table is read through ``ray._private.state`` and any failure to read it falls back to the requests.
    """
    try:
        table = ray._private.state.actors(handle._actor_id.hex())
        return int(table["NumRestarts"])
    except Exception:  # noqa: BLE001  (a private table: any change in it only loses the exact count)
        return None


def classify_failure(error: Exception, exceptions: Any) -> tuple[str, bool, bool]:
    """How a Ray request failed: ``(how, crashed, new)``, for the restart policy.

    ``crashed``: the actor's own code failed (its method or its constructor raised), as an exit code or a
    crash signal is for the processes runner. ``new``: a failure of the incarnation that was asked; False
    for a request that reached a process Ray is still restarting (that death was counted already).
    ``exceptions`` is ``ray.exceptions`` (passed in: this module does not import Ray).
    """
    if isinstance(error, exceptions.RayTaskError):
        cause = getattr(error, "cause", None)  # the exception the actor's code raised
        how = f"its code raised {type(cause).__name__}: {cause}" if cause is not None else "its code raised"
        return how, True, True
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = " ".join(lines)
    if isinstance(error, exceptions.RayActorError) and error.actor_init_failed:
        return f"its constructor raised {lines[-1][:300] if lines else 'an error'}", True, True  # the last line
    if isinstance(error, exceptions.ActorUnavailableError) and RESTARTING in text:
        return f"its process is restarting: {text[:200]}", False, False
    return f"its process died ({type(error).__name__}: {text[:200]})", False, True
