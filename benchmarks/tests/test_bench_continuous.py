"""Checks of bench_continuous.py's arithmetic, settings and command line (no training), against hand-checked cases.

    python -m pytest -q -p no:cacheprovider benchmarks/tests/test_bench_continuous.py
"""

import sys
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BENCH_DIR))

import bench_continuous as bc  # noqa: E402


@pytest.mark.parametrize("reference, bound", [(-150.0, -165.0), (1000.0, 900.0), (0.0, 0.0)])
def test_within_ten_percent_is_measured_on_the_references_size(reference, bound):
    assert bc.lower_bound(reference, 0.10) == pytest.approx(bound)


def test_pendulum_checks_print_bound_value_and_verdict():
    finals = {"sac": -160.0, "sb3_sac_full": -150.0, "sb3_sac_masked": -700.0, "recurrent_ppo": None}
    lines = [bc.check_line(kind, mine, other, finals) for kind, mine, other in bc.CHECKS["pendulum_novel"]]
    assert lines[0] == "sac final -160.0 >= -165.0 (sb3_sac_full final -150.0 less 10% of its size): ok"
    assert lines[1] == "sac final -160.0 > sb3_sac_masked final -700.0: ok"
    assert lines[2] == "ahead sac / recurrent_ppo: not judged (no runs of recurrent_ppo)"
    assert bc.check_line("within", "sac", "sb3_sac_full", dict(finals, sac=-166.0)).endswith(": MISSED")
    assert bc.check_line("within", "sac", "sb3_sac_full", dict(finals, sac=-140.0)).endswith(": ok")  # better


def test_halfcheetah_checks_say_who_wins_and_by_how_much():
    finals = {"sac": 2400.0, "sac_zero_state": 3000.0, "sb3_sac_full": 5000.0, "sb3_sac_masked": 2500.0,
              "recurrent_ppo": 800.0}
    lines = [bc.check_line(kind, mine, other, finals) for kind, mine, other in bc.CHECKS["halfcheetah_p"]]
    assert lines == ["sac final 2400.0 > sb3_sac_masked final 2500.0: MISSED", "beside: sb3_sac_full final 5000.0",
                     "beside: recurrent_ppo final 800.0",
                     "sac final 2400.0 vs sac_zero_state final 3000.0: sac_zero_state wins by 600.0 (25% of sac's "
                     "size)"]


def test_curves_come_from_metrics_csv_and_score_last_and_best(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("env_steps,updates,seconds,eval_mean,eval_std,train_return,loss,eval_min,eval_max\n"
                    "2000,1000,5.0,-1200.5,30.0,-1300,0.5,-1250,-1150\n"
                    "4000,3000,9.0,-300.0,10.0,-800,0.4,-310,-290\n6000,5000,13.0,-420.0,90.0,-500,0.3,-600,-150\n")
    curve = bc.read_curve(path)
    assert curve == [(2000, -1200.5, 30.0), (4000, -300.0, 10.0), (6000, -420.0, 90.0)]
    assert bc.final_mean(curve) == -420.0 and bc.best_mean(curve) == -300.0
    assert bc.read_curve(tmp_path / "missing.csv") == [] and bc.final_mean([]) is None and bc.best_mean([]) is None
    assert bc.off_grid(curve, 2000) == [] and bc.off_grid([(2004, 0.0, 0.0)], 2000) == [2004]
    assert bc.mean_curve([curve, [(2000, -800.5, 0.0), (4000, -100.0, 0.0)]]) == {2000: -1000.5, 4000: -200.0}


def test_per_task_values_for_all_tasks_or_one():
    defaults = {"pendulum_novel": 20_000, "halfcheetah_p": 100_000}
    assert bc.per_task(None, int, defaults, "--steps") == defaults
    assert bc.per_task(["500"], int, defaults, "--steps") == {"pendulum_novel": 500, "halfcheetah_p": 500}
    assert bc.per_task(["800", "halfcheetah_p=9000"], int, defaults, "--steps") == {"pendulum_novel": 800,
                                                                                    "halfcheetah_p": 9000}
    paths = bc.per_task(["pendulum_novel=/tmp/a=b.yaml"], str, {"pendulum_novel": "x", "halfcheetah_p": "y"},
                        "--config", need_task=True)
    assert paths == {"pendulum_novel": "/tmp/a=b.yaml", "halfcheetah_p": "y"}
    for bad, named in [(["cartpole=5"], "unknown task 'cartpole'"), (["pendulum_novel=x"], "not a valid value"),
                       (["0"], "not a valid value")]:
        with pytest.raises(ValueError, match=named):
            bc.per_task(bad, bc.positive_int, defaults, "--steps")
    with pytest.raises(ValueError, match="expected TASK=VALUE"):
        bc.per_task(["my.yaml"], str, defaults, "--config", need_task=True)


def test_peers_take_the_zoos_settings_and_quick_caps_them_to_update():
    full, masked = bc.peer_settings("sb3_sac_full", "pendulum_novel"), bc.peer_settings("sb3_sac_masked",
                                                                                        "pendulum_novel")
    assert (full["env_id"], masked["env_id"]) == ("Pendulum-v1", "PendulumNoVel-v1")
    assert full["kwargs"] == masked["kwargs"] == {"learning_rate": 1e-3} and full["normalize_gamma"] is None
    cheetah = bc.peer_settings("sb3_sac_full", "halfcheetah_p")
    assert cheetah["env_id"] == "HalfCheetah-v5" and cheetah["kwargs"] == {"learning_starts": 10_000}
    assert bc.peer_settings("sb3_sac_masked", "halfcheetah_p", quick=True)["kwargs"]["learning_starts"] == 500
    ppo = bc.peer_settings("recurrent_ppo", "pendulum_novel")
    assert (ppo["n_envs"], ppo["normalize_gamma"], ppo["kwargs"]["n_steps"], ppo["env_id"]) == (4, 0.9, 1024,
                                                                                                "PendulumNoVel-v1")
    assert bc.peer_settings("recurrent_ppo", "pendulum_novel", quick=True)["kwargs"]["n_steps"] == 128  # 4 x 128
    assert bc.peer_settings("recurrent_ppo", "halfcheetah_p")["env_id"] == "HalfCheetah-P-v5"
    with pytest.raises(ValueError, match="not a peer series"):
        bc.peer_settings("sac", "pendulum_novel")


def test_the_zero_state_series_keeps_its_overrides_after_the_users(tmp_path):
    job = dict(series="sac_zero_state", seed=3, steps=1500, eval_every=500, eval_episodes=4,
               overrides=["replay.burn_in=8", "learner.tau=0.01"])
    overrides = bc.sac_overrides(job, tmp_path / "run")
    assert overrides[:4] == ["run.seed=3", "run.total_env_steps=1500", "run.eval_every=500", "run.eval_episodes=4"]
    assert f"logging.run_dir={tmp_path}" in overrides and "logging.tensorboard=false" in overrides
    assert overrides[-4:] == ["replay.burn_in=8", "learner.tau=0.01", "replay.initial_state=zero", "replay.burn_in=0"]
    assert bc.sac_overrides(dict(job, series="sac"), tmp_path)[-2:] == ["replay.burn_in=8", "learner.tau=0.01"]


def test_config_digest_ignores_comments_budget_and_logging_but_not_learning(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("agent: sac\nlearner: {tau: 0.005}\nrun: {total_env_steps: 20000, seed: 1}\n")
    before = bc.config_digest(path)
    path.write_text("# note\nagent: sac\nlearner: {tau: 0.005}\nrun: {total_env_steps: 5}\n"
                    "logging: {progress: false}\n")
    assert bc.config_digest(path) == before
    path.write_text("agent: sac\nlearner: {tau: 0.01}\n")
    assert bc.config_digest(path) != before


def test_command_line_defaults_quick_and_refusals(tmp_path, capsys):
    config = tmp_path / "pendulum.yaml"
    config.write_text("agent: sac\n")
    args = bc.parse_args(["--config", f"pendulum_novel={config}", "--tasks", "pendulum_novel"])
    assert (args.seeds, args.steps["pendulum_novel"], args.eval_every["pendulum_novel"], args.eval_episodes) == (
        [0, 1, 2], 20_000, 2_000, 10)
    assert args.config["pendulum_novel"] == str(config.resolve()) and args.series == list(bc.SERIES)
    quick = bc.parse_args(["--quick", "--config", f"pendulum_novel={config}", "--tasks", "pendulum_novel"])
    assert (quick.seeds, quick.steps["pendulum_novel"], quick.set) == ([0], 1_500, ["run.warmup_steps=500"])
    runs = bc.plan(quick)
    assert [r["series"] for r in runs] == list(bc.SERIES) and runs[0]["settings"] == runs[1]["settings"]
    assert bc.job_extras(runs[0], quick)["config"] == str(config.resolve())
    assert bc.job_extras(runs[-1], quick)["peer"]["algorithm"] == "RecurrentPPO"
    peers = bc.parse_args(["--series", "sb3_sac_masked", "--config", "pendulum_novel=/nowhere.yaml"])
    assert peers.series == ["sb3_sac_masked"]  # no sac series: no config needed
    for argv, message in [(["--config", "pendulum_novel=/nowhere.yaml"], "no r2d2kit config for pendulum_novel"),
                          (["--series", "recurrent_ppo", "--eval-every", "1002"], "multiple of 4"),
                          (["--series", "recurrent_ppo", "--steps", "400", "--eval-every", "500"],
                           "at most the budget"),
                          (["--eval-episodes", "0", "--series", "recurrent_ppo"], "--eval-episodes must be >= 1")]:
        with pytest.raises(SystemExit):
            bc.parse_args(argv)
        assert message in capsys.readouterr().err


def test_report_tables_checks_and_curves_per_task():
    def run(series, seed, curve, task="pendulum_novel"):
        return dict(series=series, task=task, seed=seed, eval_every=2000, curve=curve, final=bc.final_mean(curve),
                    best=bc.best_mean(curve), env_steps=curve[-1][0], train_seconds=10.0, wall_seconds=20.0,
                    cpu_seconds=30.0, peak_rss_mb=900.0, error=None)
    runs = [run("sac", 0, [(2000, -140.0, 1.0), (4000, -150.0, 1.0)]),
            run("sac", 1, [(2000, -700.0, 1.0), (4000, -170.0, 1.0)]),
            run("sb3_sac_full", 0, [(2000, -300.0, 1.0), (4000, -150.0, 1.0)]),
            run("sb3_sac_masked", 0, [(2000, -1000.0, 1.0), (4000, -800.0, 1.0)]),
            run("recurrent_ppo", 0, [(2000, -1200.0, 1.0), (4002, -1100.0, 1.0)]),
            dict(series="sac_zero_state", task="pendulum_novel", seed=0, eval_every=2000, curve=[], error="boom")]
    text = bc.report(runs, ["pendulum_novel"], list(bc.SERIES), markdown=True)
    assert "| r2d2kit SAC | 2 | -160.0 +- 10.0 | -155.0 +- 15.0 | 4,000 | 10 | 20 | 30 | 900 MB | 0 |" in text
    assert "| r2d2kit SAC, zero state | 0 | - | - | - | - | - | - | - | 1 |" in text
    assert "sac final -160.0 >= -165.0 (sb3_sac_full final -150.0 less 10% of its size): ok" in text
    assert "sac final -160.0 > recurrent_ppo final -1100.0: ok" in text
    assert "| 2,000 | -420.0 | -300.0 | -1000.0 | -1200.0 |" in text  # the curves: mean over seeds
    assert "- note: recurrent_ppo seed 0 evaluated at [4002] env steps" in text


def test_the_peers_evaluation_plays_the_trainers_episodes():
    """r2d2kit's evaluate and the peers' greedy_eval_sb3, one deterministic feedback policy, 10 PendulumNoVel
    episodes on 8 envs from one seed: the same returns in the same order, so the same reset seeds and quotas."""
    import contextlib

    import numpy as np

    from r2d2kit.runners.evaluation import evaluate

    def torque(obs):  # a function of the observation: the returns depend on every state the episodes pass
        return np.clip(-2.0 * np.asarray(obs)[:, 1:2], -2.0, 2.0).astype(np.float32)

    class Policy:  # r2d2kit's Policy seam, the parts evaluate() calls
        num_envs = min(10, bc.harness.MAX_EVAL_ENVS)

        def fixed_weights(self):
            return contextlib.nullcontext(self)

        def reset(self, mask=None):
            pass

        def act(self, obs, prev_action, prev_reward):
            return torque(obs)

    class Model:  # what greedy_eval_sb3 calls of an SB3 model
        def predict(self, obs, state=None, episode_start=None, deterministic=False):
            return torque(obs), state

    make = lambda: bc.make_env("PendulumNoVel-v1")  # noqa: E731
    seed = 10 + bc.EVAL_SEED_OFFSET + 2000
    theirs = bc.harness.greedy_eval_sb3(Model(), make, 10, seed)
    assert np.array_equal(evaluate(Policy(), make, 10, seed).returns, theirs) and len(set(theirs.tolist())) == 10
    assert not np.array_equal(bc.harness.greedy_eval_sb3(Model(), make, 10, seed + 1), theirs)
