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
starts a local instance otherwise. Ray restarts an actor whose process dies; an actor whose code
raises (an env error) is killed so that Ray restarts it too. Either is one failure for the pool's
:class:`~r2d2kit.runners.restarts.RestartPolicy` (the same as the processes runner's): the batch it
was working on is lost, counted in ``restarts`` and requested again after the policy's back-off, or
the run stops with :class:`~r2d2kit.runners.restarts.ActorsFailed` on a crash loop or too many
restarts too fast.
The driver hands every incarnation its seed with its first request and files its windows under a
new source id (:mod:`r2d2kit.runners.pool`), so a restarted actor neither replays its predecessor's
episodes nor has its windows joined to its predecessor's rows.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from r2d2kit.runners.acting import THREAD_VARIABLES, ActingLoop, limit_threads
from r2d2kit.runners.callbacks import Callback
from r2d2kit.runners.pool import Experience, Incarnations, PolicyFactory
from r2d2kit.runners.restarts import ActorsFailed, RestartPolicy
from r2d2kit.runners.weights import flatten_weights

if TYPE_CHECKING:
    import gymnasium as gym
    import keras
    from numpy.typing import DTypeLike
    from ray import ObjectRef

    from r2d2kit.agent.seam import WindowLayout

# ActorBody.collect's answer: (windows or None, env steps, finished (return, length) episodes, weights version)
Batch = tuple[dict[str, np.ndarray] | None, int, list[tuple[float, int]], int]

RESTART_TIMEOUT_S = 300.0  # a failed actor that Ray has not brought back by then stops the run


class ActorBody:
    """What runs inside one Ray actor: an acting loop returning batches of windows.

    The policy and the loop are built on the first request, with the seed the driver sends: a restarted
    actor (Ray runs ``__init__`` again) gets its incarnation's seed, not its predecessor's.
    """

    def __init__(self, actor_id: int, make_policy: PolicyFactory, make_env: Callable[[], gym.Env],
                 layout: WindowLayout, threads: int = 1, callbacks: Callback | None = None,
                 extras: tuple[str, ...] = ()) -> None:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        limit_threads(threads)
        from r2d2kit.models.tf_setup import setup_tensorflow

        setup_tensorflow(threads=threads, gpu=False)  # the GPU is the learner's
        self.actor_id, self.make_env, self.layout, self.make_policy = actor_id, make_env, layout, make_policy
        self.callbacks, self.extras = callbacks, extras
        self.loop: ActingLoop | None = None
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
        ``seed`` seeds the acting loop if this is the incarnation's first request.
        """
        import ray

        loop = self.loop
        if loop is None:
            loop = ActingLoop.build(self.make_env, self.make_policy(self.actor_id, seed), self.layout, seed,
                                    self.extras, actor_id=self.actor_id, callbacks=self.callbacks)
            self.loop = loop
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

    def close(self) -> None:
        """End hook and envs."""
        if self.loop is not None:
            self.loop.close()


class RayActors:
    """An :class:`~r2d2kit.runners.pool.ActorPool` of ``num_actors`` Ray actors feeding this (learner) process.

    Args:
        make_env: picklable factory of one env (Ray ships it to the actors).
        make_policy: picklable :data:`~r2d2kit.runners.pool.PolicyFactory`: each Ray actor builds its agent's
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
            ray.init(address=address, num_cpus=None if address else num_cpus, include_dashboard=False,
                     log_to_driver=True, configure_logging=False)
        self._version = 0
        self._weights = ray.put(flatten_weights(variables))
        self._published_at = 0
        # set before the worker imports TensorFlow (unpickling make_policy already does)
        env_vars = {"TF_CPP_MIN_LOG_LEVEL": "2", **{name: str(threads) for name in THREAD_VARIABLES}}
        # Ray restarts a dead actor without limit; the restart policy decides when the run stops
        remote = ray.remote(num_cpus=cpus_per_actor, max_restarts=-1, max_task_retries=0,
                            runtime_env={"env_vars": env_vars})(ActorBody)
        self._actors = [remote.remote(i, make_policy, make_env, layout, threads, callbacks, tuple(extras or {}))
                        for i in range(num_actors)]
        self._seeds = {i: incarnations.start(i)[1] for i in range(num_actors)}  # sent with each request
        self._pending: dict[ObjectRef[Batch], int] = {}
        self._retry_at: dict[int, float] = {}
        self._restarting: dict[int, float] = {}  # actor id -> when its failure was seen (until it answers)
        for actor_id in range(num_actors):
            self._request(actor_id)

    # ray.remote(...)(ActorBody) gives handles whose methods' .remote() mypy cannot see (ray types a handle's
    # methods through @ray.method, which this module cannot apply without importing Ray): hence the ignores below

    def _request(self, actor_id: int) -> None:
        ref: ObjectRef[Batch] = self._actors[actor_id].collect.remote(  # type: ignore[attr-defined]
            [self._weights], self._version, self.steps_per_batch, self._seeds[actor_id])
        self._pending[ref] = actor_id

    def actor_pids(self) -> dict[int, int]:
        """Process id of every actor (blocks until each answers)."""
        pids = {}
        for i, actor in enumerate(self._actors):
            ref: ObjectRef[int] = actor.pid.remote()  # type: ignore[attr-defined]
            pids[i] = self._ray.get(ref)
        return pids

    def actor_nodes(self) -> dict[int, str]:
        """Ray node id of every actor (blocks until each answers)."""
        nodes = {}
        for i, actor in enumerate(self._actors):
            ref: ObjectRef[str] = actor.node_id.remote()  # type: ignore[attr-defined]
            nodes[i] = self._ray.get(ref)
        return nodes

    @property
    def restarts(self) -> int:
        """Actor failures recovered from so far (restarts granted by the restart policy)."""
        return self.restart_policy.restarts

    def collect(self) -> Experience:
        """Take every finished batch and ask its actor for the next one.

        Raises:
            ActorsFailed: an actor failed and the restart policy stops the run, or a failed actor did not
                come back within ``RESTART_TIMEOUT_S``.
        """
        ray = self._ray
        experience = Experience()
        now = time.monotonic()
        for actor_id, when in list(self._retry_at.items()):  # actors that were restarting: ask again
            if now >= when:
                del self._retry_at[actor_id]
                self._request(actor_id)
        ready, _ = ray.wait(list(self._pending), num_returns=len(self._pending), timeout=0)
        for ref in ready:
            actor_id = self._pending.pop(ref)
            try:
                windows, steps, episodes, version = ray.get(ref)
            except ray.exceptions.RayTaskError as error:  # its code raised: a failure of this incarnation
                self._failed(actor_id, error)
                continue
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as error:
                # the actor's process died (Ray restarts it): one failure, however many requests fail until it
                # answers again (a process that dies on every start is caught by RESTART_TIMEOUT_S)
                if actor_id in self._restarting:
                    self._await_restart(actor_id, error)
                else:
                    self._failed(actor_id, error)
                continue
            if self._restarting.pop(actor_id, None) is not None:
                self.log(f"Ray actor {actor_id} is back")
            if steps:
                self.restart_policy.progress(actor_id)
            experience.env_steps += steps
            experience.episodes.extend(episodes)
            if windows is not None:
                experience.windows.append((windows, self.incarnations.source_of[actor_id]))
                self.windows_per_actor[actor_id] = self.windows_per_actor.get(actor_id, 0) + len(windows["env"])
            self.weight_versions_seen[actor_id] = max(version, self.weight_versions_seen.get(actor_id, -1))
            self._request(actor_id)
        if not ready:  # nothing yet: wait briefly rather than spin
            if self._pending:
                ray.wait(list(self._pending), num_returns=1, timeout=0.01)
            else:
                time.sleep(0.01)
        return experience

    def _failed(self, actor_id: int, error: Exception) -> None:
        """A request failed: its actor's process died (Ray restarts it) or its code raised (killed here so
        that Ray restarts it, as a fresh incarnation). One failure for the policy; ask again after its back-off."""
        ray = self._ray
        if isinstance(error, ray.exceptions.RayTaskError):
            cause = getattr(error, "cause", None)  # the exception the actor's code raised
            how = f"its code raised {type(cause).__name__}: {cause}" if cause is not None else "its code raised"
            ray.kill(self._actors[actor_id], no_restart=False)
        else:
            how = f"{type(error).__name__}: {str(error).strip().splitlines()[0][:160] if str(error).strip() else ''}"
        # a RayTaskError is the actor's own code failing; a dead process cannot be told from an outside kill
        crashed = isinstance(error, ray.exceptions.RayTaskError)
        restart = self.restart_policy.failed(actor_id, how, crashed)  # raises ActorsFailed: the run stops
        self._restarting[actor_id] = time.monotonic()
        _, self._seeds[actor_id] = self.incarnations.start(actor_id, restart=True)
        self.log(f"Ray actor {actor_id} failed ({how}); Ray restarts it and its batch is requested again in "
                 f"{restart.delay_s:g} s ({restart.budget})")
        self._retry_at[actor_id] = time.monotonic() + restart.delay_s

    def _await_restart(self, actor_id: int, error: Exception) -> None:
        """A request to an actor Ray is restarting failed: ask again shortly, for at most ``RESTART_TIMEOUT_S``."""
        if time.monotonic() - self._restarting[actor_id] > RESTART_TIMEOUT_S:
            raise ActorsFailed(f"Ray actor {actor_id} did not come back within {RESTART_TIMEOUT_S:.0f} s of failing: "
                               f"{error}") from None
        self._retry_at[actor_id] = time.monotonic() + 0.5

    def publish(self, variables: Sequence[keras.Variable], updates: int) -> None:
        """One ``ray.put`` of the weights every ``publish_every`` updates; actors fetch it on their next batch."""
        if updates - self._published_at >= self.publish_every:
            self._weights = self._ray.put(flatten_weights(variables))
            self._version += 1
            self._published_at = updates

    @property
    def weight_lag(self) -> float:
        """Updates the most out-of-date live actor's weights are behind the newest (publishes x ``publish_every``)."""
        if not self.weight_versions_seen:
            return float("nan")
        return float((self._version - min(self.weight_versions_seen.values())) * self.publish_every)

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
        self._actors, self._pending, self._retry_at = [], {}, {}
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()
