"""NStepAccumulator vs hand-written cases, a brute-force per-episode reference, and a real vector env.

The reference (``reference_buffers.expected_nstep_transitions``) cuts each env's log into episodes
and writes every window out as a closed-form sum (SB3's ``compute_expected_nstep_reward``); the
accumulator computes the same incrementally, one vector step at a time.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference_buffers import expected_nstep_transitions

from r2d2kit.replay import NStepAccumulator, ReplayBuffer

KEYS = ("obs", "action", "reward", "next_obs", "discount", "env")


def rows(out: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    count = out["env"].shape[0]
    assert all(out[key].shape[0] == count for key in KEYS)
    return [{key: out[key][i] for key in KEYS} for i in range(count)]


def key_of(row: dict[str, Any]) -> tuple:
    return (int(row["env"]), np.asarray(row["obs"]).tobytes(), np.asarray(row["action"]).tobytes(),
            np.asarray(row["next_obs"]).tobytes())


def assert_same_transitions(got: list[dict[str, Any]], expected: list[dict[str, Any]], where: str) -> None:
    """Same multiset of transitions (obs/action/next_obs exactly, reward/discount to float32 precision)."""
    got_by_key = {key_of(row): row for row in got}
    want_by_key = {key_of(row): row for row in expected}
    assert len(got_by_key) == len(got), f"{where}: a transition was emitted twice"
    assert got_by_key.keys() == want_by_key.keys(), f"{where}: emitted {len(got)} transitions, expected {len(expected)}"
    for key, want in want_by_key.items():
        row = got_by_key[key]
        assert float(row["reward"]) == pytest.approx(want["reward"], rel=1e-6, abs=1e-5), where
        assert float(row["discount"]) == pytest.approx(want["discount"], rel=1e-6, abs=1e-12), where


def run_accumulator(acc: NStepAccumulator, log: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    outputs = []
    for call in log:
        out = acc.step(call["obs"], call["action"], call["reward"], call["next_obs"], call["terminated"],
                       call["truncated"])
        assert out["reward"].dtype == np.float32 and out["discount"].dtype == np.float32
        assert out["env"].dtype == np.int64
        assert out["obs"].dtype == call["obs"].dtype and out["next_obs"].dtype == call["obs"].dtype
        assert out["obs"].shape[1:] == call["obs"].shape[1:] and out["action"].shape[1:] == call["action"].shape[1:]
        outputs.append(out)
    return outputs


def check_against_reference(log, outputs, acc, n_step, gamma, mode) -> None:
    expected, pending = expected_nstep_transitions(log, acc.num_envs, n_step, gamma, mode)
    for c, (out, want) in enumerate(zip(outputs, expected)):
        assert_same_transitions(rows(out), want, where=f"call {c}")
    np.testing.assert_array_equal(acc.pending(), pending)


# =====================================================================================================
# Hand-checked cases (Acme test_cases style): one env, scalar observations
# =====================================================================================================

# Each step: (obs, reward, next_obs, terminated, truncated). The action taken is 10 * obs.
# Each expected transition: (obs, reward, next_obs, discount), listed under the call that emits it.
HAND_CASES = {
    "full_windows_then_termination": dict(
        n_step=3, gamma=0.5, mode="next_step",
        steps=[(0, 1.0, 1, False, False), (1, 2.0, 2, False, False), (2, 3.0, 3, False, False),
               (3, 4.0, 4, True, False)],
        emitted=[[], [],
                 [(0, 1 + 0.5 * 2 + 0.25 * 3, 3, 0.125)],
                 [(1, 2 + 0.5 * 3 + 0.25 * 4, 4, 0.0), (2, 3 + 0.5 * 4, 4, 0.0), (3, 4.0, 4, 0.0)]],
    ),
    "truncation_bootstraps_with_shorter_discounts": dict(
        n_step=3, gamma=0.5, mode="next_step",
        steps=[(0, 1.0, 1, False, False), (1, 2.0, 2, False, False), (2, 3.0, 3, False, False),
               (3, 4.0, 4, False, True)],
        emitted=[[], [],
                 [(0, 2.75, 3, 0.125)],
                 [(1, 4.5, 4, 0.125), (2, 5.0, 4, 0.25), (3, 4.0, 4, 0.5)]],
    ),
    "episode_shorter_than_n": dict(
        n_step=5, gamma=0.9, mode="next_step",
        steps=[(0, 1.0, 1, False, False), (1, -2.0, 2, True, False)],
        emitted=[[], [(0, 1 - 0.9 * 2, 2, 0.0), (1, -2.0, 2, 0.0)]],
    ),
    "one_step_transitions": dict(
        n_step=1, gamma=0.9, mode="next_step",
        steps=[(0, 1.0, 1, False, False), (1, 2.0, 2, False, True), (2, 0.0, 7, False, False),
               (7, 3.0, 8, True, False)],
        emitted=[[(0, 1.0, 1, 0.9)], [(1, 2.0, 2, 0.9)], [], [(7, 3.0, 8, 0.0)]],
    ),
    "next_step_autoreset_skips_the_reset_step": dict(
        n_step=2, gamma=0.5, mode="next_step",
        steps=[(0, 1.0, 1, False, False), (1, 2.0, 2, True, False),
               (2, 100.0, 10, False, False),  # reset step: obs = final obs, next_obs = reset obs; ignored
               (10, 3.0, 11, False, False), (11, 4.0, 12, False, True)],
        emitted=[[], [(0, 2.0, 2, 0.0), (1, 2.0, 2, 0.0)], [], [], [(10, 5.0, 12, 0.25), (11, 4.0, 12, 0.5)]],
    ),
    "same_step_autoreset_keeps_every_step": dict(
        n_step=2, gamma=0.5, mode="same_step",
        steps=[(0, 1.0, 1, False, False), (1, 2.0, 99, True, False),  # next_obs = infos["final_obs"]
               (10, 3.0, 11, False, False), (11, 4.0, 12, False, False)],
        emitted=[[], [(0, 2.0, 99, 0.0), (1, 2.0, 99, 0.0)], [], [(10, 5.0, 12, 0.25)]],
    ),
    "terminated_and_truncated_together_means_terminal": dict(
        n_step=2, gamma=0.5, mode="next_step",
        steps=[(0, 1.0, 1, False, False), (1, 2.0, 2, True, True)],
        emitted=[[], [(0, 2.0, 2, 0.0), (1, 2.0, 2, 0.0)]],
    ),
    "gamma_zero_keeps_only_the_first_reward": dict(
        n_step=3, gamma=0.0, mode="next_step",
        steps=[(0, 1.0, 1, False, False), (1, 2.0, 2, False, False), (2, 3.0, 3, False, False),
               (3, 4.0, 4, False, True)],
        emitted=[[], [], [(0, 1.0, 3, 0.0)], [(1, 2.0, 4, 0.0), (2, 3.0, 4, 0.0), (3, 4.0, 4, 0.0)]],
    ),
}


@pytest.mark.parametrize("name", list(HAND_CASES))
def test_hand_checked_case(name):
    case = HAND_CASES[name]
    acc = NStepAccumulator(1, case["n_step"], case["gamma"], autoreset_mode=case["mode"])
    for c, ((obs, reward, next_obs, terminated, truncated), want) in enumerate(zip(case["steps"], case["emitted"])):
        out = acc.step(np.array([obs], np.float32), np.array([10 * obs]), np.array([reward]),
                       np.array([next_obs], np.float32), np.array([terminated]), np.array([truncated]))
        expected = [{"env": 0, "obs": np.float32(o), "action": np.int64(10 * o), "reward": r,
                     "next_obs": np.float32(n), "discount": d} for o, r, n, d in want]
        assert_same_transitions(rows(out), expected, where=f"{name}, call {c}")


def test_hand_checked_case_matches_the_reference_too():
    """The brute-force reference agrees with the hand-written table (so the table checks the reference)."""
    for name, case in HAND_CASES.items():
        log = [{"obs": np.array([o], np.float32), "action": np.array([10 * o]), "reward": np.array([r]),
                "next_obs": np.array([n], np.float32), "terminated": np.array([te]), "truncated": np.array([tr])}
               for o, r, n, te, tr in case["steps"]]
        expected, _ = expected_nstep_transitions(log, 1, case["n_step"], case["gamma"], case["mode"])
        for c, (got, want) in enumerate(zip(expected, case["emitted"])):
            table = [{"env": 0, "obs": np.float32(o), "action": np.int64(10 * o), "reward": r,
                      "next_obs": np.float32(n), "discount": d} for o, r, n, d in want]
            assert_same_transitions(got, table, where=f"{name}, call {c}")


# =====================================================================================================
# Random multi-env rollouts vs the reference
# =====================================================================================================


def fake_rollout(seed: int, num_envs: int, num_calls: int, mode: str, max_len: int,
                 action_shape: tuple[int, ...]) -> list[dict[str, np.ndarray]]:
    """A vector env that follows gymnasium's autoreset protocol, with unique observations.

    Observations are ``[uid, env]``; episodes last 1 .. max_len steps and end terminated or
    truncated at random. ``next_step``: after an end, the env's next step returns the reset
    observation (with a large reward that must be ignored). ``same_step``: the step that ends an
    episode passes the final observation as ``next_obs``, and the next step starts from a reset one.
    """
    rng = np.random.default_rng(seed)
    uid = iter(range(1, 10**9))
    current = [float(next(uid)) for _ in range(num_envs)]
    remaining = rng.integers(1, max_len + 1, size=num_envs)
    needs_reset = np.zeros(num_envs, dtype=bool)
    log = []
    for _ in range(num_calls):
        call = {"obs": np.zeros((num_envs, 2), np.float32), "next_obs": np.zeros((num_envs, 2), np.float32),
                "action": rng.normal(size=(num_envs,) + action_shape) if action_shape
                else rng.integers(0, 100, size=num_envs),
                "reward": rng.normal(size=num_envs), "terminated": np.zeros(num_envs, bool),
                "truncated": np.zeros(num_envs, bool)}
        for env in range(num_envs):
            call["obs"][env] = (current[env], env)
            if needs_reset[env]:  # next_step autoreset: this step only carries the reset observation
                needs_reset[env] = False
                call["reward"][env] = 1000.0
                current[env] = float(next(uid))
                call["next_obs"][env] = (current[env], env)
                remaining[env] = rng.integers(1, max_len + 1)
                continue
            final = float(next(uid))
            call["next_obs"][env] = (final, env)
            remaining[env] -= 1
            if remaining[env] == 0:
                kind = rng.integers(0, 3)  # terminated, truncated, or both
                call["terminated"][env] = kind in (0, 2)
                call["truncated"][env] = kind in (1, 2)
                if mode == "next_step":
                    needs_reset[env] = True
                    current[env] = final
                else:
                    current[env] = float(next(uid))  # the reset observation the next step starts from
                    remaining[env] = rng.integers(1, max_len + 1)
            else:
                current[env] = final
        log.append(call)
    return log


@settings(deadline=None, max_examples=150)
@given(seed=st.integers(0, 2**32 - 1), num_envs=st.integers(1, 4), n_step=st.integers(1, 5),
       gamma=st.sampled_from([0.0, 0.5, 0.9, 0.99, 1.0]), mode=st.sampled_from(["next_step", "same_step"]),
       num_calls=st.integers(0, 40), max_len=st.integers(1, 9), action_shape=st.sampled_from([(), (2,)]))
def test_random_rollouts_match_reference(seed, num_envs, n_step, gamma, mode, num_calls, max_len, action_shape):
    log = fake_rollout(seed, num_envs, num_calls, mode, max_len, action_shape)
    acc = NStepAccumulator(num_envs, n_step, gamma, autoreset_mode=mode)
    outputs = run_accumulator(acc, log)
    check_against_reference(log, outputs, acc, n_step, gamma, mode)
    if mode == "next_step":
        for out in outputs:  # no transition starts from a reset step (rewarded 1000 in the fake env)
            assert np.all(np.abs(out["reward"]) < 500)


def test_disabled_mode_behaves_like_same_step():
    log = fake_rollout(3, 3, 60, "same_step", 6, ())
    same = run_accumulator(NStepAccumulator(3, 3, 0.9, autoreset_mode="same_step"), log)
    disabled = run_accumulator(NStepAccumulator(3, 3, 0.9, autoreset_mode="disabled"), log)
    for a, b in zip(same, disabled):
        for key in KEYS:
            np.testing.assert_array_equal(a[key], b[key])


def test_reset_drops_pending_steps():
    acc = NStepAccumulator(2, 3, 0.9)
    log = fake_rollout(4, 2, 2, "next_step", 50, ())
    run_accumulator(acc, log)
    np.testing.assert_array_equal(acc.pending(), [2, 2])
    acc.reset()
    np.testing.assert_array_equal(acc.pending(), [0, 0])
    fresh = fake_rollout(5, 2, 3, "next_step", 50, ())
    outputs = run_accumulator(acc, fresh)
    assert [out["env"].size for out in outputs] == [0, 0, 2]  # windows start after the reset only
    np.testing.assert_array_equal(outputs[2]["obs"], fresh[0]["obs"])


def test_transitions_feed_a_buffer():
    acc = NStepAccumulator(2, 2, 0.9)
    buf = ReplayBuffer(64, {"obs": ((2,), "float32"), "action": ((), "int64"), "reward": ((), "float32"),
                            "next_obs": ((2,), "float32"), "discount": ((), "float32")}, "proportional", seed=0)
    for out in run_accumulator(acc, fake_rollout(6, 2, 20, "next_step", 5, ())):
        buf.add_batch(**{key: value for key, value in out.items() if key in buf.fields})
    assert len(buf) > 10


# =====================================================================================================
# A real gymnasium vector env
# =====================================================================================================


def cartpole_envs(autoreset_mode) -> gym.vector.SyncVectorEnv:
    """Three CartPoles: two with short time limits (truncations), one with the default 500 (terminations)."""
    return gym.vector.SyncVectorEnv(
        [lambda limit=limit: gym.make("CartPole-v1", max_episode_steps=limit) for limit in (9, 23, 500)],
        autoreset_mode=autoreset_mode,
    )


@pytest.mark.parametrize("n_step", [1, 3, 5])
def test_cartpole_next_step_autoreset(n_step):
    envs = cartpole_envs(gym.vector.AutoresetMode.NEXT_STEP)
    acc = NStepAccumulator(envs.num_envs, n_step, 0.97)  # default mode: next_step, gymnasium's default
    assert acc.autoreset_mode == "next_step"
    obs, _ = envs.reset(seed=0)
    envs.action_space.seed(0)
    log, outputs, finals = [], [], set()
    for _ in range(300):
        action = envs.action_space.sample()
        next_obs, reward, terminated, truncated, _ = envs.step(action)
        log.append({"obs": obs.copy(), "action": action.copy(), "reward": reward.copy(), "next_obs": next_obs.copy(),
                    "terminated": terminated.copy(), "truncated": truncated.copy()})
        outputs.append(acc.step(obs, action, reward, next_obs, terminated, truncated))
        finals.update(next_obs[e].tobytes() for e in np.flatnonzero(terminated | truncated))
        obs = next_obs
    envs.close()
    ends = np.array([[c["terminated"], c["truncated"]] for c in log]).sum(axis=(0, 2))
    assert ends[0] > 3 and ends[1] > 3, "the rollout should see both terminations and truncations"
    check_against_reference(log, outputs, acc, n_step, 0.97, "next_step")
    for out in outputs:  # a final observation never starts a transition
        assert not any(out["obs"][i].tobytes() in finals for i in range(out["env"].size))


def test_cartpole_same_step_autoreset_with_final_obs():
    envs = cartpole_envs(gym.vector.AutoresetMode.SAME_STEP)
    acc = NStepAccumulator(envs.num_envs, 3, 0.9, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    assert acc.autoreset_mode == "same_step"
    obs, _ = envs.reset(seed=1)
    envs.action_space.seed(1)
    log, outputs = [], []
    for _ in range(200):
        action = envs.action_space.sample()
        next_obs, reward, terminated, truncated, infos = envs.step(action)
        true_next = next_obs.copy()
        if "final_obs" in infos:
            for e in np.flatnonzero(infos["_final_obs"]):
                true_next[e] = infos["final_obs"][e]
        log.append({"obs": obs.copy(), "action": action.copy(), "reward": reward.copy(), "next_obs": true_next,
                    "terminated": terminated.copy(), "truncated": truncated.copy()})
        outputs.append(acc.step(obs, action, reward, true_next, terminated, truncated))
        obs = next_obs
    envs.close()
    assert sum(int(np.sum(c["terminated"] | c["truncated"])) for c in log) > 5
    check_against_reference(log, outputs, acc, 3, 0.9, "same_step")


# =====================================================================================================
# Validation
# =====================================================================================================


@pytest.mark.parametrize("kwargs, error, pattern", [
    (dict(num_envs=0, n_step=3, gamma=0.9), ValueError, "num_envs"),
    (dict(num_envs=2, n_step=0, gamma=0.9), ValueError, "n_step"),
    (dict(num_envs=2, n_step=3, gamma=1.5), ValueError, "gamma"),
    (dict(num_envs=2, n_step=3, gamma=-0.1), ValueError, "gamma"),
    (dict(num_envs=2, n_step=3, gamma=0.9, autoreset_mode="sometimes"), ValueError, "autoreset_mode"),
])
def test_constructor_validation(kwargs, error, pattern):
    with pytest.raises(error, match=pattern):
        NStepAccumulator(**kwargs)


@pytest.mark.parametrize("mode", ["next_step", "NextStep", "next-step", gym.vector.AutoresetMode.NEXT_STEP])
def test_autoreset_mode_spellings(mode):
    assert NStepAccumulator(1, 1, 0.9, autoreset_mode=mode).autoreset_mode == "next_step"


def test_step_validation():
    acc = NStepAccumulator(2, 2, 0.9)
    ok = dict(obs=np.zeros((2, 3)), action=np.zeros(2), reward=np.zeros(2), next_obs=np.zeros((2, 3)),
              terminated=np.zeros(2, bool), truncated=np.zeros(2, bool))
    for name, bad, pattern in [("reward", np.zeros(3), "reward"), ("terminated", np.zeros((2, 1)), "terminated"),
                               ("obs", np.zeros((3, 3)), "obs"), ("next_obs", np.zeros((2, 4)), "next_obs"),
                               ("action", np.zeros(3), "action")]:
        with pytest.raises(ValueError, match=pattern):
            acc.step(**{**ok, name: bad})
    acc.step(**ok)
    with pytest.raises(ValueError, match="changed"):
        acc.step(**{**ok, "obs": np.zeros((2, 5)), "next_obs": np.zeros((2, 5))})
