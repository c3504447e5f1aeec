"""agents/her_dqn.py: a CI learning test on BitFlip n_bits=8, the --her switch, the YAML config, and
another goal env (--env-id PointMassGoal-v0)."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from script_loading import load_script

pytestmark = pytest.mark.tensorflow  # agents/her_dqn.py is written on TensorFlow (tf.function)

REPO_ROOT = Path(__file__).resolve().parent.parent
CONFIG = REPO_ROOT / "agents" / "her_dqn.yaml"


@pytest.fixture(scope="module")
def agent():
    """Import ``agents/her_dqn.py`` by path (``agents/`` is a folder of scripts, not a package)."""
    return load_script("agents_her_dqn", REPO_ROOT / "agents" / "her_dqn.py")


# --- learning ---
def test_her_dqn_learns_bitflip_8(agent, tmp_path):
    """With the shipped config, greedy success on 8 bits (a random goal per episode) passes 0.9 quickly."""
    out = tmp_path / "curve.png"
    metrics = agent.main(["--config", str(CONFIG), "--n-bits", "8", "--total-steps", "6000", "--eval-every", "250",
                          "--max-seconds", "90", "--seed", "3", "--no-progress", "--out", str(out)])
    steps, success = zip(*metrics["eval_curve"])
    assert metrics["final_success"] > 0.9, metrics["eval_curve"]
    assert metrics["steps_to_target"] is not None and metrics["steps_to_target"] == steps[-1]  # stopped there
    assert success[0] < 0.5  # it learned: the first evaluation (250 env steps) is far from solved
    assert list(steps) == sorted(steps) and steps[0] == 250
    assert metrics["train_steps"] > 0 and np.isfinite(metrics["loss"])
    assert out.stat().st_size > 0  # the learning curve was written
    assert metrics["train_seconds"] <= metrics["seconds"]


def test_her_switch_controls_relabelling(agent):
    """--her relabels k/(k+1) of finished-episode samples; --no-her keeps the same buffer, never relabelling."""
    common = ["--n-bits", "6", "--total-steps", "600", "--learning-starts", "100", "--batch-size", "32",
              "--hidden", "32", "--eval-every", "600", "--eval-episodes", "4", "--no-stop-at-target",
              "--no-progress"]
    with_her = agent.main(common + ["--her"])["buffer"]
    without = agent.main(common + ["--no-her"])["buffer"]
    assert with_her.n_sampled_goal == 4 and without.n_sampled_goal == 0
    batch = with_her.sample(4000)
    assert abs(batch["relabelled"].mean() - 0.8) < 0.05  # nearly every stored episode is finished
    assert not without.sample(4000)["relabelled"].any()
    # relabelled rewards were recomputed under the new goal: 0 exactly where it is reached
    reached = np.all(batch["next_achieved_goal"] == batch["desired_goal"], axis=1)
    np.testing.assert_array_equal(batch["reward"], np.where(reached, 0.0, -1.0))
    assert np.all(batch["discount"][reached] == 0.0)  # reaching the goal terminates (compute_terminated)


# --- config ---
def test_config_loads_and_matches_the_flag_defaults(agent):
    values = agent.load_config(str(CONFIG))
    assert values["n_bits"] == 15 and values["her"] is True and values["hidden"] == [1024]
    assert isinstance(values["lr"], float) and values["max_seconds"] is None
    from_yaml = vars(agent.parse_args(["--config", str(CONFIG)]))
    from_flags = vars(agent.parse_args([]))
    from_yaml.pop("config"), from_flags.pop("config")
    assert from_yaml == from_flags  # the YAML documents the defaults that the flags also carry


def test_flags_override_the_config(agent):
    args = agent.parse_args(["--config", str(CONFIG), "--n-bits", "30", "--no-her", "--hidden", "64", "64"])
    assert (args.n_bits, args.her, args.hidden, args.gamma) == (30, False, [64, 64], 0.98)


def test_config_values_are_parsed_like_flags(agent, tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("agent:\n  lr: 3e-4\n  hidden: 128\nreplay:\n  n-sampled-goal: 2\n")  # YAML reads 3e-4 as text
    args = agent.parse_args(["--config", str(path)])
    assert (args.lr, args.hidden, args.n_sampled_goal) == (3e-4, [128], 2)


@pytest.mark.parametrize("text, expected", [
    ("agent:\n  learning_rate: 0.001\n", r"unknown key 'learning_rate' in section 'agent'.*\blr\b"),
    ("env:\n  n_bits: 8\n  gamma: 0.9\n", r"unknown key 'gamma' in section 'env'.*n_bits, num_envs"),
    ("optim:\n  lr: 0.001\n", r"unknown section 'optim'.*env, replay, agent, run"),
    ("replay:\n  her: 1\n", r"replay\.her must be true or false"),
    ("replay:\n  goal_selection_strategy: past\n", r"replay\.goal_selection_strategy must be one of"),
])
def test_config_errors_name_the_section(agent, tmp_path, text, expected):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=expected):
        agent.load_config(str(path))


def test_config_error_exits_with_a_usage_message(agent, tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("run:\n  total_step: 10\n")
    with pytest.raises(SystemExit) as exit_info:
        agent.main(["--config", str(path)])
    assert exit_info.value.code == 2
    assert "unknown key 'total_step' in section 'run'" in capsys.readouterr().err


# --- other goal envs (--env-id) ---
def test_her_dqn_runs_on_point_mass_goal(agent, tmp_path):
    """--env-id PointMassGoal-v0: sizes come from the env's spaces (position 2, goal 4, 9 actions)."""
    out = tmp_path / "curve.png"
    metrics = agent.main(["--env-id", "PointMassGoal-v0", "--total-steps", "400", "--learning-starts", "100",
                          "--batch-size", "32", "--hidden", "32", "--eval-every", "200", "--eval-episodes", "4",
                          "--no-stop-at-target", "--no-progress", "--seed", "0", "--out", str(out)])
    assert metrics["env_id"] == "PointMassGoal-v0" and metrics["n_bits"] is None
    assert metrics["global_step"] == 400 and metrics["train_steps"] > 0 and np.isfinite(metrics["loss"])
    assert [step for step, _ in metrics["eval_curve"]] == [200, 400]
    batch = metrics["buffer"].sample(2000)
    assert batch["observation"].shape == (2000, 2) and batch["desired_goal"].shape == (2000, 4)
    assert set(np.unique(batch["action"])) == set(range(9))  # exploration draws from all 9 actions
    assert out.stat().st_size > 0


class OneStepEnv(gym.Env):
    """Ends after one step: action 1 terminates (and succeeds), action 0 is truncated; ``report`` says
    whether ``info["is_success"]`` is given, and ``flip`` makes it disagree with ``terminated``."""

    def __init__(self, report: bool, flip: bool = False) -> None:
        self.report, self.flip = report, flip
        self.observation_space = spaces.Box(0.0, 1.0, (1,))
        self.action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        terminated = int(action) == 1
        info = {"is_success": terminated != self.flip} if self.report else {}
        return np.zeros(1, np.float32), -1.0, terminated, not terminated, info


@pytest.mark.parametrize("report, flip, expected", [
    (False, False, 0.75),  # no is_success: terminated counts
    (True, False, 0.75),  # is_success agrees with terminated
    (True, True, 0.25),  # is_success is what counts when the env reports it
])
def test_evaluate_reads_is_success_at_the_episode_end(agent, report, flip, expected):
    envs = gym.vector.SyncVectorEnv([lambda: OneStepEnv(report, flip) for _ in range(4)])
    assert agent.evaluate(envs, lambda obs: np.array([1, 1, 1, 0])) == expected
    envs.close()
