"""Value rescaling and n-step double-Q targets (numpy and keras.ops) against closed forms and a plain float64 loop."""

import math

import keras
import numpy as np
import pytest

from r2d2kit.agent.r2d2 import losses
from r2d2kit.agent.r2d2.rescale import inverse_value_rescale, value_rescale
from r2d2kit.agent.r2d2.targets import nstep_targets


def h(x, eps=1e-3):
    return math.copysign(math.sqrt(abs(x) + 1.0) - 1.0, x) + eps * x


def h_inv(x, eps=1e-3):
    return math.copysign(((math.sqrt(1.0 + 4.0 * eps * (abs(x) + 1.0 + eps)) - 1.0) / (2.0 * eps)) ** 2 - 1.0, x)


@pytest.mark.tensorflow
def test_inverse_value_rescale_round_trips_to_1e_6_relative():
    x = np.concatenate([-np.logspace(-9, 6, 20001), [0.0], np.logspace(-9, 6, 20001), np.linspace(-1e6, 1e6, 20001)])
    for dtype, tolerance in ((np.float64, 1e-12), (np.float32, 1e-6)):
        values = x.astype(dtype)
        back = inverse_value_rescale(value_rescale(values))
        assert back.dtype == dtype
        np.testing.assert_allclose(back, values, rtol=tolerance, atol=0)
        ops_back = keras.ops.convert_to_numpy(losses.inverse_value_rescale(losses.value_rescale(values)))
        assert ops_back.dtype == dtype
        np.testing.assert_allclose(ops_back, values, rtol=tolerance, atol=0)


@pytest.mark.parametrize("x", [-1e6, -12.5, -1.0, 0.5, 3.0, 250.0, 1e6])
def test_value_rescale_matches_the_textbook_formula(x):
    assert value_rescale(x) == pytest.approx(h(x), rel=1e-12)
    assert inverse_value_rescale(value_rescale(x)) == pytest.approx(h_inv(h(x)), rel=1e-9)


def brute_force_targets(reward, mask, terminated, q_online, q_target, gamma, n_step, burn_in, trace, rescale):
    """The target formula written out one row at a time in float64."""
    batch = reward.shape[0]
    out = np.zeros((batch, trace))
    for b in range(batch):
        for i in range(trace):
            t = burn_in + i
            if not mask[b, t]:
                continue
            rewards, cut = [], False
            row = t
            while len(rewards) < n_step and mask[b, row]:
                rewards.append(reward[b, row])
                cut = bool(terminated[b, row])
                row += 1
                if cut:
                    break
            m = len(rewards)
            ret = math.fsum(gamma ** k * r for k, r in enumerate(rewards))
            action = int(np.argmax(q_online[b, row]))
            q = q_target[b, row, action]
            if rescale:
                out[b, i] = h(ret + (0.0 if cut else gamma ** m) * h_inv(q))
            else:
                out[b, i] = ret + (0.0 if cut else gamma ** m) * q
    return out


def random_windows(rng, batch, burn_in, trace, n_step, actions):
    """Window-shaped masks: front padding, a run of transitions, maybe an episode end, back padding."""
    length = burn_in + trace + n_step
    mask = np.zeros((batch, length), bool)
    terminated = np.zeros((batch, length), bool)
    for b in range(batch):
        first = rng.integers(0, burn_in + 1)
        if rng.random() < 0.5:  # episode ends inside the window: last transition, then a final-obs row
            last = rng.integers(first, length - 1)
            mask[b, first:last + 1] = True
            terminated[b, last] = rng.random() < 0.5  # else truncated: bootstraps from the final row
        else:
            mask[b, first:] = True
            mask[b, -1] = False  # the last row only serves as a bootstrap
    reward = rng.normal(0, 10, (batch, length)) * mask
    q_online = rng.normal(0, 5, (batch, length, actions))
    q_target = rng.normal(0, 5, (batch, length, actions))
    return reward, mask, terminated, q_online, q_target


@pytest.mark.parametrize("burn_in,trace,n_step,gamma,rescale", [
    (0, 5, 1, 0.99, True), (3, 8, 5, 0.997, True), (2, 6, 3, 0.9, False), (4, 4, 4, 1.0, True),
])
@pytest.mark.parametrize("seed", range(3))
def test_targets_equal_brute_force_loop(burn_in, trace, n_step, gamma, rescale, seed):
    rng = np.random.default_rng(seed)
    data = random_windows(rng, 64, burn_in, trace, n_step, actions=3)
    kwargs = dict(gamma=gamma, n_step=n_step, burn_in=burn_in, trace_length=trace, rescale=rescale)
    expected = brute_force_targets(*data, gamma, n_step, burn_in, trace, rescale)
    np.testing.assert_allclose(nstep_targets(*data, **kwargs), expected, rtol=1e-5, atol=1e-5)
    tensors = [keras.ops.convert_to_tensor(a.astype(np.float32) if a.dtype != bool else a) for a in data]
    got = keras.ops.convert_to_numpy(losses.nstep_targets(*tensors, **kwargs))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-4)


def test_hand_checked_window():
    """burn_in 1, trace 2, n_step 2; transitions at rows 1, 2 then a truncation's final obs at row 3.

    row 1: y = h(r1 + g r2 + g^2 h^-1(Q_target(s3, argmax Q(s3))))   (truncated: bootstraps)
    row 2: y = h(r2 + g h^-1(Q_target(s3, .)))
    """
    g = 0.5
    reward = np.array([[0.0, 1.0, 2.0, 0.0, 0.0]])
    mask = np.array([[False, True, True, False, False]])
    terminated = np.zeros_like(mask)
    q_online = np.zeros((1, 5, 2))
    q_online[0, 3] = [0.0, 1.0]  # argmax at s3 is action 1
    q_target = np.zeros((1, 5, 2))
    q_target[0, 3] = [100.0, 4.0]
    got = nstep_targets(reward, mask, terminated, q_online, q_target, gamma=g, n_step=2, burn_in=1, trace_length=2)
    np.testing.assert_allclose(got[0], [h(1 + g * 2 + g * g * h_inv(4.0)), h(2 + g * h_inv(4.0))], rtol=1e-12)
    terminated[0, 2] = True  # now the episode terminates at row 2: no bootstrap
    got = nstep_targets(reward, mask, terminated, q_online, q_target, gamma=g, n_step=2, burn_in=1, trace_length=2)
    np.testing.assert_allclose(got[0], [h(1 + g * 2), h(2)], rtol=1e-12)


def test_the_shortcut_target_is_not_what_we_compute():
    """h(r) + gamma * Q differs from h(r + gamma * h^-1(Q)); guard against the Keras-RL port's shortcut."""
    reward = np.array([[5.0, 0.0]])
    mask = np.array([[True, False]])
    q = np.full((1, 2, 1), 3.0)
    got = nstep_targets(reward, mask, np.zeros_like(mask), q, q, gamma=0.9, n_step=1, burn_in=0, trace_length=1)
    assert got[0, 0] == pytest.approx(h(5.0 + 0.9 * h_inv(3.0)))
    assert abs(got[0, 0] - (h(5.0) + 0.9 * 3.0)) > 0.1


def test_shape_errors_name_the_argument():
    with pytest.raises(ValueError, match="reward must be"):
        nstep_targets(np.zeros((2, 4)), np.zeros((2, 4)), np.zeros((2, 4)), np.zeros((2, 4, 2)),
                      np.zeros((2, 4, 2)), gamma=0.9, n_step=2, burn_in=1, trace_length=2)
