"""Encoders fold time into the batch: the same outputs and gradients as the per-frame reference
(the same layers wrapped in ``TimeDistributed`` over a ``[B, T, ...]`` input), for every built-in
encoder and a user's subclass, and no per-frame unrolling in the graph."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from r2d2kit.agent.r2d2 import QNetwork
from r2d2kit.models import (
    DQNImageModel,
    ImageModel,
    MinAtarImageModel,
    MiniGridImageModel,
    MLPModel,
    R2D3ImageModel,
)

pytestmark = pytest.mark.tensorflow  # its references and gradient graph are written on tf


class UserConv(ImageModel):
    """A user's encoder: layers applied to a batch of frames."""

    def create_image_model(self, x):
        x = self.scale_uint8(x)
        x = keras.layers.Conv2D(4, 3, strides=2, activation="relu")(x)
        x = keras.layers.Flatten()(x)
        return keras.layers.Dense(6, activation="tanh")(x)


def per_frame_reference(encoder: ImageModel, obs_shape, obs_dtype) -> keras.Model:
    """The unfolded construction: the encoder's frame model applied frame by frame (``TimeDistributed``)
    over a [B, T, ...] input."""
    frame = keras.Input(shape=tuple(obs_shape), dtype=obs_dtype)
    per_frame = keras.Model(frame, encoder.create_image_model(frame))
    inputs = keras.Input(shape=(None,) + tuple(obs_shape), dtype=obs_dtype)
    return keras.Model(inputs, keras.layers.TimeDistributed(per_frame)(inputs))


CASES = [
    ("mlp", lambda: MLPModel((16, 8), input_scale=2.0), (5,), "float32"),
    ("mlp-grid", lambda: MLPModel((8,)), (3, 4), "float32"),
    ("nature-cnn", lambda: DQNImageModel(dense_units=32), (36, 36), "uint8"),
    ("impala", lambda: R2D3ImageModel(channels=(4, 8), dense_units=16), (12, 12, 3), "uint8"),
    ("minatar", lambda: MinAtarImageModel(dense_units=16), (10, 10, 4), "bool"),
    ("minigrid", lambda: MiniGridImageModel(categories=(4, 3, 2)), (7, 7, 3), "uint8"),
    ("user", UserConv, (9, 9, 2), "uint8"),
]


@pytest.mark.parametrize("name, make, obs_shape, obs_dtype", CASES, ids=[c[0] for c in CASES])
def test_folded_encoder_equals_the_per_frame_reference(name, make, obs_shape, obs_dtype):
    keras.utils.set_random_seed(0)
    folded = make().build(obs_shape, obs_dtype)
    reference = per_frame_reference(make(), obs_shape, obs_dtype)
    assert len(folded.weights) == len(reference.weights) > 0
    reference.set_weights(folded.get_weights())  # the same layers in the same order

    rng = np.random.default_rng(1)
    batch, time = 3, 7
    if obs_dtype == "bool":
        obs = rng.random((batch, time) + obs_shape) < 0.3
    elif name == "minigrid":  # indices, one beyond the last category included (it one-hot encodes to zeros)
        obs = rng.integers(0, 5, (batch, time) + obs_shape).astype(np.uint8)
    elif obs_dtype == "uint8":
        obs = rng.integers(0, 256, (batch, time) + obs_shape).astype(np.uint8)
    else:
        obs = rng.normal(size=(batch, time) + obs_shape).astype(np.float32)
    out_folded = keras.ops.convert_to_numpy(folded(obs))
    out_reference = keras.ops.convert_to_numpy(reference(obs))
    assert out_folded.shape == out_reference.shape == (batch, time, folded.output_shape[-1])
    np.testing.assert_allclose(out_folded, out_reference, rtol=1e-5, atol=1e-6)

    probe = tf.constant(rng.normal(size=out_folded.shape).astype(np.float32))
    grads = []
    for model in (folded, reference):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(obs) * probe)
        grads.append([g.numpy() for g in tape.gradient(loss, model.trainable_variables)])
    for g_folded, g_reference in zip(*grads, strict=True):
        np.testing.assert_allclose(g_folded, g_reference, rtol=1e-4, atol=1e-5)


def test_the_gradient_graph_has_one_conv_per_layer_not_one_per_frame():
    keras.utils.set_random_seed(0)
    network = QNetwork((36, 36), 3, DQNImageModel(dense_units=16), obs_dtype="uint8", core_units=8, head_units=8)
    obs = tf.TensorSpec((2, 40, 36, 36), tf.uint8)

    @tf.function
    def grads(frames):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(network.encoder(frames))
        return tape.gradient(loss, network.encoder.trainable_variables)

    graph = grads.get_concrete_function(obs).graph
    ops = [op.type for op in graph.get_operations()]
    for function in graph._functions.values():  # noqa: SLF001  (gradient bodies live in nested functions)
        ops += [node.op for node in function.definition.node_def]
    assert ops.count("Conv2D") == 3  # one per layer over all 80 frames (TimeDistributed: 3 x 40)
    assert ops.count("Conv2DBackpropFilter") == 3


def test_encoder_shapes_for_actor_steps_and_windows():
    keras.utils.set_random_seed(0)
    network = QNetwork((9, 9, 2), 4, UserConv(), obs_dtype="uint8", core_units=8, head_units=8)
    assert network.encoder.output_shape == (None, None, 6)
    q = network.actor(2).q_values(np.zeros((2, 9, 9, 2), np.uint8), [0, 1], [0.0, 1.0])
    assert q.shape == (2, 4)
    h0, c0 = network.zero_state(3)
    q_seq, _, _ = network.model([np.zeros((3, 5, 9, 9, 2), np.uint8), np.zeros((3, 5), np.int32),
                                 np.zeros((3, 5), np.float32), np.ones((3, 5), bool), h0, c0])
    assert q_seq.shape == (3, 5, 4)
