"""R2D2's update compiled per Keras backend: the JAX step (``jax.jit``, ``stateless_call``, ``stateless_apply``)
computes what the TensorFlow step (``tf.function``, ``GradientTape``) computes.

Keras picks its backend when it is imported, so the JAX update runs in a subprocess with ``KERAS_BACKEND=jax``
on the weights and the batch this process (TensorFlow) starts from; one update of each is compared: loss,
priorities, |TD|, the gradient norm, the updated online weights and the synced target weights.
"""

import os
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest

from r2d2kit.agent.r2d2 import QNetwork
from r2d2kit.agent.r2d2.learner import R2D2Config, R2D2Learner
from r2d2kit.agent.seam import WindowLayout
from r2d2kit.models import MLPModel

pytest.importorskip("jax")  # the optional extra `jax`

ROOT = Path(__file__).resolve().parents[2]
LAYOUT = dict(burn_in=2, trace_length=5, period=2, n_step=3)
CONFIG = dict(gamma=0.97, loss="huber", learning_rate=1e-2, max_gradient_norm=0.2, target_update_period=1)
OUTPUTS = ("loss", "priorities", "abs_td", "q_mean", "gradient_norm")

JAX_UPDATE = """
import sys
import numpy as np
import keras
from r2d2kit.agent.r2d2 import QNetwork
from r2d2kit.agent.r2d2.learner import R2D2Config, R2D2Learner
from r2d2kit.agent.seam import WindowLayout
from r2d2kit.models import MLPModel

assert keras.backend.backend() == "jax", keras.backend.backend()
start = np.load(sys.argv[1])
learner = R2D2Learner(QNetwork((3,), 2, MLPModel((8,)), core_units=8, head_units=8), R2D2Config(**{config}),
                      WindowLayout(**{layout}))
for i, variable in enumerate(learner.online.variables):
    variable.assign(start[f"online_{{i}}"])
for i, variable in enumerate(learner.target.variables):
    variable.assign(start[f"target_{{i}}"])
batch = {{key[len("batch_"):]: start[key] for key in start.files if key.startswith("batch_")}}
out = learner.train(batch)
arrays = {{key: np.asarray(out[key]) for key in {outputs}}}
arrays.update({{f"online_{{i}}": np.asarray(v.numpy()) for i, v in enumerate(learner.online.variables)}})
arrays.update({{f"target_{{i}}": np.asarray(v.numpy()) for i, v in enumerate(learner.target.variables)}})
np.savez(sys.argv[2], **arrays)
"""


def window_batch(rng: np.random.Generator, layout: WindowLayout, batch: int = 4) -> dict[str, np.ndarray]:
    """A sample-shaped batch with front padding, a truncation and a termination."""
    length = layout.length
    obs_mask = np.ones((batch, length), bool)
    mask = np.ones((batch, length), bool)
    terminated = np.zeros((batch, length), bool)
    obs_mask[0, :2] = mask[0, :2] = False
    mask[1, length - 3] = False
    obs_mask[1, length - 2:] = mask[1, length - 2:] = False
    terminated[2, length - 4] = True
    mask[2, length - 3:] = False
    obs_mask[2, length - 2:] = False
    return {"obs": (rng.normal(size=(batch, length, 3)) * obs_mask[..., None]).astype(np.float32),
            "action": rng.integers(0, 2, (batch, length)) * mask,
            "reward": (rng.normal(0, 3, (batch, length)) * mask).astype(np.float32),
            "prev_action": rng.integers(0, 2, (batch, length)) * obs_mask,
            "prev_reward": (rng.normal(size=(batch, length)) * obs_mask).astype(np.float32),
            "terminated": terminated, "mask": mask, "obs_mask": obs_mask,
            "state_h": rng.normal(size=(batch, 8)).astype(np.float32),
            "state_c": rng.normal(size=(batch, 8)).astype(np.float32),
            "weights": rng.uniform(0.2, 1.0, batch).astype(np.float32)}


@pytest.mark.slow
def test_jax_update_equals_the_tensorflow_update(tmp_path):
    if keras.backend.backend() != "tensorflow":
        pytest.skip("compares against the TensorFlow step: run under KERAS_BACKEND=tensorflow")
    keras.utils.set_random_seed(0)
    layout = WindowLayout(**LAYOUT)
    learner = R2D2Learner(QNetwork((3,), 2, MLPModel((8,)), core_units=8, head_units=8), R2D2Config(**CONFIG),
                          layout)
    noise = np.random.default_rng(1)
    for variable in learner.target.variables:  # a target that differs, so that its weights matter
        variable.assign(variable.numpy() + noise.normal(0, 0.3, variable.shape).astype(np.float32))
    batch = window_batch(np.random.default_rng(2), layout)
    start = {f"batch_{key}": value for key, value in batch.items()}
    start.update({f"online_{i}": v.numpy() for i, v in enumerate(learner.online.variables)})
    start.update({f"target_{i}": v.numpy() for i, v in enumerate(learner.target.variables)})
    np.savez(tmp_path / "start.npz", **start)

    script = JAX_UPDATE.format(config=CONFIG, layout=LAYOUT, outputs=OUTPUTS)
    env = dict(os.environ, KERAS_BACKEND="jax", PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "start.npz"), str(tmp_path / "jax.npz")],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    jax_out = np.load(tmp_path / "jax.npz")

    tf_out = learner.train(batch)
    assert np.max(tf_out["abs_td"]) > 1.0 > np.min(tf_out["abs_td"][tf_out["mask"] > 0])  # both Huber branches
    assert tf_out["gradient_norm"] > CONFIG["max_gradient_norm"]  # the global clipping acts
    for key in OUTPUTS:
        np.testing.assert_allclose(jax_out[key], tf_out[key], rtol=1e-5, atol=1e-6, err_msg=key)
    for i, variable in enumerate(learner.online.variables):
        assert not np.array_equal(variable.numpy(), start[f"online_{i}"]) or not variable.trainable
        np.testing.assert_allclose(jax_out[f"online_{i}"], variable.numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=variable.path)
    for i, variable in enumerate(learner.target.variables):  # synced after the update (period 1)
        np.testing.assert_allclose(jax_out[f"target_{i}"], variable.numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=variable.path)
