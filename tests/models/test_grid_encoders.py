"""The built-in grid encoders: MinAtar's bool channels and MiniGrid's index image, against numpy references.

``MinAtarImageModel`` is the MinAtar paper's network (one 16x3x3 conv, a 128-unit dense layer):
its sizes are checked in closed form for every game's channel count. ``MiniGridImageModel`` one-hot
encodes each index channel before its convolutions; the encoding is checked against ``np.eye``.
"""

import keras
import numpy as np
import pytest

from r2d2kit.agent.r2d2 import QNetwork
from r2d2kit.models import MinAtarImageModel, MiniGridImageModel
from r2d2kit.models.encoders import OneHotChannels


@pytest.mark.parametrize("channels", [4, 6, 7, 10], ids=lambda c: f"{c}-channels")
def test_minatar_encoder_is_the_papers_network(channels):
    """10x10xC -> conv 16 3x3 stride 1 (no padding) -> 8x8x16 -> dense 128."""
    keras.utils.set_random_seed(0)
    encoder = MinAtarImageModel().build((10, 10, channels), "bool")
    conv, dense = (layer for layer in encoder.layers if layer.weights)
    assert conv.kernel.shape == (3, 3, channels, 16) and conv.strides == (1, 1)
    assert dense.kernel.shape == (8 * 8 * 16, 128)
    assert encoder.count_params() == (9 * channels * 16 + 16) + (1024 * 128 + 128)
    obs = np.random.default_rng(0).random((2, 3, 10, 10, channels)) < 0.2  # [B, T, 10, 10, C] bool
    features = keras.ops.convert_to_numpy(encoder(obs))
    assert features.shape == (2, 3, 128) and features.min() >= 0.0  # ReLU
    # bool channels are read as 0.0 / 1.0 (not scaled like uint8 pixels)
    float_model = MinAtarImageModel().build((10, 10, channels), "float32")
    float_model.set_weights(encoder.get_weights())
    np.testing.assert_allclose(keras.ops.convert_to_numpy(float_model(obs.astype(np.float32))), features, rtol=1e-6)


def test_minatar_encoder_refuses_vector_observations():
    with pytest.raises(ValueError, match=r"MinAtarImageModel convolves \[height, width, channels\] frames, got "
                                         r"frames of shape \(5,\); use model.encoder: mlp"):
        MinAtarImageModel().build((5,), "float32")


@pytest.mark.parametrize("leading", [(6,), (2, 3)])
def test_one_hot_channels_match_a_numpy_reference(leading):
    categories = (4, 3, 2)
    codes = np.random.default_rng(1).integers(0, 5, leading + (5, 5, 3)).astype(np.uint8)  # 4: out of range
    reference = np.concatenate([np.eye(n + 1, dtype=np.float32)[np.minimum(codes[..., c], n)][..., :n]
                                for c, n in enumerate(categories)], axis=-1)  # out of range -> all zeros
    encoded = keras.ops.convert_to_numpy(OneHotChannels(categories)(codes))
    assert encoded.shape == leading + (5, 5, 9)
    np.testing.assert_array_equal(encoded, reference)


def test_minigrid_encoder_sizes():
    """7x7x3 indices -> one-hot 20 channels -> 16 2x2 -> max-pool -> 32 2x2 -> 64 2x2 -> 64 features."""
    keras.utils.set_random_seed(0)
    encoder = MiniGridImageModel().build((7, 7, 3), "uint8")
    kernels = [layer.kernel.shape for layer in encoder.layers if layer.weights]
    assert kernels == [(2, 2, 20, 16), (2, 2, 16, 32), (2, 2, 32, 64)]
    assert encoder.count_params() == (4 * 20 * 16 + 16) + (4 * 16 * 32 + 32) + (4 * 32 * 64 + 64) == 11_632
    obs = np.random.default_rng(0).integers(0, 3, (2, 4, 7, 7, 3)).astype(np.uint8)
    assert encoder(obs).shape == (2, 4, 64)


def test_minigrid_categories_are_minigrids_object_colour_and_state_counts():
    constants = pytest.importorskip("minigrid.core.constants")
    assert MiniGridImageModel().categories == (len(constants.OBJECT_TO_IDX), len(constants.COLOR_TO_IDX),
                                               len(constants.STATE_TO_IDX))


def test_minigrid_encoder_refuses_a_flattened_view():
    with pytest.raises(ValueError, match=r"reads \[height, width, 3\] frames of indices .* got frames of shape "
                                         r"\(147,\); keep MiniGrid's image unflattened"):
        MiniGridImageModel().build((147,), "uint8")


def test_grid_encoders_act_on_steps_and_windows():
    """Both encoders under the recurrent Q-network: one actor step of [E] frames, one window of [B, T] frames."""
    for encoder, shape, dtype in ((MinAtarImageModel(), (10, 10, 4), "bool"), (MiniGridImageModel(), (7, 7, 3),
                                                                                   "uint8")):
        network = QNetwork(shape, 3, encoder, obs_dtype=dtype, core_units=8, head_units=8)
        assert network.actor(2).q_values(np.zeros((2,) + shape, dtype), [0, 1], [0.0, 1.0]).shape == (2, 3)
        h0, c0 = network.zero_state(3)
        q, _, _ = network.model([np.zeros((3, 5) + shape, dtype), np.zeros((3, 5), np.int32),
                                 np.zeros((3, 5), np.float32), np.ones((3, 5), bool), h0, c0])
        assert q.shape == (3, 5, 3)
