"""Training-health diagnostics, each against a value computed by hand or by an independent forward.

The reference forward is the actors' numpy step (:class:`~r2d2kit.agent.r2d2.numpy_actor.NumpyForward`),
stepped row by row: the learner's Keras sequence model and the diagnostics' unrolls never enter it.
"""

import math

import numpy as np
import pytest

from r2d2kit.agent.r2d2.config import R2D2Config
from r2d2kit.agent.r2d2.diagnostics import HealthCheck
from r2d2kit.agent.r2d2.learner import R2D2Learner
from r2d2kit.agent.r2d2.qnetwork import QNetwork
from r2d2kit.agent.r2d2.rescale import inverse_value_rescale
from r2d2kit.agent.seam import WindowLayout
from r2d2kit.models.encoders import MLPModel
from r2d2kit.replay.samplers import make_sampler
from r2d2kit.replay.sequence import SequenceReplayBuffer
from r2d2kit.replay.sequence_builder import SequenceBuilder
from r2d2kit.training.update_statistics import UpdateStatistics, effective_sample_share

BURN_IN, TRACE, N_STEP, PERIOD, UNITS = 2, 3, 1, 2, 4
LAYOUT = WindowLayout(burn_in=BURN_IN, trace_length=TRACE, n_step=N_STEP, period=PERIOD)
GAMMA = 0.9


def test_effective_sample_share_closed_form():
    assert effective_sample_share(np.ones(8)) == pytest.approx(1.0)
    # weights 1, 1, 0, 0: two effective samples of four
    assert effective_sample_share(np.array([1.0, 1.0, 0.0, 0.0])) == pytest.approx(0.5)
    # (1 + 0.5)^2 / (1 + 0.25) / 2 = 0.9
    assert effective_sample_share(np.array([1.0, 0.5])) == pytest.approx(0.9)
    assert math.isnan(effective_sample_share(np.zeros(3)))


def test_update_statistics_summarise_the_interval_by_hand():
    stats = UpdateStatistics(max_gradient_norm=1.0)
    # update 1: trained rows hold |TD| 1, 2, 3, 4 (the masked 100 is not a transition)
    stats.add({"abs_td": np.array([[1.0, 2.0, 100.0], [3.0, 4.0, 0.0]]), "mask": np.array([[1, 1, 0], [1, 1, 0]]),
               "weights": np.array([1.0, 0.5]), "gradient_norm": 2.0, "trained_rows": 4.0})
    # update 2: one row, |TD| 10
    stats.add({"abs_td": np.array([[10.0]]), "mask": np.array([[1]]), "weights": np.array([1.0]),
               "gradient_norm": 0.5, "trained_rows": 1.0})
    summary = stats.summary()
    assert summary["learner/gradient_norm"] == pytest.approx(1.25)
    assert summary["learner/clipped_share"] == pytest.approx(0.5)
    assert summary["learner/td_p50"] == pytest.approx((2.5 + 10.0) / 2)  # numpy's linear percentile of 1..4: 2.5
    assert summary["learner/td_p90"] == pytest.approx((3.7 + 10.0) / 2)
    assert summary["learner/td_max"] == pytest.approx(7.0)
    assert summary["replay/is_weight_min"] == pytest.approx(0.75)
    assert summary["replay/is_weight_mean"] == pytest.approx((0.75 + 1.0) / 2)
    assert summary["replay/effective_batch_share"] == pytest.approx((0.9 + 1.0) / 2)
    assert stats.trained_rows == 5.0
    assert math.isnan(stats.summary()["learner/gradient_norm"])  # reset after a summary


def test_probability_spread_of_each_sampler_closed_form():
    slots = np.arange(4)
    proportional = make_sampler("proportional", 8, alpha=1.0, eps=0.0)
    proportional.place(slots, priorities=np.array([1.0, 1.0, 2.0, 4.0]))
    assert proportional.probability_spread() == pytest.approx(4.0 * 4 / 8.0)  # P max 4/8 against 1/4
    rank = make_sampler("rank", 8, alpha=1.0)
    rank.place(slots, priorities=np.array([5.0, 1.0, 2.0, 4.0]))
    assert rank.probability_spread() == pytest.approx(4 / (1 + 1 / 2 + 1 / 3 + 1 / 4))
    uniform = make_sampler("uniform", 8)
    uniform.place(slots)
    assert uniform.probability_spread() == 1.0
    assert math.isnan(make_sampler("uniform", 8).probability_spread())


def network(seed):
    import keras

    keras.utils.set_random_seed(seed)
    return QNetwork((2,), 3, MLPModel(units=(5,)), core_units=UNITS, head_units=6)


def fill_replay(net, steps=40, seed=0):
    """One env of short episodes acted by ``net``'s numpy actor; the builder stores the actor's states."""
    rng = np.random.default_rng(seed)
    actor = net.actor(1, backend="numpy")
    builder = SequenceBuilder(1, BURN_IN, TRACE, N_STEP, PERIOD, state_names=("state_h", "state_c"))
    replay = SequenceReplayBuffer(500, {"obs": ((2,), "float32"), "action": ((), "int64")},
                                  {"state_h": ((UNITS,), "float32"), "state_c": ((UNITS,), "float32")},
                                  burn_in=BURN_IN, trace_length=TRACE, n_step=N_STEP, period=PERIOD, seed=seed)
    lengths = [13, 17, 9]
    time, episode, prev_action, prev_reward = 0, 0, np.zeros(1, np.int64), np.zeros(1, np.float32)
    for _ in range(steps):
        length = lengths[episode % len(lengths)]
        obs = rng.normal(size=(1, 2)).astype(np.float32)
        state = actor.get_state()  # the state before this step: what the builder stores at window starts
        if time == length:  # the final observation: no action counts
            action = np.zeros(1, np.int64)
        else:
            actor.q_values(obs, prev_action, prev_reward)
            action = rng.integers(0, 3, 1)
        reward = rng.integers(0, 3, 1).astype(np.float32)
        done = np.array([time == length - 1])
        out = builder.step(obs, action, reward, done, np.array([False]), state)
        if out is not None:
            replay.add_sequences(out)
        if time == length:
            time, episode = 0, episode + 1
            actor.reset()
            prev_action, prev_reward = np.zeros(1, np.int64), np.zeros(1, np.float32)
        else:
            time += 1
            prev_action, prev_reward = action, reward
    return replay


def numpy_q(net, rows, h, c):
    """Q of every row of one window, stepping the numpy actor from ``(h, c)``; padding rows keep the state."""
    actor = net.actor(1, backend="numpy")
    actor.set_state((h[None], c[None]))
    q = np.zeros((rows["obs"].shape[0], net.num_actions))
    for t in range(rows["obs"].shape[0]):
        if rows["obs_mask"][t]:
            q[t] = actor.q_values(rows["obs"][t][None], rows["prev_action"][t][None].astype(np.int64),
                                  rows["prev_reward"][t][None])[0]
    return q, actor.get_state()


@pytest.fixture(scope="module")
def stale_setup():
    """Replay filled by acting weights; the learner's weights have moved since (stored states are stale)."""
    acting = network(0)
    replay = fill_replay(acting)
    net = network(1)
    learner = R2D2Learner(net, R2D2Config(batch_size=8, gamma=GAMMA), LAYOUT)
    return replay, net, learner


def test_delta_q_and_overestimation_match_a_numpy_unroll(stale_setup):
    replay, net, learner = stale_setup
    context_rows = 6
    health = HealthCheck(learner, context_rows=context_rows, return_horizon=50)
    batch = replay.sample(8, beta=0.6)
    values = health.measure_batch(replay, batch)

    context = replay.preceding_rows(batch["indices"], context_rows)
    returns, known = replay.episode_returns(batch["indices"], GAMMA, 50)
    zeros = np.zeros(UNITS, np.float32)
    starts, afters, scale, has_context = [], [], 0.0, []
    q_taken, obtained = [], []
    for b in range(8):
        window = {key: batch[key][b] for key in ("obs", "prev_action", "prev_reward", "obs_mask")}
        q_stored, _ = numpy_q(net, window, batch["state_h"][b], batch["state_c"][b])
        _, (h, c) = numpy_q(net, {key: context[key][b] for key in window}, zeros, zeros)
        q_fresh, _ = numpy_q(net, window, h[0], c[0])
        present = batch["obs_mask"][b]
        scale = max(scale, np.abs(q_stored[present]).max())
        first = int(np.argmax(present))
        has_context.append(context["obs_mask"][b].any())
        if has_context[-1]:
            starts.append(np.linalg.norm(q_stored[first] - q_fresh[first]))
            if present[BURN_IN]:
                afters.append(np.linalg.norm(q_stored[BURN_IN] - q_fresh[BURN_IN]))
        for t in range(TRACE):
            row = BURN_IN + t
            if known[b, row]:
                q_taken.append(inverse_value_rescale(q_stored[row, batch["action"][b, row]]))
                obtained.append(returns[b, row])
    assert 0 < len(starts) < 8, "the fixture should mix windows with and without earlier rows"
    assert values["health/context_share"] == pytest.approx(np.mean(has_context))
    assert values["health/delta_q_start"] == pytest.approx(np.mean(starts) / scale, rel=1e-4)
    assert values["health/delta_q_start"] > 0.01  # the states are stale: the measure must see it
    assert values["health/delta_q_after_burn_in"] == pytest.approx(np.mean(afters) / scale, rel=1e-4)
    assert q_taken, "the fixture's episodes end within the horizon"
    assert values["health/q_taken"] == pytest.approx(np.mean(q_taken), rel=1e-4, abs=1e-6)
    assert values["health/return_obtained"] == pytest.approx(np.mean(obtained))
    assert values["health/overestimation"] == pytest.approx(np.mean(q_taken) - np.mean(obtained), rel=1e-4, abs=1e-6)
    assert values["health/return_known_share"] == pytest.approx(known[:, BURN_IN:BURN_IN + TRACE].sum()
                                                                / batch["mask"][:, BURN_IN:BURN_IN + TRACE].sum())
    assert values["health/priority_spread"] == pytest.approx(replay.sampler.probability_spread())


def test_action_gap_and_greedy_disagreement_match_a_numpy_unroll(stale_setup):
    replay, net, learner = stale_setup
    learner.target.copy_weights_from(net)
    rng = np.random.default_rng(5)
    for variable in learner.target.variables:  # a target a little away from the online network
        variable.assign(variable.numpy() + rng.normal(scale=0.1, size=variable.shape).astype(np.float32))
    batch = replay.sample(8, beta=0.6)
    values = HealthCheck(learner, context_rows=4).measure_batch(replay, batch)
    gaps, disagree = [], []
    for b in range(8):
        window = {key: batch[key][b] for key in ("obs", "prev_action", "prev_reward", "obs_mask")}
        q_online, _ = numpy_q(net, window, batch["state_h"][b], batch["state_c"][b])
        q_target, _ = numpy_q(learner.target, window, batch["state_h"][b], batch["state_c"][b])
        for row in range(BURN_IN, BURN_IN + TRACE):
            if batch["mask"][b, row]:
                raw = np.sort(inverse_value_rescale(q_online[row]))
                gaps.append(raw[-1] - raw[-2])
                disagree.append(np.argmax(q_online[row]) != np.argmax(q_target[row]))
    assert values["health/action_gap"] == pytest.approx(np.mean(gaps), rel=1e-4)
    assert values["health/greedy_disagreement"] == pytest.approx(np.mean(disagree))
    assert 0.0 < np.mean(disagree) < 1.0, "the fixture should mix rows where the networks agree and disagree"
    learner.target.copy_weights_from(net)
    assert HealthCheck(learner, context_rows=4).measure_batch(replay, batch)["health/greedy_disagreement"] == 0.0


def test_target_age_counts_updates_since_the_last_copy():
    """Disagreement depends on how long ago the target was copied: the age logged beside it is that count."""
    net = network(0)
    replay = fill_replay(net, steps=30)
    learner = R2D2Learner(net, R2D2Config(batch_size=4, gamma=GAMMA, target_update_period=3), LAYOUT)
    health = HealthCheck(learner, context_rows=4)

    def same_weights() -> bool:
        return all(np.array_equal(t.numpy(), o.numpy()) for t, o in zip(learner.target.variables, net.variables))

    ages, copied = [], []
    for _ in range(7):
        learner.train(replay.sample(4, beta=0.6))
        ages.append(health.measure(replay)["health/target_age"])
        copied.append(same_weights())
    assert ages == [1.0, 2.0, 0.0, 1.0, 2.0, 0.0, 1.0]
    assert copied == [age == 0.0 for age in ages]  # age 0 is exactly the update that copied the weights


def test_fresh_states_give_zero_delta_q():
    """Stored states computed with the learner's own weights from the episode start: nothing is stale."""
    net = network(0)
    replay = fill_replay(net, steps=30)
    learner = R2D2Learner(net, R2D2Config(batch_size=8, gamma=GAMMA), LAYOUT)
    values = HealthCheck(learner, context_rows=40).measure(replay)  # every episode's start is within 40 rows
    assert values["health/delta_q_start"] == pytest.approx(0.0, abs=1e-5)
    assert values["health/delta_q_after_burn_in"] == pytest.approx(0.0, abs=1e-5)


def test_dead_units_and_saturated_gates_by_construction(stale_setup):
    replay, net, learner = stale_setup
    health = HealthCheck(learner, context_rows=4)
    batch = replay.sample(8, beta=0.6)
    encoder_dense = [layer for layer in net.encoder.layers if hasattr(layer, "kernel")][0]
    saved = [layer.get_weights() for layer in (encoder_dense, net.advantage_layers[0], net.value_layers[0], net.cell)]
    assert encoder_dense.units == 5
    kernel, bias = encoder_dense.get_weights()
    # encoder units 0 and 1: zero input weights and a negative bias, so never active
    encoder_dense.set_weights([np.where(np.arange(5) < 2, 0.0, kernel), np.where(np.arange(5) < 2, -1.0, bias)])
    advantage, value = net.advantage_layers[0], net.value_layers[0]
    advantage.set_weights([np.zeros_like(advantage.kernel.numpy()), -np.ones(6)])  # all 6 dead
    value.set_weights([np.zeros_like(value.kernel.numpy()), np.ones(6)])  # all 6 active
    cell_weights = net.cell.get_weights()
    net.cell.set_weights([np.zeros_like(cell_weights[0]), np.zeros_like(cell_weights[1]),
                          np.full_like(cell_weights[2], 50.0)])  # every gate pinned: sigmoid(50) = 1, tanh(50) = 1
    try:
        values = health.measure_batch(replay, batch)
        # ReLU units: 5 encoder + 6 advantage + 6 value; dead: 2 + 6 (+ any encoder unit the batch never lights)
        obs = batch["obs"][batch["obs_mask"]]
        pre = obs @ encoder_dense.kernel.numpy() + encoder_dense.bias.numpy()
        encoder_dead = int((pre.max(axis=0) <= 0.0).sum())
        assert encoder_dead >= 2
        assert values["health/dead_relu_share"] == pytest.approx((encoder_dead + 6) / 17)
        assert values["health/gate_saturation"] == pytest.approx(1.0)
        net.cell.set_weights([np.zeros_like(w) for w in cell_weights])  # gates at sigmoid(0) = 0.5, tanh(0) = 0
        assert health.measure_batch(replay, batch)["health/gate_saturation"] == pytest.approx(0.0)
    finally:
        encoder_dense.set_weights(saved[0])
        advantage.set_weights(saved[1])
        value.set_weights(saved[2])
        net.cell.set_weights(saved[3])
