"""DQN inside the toolkit: a network without a core (``model.core: none``), single-step windows, the
loss, target and optimiser switches and an annealed epsilon, each against an independent reference."""

import keras
import numpy as np
import pytest

from r2d2kit.agent.r2d2 import QNetwork
from r2d2kit.agent.r2d2.learner import R2D2Config, R2D2Learner
from r2d2kit.agent.r2d2.losses import row_loss
from r2d2kit.agent.r2d2.policies import EpsilonSchedule, apex_epsilons, as_schedule
from r2d2kit.agent.seam import WindowLayout
from r2d2kit.models import MLPModel
from r2d2kit.replay import SequenceBuilder
from r2d2kit.runners.acting import ActingLoop
from r2d2kit.training.builders import make_sequence_replay
from r2d2kit.training.config import ConfigError, build_config

DQN_LAYOUT = dict(burn_in=0, trace_length=1, period=1, n_step=1)


def feed_forward(actions=3, seed=0, **kwargs):
    keras.utils.set_random_seed(seed)
    kwargs = dict(dict(dueling=False, head_units=0, prev_action_reward=False), **kwargs)
    return QNetwork((4,), actions, MLPModel((16,)), core="none", **kwargs)


@pytest.mark.parametrize("prev_action_reward", [False, True])
@pytest.mark.parametrize("dueling", [False, True])
def test_feed_forward_network_is_one_row_at_a_time_in_every_forward(prev_action_reward, dueling):
    """No state; the sequence model, the Keras actor and the numpy actor agree with a numpy forward of the weights."""
    network = feed_forward(prev_action_reward=prev_action_reward, dueling=dueling, head_units=8 if dueling else 0)
    assert network.state_spec() == () and network.cell is None and network.zero_state(3) == ()
    rng = np.random.default_rng(1)
    obs = rng.normal(size=(3, 5, 4)).astype(np.float32)
    prev_action, prev_reward = rng.integers(0, 3, (3, 5)), rng.normal(size=(3, 5)).astype(np.float32)
    q = keras.ops.convert_to_numpy(network.model([obs, prev_action, prev_reward, np.ones((3, 5), bool)]))

    def reference(o, a, r):  # numpy, from the Keras weights by role
        kernel, bias = (keras.ops.convert_to_numpy(w) for w in network.encoder.weights)  # MLPModel((16,)): one Dense
        x = np.maximum(o @ kernel + bias, 0)
        if prev_action_reward:
            x = np.concatenate([x, np.eye(3)[a], r[..., None]], axis=-1)

        def stream(layers, h):
            for layer in layers:
                h = h @ layer.kernel.numpy() + layer.bias.numpy()
                if layer is not layers[-1]:
                    h = np.maximum(h, 0)
            return h

        advantage = stream(network.advantage_layers, x)
        if not dueling:
            return advantage
        return stream(network.value_layers, x) + advantage - advantage.mean(-1, keepdims=True)

    np.testing.assert_allclose(q, reference(obs, prev_action, prev_reward), rtol=1e-5, atol=1e-5)
    for backend in ("numpy", "keras"):
        actor = network.actor(3, backend=backend)
        for t in range(5):  # a row's Q never depends on the rows before it
            np.testing.assert_allclose(actor.q_values(obs[:, t], prev_action[:, t], prev_reward[:, t]), q[:, t],
                                       rtol=1e-5, atol=1e-5)
        assert actor.get_state() == ()


def test_windows_of_a_feed_forward_network_store_no_state():
    network = feed_forward()
    replay = make_sequence_replay(network.window_fields(), WindowLayout(**DQN_LAYOUT), 100, sampler="uniform", seed=0)
    builder = SequenceBuilder(2, 0, 1, 1, 1, state_names=())
    rng = np.random.default_rng(0)
    windows = None
    for step in range(4):
        windows = builder.step(rng.normal(size=(2, 4)).astype(np.float32), np.array([step % 3, 1]),
                               np.ones(2, np.float32), np.array([False, step == 2]), np.zeros(2, bool), ())
        if windows is not None:
            replay.add_sequences(windows)
    assert not any(name.startswith("state_") for name in windows)
    batch = replay.sample(4)
    assert batch["obs"].shape == (4, 2, 4) and not any(name.startswith("state_") for name in batch)


def dqn_batch(rng, batch=6, actions=3):
    """Single-transition windows (row 0 the transition, row 1 its next observation), some terminal."""
    terminated = np.zeros((batch, 2), bool)
    terminated[:2, 0] = True
    mask = np.ones((batch, 2), bool)
    mask[:2, 1] = False  # a terminal transition's next row is the episode's final observation
    return {"obs": rng.normal(size=(batch, 2, 4)).astype(np.float32), "action": rng.integers(0, actions, (batch, 2)),
            "reward": rng.normal(size=(batch, 2)).astype(np.float32) * 3,
            "prev_action": np.zeros((batch, 2), np.int64), "prev_reward": np.zeros((batch, 2), np.float32),
            "terminated": terminated, "mask": mask, "obs_mask": np.ones((batch, 2), bool),
            "weights": rng.uniform(0.5, 1.0, batch).astype(np.float32)}


def numpy_q(network, obs):
    rows = obs.shape[:2]
    return keras.ops.convert_to_numpy(network.model([obs, np.zeros(rows, np.int32), np.zeros(rows, np.float32),
                                                     np.ones(rows, bool)]))


@pytest.mark.parametrize("double_q", [False, True])
@pytest.mark.parametrize("loss", ["squared", "huber"])
def test_dqn_loss_equals_the_textbook_one(double_q, loss):
    """y = r + gamma (1 - terminal) Q_target(s', a*), a* = argmax of the target (or online with double Q);
    loss = mean_i w_i l(y_i - Q(s_i, a_i)), l = td^2 / 2 or Huber(1)."""
    config = R2D2Config(gamma=0.9, double_q=double_q, loss=loss, value_rescaling=False)
    learner = R2D2Learner(feed_forward(), config, WindowLayout(**DQN_LAYOUT))
    for online, target in zip(learner.online.variables, learner.target.variables):  # a target that differs
        target.assign(online.numpy() + np.random.default_rng(3).normal(0, 0.3, online.shape))
    batch = dqn_batch(np.random.default_rng(2))
    q_online, q_target = numpy_q(learner.online, batch["obs"]), numpy_q(learner.target, batch["obs"])
    chooser = q_online if double_q else q_target
    best = chooser[:, 1].argmax(-1)
    bootstrap = q_target[np.arange(6), 1, best] * (1.0 - batch["terminated"][:, 0])
    y = batch["reward"][:, 0] + 0.9 * bootstrap
    td = y - q_online[np.arange(6), 0, batch["action"][:, 0]]
    assert np.abs(td).max() > 1.0 and np.abs(td).min() < 1.0  # both branches of Huber's loss are taken
    per_row = 0.5 * td ** 2 if loss == "squared" else np.where(np.abs(td) <= 1, 0.5 * td ** 2, np.abs(td) - 0.5)
    loss_value, _ = learner.gradients(batch)
    np.testing.assert_allclose(loss_value, np.mean(batch["weights"] * per_row), rtol=1e-5)
    np.testing.assert_allclose(learner.train(batch)["abs_td"][:, 0], np.abs(td), rtol=1e-4, atol=1e-5)


@pytest.mark.tensorflow
def test_huber_gradient_is_clipped_to_one_per_row():
    td = np.array([-5.0, -1.0, -0.25, 0.0, 0.5, 3.0], np.float32)
    import tensorflow as tf

    variable = tf.Variable(td)
    with tf.GradientTape() as tape:
        total = tf.reduce_sum(row_loss(variable, "huber"))
    np.testing.assert_allclose(tape.gradient(total, variable).numpy(), np.clip(td, -1, 1))


def test_rmsprop_is_the_minatar_papers_centered_one():
    learner = R2D2Learner(feed_forward(), R2D2Config(optimizer="rmsprop", rmsprop_epsilon=1e-4,
                                                     learning_rate=2.5e-4))
    optimizer = learner.optimizer
    assert isinstance(optimizer, keras.optimizers.RMSprop)
    assert optimizer.centered and optimizer.rho == pytest.approx(0.95) and optimizer.epsilon == pytest.approx(1e-4)
    assert isinstance(R2D2Learner(feed_forward(), R2D2Config()).optimizer, keras.optimizers.Adam)


@pytest.mark.parametrize("field, value", [("loss", "l1"), ("optimizer", "sgd"), ("double_q", 1)])
def test_unknown_learner_choices_are_refused_by_name(field, value):
    with pytest.raises(ValueError, match=field):
        R2D2Config(**{field: value})


def test_config_refuses_burn_in_without_a_core_and_unknown_exploration():
    with pytest.raises(ConfigError, match="replay.burn_in: 0"):
        build_config({"model": {"core": "none"}, "replay": {"burn_in": 4}})
    build_config({"model": {"core": "none"}, "replay": {"burn_in": 0}})
    with pytest.raises(ConfigError, match="exploration must be one of"):
        build_config({"actors": {"exploration": "boltzmann"}})
    with pytest.raises(ConfigError, match="epsilon_start must be in"):
        build_config({"actors": {"epsilon_start": 1.5}})


# --- the annealed epsilon
def test_linear_schedule_closed_form_and_its_estimate_of_the_run_steps():
    schedule = EpsilonSchedule.linear(8, 1.0, 0.1, decay_env_steps=1000)
    np.testing.assert_allclose(schedule.epsilons(0), 1.0)
    np.testing.assert_allclose(schedule.epsilons(1000), 0.1)
    np.testing.assert_allclose(schedule.epsilons(5000), 0.1)  # held after the decay
    # one of two actors (4 of 8 envs) that took 100 env steps: the run took about 200
    np.testing.assert_allclose(schedule[4:8].epsilons(100), 1.0 - 0.9 * 200 / 1000)
    # a resumed run's actors start where the run stopped
    np.testing.assert_allclose(schedule.resumed(500)[0:4].epsilons(0), 1.0 - 0.9 * 500 / 1000)


def test_fixed_rates_are_the_apex_ones_untouched():
    rates = apex_epsilons(8, 0.4, 7.0)
    schedule = as_schedule(rates)
    np.testing.assert_array_equal(schedule.epsilons(10 ** 6), rates)
    np.testing.assert_array_equal(schedule[2:4].epsilons(), rates[2:4])
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        EpsilonSchedule(np.array([0.5, 1.5]))


def test_acting_loop_explores_at_the_scheduled_rate(monkeypatch):
    """Each step acts with the rate of the env steps taken before it (16 envs, 1.0 -> 0.0 over 400 steps)."""
    import r2d2kit.agent.r2d2.policies as policies
    from r2d2kit.envs.memory import CueMemoryEnv

    used = []
    original = policies.epsilon_greedy

    def recording(q_values, epsilon, rng):
        used.append(np.array(epsilon))
        return original(q_values, epsilon, rng)

    monkeypatch.setattr(policies, "epsilon_greedy", recording)
    network = QNetwork((2,), 2, MLPModel((8,)), core="none", head_units=0, dueling=False, prev_action_reward=False)
    schedule = EpsilonSchedule.linear(16, 1.0, 0.0, decay_env_steps=16 * 400)
    policy = policies.EpsilonGreedyPolicy(network.actor(16, follow_weights=False), schedule, seed=0)
    loop = ActingLoop.build(lambda: CueMemoryEnv(delay=2), policy, WindowLayout(**DQN_LAYOUT), seed=0)
    for _ in range(450):
        loop.step()
    loop.close()
    expected = np.clip(1.0 - np.arange(450) / 400, 0.0, None)
    np.testing.assert_allclose([rates[0] for rates in used], expected, atol=1e-12)
    assert all(np.all(rates == rates[0]) for rates in used) and loop.env_steps == 16 * 450


# --- through the CLI
DQN_SETS = ["model.core=none", "model.prev_action_reward=false", "replay.burn_in=0", "replay.trace_length=1",
            "replay.period=1", "actors.exploration=linear", "learner.learning_rate_decay_updates=0"]


def run_train(*args):
    import subprocess
    import sys
    from pathlib import Path

    return subprocess.run([sys.executable, "-m", "r2d2kit.train", *args], cwd=Path(__file__).resolve().parents[1],
                          capture_output=True, text=True, timeout=900)


def _sets(items):
    return [part for item in items for part in ("--set", item)]


@pytest.mark.slow
def test_dqn_learns_cartpole_through_the_cli(tmp_path):
    """A feed-forward DQN (3-step targets, linear epsilon) on full-state CartPole-v1: random play scores about
    22; it scored 367 at 10k env steps on seed 0 (471 at 20k)."""
    import json

    result = run_train("configs/cartpole_pomdp.yaml", *_sets(DQN_SETS + [
        "env.id=CartPole-v1", "model.input_scale=null", "replay.n_step=3", "actors.runner=local",
        "actors.epsilon=0.05", "actors.epsilon_decay_steps=10000", "learner.target_update_period=500",
        "run.updates_per_env_step=0.5", "run.total_env_steps=10000", "logging.progress=false"]),
        "--run-dir", str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "no core (feed-forward)" in result.stdout
    assert "epsilon 1 -> 0.05 over 10,000 env steps" in result.stdout
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["best_eval"] >= 150, summary


@pytest.mark.slow
def test_dqn_on_minatar_breakout_with_actor_processes_saves_and_resumes(tmp_path):
    """No state in the shared-memory record, a decaying epsilon in each actor process, a resumed run."""
    import json

    sets = _sets(DQN_SETS + ["model.dueling=false", "model.head_units=0", "replay.n_step=1", "learner.loss=huber",
                             "learner.optimizer=rmsprop", "learner.double_q=false", "learner.value_rescaling=false",
                             "actors.epsilon=0.1", "run.warmup_steps=500", "run.eval_every=1000",
                             "run.eval_episodes=2", "run.updates_per_env_step=0.25", "logging.progress=false",
                             "checkpoints.every_env_steps=1000"])
    first = run_train("minatar/breakout", *sets, "--set", "run.total_env_steps=1500", "--run-dir",
                      str(tmp_path / "run"))
    assert first.returncode == 0, first.stderr[-2000:]
    assert "actors: processes, 2 x 4 envs (actor processes), epsilon 1 -> 0.1 over 100,000 env steps" in first.stdout
    done = json.loads((tmp_path / "run" / "summary.json").read_text())
    resumed = run_train("--resume", str(tmp_path / "run"), "--set", f"run.total_env_steps={done['env_steps'] + 1000}")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["resumed_from"] and summary["env_steps"] >= done["env_steps"] + 1000
    assert summary["updates"] > done["updates"]
