"""The restart policy both actor pools share: a rate budget, failures in a row without progress, back-off.

Table-driven on a fake clock: each case is a list of events (``("fail", actor, at_seconds)`` or
``("progress", actor)``) and what the policy must answer to the last failure."""

from __future__ import annotations

import signal

import pytest

from r2d2kit.runners.restarts import ActorsFailed, RestartPolicy, describe_exit


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def replay_events(policy: RestartPolicy, clock: FakeClock, events) -> list[float]:
    """Run the events; return the back-off of every failure that was granted a restart."""
    delays = []
    for event in events:
        if event[0] == "progress":
            policy.progress(event[1])
            continue
        _, actor_id, at, *how = event
        clock.now = at
        how = how[0] if how else "exit code 1"
        delays.append(policy.failed(actor_id, how, crashed=not killed_from_outside_text(how)).delay_s)
    return delays


def killed_from_outside_text(how: str) -> bool:
    return how == "signal SIGKILL"


def make(**kwargs) -> tuple[RestartPolicy, FakeClock]:
    clock = FakeClock()
    return RestartPolicy(**{"max_restarts": 3, "window_s": 60.0, "max_consecutive_failures": 3, "backoff_s": 1.0,
                            "max_backoff_s": 5.0, "clock": clock, **kwargs}), clock


def test_sporadic_kills_over_a_week_never_spend_the_budget():
    """A kill every 30 minutes for a week, alternating actors, each after progress: never a stop."""
    policy, clock = make()
    events = []
    for k in range(7 * 24 * 2):
        events += [("progress", k % 2), ("fail", k % 2, k * 1800.0)]
    delays = replay_events(policy, clock, events)
    assert len(delays) == 7 * 24 * 2 and set(delays) == {1.0} and policy.restarts == 7 * 24 * 2


@pytest.mark.parametrize("name, events, message", [
    ("a crash loop: three failures of one actor without progress",
     [("fail", 1, 0.0), ("fail", 1, 5.0), ("fail", 1, 12.0)],
     r"actor 1 crashed \(exit code 1\) 3 time\(s\) in a row without delivering .*max_consecutive_failures=3"),
    ("four restarts within 60 s over two actors, each after progress",
     [("progress", 0), ("fail", 0, 0.0), ("progress", 1), ("fail", 1, 10.0), ("progress", 0), ("fail", 0, 20.0),
      ("progress", 1), ("fail", 1, 59.0)],
     r"restart budget is spent: 3 restarts within the last 60 s \(actors.max_restarts=3 within "
     r"actors.restart_window_s=60\)"),
])
def test_a_crash_loop_or_too_many_restarts_too_fast_stop_the_run(name, events, message):
    policy, clock = make()
    with pytest.raises(ActorsFailed, match=message):
        replay_events(policy, clock, events)


def test_the_window_slides_and_progress_resets_the_count_in_a_row():
    policy, clock = make()
    # 3 restarts in the first minute, then a fourth once the first has left the window
    replay_events(policy, clock, [("fail", 0, 0.0), ("progress", 0), ("fail", 0, 30.0), ("progress", 0),
                                  ("fail", 0, 50.0), ("progress", 0), ("fail", 0, 60.0)])
    assert policy.restarts == 4
    # two failures in a row, progress, then two more: never three in a row
    policy, clock = make(max_restarts=100)
    replay_events(policy, clock, [("fail", 1, 0.0), ("fail", 1, 1.0), ("progress", 1), ("fail", 1, 2.0),
                                  ("fail", 1, 3.0)])
    assert policy.restarts == 4


def test_sigkills_in_a_row_are_never_a_crash_loop_but_grow_the_back_off_and_spend_the_rate_budget():
    """SIGKILLs come from outside (the OOM killer, an operator): an actor killed while starting, again and again,
    is retried with a growing back-off; only the rate budget stops such a storm."""
    policy, clock = make(max_restarts=5)
    delays = replay_events(policy, clock, [("fail", 0, 20.0 * k, "signal SIGKILL") for k in range(8)])
    assert delays == [1.0, 2.0, 4.0, 5.0, 5.0, 5.0, 5.0, 5.0]  # never 3 crashes in a row; 3 per 60 s < 5
    with pytest.raises(ActorsFailed, match="restart budget is spent"):
        replay_events(policy, clock, [("fail", 1, 161.0 + k, "signal SIGKILL") for k in range(4)])  # 120, 140 + 4
    policy, clock = make()  # a kill between crashes still leaves them in a row
    with pytest.raises(ActorsFailed, match=r"crashed \(exit code 1\) 3 time\(s\) in a row"):
        replay_events(policy, clock, [("fail", 0, 0.0), ("fail", 0, 1.0, "signal SIGKILL"), ("fail", 0, 2.0),
                                      ("fail", 0, 3.0)])


def test_the_back_off_doubles_with_each_failure_in_a_row_up_to_its_cap():
    policy, clock = make(max_restarts=100, max_consecutive_failures=10)
    delays = replay_events(policy, clock, [("fail", 0, float(t)) for t in range(6)])
    assert delays == [1.0, 2.0, 4.0, 5.0, 5.0, 5.0]
    assert policy.failed(1, "exit code 1").budget == "restart 7 of 100 within 60 s; crash 1 in a row of 10"


def test_no_restart_budget_stops_at_the_first_failure_and_bad_settings_are_refused():
    policy, _ = make(max_restarts=0)
    with pytest.raises(ActorsFailed, match="restart budget is spent: 0 restarts"):
        policy.failed(0, "exit code 1")
    with pytest.raises(ValueError, match="max_consecutive_failures >= 1"):
        RestartPolicy(max_consecutive_failures=0)


@pytest.mark.parametrize("code, words", [(-signal.SIGKILL, "signal SIGKILL"), (-signal.SIGSEGV, "signal SIGSEGV"),
                                         (1, "exit code 1"), (None, "an unknown cause")])
def test_describe_exit_names_the_signal_or_the_code(code, words):
    assert describe_exit(code) == words
