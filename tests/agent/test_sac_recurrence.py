"""Recurrent SAC's state: the learner's burn-in from a stored state reproduces a full unroll from the
episode's start (a numpy LSTM written here), the acting policy keeps the states windows store and resets
them by mask, and weights travel by checkpoint and by published vector unchanged."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from r2d2kit.agent.sac.config import SACConfig
from r2d2kit.agent.sac.learner import SACLearner
from r2d2kit.agent.sac.networks import SACNetworks, make_sac_networks, sac_networks_factory
from r2d2kit.agent.sac.policy import SACPolicy, make_sac_policy
from r2d2kit.agent.seam import Learner, Policy, WindowLayout
from r2d2kit.models.encoders import MLPModel
from r2d2kit.runners.weights import flatten_weights
from r2d2kit.training.checkpoint import CheckpointError, load_policy_weights

LOW, HIGH = np.array([-2.0, -1.0]), np.array([2.0, 3.0])
LAYOUT = WindowLayout(burn_in=3, trace_length=3, period=3, n_step=1)
EPISODE, START = 12, 5  # the window covers rows START .. START + 6 of a 12-row episode


def build(shared: bool, units: int = 6) -> SACNetworks:
    return make_sac_networks((3,), LOW, HIGH, encoder=MLPModel((5,)), core="lstm", core_units=units,
                             hidden_units=(8,), shared_core=shared)


@pytest.fixture(scope="module", params=[False, True], ids=["separate-cores", "shared-core"])
def networks(request) -> SACNetworks:
    return build(request.param)


# ---------------------------------------------------------------------------- numpy reference
def relu(x):
    return np.maximum(x, 0.0)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def numpy_dense(layer: keras.layers.Dense, x: np.ndarray, activation=None) -> np.ndarray:
    kernel, bias = (np.asarray(w.numpy(), np.float64) for w in layer.weights)
    y = x @ kernel + bias
    return activation(y) if activation else y


def numpy_body(body: keras.Model, name: str, obs, prev_action, prev_reward):
    """Hidden rows ``[T, H]`` and the (h, c) before each row, unrolled from zeros at the episode's start."""
    encoder = body.get_layer("MLPModel")
    features = obs.astype(np.float64)
    for layer in [layer for layer in encoder.layers if isinstance(layer, keras.layers.Dense)]:
        features = numpy_dense(layer, features, relu)
    x = np.concatenate([features, prev_action, prev_reward[:, None]], axis=1)
    cell = body.get_layer(f"{name}_rnn").cell
    kernel, recurrent, bias = (np.asarray(w.numpy(), np.float64) for w in (cell.kernel, cell.recurrent_kernel,
                                                                           cell.bias))
    h = c = np.zeros(cell.units)
    hidden, before = [], []
    for row in x:
        before.append((h.copy(), c.copy()))
        i, f, g, o = np.split(row @ kernel + h @ recurrent + bias, 4)  # Keras' gate order
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        h = sigmoid(o) * np.tanh(c)
        hidden.append(h)
    return np.array(hidden), before


def numpy_policy_mean(nets: SACNetworks, hidden):
    x = numpy_dense(nets.policy_head.get_layer("sac_policy_hidden0"), hidden, relu)
    return numpy_dense(nets.policy_head.get_layer("sac_policy_mean"), x)


def numpy_q1(nets: SACNetworks, hidden, action):
    x = numpy_dense(nets.q_head.get_layer("sac_q1_hidden0"), np.concatenate([hidden, action], axis=1), relu)
    return numpy_dense(nets.q_head.get_layer("sac_q1_out"), x)[:, 0]


def episode(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    action = rng.uniform(LOW, HIGH, (EPISODE, 2)).astype(np.float32)
    reward = rng.normal(size=EPISODE).astype(np.float32)
    return {"obs": rng.normal(size=(EPISODE, 3)).astype(np.float32), "action": action, "reward": reward,
            "prev_action": np.concatenate([np.zeros((1, 2), np.float32), action[:-1]]),
            "prev_reward": np.concatenate([np.zeros(1, np.float32), reward[:-1]])}


def reference(nets: SACNetworks, rows: dict[str, np.ndarray]):
    """Per row of the whole episode: the actor's mean, the first critic's Q at the taken action, and the
    policy's state before the row (the actor core's, then the critic core's), all from a zero start."""
    inputs = (rows["obs"], rows["prev_action"], rows["prev_reward"])
    if nets.shared_core:
        actor_hidden, actor_before = numpy_body(nets.actor_body, "sac_shared", *inputs)
        critic_hidden, critic_before = actor_hidden, []
    else:
        actor_hidden, actor_before = numpy_body(nets.actor_body, "sac_actor", *inputs)
        critic_hidden, critic_before = numpy_body(nets.critic_body, "sac_critic", *inputs)
    states = [tuple(actor_before[t]) + (tuple(critic_before[t]) if critic_before else ()) for t in range(EPISODE)]
    return numpy_policy_mean(nets, actor_hidden), numpy_q1(nets, critic_hidden, rows["action"]), states


def window(rows: dict[str, np.ndarray], state) -> dict[str, np.ndarray]:
    """The window of rows START .. START + L - 1 (all observations and transitions), storing ``state``."""
    span = slice(START, START + LAYOUT.length)
    batch = {key: value[span][None] for key, value in rows.items()}
    length = LAYOUT.length
    batch.update(obs_mask=np.ones((1, length), bool), mask=np.ones((1, length), bool),
                 terminated=np.zeros((1, length), bool), weights=np.ones(1, np.float32))
    return batch | {key: np.asarray(part, np.float32)[None] for key, part in state.items()}


def test_burn_in_from_the_stored_state_reproduces_the_full_unroll(networks: SACNetworks) -> None:
    """Trained rows 8 .. 10 after burning in rows 5 .. 7 from the state stored at row 5 equal the numpy
    unroll of rows 0 .. 10 from zeros; starting the window from a zero state instead does not."""
    learner = SACLearner(networks, SACConfig(), LAYOUT)
    rows = episode()
    mean, q1, states = reference(networks, rows)
    keys = [field.key for field in networks.state_spec()]
    stored = window(rows, dict(zip(keys, states[START], strict=True)))
    got = learner.trained_outputs(stored)
    trained = slice(START + LAYOUT.burn_in, START + LAYOUT.burn_in + LAYOUT.trace_length)
    np.testing.assert_allclose(got["mean"][0], mean[trained], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got["q1"][0], q1[trained], rtol=1e-4, atol=1e-5)
    zero = learner.trained_outputs(window(rows, {key: np.zeros_like(part) for key, part in
                                                 zip(keys, states[START], strict=True)}))
    assert np.abs(zero["mean"][0] - mean[trained]).max() > 1e-3


def test_the_policy_keeps_the_states_windows_store_and_acts_with_the_squashed_mean(networks: SACNetworks) -> None:
    rows = episode(1)
    mean, _, states = reference(networks, rows)
    policy = SACPolicy(networks, 1, deterministic=True)
    assert isinstance(policy, Policy)
    names = [field.name for field in policy.state_spec()]
    assert names == (["h", "c"] if networks.shared_core else ["actor_h", "actor_c", "critic_h", "critic_c"])
    for t in range(EPISODE):
        for part, want in zip(policy.get_state(), states[t], strict=True):
            np.testing.assert_allclose(part[0], want, rtol=1e-4, atol=1e-5, err_msg=f"state before row {t}")
        action = policy.act(rows["obs"][t:t + 1], rows["prev_action"][t:t + 1], rows["prev_reward"][t:t + 1])
        np.testing.assert_allclose(action[0], (HIGH + LOW) / 2 + (HIGH - LOW) / 2 * np.tanh(mean[t]), rtol=1e-4,
                                   atol=1e-5)


def test_reset_by_mask_zeroes_only_those_envs_which_then_act_as_fresh_ones(networks: SACNetworks) -> None:
    rng = np.random.default_rng(5)
    policy = SACPolicy(networks, 3, deterministic=True)
    inputs = [(rng.normal(size=(3, 3)), rng.uniform(LOW, HIGH, (3, 2)), rng.normal(size=3)) for _ in range(3)]
    policy.act(*inputs[0])
    policy.act(*inputs[1])
    before = policy.get_state()
    policy.reset(np.array([True, False, True]))
    after = policy.get_state()
    for old, new in zip(before, after, strict=True):
        assert not new[[0, 2]].any() and np.array_equal(new[1], old[1]) and old[[0, 2]].any()
    fresh = SACPolicy(networks, 3, deterministic=True)
    np.testing.assert_allclose(policy.act(*inputs[2])[[0, 2]], fresh.act(*inputs[2])[[0, 2]], rtol=1e-5)
    with pytest.raises(ValueError, match=r"reset: mask of shape \(2,\), expected \(3,\)"):
        policy.reset(np.array([True, False]))


def test_a_sampling_policy_is_seeded_and_stays_in_the_box(networks: SACNetworks) -> None:
    obs, prev_action, prev_reward = np.zeros((64, 3)), np.zeros((64, 2)), np.zeros(64)
    first = SACPolicy(networks, 64, seed=3).act(obs, prev_action, prev_reward)
    again = SACPolicy(networks, 64, seed=3).act(obs, prev_action, prev_reward)
    other = SACPolicy(networks, 64, seed=4).act(obs, prev_action, prev_reward)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    assert np.all(first >= LOW) and np.all(first <= HIGH) and first.std(axis=0).min() > 0.05


# ---------------------------------------------------------------------------- weights travel
def scramble(learner: SACLearner, seed: int) -> None:
    """Give every weight, optimiser slot and the temperature values no fresh learner has."""
    rng = np.random.default_rng(seed)
    for variable in [v for model in learner._models().values() for v in model.weights]:
        variable.assign(0.3 * rng.normal(size=variable.shape).astype(np.float32))
    for optimizer in (learner.actor_optimizer, learner.critic_optimizer, learner.alpha_optimizer):
        for variable in optimizer.variables:
            if np.issubdtype(np.dtype(variable.dtype), np.floating):
                variable.assign(rng.uniform(0, 1, variable.shape).astype(variable.dtype))
            else:
                variable.assign(np.full(variable.shape, 7, variable.dtype))
    learner.log_alpha.assign(-1.25)
    learner.updates = 7


def test_save_and_restore_into_a_fresh_learner_give_the_same_outputs_and_state(tmp_path) -> None:
    saved = SACLearner(build(False), SACConfig(), LAYOUT, seed=0)
    assert isinstance(saved, Learner)
    scramble(saved, 0)
    saved.save(tmp_path)
    restored = SACLearner(build(False), SACConfig(), LAYOUT, seed=1)
    rows = episode(2)
    batch = window(rows, {field.key: np.zeros(field.shape) for field in saved.networks.state_spec()})
    assert not np.allclose(restored.trained_outputs(batch)["q1"], saved.trained_outputs(batch)["q1"])
    restored.restore(tmp_path)
    for key, value in saved.trained_outputs(batch).items():
        np.testing.assert_array_equal(restored.trained_outputs(batch)[key], value, err_msg=key)
    for name in ("actor_optimizer", "critic_optimizer", "alpha_optimizer"):
        for mine, theirs in zip(getattr(restored, name).variables, getattr(saved, name).variables, strict=True):
            np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
    assert restored.alpha == pytest.approx(np.exp(-1.25)) and restored.updates == 7 and restored.is_finite()
    policy_file = tmp_path / "best.weights.h5"
    saved.save_policy_weights(policy_file)
    evaluation = build(False)
    load_policy_weights(evaluation.policy_model, policy_file)
    for mine, theirs in zip(evaluation.policy_variables(), saved.actor_variables(), strict=True):
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())


def test_restore_refuses_a_checkpoint_of_another_architecture_naming_the_file(tmp_path) -> None:
    SACLearner(build(False), SACConfig(), LAYOUT).save(tmp_path)
    wider = SACLearner(build(False, units=7), SACConfig(), LAYOUT)
    with pytest.raises(CheckpointError, match=r"sac_actor_body\.weights\.h5: does not fit the actor_body network"):
        wider.restore(tmp_path)
    (tmp_path / "sac_q_head.weights.h5").unlink()
    with pytest.raises(CheckpointError, match=r"sac_q_head\.weights\.h5: missing"):
        SACLearner(build(False), SACConfig(), LAYOUT).restore(tmp_path)


def test_a_published_weight_vector_makes_an_actor_process_policy_act_like_the_learners() -> None:
    """What actor processes do: rebuild the networks from a picklable factory, load the learner's vector."""
    learner = SACLearner(build(False), SACConfig(), LAYOUT)
    scramble(learner, 3)
    factory = sac_networks_factory((3,), LOW, HIGH, encoder=MLPModel((5,)), core="lstm", core_units=6,
                                   hidden_units=[8])
    remote = make_sac_policy(factory, 2, deterministic=True)
    local = SACPolicy(learner.networks, 2, deterministic=True)
    rows = episode(3)
    inputs = (rows["obs"][:2], rows["prev_action"][:2], rows["prev_reward"][:2])
    assert not np.allclose(remote.act(*inputs), local.act(*inputs))
    remote.reset()
    local.reset()
    remote.load_weights(flatten_weights(learner.actor_variables()))
    remote.refresh_weights()
    for _ in range(3):
        np.testing.assert_allclose(remote.act(*inputs), local.act(*inputs), rtol=1e-6)
    with pytest.raises(ValueError, match="weight vector has 3 values"):
        remote.load_weights(np.zeros(3, np.float32))
