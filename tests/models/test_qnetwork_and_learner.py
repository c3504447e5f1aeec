"""Q-network and learner: stored states go in exactly, burn-in gets no gradient, padding is ignored,
the target network moves only on its period, and a user's ImageModel trains."""

import keras
import numpy as np
import pytest

from r2d2kit.agent.r2d2 import QNetwork
from r2d2kit.agent.r2d2.learner import R2D2Config, R2D2Learner
from r2d2kit.agent.seam import WindowLayout
from r2d2kit.models import ImageModel, MLPModel
from r2d2kit.replay import SequenceBuilder
from r2d2kit.training.builders import make_sequence_replay

STATE_NAMES = ("state_h", "state_c")  # the windows' fields of an LSTM's (h, c)

UNITS = 8


def small_network(obs_shape=(3,), actions=2, encoder=None, **kwargs):
    keras.utils.set_random_seed(0)
    return QNetwork(obs_shape, actions, encoder or MLPModel((8,)), core_units=UNITS, head_units=8, **kwargs)


def random_batch(rng, layout, batch=4, obs_shape=(3,), actions=2, obs_dtype=np.float32):
    """A window batch shaped like SequenceReplayBuffer.sample(): front padding, an episode end, padding."""
    length = layout.length
    obs_mask = np.ones((batch, length), bool)
    mask = np.ones((batch, length), bool)
    terminated = np.zeros((batch, length), bool)
    obs_mask[0, :2] = mask[0, :2] = False  # window starting before its episode
    mask[1, length - 3] = False  # final observation row of a truncated episode ...
    obs_mask[1, length - 2:] = mask[1, length - 2:] = False  # ... then padding
    terminated[2, length - 4] = True
    mask[2, length - 3:] = False
    obs_mask[2, length - 2:] = False
    if np.issubdtype(obs_dtype, np.integer):
        obs = rng.integers(0, 255, size=(batch, length) + obs_shape).astype(obs_dtype)
    else:
        obs = rng.normal(size=(batch, length) + obs_shape).astype(obs_dtype)
    obs[~obs_mask] = 0
    return {
        "obs": obs,
        "action": rng.integers(0, actions, (batch, length)) * mask,
        "reward": (rng.normal(size=(batch, length)) * mask).astype(np.float32),
        "prev_action": rng.integers(0, actions, (batch, length)) * obs_mask,
        "prev_reward": (rng.normal(size=(batch, length)) * obs_mask).astype(np.float32),
        "terminated": terminated,
        "mask": mask,
        "obs_mask": obs_mask,
        "state_h": rng.normal(size=(batch, UNITS)).astype(np.float32),
        "state_c": rng.normal(size=(batch, UNITS)).astype(np.float32),
        "weights": rng.uniform(0.2, 1.0, batch).astype(np.float32),
    }


def test_actor_and_sequence_model_share_the_same_weight_objects():
    network = small_network()
    actor = network.actor(3)
    assert {id(v) for v in actor.model.weights} == {id(v) for v in network.variables}


@pytest.mark.tensorflow
def test_stateful_actor_receives_exactly_the_stored_state():
    """Assigning (h, c) into the stateful LSTM equals an explicit initial_state forward pass, step by step."""
    rng = np.random.default_rng(0)
    network = small_network()
    actor = network.actor(2)
    h, c = rng.normal(size=(2, UNITS)).astype(np.float32), rng.normal(size=(2, UNITS)).astype(np.float32)
    obs = rng.normal(size=(2, 5, 3)).astype(np.float32)
    prev_action = rng.integers(0, 2, (2, 5)).astype(np.int32)
    prev_reward = rng.normal(size=(2, 5)).astype(np.float32)
    actor.set_state((h, c))
    stepped = np.stack([actor.q_values(obs[:, t], prev_action[:, t], prev_reward[:, t]) for t in range(5)], axis=1)
    explicit, h_end, c_end = network.model([obs, prev_action, prev_reward, np.ones((2, 5), bool), h, c])
    np.testing.assert_allclose(stepped, explicit.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(actor.get_state()[0], h_end.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(actor.get_state()[1], c_end.numpy(), rtol=1e-5, atol=1e-6)


def numpy_layer_norm(x, layer):
    gamma, beta = (w.numpy() for w in layer.weights)
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + layer.epsilon) * gamma + beta


@pytest.mark.tensorflow
def test_layer_norm_head_equals_a_numpy_reference_and_the_actor_shares_it():
    """layer_norm=True: Q = dueling(Dense(ReLU(LN(Dense(LN(lstm_out)))))) per stream, in numpy."""
    rng = np.random.default_rng(2)
    network = small_network(layer_norm=True)
    for layer in network.model.layers:  # non-trivial LN gains and offsets
        if isinstance(layer, keras.layers.LayerNormalization):
            layer.gamma.assign(rng.uniform(0.5, 2.0, layer.gamma.shape))
            layer.beta.assign(rng.normal(size=layer.beta.shape))
    obs = rng.normal(size=(2, 5, 3)).astype(np.float32)
    prev_action = rng.integers(0, 2, (2, 5)).astype(np.int32)
    prev_reward = rng.normal(size=(2, 5)).astype(np.float32)
    h, c = rng.normal(size=(2, UNITS)).astype(np.float32), rng.normal(size=(2, UNITS)).astype(np.float32)
    inputs = [obs, prev_action, prev_reward, np.ones((2, 5), bool), h, c]
    q = network.model(inputs)[0].numpy()

    lstm_out = keras.Model(network.model.inputs, network.model.get_layer("online_lstm").output[0])(inputs).numpy()
    x = numpy_layer_norm(lstm_out, network.core_norm)

    def stream(layers):
        dense, norm, _, out = layers
        hidden = np.maximum(numpy_layer_norm(x @ dense.kernel.numpy() + dense.bias.numpy(), norm), 0.0)
        return hidden @ out.kernel.numpy() + out.bias.numpy()

    value, advantage = stream(network.value_layers), stream(network.advantage_layers)
    np.testing.assert_allclose(q, value + advantage - advantage.mean(-1, keepdims=True), rtol=1e-4, atol=1e-5)

    # the stateful actor runs the very same normalised head
    actor = network.actor(2)
    actor.set_state((h, c))
    stepped = np.stack([actor.q_values(obs[:, t], prev_action[:, t], prev_reward[:, t]) for t in range(5)], axis=1)
    np.testing.assert_allclose(stepped, q, rtol=1e-5, atol=1e-6)
    # and a clone (the target network) copies the normalisation weights too
    target = network.clone()
    target.copy_weights_from(network)
    np.testing.assert_allclose(target.model(inputs)[0].numpy(), q, rtol=1e-6, atol=1e-6)
    assert not any(isinstance(layer, keras.layers.LayerNormalization) for layer in small_network().model.layers)


def test_model_layer_norm_in_a_config_reaches_the_network(tmp_path):
    from r2d2kit.agent.r2d2.builder import build_q_network
    from r2d2kit.training.config import load_config

    path = tmp_path / "c.yaml"
    path.write_text("env: {id: CartPoleNoVel-v1}\nmodel: {core_units: 4, head_units: 4, hidden: [4]}\n")
    norms = [sorted(layer.name for layer in build_q_network(config).model.layers
                    if isinstance(layer, keras.layers.LayerNormalization))
             for config in (load_config(path, ["model.layer_norm=true"]), load_config(path))]
    assert norms == [["online_advantage_hidden_norm", "online_lstm_norm", "online_value_hidden_norm"], []]


def test_actor_reset_zeroes_only_the_masked_envs():
    network = small_network()
    actor = network.actor(3)
    actor.set_state((np.ones((3, UNITS)), np.full((3, UNITS), 2.0)))
    actor.reset(np.array([False, True, False]))
    h, c = actor.get_state()
    np.testing.assert_array_equal(h[:, 0], [1.0, 0.0, 1.0])
    np.testing.assert_array_equal(c[:, 0], [2.0, 0.0, 2.0])


@pytest.mark.tensorflow
def test_masked_rows_leave_the_lstm_state_untouched():
    """Front padding (obs_mask false) must not move the stored state: episode starts begin from it."""
    rng = np.random.default_rng(1)
    network = small_network()
    obs = rng.normal(size=(1, 4, 3)).astype(np.float32)
    h0, c0 = network.zero_state(1)
    zeros = np.zeros((1, 4), np.int32), np.zeros((1, 4), np.float32)
    padded, _, _ = network.model([obs, *zeros, np.array([[False, False, True, True]]), h0, c0])
    plain, _, _ = network.model([obs[:, 2:], zeros[0][:, 2:], zeros[1][:, 2:], np.ones((1, 2), bool), h0, c0])
    np.testing.assert_allclose(padded.numpy()[:, 2:], plain.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.tensorflow
def test_burn_in_rows_contribute_no_gradient():
    """Gradients with burn-in equal those of a burn-in-free learner started from the burned-in state."""
    layout = WindowLayout(burn_in=3, trace_length=4, period=2, n_step=2)
    config = R2D2Config(gamma=0.9, target_update_period=100)
    learner = R2D2Learner(small_network(), config, layout)
    batch = random_batch(np.random.default_rng(2), layout)
    loss, grads = learner.gradients(batch)

    rows = slice(0, layout.burn_in)
    inputs = [batch["obs"][:, rows], batch["prev_action"][:, rows].astype(np.int32), batch["prev_reward"][:, rows],
              batch["obs_mask"][:, rows]]
    _, h, c = learner.online.model([*inputs, batch["state_h"], batch["state_c"]])
    _, ht, ct = learner.target.model([*inputs, batch["state_h"], batch["state_c"]])
    np.testing.assert_allclose(h.numpy(), ht.numpy())  # target starts as a copy of online
    no_burn_in_layout = WindowLayout(burn_in=0, trace_length=4, period=2, n_step=2)
    no_burn_in = R2D2Config(gamma=0.9, target_update_period=100)
    twin = R2D2Learner(learner.online, no_burn_in, no_burn_in_layout)
    twin.target.copy_weights_from(learner.target)
    rest = {key: (value[:, layout.burn_in:] if np.ndim(value) >= 2 and key not in ("state_h", "state_c") else value)
            for key, value in batch.items()}
    rest["state_h"], rest["state_c"] = h.numpy(), c.numpy()
    twin_loss, twin_grads = twin.gradients(rest)
    assert loss == pytest.approx(twin_loss, rel=1e-5)
    for mine, theirs in zip(grads, twin_grads):
        np.testing.assert_allclose(mine, theirs, rtol=1e-4, atol=1e-6)


def test_loss_and_gradients_ignore_padded_rows():
    layout = WindowLayout(burn_in=2, trace_length=5, period=2, n_step=2)
    config = R2D2Config(gamma=0.9, target_update_period=100)
    learner = R2D2Learner(small_network(), config, layout)
    rng = np.random.default_rng(3)
    batch = random_batch(rng, layout)
    loss, grads = learner.gradients(batch)
    noisy = {key: np.array(value) for key, value in batch.items()}
    padding = ~batch["obs_mask"]
    noisy["obs"][padding] = rng.normal(size=noisy["obs"][padding].shape) * 100
    noisy["reward"][padding] = 1e3
    noisy["action"][padding] = 1
    noisy["prev_reward"][padding] = -50.0
    noisy_loss, noisy_grads = learner.gradients(noisy)
    assert noisy_loss == pytest.approx(loss, rel=1e-6)
    for a, b in zip(grads, noisy_grads):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    # ... while a real row does matter (the test can fail)
    noisy["reward"][3, layout.burn_in] += 5.0
    assert learner.gradients(noisy)[0] != pytest.approx(loss, rel=1e-6)


def test_target_network_changes_only_on_its_period():
    layout = WindowLayout(burn_in=1, trace_length=3, period=2, n_step=1)
    config = R2D2Config(gamma=0.9, target_update_period=3, learning_rate=1e-2)
    learner = R2D2Learner(small_network(), config, layout)
    batch = random_batch(np.random.default_rng(4), layout)
    initial = [v.numpy().copy() for v in learner.target.variables]
    for update in range(1, 7):
        learner.train(batch)
        target = [v.numpy() for v in learner.target.variables]
        online = [v.numpy() for v in learner.online.variables]
        if update % 3 == 0:
            for t, o in zip(target, online):
                np.testing.assert_array_equal(t, o)
            initial = [t.copy() for t in target]
        else:
            for t, before in zip(target, initial):
                np.testing.assert_array_equal(t, before)
            assert any(not np.array_equal(t, o) for t, o in zip(target, online))


@pytest.mark.slow
def test_soft_target_update_moves_the_target_tau_of_the_way_to_the_online_weights():
    """Polyak averaging: after each update (period 1) target <- target + tau (online - target)."""
    tau = 0.25
    layout = WindowLayout(burn_in=1, trace_length=3, period=2, n_step=1)
    config = R2D2Config(gamma=0.9, target_update_period=1, target_update_tau=tau, learning_rate=1e-2)
    learner = R2D2Learner(small_network(), config, layout)
    batch = random_batch(np.random.default_rng(6), layout)
    target = [v.numpy().astype(np.float64) for v in learner.target.variables]
    for _ in range(3):
        learner.train(batch)
        online = [v.numpy() for v in learner.online.variables]
        target = [t + tau * (o - t) for t, o in zip(target, online)]  # independent float64 recursion
        for expected, actual in zip(target, learner.target.variables):
            np.testing.assert_allclose(actual.numpy(), expected, rtol=1e-5, atol=1e-6)
    # the target lags: it is neither the online weights nor the initial ones
    assert any(not np.allclose(t.numpy(), o.numpy()) for t, o in zip(learner.target.variables,
                                                                      learner.online.variables))


@pytest.mark.parametrize("tau", [0.0, -0.1, 1.5])
def test_target_update_tau_outside_zero_one_is_refused_by_name(tau):
    with pytest.raises(ValueError, match="target_update_tau must be in \\(0, 1\\]"):
        R2D2Config(target_update_tau=tau)


@pytest.mark.slow
def test_train_returns_td_and_priorities_of_the_right_shape_and_mixing():
    layout = WindowLayout(burn_in=2, trace_length=4, period=2, n_step=2)
    config = R2D2Config(gamma=0.9, target_update_period=100, eta=0.9)
    learner = R2D2Learner(small_network(), config, layout)
    batch = random_batch(np.random.default_rng(5), layout)
    out = learner.train(batch)
    assert out["abs_td"].shape == (4, layout.trace_length)
    trace_mask = batch["mask"][:, layout.burn_in:layout.burn_in + layout.trace_length]
    np.testing.assert_array_equal(out["abs_td"][~trace_mask], 0.0)
    expected = [0.9 * row[m].max() + 0.1 * row[m].mean() if m.any() else 0.0
                for row, m in zip(out["abs_td"], trace_mask)]
    np.testing.assert_allclose(out["priorities"], expected, rtol=1e-5)


def filled_replay(network, layout, seed):
    """A replay of make_sequence_replay filled with two random episodes per env."""
    replay = make_sequence_replay(network.window_fields(), layout, 200, seed=seed)
    builder = SequenceBuilder(2, layout.burn_in, layout.trace_length, layout.n_step, layout.period,
                              state_names=STATE_NAMES)
    rng = np.random.default_rng(1)
    for t in range(30):
        ended = np.array([t % 13 == 12, t % 17 == 16])
        windows = builder.step(rng.normal(size=(2, 3)).astype(np.float32), rng.integers(0, 2, 2), np.ones(2),
                               ended, np.zeros(2, bool), network.zero_state(2))
        if windows is not None:
            replay.add_sequences(windows)
    return replay


def test_make_sequence_replay_matches_the_config_and_the_network():
    layout = WindowLayout(burn_in=2, trace_length=4, period=2, n_step=2)
    config = R2D2Config(priority_exponent=0.7)
    replay = make_sequence_replay(small_network().window_fields(), layout, 100,
                                  priority_exponent=config.priority_exponent, seed=0)
    assert (replay.burn_in, replay.trace_length, replay.n_step, replay.length) == (2, 4, 2, 8)
    assert replay.capacity == 100
    batch = filled_replay(small_network(), layout, seed=0).sample(3, beta=0.6)
    assert batch["obs"].shape == (3, 8, 3) and batch["state_h"].shape == (3, UNITS)
    learner = R2D2Learner(small_network(), config, layout)
    assert set(learner.ROW_KEYS + learner.state_keys) <= set(batch)


@pytest.mark.slow
def test_train_from_is_sample_train_and_update_priorities():
    layout = WindowLayout(burn_in=2, trace_length=4, period=2, n_step=2)
    config = R2D2Config(gamma=0.9, batch_size=3, target_update_period=100, importance_exponent=0.5)
    by_hand, by_helper = R2D2Learner(small_network(), config, layout), R2D2Learner(small_network(), config, layout)
    replay_hand = filled_replay(by_hand.online, layout, seed=3)
    replay_helper = filled_replay(by_helper.online, layout, seed=3)
    for _ in range(3):
        batch = replay_hand.sample(config.batch_size, beta=config.importance_exponent)
        expected = by_hand.train(batch)
        replay_hand.update_priorities(batch["indices"], expected["priorities"])
        out = by_helper.train_from(replay_helper)
        np.testing.assert_allclose(out["loss"], expected["loss"], rtol=1e-6)
        np.testing.assert_allclose(out["priorities"], expected["priorities"], rtol=1e-6)
    assert by_helper.updates == 3
    assert len(replay_helper) == len(replay_hand) > config.batch_size
    np.testing.assert_allclose(replay_helper.sampler.tree.leaves(), replay_hand.sampler.tree.leaves(), rtol=1e-6)
    assert not np.allclose(replay_hand.sampler.tree.leaves()[:len(replay_hand)], 1.0)  # priorities were written
    # every update gathered into the same arrays (the losses above match with that reuse)
    replay, arrays = by_helper.batches.replay, by_helper.batches.arrays
    assert replay is replay_helper
    np.testing.assert_array_equal(arrays["indices"], batch["indices"])  # the third update's batch is in them
    address = arrays["obs"].ctypes.data
    by_helper.train_from(replay_helper)
    assert by_helper.batches.arrays["obs"].ctypes.data == address, "train_from should sample into the same arrays"


class TinyConv(ImageModel):
    """A user's encoder: one strided convolution over 8x8 gray frames."""

    def create_image_model(self, x):
        x = self.scale_uint8(x)
        x = keras.ops.expand_dims(x, -1)
        x = keras.layers.Conv2D(4, 3, strides=2, activation="relu")(x)
        return keras.layers.Flatten()(x)


@pytest.mark.slow
def test_custom_image_model_trains_a_step():
    layout = WindowLayout(burn_in=1, trace_length=3, period=2, n_step=1)
    config = R2D2Config(gamma=0.9, target_update_period=100, learning_rate=1e-2)
    network = small_network(obs_shape=(8, 8), actions=3, encoder=TinyConv(), obs_dtype="uint8")
    learner = R2D2Learner(network, config, layout)
    batch = random_batch(np.random.default_rng(6), layout, obs_shape=(8, 8), actions=3, obs_dtype=np.uint8)
    conv_kernel = network.encoder.weights[0]
    before = conv_kernel.numpy().copy()
    out = learner.train(batch)
    assert np.isfinite(out["loss"])
    assert not np.array_equal(conv_kernel.numpy(), before), "the user's encoder weights must be trained"
    q = network.actor(2).q_values(np.zeros((2, 8, 8), np.uint8), np.zeros(2), np.zeros(2))
    assert q.shape == (2, 3)


def test_image_model_must_return_features_per_frame():
    class Broken(ImageModel):
        def create_image_model(self, x):
            return keras.layers.Conv2D(2, 3)(keras.ops.expand_dims(x, -1))  # no Flatten: [N, 2, 2, 2]

    with pytest.raises(ValueError, match=r"features \[frames, features\].*Flatten"):
        small_network(obs_shape=(4, 4), encoder=Broken())


def test_config_validation_names_the_field():
    with pytest.raises(ValueError, match="period"):
        WindowLayout(trace_length=4, period=8)
    with pytest.raises(ValueError, match="burn_in"):
        WindowLayout(burn_in=-1)
    with pytest.raises(ValueError, match="gamma"):
        R2D2Config(gamma=1.5)


@pytest.mark.slow
def test_learning_rate_decays_linearly_to_the_final_rate_then_stays():
    layout = WindowLayout(burn_in=1, trace_length=3, period=2, n_step=1)
    config = R2D2Config(gamma=0.9, target_update_period=100, learning_rate=1e-2, learning_rate_decay_updates=4,
                        final_learning_rate=2e-3)
    learner = R2D2Learner(small_network(), config, layout)
    batch = random_batch(np.random.default_rng(7), layout)
    rates = []
    for _ in range(6):
        rates.append(float(keras.ops.convert_to_numpy(learner.optimizer.learning_rate)))
        learner.train(batch)
    np.testing.assert_allclose(rates, [1e-2, 8e-3, 6e-3, 4e-3, 2e-3, 2e-3], rtol=1e-5)
    constant = R2D2Learner(small_network(), R2D2Config(learning_rate=3e-4))
    assert float(keras.ops.convert_to_numpy(constant.optimizer.learning_rate)) == pytest.approx(3e-4)
    with pytest.raises(ValueError, match="learning_rate_decay_updates"):
        R2D2Config(learning_rate_decay_updates=-1)
    with pytest.raises(ValueError, match="final_learning_rate"):
        R2D2Config(final_learning_rate=-1e-4)


def test_mlp_input_scale_multiplies_the_observation_before_the_first_layer():
    scaled = MLPModel((8,), input_scale=[2.0, 20.0]).build((2,))
    plain = MLPModel((8,)).build((2,))
    plain.set_weights(scaled.get_weights())
    obs = np.random.default_rng(8).normal(size=(3, 5, 2)).astype(np.float32)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(scaled(obs)),
                               keras.ops.convert_to_numpy(plain(obs * np.float32([2.0, 20.0]))), rtol=1e-6)
    network = QNetwork((2,), 2, MLPModel((8,), input_scale=3.0), core_units=UNITS, head_units=8)
    assert network.actor(2).q_values(np.ones((2, 2)), np.zeros(2), np.zeros(2)).shape == (2, 2)
    with pytest.raises(ValueError, match="input_scale"):
        MLPModel(input_scale=[[1.0, 2.0]])
