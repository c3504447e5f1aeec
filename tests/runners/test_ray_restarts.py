"""The Ray pool's restart policy, on a fake ``ray`` module (no Ray started: seconds, not minutes).

Each fake actor answers requests from a script of outcomes: a batch, its code raising (``RayTaskError``),
its process dying (``ActorUnavailableError``, the same words for a SIGKILL and a segfault), a request that
reached a process Ray is restarting, or its constructor raising (``ActorDiedError``, dead for good). Ray's
restart count of each actor (its GCS table) counts every process death, including those no request saw."""

from __future__ import annotations

import itertools
import re
import sys
import types

import numpy as np
import pytest

from r2d2kit.runners import ray_actors
from r2d2kit.runners.pool import Incarnations
from r2d2kit.runners.restarts import ActorsFailed, RestartPolicy


class RayError(Exception):
    pass


class RayTaskError(RayError):
    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


class RayActorError(RayError):
    def __init__(self, message: str, actor_init_failed: bool = False) -> None:
        super().__init__(message)
        self.actor_init_failed = actor_init_failed


class ActorUnavailableError(RayActorError):
    pass


class ActorDiedError(RayActorError):
    pass


BATCH = "batch"
RAISES = RayTaskError(RuntimeError("the env fails on its first step"))
DIES = ActorUnavailableError("The actor is temporarily unavailable: RpcError: Socket closed")
RESTARTING = ActorUnavailableError("The actor is temporarily unavailable: IOError: The actor is restarting..")
INIT_FAILS = ActorDiedError("The actor died because of an error raised in its creation task, ray::ActorBody.__init__()"
                            "\n  File ...\nImportError: no module named 'gym_broken'", actor_init_failed=True)


class UnseenDeath:
    """A kill of the process Ray is restarting: Ray's table counts one more restart; the request reads ``then``."""

    def __init__(self, then: object) -> None:
        self.then = then


class FakeRay(types.ModuleType):
    """What RayActors calls; ``scripts[actor_id]`` is the outcomes of that actor's requests, in order (then batches)."""

    def __init__(self, scripts: dict[int, list]) -> None:
        super().__init__("ray")
        self.exceptions = types.SimpleNamespace(RayTaskError=RayTaskError, RayActorError=RayActorError,
                                                ActorUnavailableError=ActorUnavailableError,
                                                ActorDiedError=ActorDiedError)
        self.scripts = {actor_id: iter(outcomes) for actor_id, outcomes in scripts.items()}
        self.requests: list[tuple[int, int]] = []  # (actor id, seed) of every request
        self.created: list[int] = []  # actor id of every actor created
        self.killed: list[tuple[int, bool]] = []
        self.refs = itertools.count()
        self.outcomes: dict[int, object] = {}
        self.restart_counts: dict[str, int] = {}  # Ray's GCS table: handle id -> NumRestarts
        self.handles = itertools.count()
        self._private = types.SimpleNamespace(state=types.SimpleNamespace(actors=self.actor_table))

    def actor_table(self, actor_id: str) -> dict:
        return {"NumRestarts": self.restart_counts.get(actor_id, 0)}

    def is_initialized(self) -> bool:
        return True  # the pool neither starts nor shuts down Ray

    def put(self, value):
        return value

    def remote(self, **options):
        ray = self

        def wrap(body):
            class Remote:
                @staticmethod
                def remote(actor_id, *arguments):
                    ray.created.append(actor_id)
                    return FakeHandle(ray, actor_id)
            return Remote
        return wrap

    def wait(self, refs, num_returns, timeout):
        return list(refs), []

    def get(self, ref):
        outcome = self.outcomes.pop(ref)
        if isinstance(outcome, Exception):
            raise outcome
        windows = {"env": np.zeros(2)}
        return windows, 100, [], 0

    def kill(self, handle, no_restart):
        self.killed.append((handle.actor_id, no_restart))


class FakeHandle:
    def __init__(self, ray: FakeRay, actor_id: int) -> None:
        self.ray, self.actor_id = ray, actor_id
        key = f"handle-{next(ray.handles)}"  # a new handle (an actor created again) has its own restart count
        self._actor_id = types.SimpleNamespace(hex=lambda: key)
        self.collect = types.SimpleNamespace(remote=self.request)

    def request(self, weights, version, steps, seed):
        ref = next(self.ray.refs)
        self.ray.requests.append((self.actor_id, seed))
        outcome = next(self.ray.scripts[self.actor_id], BATCH)
        key = self._actor_id.hex()
        if isinstance(outcome, UnseenDeath):
            self.ray.restart_counts[key] = self.ray.restart_counts.get(key, 0) + 1
            outcome = outcome.then
        if outcome is DIES:
            self.ray.restart_counts[key] = self.ray.restart_counts.get(key, 0) + 1
        self.ray.outcomes[ref] = outcome
        return ref


class FakeVariable:
    def numpy(self) -> np.ndarray:
        return np.zeros(3, np.float32)


class FakeNetwork:
    variables = [FakeVariable()]


def pool_on(monkeypatch, scripts: dict[int, list], **policy) -> tuple[ray_actors.RayActors, FakeRay, list[str]]:
    ray = FakeRay(scripts)
    monkeypatch.setitem(sys.modules, "ray", ray)
    monkeypatch.setattr(ray_actors, "RETRY_S", 0.0)
    log: list[str] = []
    pool = ray_actors.RayActors(None, None, None, variables=FakeNetwork().variables,
                                incarnations=Incarnations(seed=0), num_actors=2,
                                restart_policy=RestartPolicy(backoff_s=0.0, **policy), log=log.append)
    return pool, ray, log


def collect_until_stopped(pool: ray_actors.RayActors, rounds: int = 20) -> int:
    """Collect ``rounds`` times; the env steps delivered."""
    steps = 0
    for _ in range(rounds):
        steps += pool.collect().env_steps
    return steps


def test_an_env_that_raises_at_every_start_is_a_crash_loop_and_each_restart_is_a_fresh_incarnation(monkeypatch):
    pool, ray, log = pool_on(monkeypatch, {0: [], 1: [RAISES] * 10})
    with pytest.raises(ActorsFailed, match=r"actor 1 crashed \(its code raised RuntimeError: the env fails on its "
                                           r"first step\) 3 time\(s\) in a row .*max_consecutive_failures=3"):
        collect_until_stopped(pool)
    seeds = [seed for actor_id, seed in ray.requests if actor_id == 1]
    assert seeds == [1000, 1001, 1002]  # three incarnations, each with its own seed
    assert ray.created == [0, 1] and ray.killed == []  # restarted in its process: no new process, no Ray restart
    assert [re.sub(r" \(.*", "", line) for line in log] == ["Ray actor 1 failed"] * 2
    assert "it starts a fresh incarnation" in log[0] and pool.restarts == 2


def test_process_deaths_count_once_each_never_as_a_crash_and_a_restarting_process_is_no_new_death(monkeypatch):
    """SIGKILLs and segfaults read the same on Ray: deaths in a row grow the back-off and spend the rate budget,
    never stop the run as a crash loop; requests that reach a process Ray is still restarting are not counted."""
    pool, ray, log = pool_on(monkeypatch, {0: [], 1: [DIES, RESTARTING, RESTARTING, DIES, DIES, DIES]})
    steps = collect_until_stopped(pool, rounds=30)
    assert pool.restarts == 4 and len(log) == 5  # 4 deaths; "is back" once it answered
    assert all("its process died (ActorUnavailableError" in line for line in log[:4]) and log[4] == \
        "Ray actor 1 is back"
    assert pool.windows_per_actor[1] > 0 and steps > 0
    pool, ray, log = pool_on(monkeypatch, {0: [], 1: [DIES] * 20}, max_restarts=5)
    with pytest.raises(ActorsFailed, match=r"restart budget is spent: 5 restarts within the last 60 s"):
        collect_until_stopped(pool, rounds=30)


@pytest.mark.parametrize("table", [True, False])
def test_a_process_killed_again_while_ray_restarts_it_is_counted_from_rays_restart_table(monkeypatch, table):
    """No request reaches a process killed while Ray is still restarting it: the pool counts that death from
    Ray's own restart count, whether a later request still finds it restarting or finds it back; without the
    table (unreadable) each failure seen counts once."""
    script = [DIES, UnseenDeath(RESTARTING), RESTARTING, UnseenDeath(BATCH), BATCH, DIES]
    pool, ray, log = pool_on(monkeypatch, {0: [], 1: script})
    if not table:
        del ray._private
    collect_until_stopped(pool, rounds=30)
    died_again = [line for line in log if "its process died again while Ray restarted it" in line]
    if table:
        assert pool.restarts == 4 and len(died_again) == 2
        assert "Ray has restarted it 2 time(s)" in died_again[0] and "Ray has restarted it 3 time(s)" in died_again[1]
        assert "restart 2 of 10 within 60 s" in died_again[0]
    else:
        assert pool.restarts == 2 and died_again == []
    assert [line for line in log if line == "Ray actor 1 is back"] == ["Ray actor 1 is back"] * 2


def test_a_process_that_never_answers_after_a_failure_stops_the_run_after_restart_timeout(monkeypatch):
    monkeypatch.setattr(ray_actors, "RESTART_TIMEOUT_S", 0.0)
    pool, ray, log = pool_on(monkeypatch, {0: [], 1: [DIES] + [RESTARTING] * 20})
    with pytest.raises(ActorsFailed, match=r"Ray actor 1 did not answer within 0 s of failing"):
        collect_until_stopped(pool)
    assert pool.restarts == 1


def test_a_constructor_that_raises_is_a_crash_and_the_actor_is_created_again(monkeypatch):
    """Ray never restarts an actor whose constructor raised: the pool creates it again, after the back-off."""
    pool, ray, log = pool_on(monkeypatch, {0: [], 1: [INIT_FAILS] * 10})
    with pytest.raises(ActorsFailed, match=r"actor 1 crashed \(its constructor raised ImportError: no module named "
                                           r"'gym_broken'\) 3 time\(s\) in a row"):
        collect_until_stopped(pool)
    assert ray.created == [0, 1, 1, 1] and ray.killed == [(1, True), (1, True)]
    assert "a new actor is created" in log[0]


def test_supervise_judges_failures_but_holds_batches_until_collect(monkeypatch):
    """Between updates the pool restarts failed actors; an actor whose batch arrived is asked again only by
    collect() (one request in flight: it waits for the learner)."""
    pool, ray, log = pool_on(monkeypatch, {0: [], 1: [RAISES]})
    pool.supervise()  # actor 0's batch held; actor 1's failure counted, asked again once its back-off (0 s) ended
    assert pool.restarts == 1 and len(ray.requests) == 2
    pool.supervise()
    assert ray.requests[-1] == (1, 1001) and len(ray.requests) == 3  # the fresh incarnation asked; it delivers
    pool.supervise()
    assert len(ray.requests) == 3  # both batches held, nobody asked
    experience = pool.collect()  # the two held batches, then (the fake answers at once) one more from each
    assert experience.env_steps == 400 and [source for _, source in experience.windows] == [0, 2, 0, 2]
    assert len(ray.requests) == 7
