"""agents/her_dqn.py: a CI learning test on BitFlip n_bits=8, the --her switch, and the YAML config."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
CONFIG = REPO_ROOT / "configs" / "bitflip_her.yaml"


@pytest.fixture(scope="module")
def agent():
    """Import ``agents/her_dqn.py`` by path (``agents/`` is a folder of scripts, not a package)."""
    spec = importlib.util.spec_from_file_location("agents_her_dqn", REPO_ROOT / "agents" / "her_dqn.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
