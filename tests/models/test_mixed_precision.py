"""Under Keras' "mixed_bfloat16" dtype policy the network and the learner still run:
Q and the LSTM state leave the models in float32, the loss is float32, and one update from the same
weights lands close to the float32 one (bf16 keeps 8 significant bits, so "close" is a few percent)."""

import keras
import numpy as np
import pytest
from test_qnetwork_and_learner import TinyConv, random_batch, small_network

from r2d2kit.agent.r2d2.learner import R2D2Config, R2D2Learner
from r2d2kit.agent.seam import WindowLayout

LAYOUT = WindowLayout(burn_in=2, trace_length=5, period=5, n_step=2)
CONFIG = R2D2Config(gamma=0.9, target_update_period=100)


@pytest.fixture
def mixed_bfloat16():
    """Set the global policy for one test and always put float32 back (it is process-wide)."""
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy("float32")


def update(network, batch):
    learner = R2D2Learner(network, CONFIG, LAYOUT)
    loss, grads = learner.gradients(batch)
    return loss, grads, learner.train(batch)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["mlp", "image"])
def test_mixed_bfloat16_update_is_finite_float32_and_close_to_float32(case, mixed_bfloat16):
    kwargs = dict(obs_shape=(8, 8), actions=3, encoder=TinyConv(), obs_dtype="uint8") if case == "image" else {}
    batch = random_batch(np.random.default_rng(7), LAYOUT, obs_shape=kwargs.get("obs_shape", (3,)),
                         actions=kwargs.get("actions", 2), obs_dtype=np.uint8 if case == "image" else np.float32)
    mixed = small_network(**kwargs)
    keras.mixed_precision.set_global_policy("float32")
    full = small_network(**kwargs)
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    mixed.copy_weights_from(full)
    assert mixed.cell.compute_dtype == "bfloat16" and all(v.dtype == "float32" for v in mixed.variables)

    q, h, c = mixed.model([batch[k] for k in ("obs", "prev_action", "prev_reward", "obs_mask", "state_h", "state_c")])
    assert (q.dtype, h.dtype, c.dtype) == ("float32",) * 3

    loss_mixed, grads_mixed, out_mixed = update(mixed, batch)
    loss_full, grads_full, out_full = update(full, batch)
    assert np.isfinite(loss_mixed) and out_mixed["loss"].dtype == np.float32
    assert out_mixed["priorities"].dtype == np.float32 and np.all(np.isfinite(out_mixed["priorities"]))
    np.testing.assert_allclose(loss_mixed, loss_full, rtol=3e-2)
    np.testing.assert_allclose(out_mixed["priorities"], out_full["priorities"], rtol=5e-2, atol=1e-3)
    flat_mixed = np.concatenate([g.ravel() for g in grads_mixed])
    flat_full = np.concatenate([g.ravel() for g in grads_full])
    cosine = flat_mixed @ flat_full / (np.linalg.norm(flat_mixed) * np.linalg.norm(flat_full))
    assert cosine > 0.99, f"bf16 gradient direction off: cosine {cosine:.4f} with float32's"


def test_mixed_bfloat16_actor_returns_float32_and_keeps_a_float32_state(mixed_bfloat16):
    network = small_network()
    actor = network.actor(2, backend="keras")
    for _ in range(2):
        q = actor.q_values(np.zeros((2, 3), np.float32), np.zeros(2), np.zeros(2))
    h, c = actor.get_state()
    assert q.dtype == h.dtype == c.dtype == np.float32 and np.all(np.isfinite(q))
