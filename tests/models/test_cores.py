"""Memory cores (LSTM, GRU, a user's three-state cell): one state spec, read by the actor, the windows
and the learner; the state stored with a window is the state an unroll of the episode's earlier rows
reaches, and burning in from it gives the Q-values of an unroll from the episode's start."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from r2d2kit.agent.r2d2 import QNetwork
from r2d2kit.agent.r2d2.config import R2D2Config
from r2d2kit.agent.r2d2.learner import R2D2Learner
from r2d2kit.agent.r2d2.policies import EpsilonGreedyPolicy
from r2d2kit.agent.seam import WindowLayout
from r2d2kit.envs import ensure_registered
from r2d2kit.models import MLPModel
from r2d2kit.models.cores import StateField, state_fields, state_spec
from r2d2kit.runners.acting import ActingLoop

USER_CORE = "tests.models.three_state_cell:make"
CORES = ["lstm", "gru", USER_CORE]
UNITS = 6


def make_network(core: str) -> QNetwork:
    return QNetwork((2,), 2, MLPModel((8,)), core=core, core_units=UNITS, head_units=8)


@pytest.mark.parametrize(("core", "expected"), [
    ("lstm", (StateField("h", (UNITS,)), StateField("c", (UNITS,)))),
    ("gru", (StateField("h", (UNITS,)),)),
    (USER_CORE, (StateField("a", (UNITS,)), StateField("b", (2,)), StateField("c", (3,)))),
])
def test_the_state_spec_names_every_state_tensor_and_windows_store_it_as_state_fields(core, expected):
    network = make_network(core)
    assert network.state_spec() == expected
    assert list(state_fields(expected)) == [f"state_{field.name}" for field in expected]
    assert [part.shape for part in network.zero_state(4)] == [(4,) + field.shape for field in expected]
    layout = WindowLayout(burn_in=1, trace_length=2, n_step=1, period=1)
    assert R2D2Learner(network, R2D2Config(), layout).state_keys == tuple(state_fields(expected))


def sequence_unroll(network: QNetwork, obs, prev_action, prev_reward):
    """Q ``[T, A]`` and the state before every row (``[T + 1]`` per part) of one episode, unrolled from zeros one
    row at a time through the sequence model (the learner's model, not the actor's step)."""
    state = network.zero_state(1)
    q_rows, states = [], [state]
    for t in range(len(obs)):
        q, *state = network.model([obs[None, t:t + 1], prev_action[None, t:t + 1], prev_reward[None, t:t + 1],
                                   np.ones((1, 1), bool), *state])
        state = [np.asarray(part) for part in state]
        q_rows.append(np.asarray(q)[0, 0])
        states.append(state)
    return np.array(q_rows), states


@pytest.mark.parametrize("backend", ["numpy", "keras"])
@pytest.mark.parametrize("core", CORES)
def test_an_actor_step_by_step_matches_the_sequence_model(core, backend):
    network = make_network(core)
    if backend == "numpy" and core == USER_CORE:
        with pytest.raises(ValueError, match="not a Keras LSTMCell or GRUCell"):
            network.actor(3, backend="numpy")
        assert network.actor(3).backend == "keras"  # auto falls back, saying why
        return
    actor = network.actor(3, backend=backend)
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(3, 7, 2)).astype(np.float32)
    prev_action = rng.integers(0, 2, (3, 7)).astype(np.int32)
    prev_reward = rng.normal(size=(3, 7)).astype(np.float32)
    stepped = np.stack([actor.q_values(obs[:, t], prev_action[:, t], prev_reward[:, t]) for t in range(7)], axis=1)
    q, *final = network.model([obs, prev_action, prev_reward, np.ones((3, 7), bool), *network.zero_state(3)])
    np.testing.assert_allclose(stepped, np.asarray(q), rtol=1e-5, atol=1e-5)
    for mine, theirs in zip(actor.get_state(), final, strict=True):
        np.testing.assert_allclose(mine, np.asarray(theirs), rtol=1e-5, atol=1e-5)


def episodes_of(windows: list[dict]) -> dict[tuple[int, int], dict[int, tuple]]:
    """``(env, episode) -> {t: (obs, prev_action, prev_reward)}`` from every row the windows hold."""
    rows: dict[tuple[int, int], dict[int, tuple]] = {}
    for batch in windows:
        for w in range(len(batch["env"])):
            episode = rows.setdefault((int(batch["env"][w]), int(batch["episode"][w])), {})
            for i in np.flatnonzero(batch["obs_mask"][w]):
                episode[int(batch["start"][w]) + int(i)] = (batch["obs"][w, i], batch["prev_action"][w, i],
                                                            batch["prev_reward"][w, i])
    return rows


@pytest.mark.parametrize("core", CORES)
def test_stored_states_are_the_unrolled_states_and_burn_in_from_them_matches_a_full_unroll(core):
    """Windows from the acting loop on CueMemory: the state stored with each window equals the state an
    unroll of the episode's earlier rows with the acting weights reaches, and the learner's Q after burn-in
    from it equals the Q of an unroll from the episode's start (brute force, one row at a time)."""
    ensure_registered("CueMemory-v0")
    network = make_network(core)
    layout = WindowLayout(burn_in=2, trace_length=3, n_step=1, period=2)
    config = R2D2Config()
    policy = EpsilonGreedyPolicy(network.actor(2, follow_weights=False), np.full(2, 0.5), seed=3)
    loop = ActingLoop.build(lambda: gym.make("CueMemory-v0", delay=3), policy, layout, seed=3)
    windows = [out for out in (loop.step()[0] for _ in range(60)) if out is not None]
    loop.close()
    episodes = episodes_of(windows)
    learner = R2D2Learner(network, config, layout)
    keys = learner.state_keys
    checked = 0
    for batch in windows:
        inputs = learner.inputs(dict(batch, weights=np.ones(len(batch["env"]), np.float32)))
        q_after_burn_in = np.asarray(learner._unroll_after_burn_in(
            network.model, inputs, slice(0, layout.burn_in), slice(layout.burn_in, None), learner.stored_state(inputs)))
        for w in range(len(batch["env"])):
            rows = episodes[(int(batch["env"][w]), int(batch["episode"][w]))]
            start, first = int(batch["start"][w]), max(int(batch["start"][w]), 0)
            known = sorted(rows)
            assert known == list(range(len(known)))  # every row of the episode is in some window
            obs, prev_action, prev_reward = (np.array([rows[t][i] for t in known]) for i in range(3))
            q, states = sequence_unroll(network, obs, prev_action, prev_reward)
            for key, part in zip(keys, states[first], strict=True):
                np.testing.assert_allclose(batch[key][w], part[0], rtol=1e-5, atol=1e-6)
            for i in range(layout.trace_length + layout.n_step):
                t = start + layout.burn_in + i
                if batch["obs_mask"][w, layout.burn_in + i]:
                    np.testing.assert_allclose(q_after_burn_in[w, i], q[t], rtol=1e-4, atol=1e-5)
                    checked += 1
    assert checked > 100 and any(batch["start"].max() > 0 for batch in windows)  # windows after an episode's start


class DeclaredCell:
    """Just what state_spec reads of a cell: its state_size and optional state_names."""

    def __init__(self, state_size, state_names=None) -> None:
        self.state_size = state_size
        if state_names is not None:
            self.state_names = state_names


@pytest.mark.parametrize(("cell", "expected"), [
    (DeclaredCell(5), (StateField("0", (5,)),)),
    (DeclaredCell([4, (2, 3)]), (StateField("0", (4,)), StateField("1", (2, 3)))),
    (DeclaredCell([4, 2], ("fast", "slow")), (StateField("fast", (4,)), StateField("slow", (2,)))),
])
def test_a_users_state_spec_comes_from_its_state_size_and_names(cell, expected):
    assert state_spec(cell, "my.module:make") == expected


@pytest.mark.parametrize(("cell", "message"), [
    (DeclaredCell([4, 2], ("a",)), r"must name each of its 2 state tensors once"),
    (DeclaredCell([4, 2], ("a", "a")), r"must name each of its 2 state tensors once"),
    (DeclaredCell([4], ("a-b",)), r"state_names \['a-b'\] do not make field names"),
    (DeclaredCell([0]), r"empty or zero-sized entry"),
])
def test_a_state_spec_that_windows_could_not_store_is_refused(cell, message):
    with pytest.raises(ValueError, match=message):
        state_spec(cell, "my.module:make")
