"""Recurrent SAC over every kind of core: a GRU, none (feed-forward, no state) and a user's cell with three
state tensors, each with separate actor and critic cores: the policy's state spec names both cores'
fields apart, acting advances exactly those, and an update's losses reach every trained variable."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from r2d2kit.agent.sac.config import SACConfig
from r2d2kit.agent.sac.learner import SACLearner
from r2d2kit.agent.sac.networks import make_sac_networks
from r2d2kit.agent.sac.policy import SACPolicy
from r2d2kit.agent.seam import WindowLayout
from r2d2kit.models.cores import state_fields

USER_CORE = "tests.models.three_state_cell:make"  # state tensors a (units), b (2), c (3)
CASES = [("gru", ["actor_h", "critic_h"]), ("none", []),
         (USER_CORE, ["actor_a", "actor_b", "actor_c", "critic_a", "critic_b", "critic_c"])]


@pytest.mark.tensorflow
@pytest.mark.parametrize("core, names", CASES, ids=["gru", "none", "user-cell"])
def test_every_core_acts_and_trains_with_both_cores_states(core, names) -> None:
    layout = WindowLayout(burn_in=2, trace_length=3, period=3, n_step=2)
    networks = make_sac_networks((3,), [-1.0, 0.0], [1.0, 2.0], core=core, core_units=4, hidden_units=(8,))
    assert [field.name for field in networks.state_spec()] == names
    policy = SACPolicy(networks, 2, seed=0)
    rng = np.random.default_rng(0)
    for _ in range(2):
        action = policy.act(rng.normal(size=(2, 3)), rng.uniform(-1, 1, (2, 2)), rng.normal(size=2))
        assert action.shape == (2, 2) and action.dtype == np.float32
        assert np.all(action >= [-1.0, 0.0]) and np.all(action <= [1.0, 2.0])
    state = policy.get_state()
    assert len(state) == len(names) and all(part.any() for part in state)  # every part moved off zero

    learner = SACLearner(networks, SACConfig(), layout, seed=0)
    B, L = 3, layout.length
    batch = {"obs": rng.normal(size=(B, L, 3)), "prev_action": rng.uniform(-1, 1, (B, L, 2)),
             "action": rng.uniform(-1, 1, (B, L, 2)), "prev_reward": rng.normal(size=(B, L)),
             "reward": rng.normal(size=(B, L)), "obs_mask": np.ones((B, L), bool), "mask": np.ones((B, L), bool),
             "terminated": np.zeros((B, L), bool), "weights": np.ones(B)}
    batch.update({key: rng.normal(size=(B,) + shape).astype(dtype)
                  for key, (shape, dtype) in state_fields(networks.state_spec()).items()})
    batch["obs"] = batch["obs"].astype(np.float32)
    inputs = learner.inputs(batch)
    with tf.GradientTape(persistent=True) as tape:
        losses, outputs = learner.forward(inputs)
    critic_gradients = tape.gradient(losses["critic"], learner._critic_variables)
    actor_gradients = tape.gradient(losses["actor"], learner._actor_variables)
    del tape
    for kind, gradients in (("critic", critic_gradients), ("actor", actor_gradients)):
        assert all(g is not None and np.all(np.isfinite(g)) for g in gradients), kind
        assert sum(float(tf.reduce_sum(tf.abs(g))) for g in gradients) > 0, kind
    assert np.asarray(outputs["abs_td"]).shape == (B, layout.trace_length)
    assert np.asarray(outputs["priorities"]).shape == (B,)


def test_train_from_returns_the_seams_outputs_and_writes_r2d2_priorities_back() -> None:
    """One update from a prioritized replay (feed-forward networks: the cheapest to compile): every
    UPDATE_OUTPUTS key and logged metric, and the priorities it writes back are R2D2's of its |TD|."""
    from r2d2kit.agent.seam import UPDATE_OUTPUTS
    from r2d2kit.replay.sequence import SequenceReplayBuffer, sequence_priorities
    from r2d2kit.replay.sequence_builder import SequenceBuilder

    layout = WindowLayout(burn_in=1, trace_length=3, period=2, n_step=2)
    networks = make_sac_networks((3,), [-1.0], [1.0], core="none", hidden_units=(8,))
    learner = SACLearner(networks, SACConfig(batch_size=4, eta=0.7), layout, seed=0)
    replay = SequenceReplayBuffer(100, {"obs": ((3,), "float32"), "action": ((1,), "float32")}, {},
                                  burn_in=1, trace_length=3, n_step=2, period=2, seed=0)
    builder = SequenceBuilder(2, 1, 3, 2, 2)
    rng = np.random.default_rng(1)
    for step in range(30):
        windows = builder.step(rng.normal(size=(2, 3)), rng.uniform(-1, 1, (2, 1)).astype(np.float32),
                               rng.normal(size=2), [step % 7 == 6, False], [False, step % 5 == 4])
        if windows is not None:
            replay.add_sequences(windows)
    written = []
    original = replay.update_priorities

    def recording(indices, priorities, generations):
        written.append((np.array(indices), np.array(priorities)))
        original(indices, priorities, generations)

    replay.update_priorities = recording
    out = learner.train_from(replay)
    assert set(UPDATE_OUTPUTS) | set(learner.logged_metrics) <= set(out) and learner.logged_metrics[0] == "loss"
    assert all(np.ndim(out[name]) == 0 for name in learner.logged_metrics)
    assert out["abs_td"].shape == out["mask"].shape == (4, 3) and learner.updates == 1
    (indices, priorities), = written
    np.testing.assert_allclose(priorities, out["priorities"])
    np.testing.assert_allclose(priorities, sequence_priorities(out["abs_td"], out["mask"], eta=0.7), rtol=1e-5)
    assert out["trained_rows"] == out["mask"].sum() and indices.shape == (4,)
    other = SequenceReplayBuffer(100, {"obs": ((3,), "float32"), "action": ((1,), "float32")}, {},
                                 burn_in=0, trace_length=3, n_step=2, period=2)
    with pytest.raises(ValueError, match=r"the replay's windows have burn_in, trace_length, n_step = \(0, 3, 2\)"):
        learner.train_from(other)


def test_reading_the_sac_config_imports_no_tensorflow() -> None:
    import subprocess
    import sys

    code = ("import sys\nfrom r2d2kit.agent.sac import SACConfig\nSACConfig(shared_core=True)\n"
            "print('tensorflow' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
