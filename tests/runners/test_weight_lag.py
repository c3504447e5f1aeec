"""The weight lag the processes and Ray pools report in ``health.csv``: updates between the newest broadcast and
the oldest weights an actor acted with."""

import math

from r2d2kit.runners.weights import weight_lag


def test_the_lag_is_the_oldest_actors_publishes_behind_times_the_publish_period():
    # version 7 published; actor 0 acted with version 7, actor 1 with 4: 3 publishes of 10 updates behind
    assert weight_lag(7, {0: 7, 1: 4}, publish_every=10) == 30.0
    assert weight_lag(7, {0: 7, 1: 7}, publish_every=10) == 0.0


def test_no_lag_is_known_before_any_actor_reported_a_version():
    assert math.isnan(weight_lag(3, {}, publish_every=10))
