"""Recurrent HER through the trainer and every runner: what reaches replay and comes out relabelled is
what the episodes were, checked row by row against a brute-force replay of each episode.

``TraceGoal-v0`` (tests/runners/goal_trace_env.py) writes its episode id and time into every value,
so each sampled window names the episode and times its rows came from; the expected rows are
rebuilt here from the env's definition alone (``transitions(uid)``, the reward formula, the goal
rules of r2d2kit/replay/sequence_her.py's docstring), not from the buffer.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from r2d2kit.replay import SequenceHerReplayBuffer
from r2d2kit.training.checkpoint import CheckpointError
from r2d2kit.training.config import ConfigError, build_config
from r2d2kit.training.trainer import Trainer
from tests.runners.goal_trace_env import UNREACHED, transitions

ROOT = Path(__file__).resolve().parents[2]
TRACE = {
    "env": {"id": "tests.runners.goal_trace_env:TraceGoal-v0", "num_envs": 3},
    "model": {"encoder": "mlp", "hidden": [8], "core_units": 8, "head_units": 8},
    "replay": {"capacity": 4000, "her": {"goal_selection_strategy": "future", "n_sampled_goal": 4},
               "burn_in": 2, "trace_length": 4, "period": 2, "n_step": 2},
    "learner": {"batch_size": 8, "target_update_period": 10},
    "actors": {"num_actors": 2, "ring_capacity": 16, "publish_every": 5, "steps_per_batch": 10},
    "run": {"total_env_steps": 600, "warmup_steps": 100, "updates_per_env_step": 0.05, "eval_every": 0},
    "logging": {"progress": False, "tensorboard": False},
    "checkpoints": {"every_env_steps": 0},
}


def trace_config(tmp_path: Path, **sections) -> object:
    data = {name: dict(values) for name, values in TRACE.items()}
    for name, values in sections.items():
        data[name] = {**data.get(name, {}), **values}
    data["logging"]["run_dir"] = str(tmp_path)
    return build_config(data)


def check_windows(batch: dict[str, np.ndarray], strategy: str, burn_in: int = 2, terminate_on_goal: bool = True) -> int:
    """Assert every sampled window is rows of one TraceGoal episode, relabelled by the rules; return
    how many were relabelled."""
    relabelled_count = 0
    for b in range(batch["obs"].shape[0]):
        present = np.flatnonzero(batch["obs_mask"][b])
        obs = batch["obs"][b]
        uid = float(obs[present[0], 0])
        t0 = int(obs[present[0], 1]) - int(present[0])  # episode time of row 0
        T = transitions(uid)
        times = t0 + np.arange(obs.shape[0])
        # the brute-force episode: observation rows 0..T, transitions 0..T-1
        np.testing.assert_array_equal(batch["obs_mask"][b], (times >= 0) & (times <= T))
        np.testing.assert_array_equal(batch["mask"][b], (times >= 0) & (times < T))
        np.testing.assert_array_equal(obs[present, :2], np.stack([np.full(present.size, uid), times[present]], 1))
        # achieved goals travelled with their own observation rows (through the runner's transport)
        np.testing.assert_array_equal(batch["achieved_goal"][b, present],
                                      np.stack([np.full(present.size, uid), times[present] + 0.5], 1))
        transition_rows = np.flatnonzero(batch["mask"][b])
        stored_terminated = (times == T - 1) & (int(uid) % 2 == 0)  # even episode ids terminate at T
        if not batch["relabelled"][b]:
            np.testing.assert_array_equal(obs[present, 2:], UNREACHED)
            np.testing.assert_allclose(batch["reward"][b, transition_rows], 0.25 + 0.125 * times[transition_rows])
            np.testing.assert_array_equal(batch["terminated"][b], stored_terminated)
            continue
        relabelled_count += 1
        goal = batch["goal"][b]
        tau = goal[1] - 0.5
        s_last = times[transition_rows[-1]]
        assert goal[0] == uid and tau == int(tau)
        if strategy == "final":
            assert tau == T
        elif strategy == "future":
            assert s_last + 1 <= tau <= T
        else:
            assert t0 + burn_in + 1 <= tau <= T
        np.testing.assert_array_equal(obs[present, 2:], np.tile(goal, (present.size, 1)))
        # reward of step t: compute_reward(ag(o_t+1), goal) = -|t + 1 - tau|; prev_reward: that of step t - 1
        np.testing.assert_allclose(batch["reward"][b, transition_rows], -np.abs(times[transition_rows] + 1 - tau))
        later = present[times[present] >= 1]
        np.testing.assert_allclose(batch["prev_reward"][b, later], -np.abs(times[later] - tau))
        # the step reaching the goal terminates (compute_terminated), the others do not
        np.testing.assert_array_equal(batch["terminated"][b], (batch["mask"][b] & (times + 1 == tau))
                                      if terminate_on_goal else stored_terminated)
    return relabelled_count


@pytest.mark.slow
@pytest.mark.parametrize("runner", ["local", "processes", "ray"])
def test_relabelled_windows_from_every_runner_match_the_episodes(runner, tmp_path, request):
    if runner == "ray":
        request.getfixturevalue("ray_instance")
    trainer = Trainer(trace_config(tmp_path, actors={"runner": runner}), tmp_path / "run")
    summary = trainer.fit()
    assert summary["env_steps"] >= 600 and summary["updates"] > 0
    assert isinstance(trainer.replay, SequenceHerReplayBuffer)
    batch = trainer.replay.sample(400)
    relabelled = check_windows(batch, "future")
    finished = batch["relabelled"].size  # nearly every window's episode is finished (they last <= 14 steps)
    assert 0.6 * finished < relabelled < 0.95 * finished  # k = 4: 80% of finished episodes' windows


@pytest.mark.slow
def test_final_and_trace_future_strategies_and_k_zero(tmp_path):
    trainer = Trainer(trace_config(tmp_path, replay={"her": {"goal_selection_strategy": "final",
                                                             "terminate_on_goal": False}}), tmp_path / "a")
    trainer.fit()
    assert check_windows(trainer.replay.sample(200), "final", terminate_on_goal=False) > 100
    trainer = Trainer(trace_config(tmp_path, replay={"her": {"goal_selection_strategy": "trace_future"}}),
                      tmp_path / "c")
    trainer.fit()
    batch = trainer.replay.sample(300)
    assert check_windows(batch, "trace_future") > 150
    assert batch["terminated"][batch["relabelled"]].any()  # goals inside windows: successes there
    trainer = Trainer(trace_config(tmp_path, replay={"her": {"n_sampled_goal": 0}}), tmp_path / "b")
    trainer.fit()
    assert check_windows(trainer.replay.sample(200), "future") == 0


@pytest.mark.slow
def test_goal_replay_survives_checkpoint_and_resume(tmp_path):
    config = trace_config(tmp_path, checkpoints={"save_replay": True})
    first = Trainer(config, tmp_path / "run")
    first.fit()
    resumed = Trainer(config, tmp_path / "run", resume=True)
    assert isinstance(resumed.replay, SequenceHerReplayBuffer) and len(resumed.replay) == len(first.replay)
    expected, restored = first.replay.sample(64), resumed.replay.sample(64)  # same sampler state: same batch
    for key in expected:
        np.testing.assert_array_equal(restored[key], expected[key], err_msg=key)
    resumed.config.run.total_env_steps = 900
    assert resumed.fit()["env_steps"] >= 900
    check_windows(resumed.replay.sample(300), "future")


@pytest.mark.slow
def test_resuming_with_the_other_replay_kind_is_refused(tmp_path):
    Trainer(trace_config(tmp_path, checkpoints={"save_replay": True}), tmp_path / "run").fit()
    plain = trace_config(tmp_path)
    plain.replay.her = None
    with pytest.raises(CheckpointError, match="another kind than the config's.*replay.her"):
        Trainer(plain, tmp_path / "run", resume=True)
    flipped = trace_config(tmp_path)
    flipped.replay.her.terminate_on_goal = not flipped.replay.her.terminate_on_goal
    with pytest.raises(CheckpointError, match="saved with replay.her.terminate_on_goal=.*targets of relabelled"):
        Trainer(flipped, tmp_path / "run", resume=True)


def test_her_on_an_env_without_goals_is_a_config_error(tmp_path):
    config = build_config({"env": {"id": "CartPoleNoVel-v1"}, "replay": {"her": True},
                           "model": {"core_units": 8, "head_units": 8}})
    with pytest.raises(ConfigError, match="not a goal env.*remove replay.her"):
        Trainer(config, tmp_path)


def brute_force_episodes(seed: int, num_envs: int, per_env: int) -> list[tuple[float, bool]]:
    """(return, success) of each env's first ``per_env`` TraceGoal episodes, played one env at a time
    (a vector env reset with ``seed`` seeds env i with ``seed + i``; autoresets do not reseed)."""
    from tests.runners.goal_trace_env import TraceGoalEnv

    out = []
    for i in range(num_envs):
        env = TraceGoalEnv()
        env.reset(seed=seed + i)
        for _ in range(per_env):
            T = transitions(env.uid)
            out.append((sum(0.25 + 0.125 * t for t in range(T)), int(env.uid) % 2 == 0))
            env.reset()
    return sorted(out)


@pytest.mark.slow
def test_evaluation_reports_the_success_of_every_episode(tmp_path):
    from r2d2kit.runners.evaluation import evaluate

    trainer = Trainer(trace_config(tmp_path, run={"eval_every": 300, "eval_episodes": 6}), tmp_path / "run")
    evaluation = evaluate(trainer.eval_policy, trainer.make_env, 6, seed=123)
    assert trainer.eval_policy.num_envs == 6
    got = sorted(zip(evaluation.returns.tolist(), evaluation.successes.tolist()))
    expected = brute_force_episodes(123, 6, 1)
    # returns and successes apart: pytest >= 9.2's approx refuses a list of (float, bool) pairs
    assert [ret for ret, _ in got] == pytest.approx([ret for ret, _ in expected])
    assert [bool(success) for _, success in got] == [bool(success) for _, success in expected]
    assert evaluation.success_rate == np.mean([success for _, success in got])
    summary = trainer.fit()
    rows = trainer.log.rows()
    assert len(rows) == 2 and all(0.0 <= row["eval_success"] <= 1.0 for row in rows)
    assert (tmp_path / "run" / "metrics.csv").read_text().splitlines()[0].endswith(",eval_success")
    assert summary["final_success"] == rows[-1]["eval_success"]
