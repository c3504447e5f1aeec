"""The actor's numpy forward equals the Keras models, step for step, and never acts on stale weights.

References: the Keras sequence model (``network.model``, what the learner trains) and the Keras
one-step actor (``backend="keras"``), both running the very same Keras layers. Every weight is set
to random values first (Keras starts biases and norm offsets at zero, which would hide a bias or
a LayerNorm read wrongly).
"""

from __future__ import annotations

import gymnasium as gym
import keras
import numpy as np
import pytest

from r2d2kit.agent.r2d2 import QNetwork
from r2d2kit.agent.r2d2.numpy_actor import NumpyForward, UnsupportedNetwork
from r2d2kit.models import ImageModel, MLPModel
from r2d2kit.runners.weights import flatten_weights

UNITS, ENVS, STEPS = 6, 3, 12


def randomize(network: QNetwork, seed: int, scale: float = 0.4) -> None:
    rng = np.random.default_rng(seed)
    for variable in network.variables:
        variable.assign(rng.normal(scale=scale, size=variable.shape).astype(np.float32))


def make_network(seed: int = 0, obs_shape=(3,), obs_dtype="float32", actions=3, units=(8,), input_scale=None,
                 **kwargs) -> QNetwork:
    network = QNetwork(obs_shape, actions, MLPModel(units, input_scale=input_scale), obs_dtype=obs_dtype,
                       core_units=UNITS, head_units=kwargs.pop("head_units", 5), **kwargs)
    randomize(network, seed)
    return network


def rollout_inputs(network: QNetwork, seed: int, steps: int = STEPS, envs: int = ENVS):
    rng = np.random.default_rng(seed)
    shape = (envs, steps) + network.obs_shape
    if network.obs_dtype == "uint8":
        obs = rng.integers(0, 256, shape).astype(np.uint8)
    else:
        obs = rng.normal(size=shape).astype(np.float32)
    prev_action = rng.integers(0, network.num_actions, (envs, steps)).astype(np.int32)
    prev_reward = rng.normal(size=(envs, steps)).astype(np.float32)
    return obs, prev_action, prev_reward


CASES = {
    "dueling": dict(),
    "not dueling": dict(dueling=False),
    "layer norm": dict(layer_norm=True),
    "layer norm, not dueling": dict(layer_norm=True, dueling=False),
    "no prev action/reward": dict(prev_action_reward=False),
    "input scale per entry": dict(input_scale=[2.0, 20.0, 0.5]),
    "input scale, one number": dict(input_scale=3.0),
    "uint8 image, flattened": dict(obs_shape=(4, 5), obs_dtype="uint8"),
    "uint8 with input scale, layer norm": dict(obs_shape=(2, 3), obs_dtype="uint8", input_scale=2.0, layer_norm=True),
    "two hidden layers": dict(units=(8, 7)),
    "no hidden layer": dict(units=()),
    "linear head": dict(head_units=0),
    "linear head, layer norm": dict(head_units=0, layer_norm=True, dueling=False),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_numpy_actor_equals_the_sequence_model_over_a_rollout(case):
    """From a random stored state, T numpy steps = one sequence-model unroll (Q, h and c)."""
    network = make_network(seed=1, **CASES[case])
    obs, prev_action, prev_reward = rollout_inputs(network, seed=2)
    rng = np.random.default_rng(3)
    h, c = (rng.normal(size=(ENVS, UNITS)).astype(np.float32) for _ in range(2))
    actor = network.actor(ENVS, backend="numpy")
    assert actor.backend == "numpy"
    actor.set_state((h, c))
    stepped = np.stack([actor.q_values(obs[:, t], prev_action[:, t], prev_reward[:, t]) for t in range(STEPS)], 1)
    q, h_end, c_end = network.model([obs, prev_action, prev_reward, np.ones((ENVS, STEPS), bool), h, c])
    np.testing.assert_allclose(stepped, keras.ops.convert_to_numpy(q), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(actor.get_state()[0], keras.ops.convert_to_numpy(h_end), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(actor.get_state()[1], keras.ops.convert_to_numpy(c_end), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_numpy_actor_equals_the_keras_actor_with_resets_and_state_reloads(case):
    """Both backends, same inputs, same resets (some envs, all, none) and a set_state midway."""
    network = make_network(seed=4, **CASES[case])
    obs, prev_action, prev_reward = rollout_inputs(network, seed=5)
    rng = np.random.default_rng(6)
    resets = rng.random((STEPS, ENVS)) < 0.3  # [T, E]
    resets[4] = True  # every env at once
    resets[5] = False
    resets[-1] = [True, False, True]
    stored = [rng.normal(size=(ENVS, UNITS)).astype(np.float32) for _ in range(2)]
    actors = {name: network.actor(ENVS, backend=name) for name in ("numpy", "keras")}
    assert [a.backend for a in actors.values()] == ["numpy", "keras"]
    seen = {name: [] for name in actors}
    for t in range(STEPS):
        for name, actor in actors.items():
            if t == 8:
                actor.set_state(stored)
            seen[name].append((actor.q_values(obs[:, t], prev_action[:, t], prev_reward[:, t]), *actor.get_state()))
            actor.reset(resets[t])
    for t, (mine, theirs) in enumerate(zip(seen["numpy"], seen["keras"], strict=True)):
        for got, expected in zip(mine, theirs, strict=True):
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, err_msg=f"step {t}")
    assert resets[-1].any()  # the last reset left zeros in those rows only
    np.testing.assert_array_equal(actors["numpy"].get_state()[0][resets[-1]], 0.0)
    assert np.all(actors["numpy"].get_state()[0][~resets[-1]] != 0.0)


@pytest.mark.parametrize("space", [
    gym.spaces.MultiDiscrete([3, 4]),
    gym.spaces.Dict({"cell": gym.spaces.Discrete(5), "pos": gym.spaces.Box(-1.0, 1.0, (2,), np.float32)}),
], ids=["MultiDiscrete", "Dict(Discrete, Box)"])
def test_coded_observations_run_in_numpy_too(space):
    """CodeEncoder(MLPModel): the codes' one-hot encoding in numpy = the network's CodeEncoding layer."""
    from r2d2kit.models.code_encoding import CodeEncoder
    from r2d2kit.spaces import observation_layout

    layout = observation_layout(space)
    space.seed(22)
    network = QNetwork(layout.code_space.shape, 3, CodeEncoder(layout, MLPModel((8,), input_scale=2.0)),
                       obs_dtype=str(layout.code_space.dtype), core_units=UNITS, head_units=5)
    randomize(network, 23)
    actor = network.actor(ENVS, backend="numpy")
    _, prev_action, prev_reward = rollout_inputs(network, seed=24)
    obs = np.stack([[layout.codes(space.sample()) for _ in range(STEPS)] for _ in range(ENVS)])  # [E, T, code_size]
    stepped = np.stack([actor.q_values(obs[:, t], prev_action[:, t], prev_reward[:, t]) for t in range(STEPS)], 1)
    h0, c0 = network.zero_state(ENVS)
    q, _, _ = network.model([obs, prev_action, prev_reward, np.ones((ENVS, STEPS), bool), h0, c0])
    np.testing.assert_allclose(stepped, keras.ops.convert_to_numpy(q), rtol=1e-5, atol=1e-5)


def test_reset_with_no_env_ended_does_no_state_work():
    """No true entry: the state arrays are left alone (not rewritten, not even replaced)."""
    network = make_network()
    for backend in ("numpy", "keras"):
        actor = network.actor(ENVS, backend=backend)
        actor.q_values(*(x[:, 0] for x in rollout_inputs(network, seed=7)))
        before = actor._state  # the arrays the actor owns (white box: "no work" means no write)
        values = actor.get_state()
        actor.reset(np.zeros(ENVS, bool))
        assert actor._state[0] is before[0] and actor._state[1] is before[1]
        np.testing.assert_array_equal(actor.get_state()[0], values[0])
        actor.reset([False, True, False])
        h, c = actor.get_state()
        np.testing.assert_array_equal(h[[0, 2]], values[0][[0, 2]])
        assert not h[1].any() and not c[1].any()
        actor.reset()
        assert not any(state.any() for state in actor.get_state())


def test_get_state_returns_copies():
    network = make_network()
    actor = network.actor(ENVS)
    h, c = actor.get_state()
    h += 1.0
    assert not actor.get_state()[0].any()


class TinyConv(ImageModel):
    """A user's image encoder: the numpy forward does not know it."""

    def create_image_model(self, x):
        x = self.scale_uint8(x)
        x = keras.ops.expand_dims(x, -1)
        x = keras.layers.Conv2D(2, 3, strides=2, activation="relu")(x)
        return keras.layers.Flatten()(x)


class ScaledMLP(MLPModel):
    """An MLPModel subclass that changes the encoder: it must not be run as a plain MLP."""

    def create_image_model(self, x):
        return super().create_image_model(x * 2.0)


@pytest.mark.parametrize("encoder", [TinyConv(), ScaledMLP((4,))], ids=["image encoder", "MLPModel subclass"])
def test_unsupported_encoders_fall_back_to_the_compiled_keras_step(encoder):
    obs_shape, dtype = ((6, 6), "uint8") if isinstance(encoder, TinyConv) else ((3,), "float32")
    network = QNetwork(obs_shape, 2, encoder, obs_dtype=dtype, core_units=UNITS, head_units=4)
    randomize(network, 8)
    actor = network.actor(2)
    assert actor.backend == "keras" and type(encoder).__name__ in actor.backend_reason
    obs, prev_action, prev_reward = rollout_inputs(network, seed=9, steps=4, envs=2)
    stepped = np.stack([actor.q_values(obs[:, t], prev_action[:, t], prev_reward[:, t]) for t in range(4)], 1)
    h0, c0 = network.zero_state(2)
    q, _, _ = network.model([obs, prev_action, prev_reward, np.ones((2, 4), bool), h0, c0])
    np.testing.assert_allclose(stepped, keras.ops.convert_to_numpy(q), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=f"backend='numpy'.*{type(encoder).__name__}.*backend='auto'"):
        network.actor(2, backend="numpy")


def test_a_misread_network_is_refused_by_the_check_against_keras():
    """If a layer the Keras model runs were skipped, the construction-time comparison refuses the network."""
    network = make_network(layer_norm=True)
    norm = network.core_norm
    network.core_norm = None  # the numpy forward no longer sees the norm; the Keras model still runs it
    try:
        with pytest.raises(UnsupportedNetwork, match="disagrees with the Keras model"):
            NumpyForward(network)
        assert network.actor(2).backend == "keras"
    finally:
        network.core_norm = norm


# ------------------------------------------------------------------ stale weights

def q_of(actor, inputs):
    actor.reset()
    return actor.q_values(*inputs)


def test_published_weights_reach_the_numpy_copy():
    """Actor processes and Ray actors load weights with the policy's load_weights: the next step uses them."""
    from r2d2kit.agent.r2d2.policies import GreedyPolicy

    network, source = make_network(seed=10), make_network(seed=11)
    inputs = tuple(x[:, 0] for x in rollout_inputs(network, seed=12))
    actor = network.actor(ENVS, follow_weights=False)  # as actor processes make it
    before = q_of(actor, inputs)
    GreedyPolicy(actor).load_weights(flatten_weights(source.variables))
    after = q_of(actor, inputs)
    expected = q_of(source.actor(ENVS, backend="keras"), inputs)
    np.testing.assert_allclose(after, expected, rtol=1e-5, atol=1e-5)
    assert not np.allclose(before, after)


def test_weights_changed_without_telling_a_non_following_actor_are_not_seen():
    """The contract, shown: follow_weights=False reads only at refresh_weights (why loaders must call it)."""
    network = make_network(seed=13)
    inputs = tuple(x[:, 0] for x in rollout_inputs(network, seed=14))
    actor = network.actor(ENVS, follow_weights=False)
    before = q_of(actor, inputs)
    randomize(network, 15)
    np.testing.assert_array_equal(q_of(actor, inputs), before)
    actor.refresh_weights()
    np.testing.assert_allclose(q_of(actor, inputs), q_of(network.actor(ENVS, backend="keras"), inputs),
                               rtol=1e-5, atol=1e-5)


def test_a_following_actor_sees_a_learner_update_at_once():
    """The default actor (shared weights, e.g. the minimal agent) reads the weights before every step."""
    from r2d2kit.agent.r2d2.learner import R2D2Config, R2D2Learner
    from r2d2kit.agent.seam import WindowLayout

    network = make_network(seed=16)
    layout = WindowLayout(burn_in=1, trace_length=3, period=2, n_step=1)
    config = R2D2Config(gamma=0.9, target_update_period=100, learning_rate=0.05)
    learner = R2D2Learner(network, config, layout)
    actor, keras_actor = network.actor(ENVS), network.actor(ENVS, backend="keras")
    inputs = tuple(x[:, 0] for x in rollout_inputs(network, seed=17))
    before = q_of(actor, inputs)
    rng = np.random.default_rng(18)
    length = layout.burn_in + layout.trace_length + layout.n_step
    batch = dict(obs=rng.normal(size=(4, length, 3)).astype(np.float32),
                 action=rng.integers(0, 3, (4, length)), reward=rng.normal(size=(4, length)).astype(np.float32),
                 prev_action=rng.integers(0, 3, (4, length)), prev_reward=np.zeros((4, length), np.float32),
                 terminated=np.zeros((4, length), bool), mask=np.ones((4, length), bool),
                 obs_mask=np.ones((4, length), bool), state_h=np.zeros((4, UNITS), np.float32),
                 state_c=np.zeros((4, UNITS), np.float32), weights=np.ones(4, np.float32))
    learner.train(batch)
    after = q_of(actor, inputs)
    assert not np.allclose(before, after)
    np.testing.assert_allclose(after, q_of(keras_actor, inputs), rtol=1e-5, atol=1e-5)


def test_local_pool_publish_and_evaluate_read_the_new_weights():
    """LocalActors.publish and evaluate() are where the in-process paths take new weights."""
    import gymnasium as gym

    from r2d2kit.agent.r2d2.policies import EpsilonGreedyFactory, EpsilonSchedule, GreedyPolicy
    from r2d2kit.agent.seam import WindowLayout
    from r2d2kit.runners.evaluation import evaluate
    from r2d2kit.runners.local import LocalActors
    from r2d2kit.runners.pool import ActorPool, Incarnations

    network = QNetwork((4,), 2, MLPModel((8,)), core_units=UNITS, head_units=5)
    randomize(network, 19)
    layout = WindowLayout(burn_in=1, trace_length=3, period=2, n_step=1)
    policies = EpsilonGreedyFactory(lambda: network, EpsilonSchedule(np.zeros(2)), 2)
    pool = LocalActors(lambda: gym.make("CartPole-v1"), policies, layout, incarnations=Incarnations(seed=0))
    assert isinstance(pool, ActorPool)
    try:
        inputs = (np.ones((2, 4), np.float32), np.zeros(2, np.int32), np.zeros(2, np.float32))
        actor = pool.loop.policy.actor
        before = q_of(actor, inputs)
        randomize(network, 20)
        pool.publish(network.variables, updates=1)
        np.testing.assert_allclose(q_of(actor, inputs), q_of(network.actor(2, backend="keras"), inputs),
                                   rtol=1e-5, atol=1e-5)
        assert not np.allclose(before, q_of(actor, inputs))
    finally:
        pool.close()
    # evaluate(): an actor that does not follow the weights still evaluates with the current ones
    stale = network.actor(2, follow_weights=False)
    randomize(network, 21)
    fresh = network.actor(2, backend="keras")
    np.testing.assert_array_equal(evaluate(GreedyPolicy(stale), lambda: gym.make("CartPole-v1"), 4, seed=3).returns,
                                  evaluate(GreedyPolicy(fresh), lambda: gym.make("CartPole-v1"), 4, seed=3).returns)
    assert stale.follow_weights is False


# ------------------------------------------------------------------ bad input

def test_bad_inputs_are_named():
    network = make_network()
    actor = network.actor(ENVS)
    good = [np.zeros((ENVS, 3), np.float32), np.zeros(ENVS, np.int32), np.zeros(ENVS, np.float32)]
    for position, bad in [(0, np.zeros((ENVS, 4))), (0, np.zeros((ENVS + 1, 3))), (1, np.zeros(ENVS + 1)),
                          (2, np.zeros((ENVS, 1)))]:
        args = list(good)
        args[position] = bad
        with pytest.raises(ValueError, match=r"q_values: obs .*expected \(3, 3\), \(3,\), \(3,\)"):
            actor.q_values(*args)
    with pytest.raises(ValueError, match=r"prev_action \[0, 3, 0\] outside \[0, 3\)"):
        actor.q_values(good[0], np.array([0, 3, 0]), good[2])
    with pytest.raises(ValueError, match="set_state"):
        actor.set_state((np.zeros((ENVS, UNITS + 1)), np.zeros((ENVS, UNITS))))
    with pytest.raises(ValueError, match="one flag per env"):
        actor.reset([True])
    with pytest.raises(ValueError, match="backend must be one of"):
        network.actor(ENVS, backend="jax")
    with pytest.raises(ValueError, match="num_envs"):
        network.actor(0)
