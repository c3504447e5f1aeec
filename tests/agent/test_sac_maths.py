"""Recurrent SAC's maths against independent numpy: the squashed Gaussian's log-probability, the n-step
soft targets, the twin minimum, the Polyak step, the temperature's gradient, and the config's refusals."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from r2d2kit.agent.sac.config import SACConfig
from r2d2kit.agent.sac.learner import SACLearner, soft_nstep_targets
from r2d2kit.agent.sac.networks import make_sac_networks, squashed_log_prob, squashed_sample
from r2d2kit.agent.seam import WindowLayout
from r2d2kit.models.cores import state_fields


def numpy_squashed_log_prob(u, mean, log_std, low, high):
    """log density of ``a = c + s tanh(u)``, ``u ~ N(mean, std^2)``: change of variables, float64."""
    std = np.exp(log_std)
    gaussian = -0.5 * ((u - mean) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi)
    scale = (high - low) / 2
    jacobian = scale * (1.0 - np.tanh(u) ** 2)  # da/du
    return np.sum(gaussian - np.log(jacobian), axis=-1)


def test_squashed_log_prob_matches_the_change_of_variables_in_numpy() -> None:
    rng = np.random.default_rng(0)
    low, high = np.array([-2.0, 0.0, -1.0]), np.array([2.0, 5.0, 1.0])
    mean = rng.normal(size=(50, 3))
    log_std = rng.uniform(-2.0, 1.0, size=(50, 3))
    u = mean + np.exp(log_std) * rng.normal(size=(50, 3))
    got = squashed_log_prob(*(keras.ops.convert_to_tensor(x, "float32") for x in (u, mean, log_std)),
                            keras.ops.convert_to_tensor((high - low) / 2, "float32"))
    np.testing.assert_allclose(np.asarray(got), numpy_squashed_log_prob(u, mean, log_std, low, high), rtol=1e-5,
                               atol=1e-4)


def test_squashed_log_prob_stays_finite_where_tanh_saturates() -> None:
    """At u = 9, 1 - tanh(u)^2 is 6e-8 (0 in float32 after rounding tanh); the stable form stays exact."""
    u = np.array([[9.0], [-9.0]])
    mean, log_std, low, high = np.zeros_like(u), np.zeros_like(u), np.array([-1.0]), np.array([1.0])
    got = np.asarray(squashed_log_prob(*(keras.ops.convert_to_tensor(x, "float32") for x in (u, mean, log_std)),
                                       keras.ops.convert_to_tensor([1.0], "float32")))
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, numpy_squashed_log_prob(u, mean, log_std, low, high), rtol=1e-5)


def test_the_squashed_density_integrates_to_one_over_the_box() -> None:
    """An independent check of the Jacobian and the scaling: the density of the env action over [low, high]."""
    low, high, mean, log_std = 0.5, 3.5, 0.3, -0.4
    center, scale = (high + low) / 2, (high - low) / 2
    actions = np.linspace(low, high, 200_001)[1:-1]
    u = np.arctanh((actions - center) / scale)
    log_p = np.asarray(squashed_log_prob(keras.ops.convert_to_tensor(u[:, None], "float32"),
                                         keras.ops.convert_to_tensor(np.full((u.size, 1), mean), "float32"),
                                         keras.ops.convert_to_tensor(np.full((u.size, 1), log_std), "float32"),
                                         keras.ops.convert_to_tensor([scale], "float32")), np.float64)
    assert abs(np.trapezoid(np.exp(log_p), actions) - 1.0) < 1e-3


def test_a_squashed_sample_lies_in_the_bounds_and_is_the_scaled_tanh() -> None:
    rng = np.random.default_rng(1)
    mean, log_std, noise = rng.normal(size=(100, 2)) * 3, rng.normal(size=(100, 2)), rng.normal(size=(100, 2))
    low, high = np.array([-2.0, 1.0]), np.array([2.0, 4.0])
    action, _ = squashed_sample(*(keras.ops.convert_to_tensor(x, "float32") for x in (mean, log_std, noise)),
                                keras.ops.convert_to_tensor((high + low) / 2, "float32"),
                                keras.ops.convert_to_tensor((high - low) / 2, "float32"))
    expected = (high + low) / 2 + (high - low) / 2 * np.tanh(mean + np.exp(log_std) * noise)
    np.testing.assert_allclose(np.asarray(action), expected, rtol=1e-5, atol=1e-5)
    assert np.all(np.asarray(action) >= low) and np.all(np.asarray(action) <= high)


# ---------------------------------------------------------------------------- n-step soft targets
def brute_force_targets(reward, mask, terminated, values, gamma, n_step, trace_length):
    """Row by row: sum the episode's rewards for up to n rows, stop after a termination (no bootstrap) or at
    the episode's last transition (bootstrap from the final observation's row)."""
    B = reward.shape[0]
    out = np.zeros((B, trace_length))
    for b in range(B):
        for t in range(trace_length):
            if not mask[b, t]:
                continue
            total, discount, row = 0.0, 1.0, t
            for k in range(n_step):
                if not mask[b, t + k]:
                    break
                total += discount * reward[b, t + k]
                discount *= gamma
                row = t + k + 1
                if terminated[b, t + k]:
                    discount = 0.0
                    break
            out[b, t] = total + discount * values[b, row]
    return out


def test_soft_nstep_targets_match_a_brute_force_loop_with_episode_ends_and_padding() -> None:
    """Rows after burn-in, T = 5 and n = 3: a running episode, one that terminates, one truncated (its final
    observation bootstraps), one that ends at once, padding everywhere after the ends."""
    T, n, gamma = 5, 3, 0.9
    mask = np.array([[1, 1, 1, 1, 1, 1, 1, 1],
                     [1, 1, 1, 0, 0, 0, 0, 0],   # terminates at row 2
                     [1, 1, 1, 1, 0, 0, 0, 0],   # truncated after row 3 (row 4: final obs)
                     [1, 0, 0, 0, 0, 0, 0, 0],   # one transition, terminated
                     [0, 0, 0, 0, 0, 0, 0, 0]], bool)  # a padded row block
    terminated = np.zeros_like(mask)
    terminated[1, 2] = terminated[3, 0] = True
    rng = np.random.default_rng(2)
    reward = rng.normal(size=mask.shape) * mask
    values = rng.normal(size=mask.shape)
    got = soft_nstep_targets(*(keras.ops.convert_to_tensor(x) for x in (reward.astype(np.float32), mask, terminated,
                                                                        values.astype(np.float32))),
                             gamma=gamma, n_step=n, trace_length=T)
    want = brute_force_targets(reward, mask, terminated, values, gamma, n, T)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
    assert want[2, 3] == pytest.approx(reward[2, 3] + gamma * values[2, 4], rel=1e-6)  # the truncation bootstraps
    assert want[1, 2] == pytest.approx(reward[1, 2])  # the termination does not


# ---------------------------------------------------------------------------- the learner's pieces
@pytest.fixture(scope="module")
def learner() -> SACLearner:
    networks = make_sac_networks((2,), [-1.0], [1.0], core="gru", core_units=4, hidden_units=(8,))
    return SACLearner(networks, SACConfig(init_alpha=1e-8, gamma=0.5, tau=0.25),
                      WindowLayout(burn_in=1, trace_length=3, period=3, n_step=1), seed=0)


def window_batch(learner: SACLearner, terminated_row: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    B, L = 2, learner.layout.length
    batch = {"obs": rng.normal(size=(B, L, 2)).astype(np.float32),
             "prev_action": rng.uniform(-1, 1, (B, L, 1)).astype(np.float32),
             "action": rng.uniform(-1, 1, (B, L, 1)).astype(np.float32),
             "prev_reward": np.zeros((B, L), np.float32), "reward": np.zeros((B, L), np.float32),
             "obs_mask": np.ones((B, L), bool), "mask": np.ones((B, L), bool), "terminated": np.zeros((B, L), bool),
             "weights": np.ones(B, np.float32)}
    batch["terminated"][:, terminated_row] = True
    batch["mask"][:, terminated_row + 1:] = False
    for key, (shape, dtype) in state_fields(learner.networks.state_spec()).items():
        batch[key] = rng.normal(size=(B,) + shape).astype(dtype)
    return batch


def constant_q_heads(model: keras.Model, q1: float, q2: float) -> None:
    """Make both twins of a Q head constant: zero weights, the output biases ``q1`` and ``q2``."""
    for variable in model.weights:
        variable.assign(np.zeros(variable.shape, np.float32))
    for twin, value in ((1, q1), (2, q2)):
        bias = next(v for v in model.weights if f"q{twin}_out" in v.path and v.path.endswith("bias"))
        bias.assign(np.full(bias.shape, value, np.float32))


def test_the_target_takes_the_smaller_twin(learner: SACLearner) -> None:
    """Target twins 5 and -3, online critics 0, no reward, gamma 0.5, alpha ~0: |TD| = 0.5 * min = 1.5 on rows
    that bootstrap, 0 on the terminated row (2.5 if the larger twin were taken)."""
    nets = learner.networks
    saved = [v.numpy() for model in (nets.q_head, nets.target_q_head) for v in model.weights]
    constant_q_heads(nets.target_q_head, 5.0, -3.0)
    constant_q_heads(nets.q_head, 0.0, 0.0)
    try:
        _, outputs = learner.forward(learner.inputs(window_batch(learner, terminated_row=learner.layout.burn_in
                                                                       + 1)))
    finally:
        for variable, value in zip([v for m in (nets.q_head, nets.target_q_head) for v in m.weights], saved,
                                   strict=True):
            variable.assign(value)
    np.testing.assert_allclose(np.asarray(outputs["abs_td"]), [[1.5, 0.0, 0.0]] * 2, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(outputs["mask"]), [[1, 1, 0]] * 2)


def test_polyak_moves_each_target_weight_tau_of_the_way(learner: SACLearner) -> None:
    nets = learner.networks
    rng = np.random.default_rng(4)
    pairs = list(zip([v for m in nets.target_models() for v in m.weights],
                     [v for m in nets.critic_models() for v in m.weights], strict=True))
    before = []
    for target, online in pairs:
        target.assign(rng.normal(size=target.shape).astype(np.float32))
        online.assign(rng.normal(size=online.shape).astype(np.float32))
        before.append((target.numpy(), online.numpy()))
    learner.update_target()
    for (target, online), (old, source) in zip(pairs, before, strict=True):
        np.testing.assert_allclose(target.numpy(), old + 0.25 * (source - old), rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(online.numpy(), source)  # the online critic is not touched
    assert len(pairs) == len(nets.critic_body.weights) + len(nets.q_head.weights) > 0


@pytest.mark.tensorflow
@pytest.mark.parametrize("target_entropy, rises", [(50.0, True), (-50.0, False)], ids=["entropy-too-low",
                                                                                      "entropy-too-high"])
def test_the_temperature_rises_when_the_policy_is_less_random_than_the_target(learner: SACLearner,
                                                                             target_entropy: float,
                                                                             rises: bool) -> None:
    """d alpha_loss / d log_alpha = -(mean log pi + target_entropy): negative (alpha grows under gradient
    descent) when the policy's entropy -log pi is below the target."""
    learner.target_entropy = target_entropy
    try:
        with tf.GradientTape() as tape:
            losses, outputs = learner.forward(learner.inputs(window_batch(learner, terminated_row=3)))
        gradient = float(tape.gradient(losses["alpha"], learner.log_alpha))
    finally:
        learner.target_entropy = learner.config.target_entropy_for([1.0])
    entropy = float(outputs["entropy"])
    assert gradient == pytest.approx(-(-entropy + target_entropy), rel=1e-4)
    assert (gradient < 0) == rises


# ---------------------------------------------------------------------------- the config
@pytest.mark.parametrize("kwargs, named", [
    ({"gamma": 1.5}, r"learner\.gamma must be in \[0, 1\], got 1\.5"),
    ({"tau": 0.0}, r"learner\.tau must be in \(0, 1\].*got 0\.0; fix"),
    ({"batch_size": 0}, r"learner\.batch_size must be an integer >= 1, got 0"),
    ({"init_alpha": -1.0}, r"learner\.init_alpha must be > 0, got -1\.0; fix"),
    ({"actor_learning_rate": float("nan")}, r"learner\.actor_learning_rate must be a finite number, got nan"),
    ({"target_entropy": "high"}, r"learner\.target_entropy must be 'auto'.*got 'high'; fix: 'auto'"),
    ({"log_std_min": 3.0}, r"learner\.log_std_min \(3\.0\) must be < learner\.log_std_max \(2\.0\)"),
    ({"shared_core": "yes"}, r"learner\.shared_core must be true or false, got 'yes'"),
], ids=lambda value: str(value) if isinstance(value, dict) else "")
def test_the_config_refuses_bad_values_naming_the_key_the_value_and_the_fix(kwargs, named) -> None:
    with pytest.raises(ValueError, match=named):
        SACConfig(**kwargs)


def test_auto_target_entropy_is_sb3s_on_actions_in_minus_one_one() -> None:
    assert SACConfig().target_entropy_for([1.0] * 6) == -6.0  # bounds [-1, 1]: SB3's -(action entries)
    # a uniform density on [-2, 2] has log 2 nats more than on [-1, 1]: the same policy, measured in env units
    assert SACConfig().target_entropy_for([2.0, 0.5]) == pytest.approx(-2.0 + math.log(2.0) + math.log(0.5))
    assert SACConfig(target_entropy=-1.5).target_entropy_for([2.0] * 6) == -1.5
    assert math.isclose(SACConfig().tau, 0.005) and SACConfig().gamma == 0.99
