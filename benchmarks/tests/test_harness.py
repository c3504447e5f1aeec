"""Checks of the benchmark harness and of the scripts' arithmetic (no training), against hand-checked cases.

    python -m pytest benchmarks/tests -q          # not part of the library's suite (pyproject's testpaths)
"""

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BENCH_DIR))

import bench_goal_pomdp as goal  # noqa: E402
import bench_minatar as minatar  # noqa: E402
import bench_popgym as popgym  # noqa: E402
import bench_r2d2_cartpole as cartpole  # noqa: E402
import harness  # noqa: E402


def test_results_resume_keeps_finished_runs_retries_failed_ones_and_replaces_by_key(tmp_path):
    path = tmp_path / "runs.json"
    key = lambda run: (run["agent"], run["seed"])  # noqa: E731
    path.write_text(json.dumps({"runs": [dict(agent="a", seed=0, steps=10, error=None),
                                         dict(agent="a", seed=1, steps=10, error="exit status 1: boom"),
                                         dict(agent="b", seed=0, steps=20, error=None)]}))
    assert harness.Results(str(path), key).runs == []  # without resume nothing is read
    results = harness.Results(str(path), key, resume=True, header=lambda: {"machine": "m"})
    assert results.stored == 3 and [key(r) for r in results.runs] == [("a", 0), ("b", 0)]  # the failed run goes
    same = lambda run: run["steps"] == 10  # noqa: E731
    assert results.has(("a", 0), same) and not results.has(("a", 1), same) and not results.has(("b", 0), same)
    results.add(dict(agent="b", seed=0, steps=10, error=None))  # replaces the stored (b, 0), written at once
    stored = json.loads(path.read_text())
    assert stored["machine"] == "m" and [(key(r), r["steps"]) for r in stored["runs"]] == [(("a", 0), 10),
                                                                                         (("b", 0), 10)]
    assert not path.with_suffix(".tmp").exists()
    assert harness.Results(str(tmp_path / "missing.json"), key, resume=True).runs == []


def test_sweep_runs_what_results_lack_with_its_extras_and_yields_what_before_adds(tmp_path, capsys):
    script = tmp_path / "child.py"
    script.write_text("import json, sys\nopen(sys.argv[-1], 'w').write(json.dumps({'job': json.loads(sys.argv[2])}))\n")
    path = tmp_path / "runs.json"
    path.write_text(json.dumps({"runs": [dict(seed=0, steps=10, error=None), dict(seed=1, steps=5, error=None)]}))
    results = harness.Results(str(path), lambda run: (run["seed"],), resume=True)
    runs = [dict(seed=0, steps=10), dict(seed=1, steps=10)]  # seed 1 is stored with another budget: run again
    done = list(harness.sweep(script, runs, results, lambda run: f"seed {run['seed']}", extras=dict(threads=1),
                              before=lambda run: dict(run, load=0.5)))
    assert [(run, result["job"]) for run, result in done] == [(dict(seed=1, steps=10, load=0.5),
                                                               dict(seed=1, steps=10, load=0.5, threads=1))]
    assert "1 runs to do (2 runs in" in capsys.readouterr().out


def test_panel_plot_writes_a_png_of_seed_bands(tmp_path):
    curves = [[(1000, 0.1), (2000, 0.5)], [(1000, 0.3), (2000, 0.7)]]
    harness.panel_plot(str(tmp_path / "p.png"), {"a": {"x": curves, "y": []}, "b": {"x": curves[:1]}}, "title",
                       guides={"a": [(0.5, "--")]}, ylim=(0, 1))
    assert (tmp_path / "p.png").stat().st_size > 0


def test_table_plain_and_markdown():
    rows = [["x", "1"], ["long", "22"]]
    assert harness.table(["name", "n"], rows).splitlines() == ["name   n", "----  --", "x      1", "long  22"]
    assert harness.table(["name", "n"], rows, markdown=True).splitlines()[:2] == ["| name | n |", "|---|---:|"]
    assert harness.table(["a", "b", "c"], [["1", "2", "3"]], True, right={1}).splitlines()[1] == "|---|---:|---|"


def test_comma_lists_are_checked_and_resume_needs_json():
    parse = harness.comma_list(("a", "b"), str.lower)
    assert parse("A, b,") == ["a", "b"] and harness.comma_list(cast=int)("0,1") == [0, 1]
    for bad in ("c", "a,c", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            parse(bad)
    with pytest.raises(SystemExit):
        harness.Results(None, tuple, resume=True)


def test_load_average_is_a_load_and_a_missing_process_has_no_peak_rss():
    load = harness.load_average()
    assert isinstance(load, float) and load >= 0 and float(harness.format_load()) >= 0
    assert math.isnan(harness.process_peak_rss_mb(2**31 - 1))  # above Linux's highest pid (2**22)


def test_a_child_run_reports_its_own_peak_rss_and_a_failure_its_reason(tmp_path):
    script = tmp_path / "child.py"
    script.write_text("import json, os, sys\nif json.loads(sys.argv[2]) == 'kill':\n    os.kill(os.getpid(), 9)\n"
                      "if json.loads(sys.argv[2]) == 'fail':\n"
                      "    print('gone wrong', file=sys.stderr)\n    sys.exit(3)\nblock = b'x' * (200 * 2**20)\n"
                      "open(sys.argv[-1], 'w').write(json.dumps({'ok': len(block) > 0}))\n")
    result = harness.run_job(script, "grow")
    assert result["ok"] is True and result["peak_rss_mb"] >= 200 and result["wall_seconds"] > 0
    failed = harness.run_job(script, "fail")
    assert failed["error"] == "exit status 3: gone wrong" and "ok" not in failed
    assert harness.run_job(script, "kill")["error"].startswith("killed by signal 9 (the out-of-memory killer?)")


def test_greedy_ppo_evaluation_plays_the_trainers_episode_quotas_and_seeds():
    import gymnasium as gym

    from r2d2kit.runners.evaluation import MAX_EVAL_ENVS
    from r2d2kit.training.trainer import EVAL_SEED_OFFSET

    assert harness.EVAL_SEED_OFFSET == EVAL_SEED_OFFSET and harness.MAX_EVAL_ENVS == MAX_EVAL_ENVS

    class Count(gym.Env):  # reward 1 per step; an episode lasts 2 + (reset seed % 3) steps
        observation_space, action_space = gym.spaces.Box(0, 1, (1,)), gym.spaces.Discrete(2)

        def reset(self, seed=None, options=None):
            self.length = self.length if seed is None else 2 + seed % 3
            self.t = 0
            return np.zeros(1, np.float32), {}

        def step(self, action):
            self.t += 1
            return np.zeros(1, np.float32), 1.0, self.t == self.length, False, {}

    class Model:
        def predict(self, obs, state, episode_start, deterministic):
            assert deterministic
            return np.zeros(len(obs), int), state

    # 10 episodes on 8 envs (seeds 0..7: lengths 2 3 4 2 3 4 2 3): envs 0 and 1 play two episodes each
    returns = harness.greedy_eval_sb3(Model(), Count, 10, seed=0)
    assert sorted(returns) == sorted([2, 3, 4, 2, 3, 4, 2, 3] + [2, 3])
    assert sorted(harness.greedy_eval_sb3(Model(), Count, 3, seed=1)) == [2, 3, 4]


# --- bench_r2d2_cartpole: the per-seed criterion (first >= 475 due by 30k env steps, then never below 425)
def curve(*means, every=5_000, late=0):
    return [(every * (i + 1) + late, mean, 0.0, 10.0 * (i + 1)) for i, mean in enumerate(means)]


@pytest.mark.parametrize("means, late, reached, held, missed_early", [
    ((300, 480, 500, 430), 0, True, True, False),           # 475 at 10k, lowest after it 430
    ((300, 300, 300, 300, 300, 476), 0, True, True, False),  # 476 at 30k: in time
    ((300, 300, 300, 300, 300, 300, 480), 0, False, True, True),  # first at 35k: too late
    ((300, 480, 424), 0, True, False, True),                 # 424 after the first: floor broken
    ((300,) * 5 + (480,), 354, True, True, False),           # ran at 30,354: due at 30k, still in time
    ((300,) * 5, 0, False, False, False),                    # no 475 up to 25k: may still reach it
    ((300,) * 6, 0, False, False, True),                     # none by 30k: missed
])
def test_cartpole_criterion(means, late, reached, held, missed_early):
    evaluations = curve(*means, late=late)
    summary = cartpole.curve_summary(evaluations, 5_000)
    assert cartpole.target_reached(summary) is reached and summary["held"] is held
    assert cartpole.target_met(summary) is (reached and held)
    assert cartpole.target_missed(evaluations, 5_000) is missed_early
    assert max(means) >= 475 or summary == dict(first_steps=None, first_due=None, first_seconds=None, held=False,
                                                min_after=None)


def test_goal_first_success_and_seed_spread():
    assert goal.first_at([(1000, 0.5), (2000, 0.9), (3000, 1.0)], 0.9) == 2000
    assert goal.first_at([(1000, 0.5)], 0.9) is None and goal.fmt_steps(46_000) == "46k"
    assert goal.mean_std([0.5, 1.0]) == "0.75 ± 0.35" and goal.mean_std([0.5]) == "0.50" and goal.mean_std([]) == "-"


# --- bench_popgym: MMER, the targets, its command line, --resume
def test_mmer_is_the_best_evaluation_mean_not_the_best_episode():
    evaluations = [(10_000, -0.5, 0.1, 1.0), (20_000, 0.4, 0.5, 2.0), (30_000, 0.25, 0.0, 3.0)]
    assert popgym.mmer(evaluations) == 0.4 and popgym.mmer([]) is None
    assert harness.mean_std([0.2, None, 0.4]) == pytest.approx((0.3, 0.1)) and harness.mean_std([None]) is None
    assert harness.fmt_mean_std([0.2, None, 0.4]) == "0.30 +- 0.10 (2)" and harness.fmt_mean_std([]) == "-"
    assert harness.fmt_mean_std([10.4, 20.6], ".0f", count=False) == "16 +- 5"


@pytest.mark.parametrize("env, value, met", [
    ("RepeatFirstEasy", 0.95, True), ("RepeatFirstEasy", 0.949, False), ("CountRecallEasy", 0.51, True),
    ("RepeatPreviousMedium", -0.32, False), ("RepeatPreviousMedium", -0.31, True),  # strictly above -0.32
    ("RepeatPreviousEasy", None, None),  # no runs: not judged
])
def test_popgym_targets(env, value, met):
    assert popgym.target_met(env, value) is met


def test_resume_reruns_a_run_whose_config_changed_but_not_for_comments_or_budget(tmp_path, monkeypatch):
    config = tmp_path / "RepeatFirstEasy.yaml"
    base = "model:\n  core_units: 64\n  head_units: 64\nlearner:\n  gamma: 0.99\n"
    config.write_text("# a comment\n" + base + "run:\n  total_env_steps: 200000\n")
    monkeypatch.setattr(popgym, "CONFIG_DIR", tmp_path)
    args = popgym.parse_args(["--envs", "RepeatFirstEasy"])
    runs = {agent: dict(agent=agent, env="RepeatFirstEasy", seed=0, steps=100_000, eval_every=args.eval_every,
                        eval_episodes=args.eval_episodes, overrides=[], ppo_prev_action=True, error=None,
                        config_digest=popgym.config_digest("RepeatFirstEasy", agent)) for agent in popgym.AGENTS}

    def kept() -> dict:
        return {agent: popgym.same_settings(run, 100_000, args) for agent, run in runs.items()}

    assert kept() == {"r2d2": True, "recurrent-ppo": True}
    args.ppo_set = ["gamma=0.5"]  # a RecurrentPPO setting the stored run was not made with
    assert kept() == {"r2d2": True, "recurrent-ppo": False}
    assert popgym.same_settings(dict(runs["recurrent-ppo"], ppo_overrides=["gamma=0.5"]), 100_000, args)
    args.ppo_set = []
    config.write_text("# another comment\n" + base + "run:\n  total_env_steps: 100000\n")  # budget: from --steps
    assert kept() == {"r2d2": True, "recurrent-ppo": True}
    config.write_text(base + "  learning_rate: 0.002\n")  # an R2D2-only setting
    assert kept() == {"r2d2": False, "recurrent-ppo": True}
    for changed in (base.replace("core_units: 64", "core_units: 128"), base.replace("0.99", "0.5")):
        config.write_text(changed)  # a model size or the discount: RecurrentPPO takes both from the config
        assert kept() == {"r2d2": False, "recurrent-ppo": False}
    assert not popgym.same_settings(dict(runs["r2d2"], config_digest=None), 100_000, args)  # made before digests


def test_ppo_takes_the_r2d2_configs_discount_unless_overridden(tmp_path, monkeypatch):
    import yaml

    for env in popgym.ENVS:  # the shipped configs
        gamma = yaml.safe_load(popgym.config_path(env).read_text())["learner"]["gamma"]
        assert popgym.ppo_hyperparameters(env)["gamma"] == gamma
    hp = popgym.ppo_hyperparameters("CountRecallEasy", {"gamma": 0.99, "n_epochs": 4})
    assert (hp["gamma"], hp["n_epochs"], hp["batch_size"]) == (0.99, 4, popgym.RECURRENT_PPO["batch_size"])
    (tmp_path / "RepeatFirstEasy.yaml").write_text("model:\n  core_units: 64\n  head_units: 64\n")  # no gamma
    monkeypatch.setattr(popgym, "CONFIG_DIR", tmp_path)
    with pytest.raises(ValueError, match="learner.gamma"):
        popgym.ppo_hyperparameters("RepeatFirstEasy")
    assert popgym.ppo_hyperparameters("RepeatFirstEasy", {"gamma": 0.9})["gamma"] == 0.9


def test_ppo_overrides_are_typed_and_checked():
    assert popgym.parse_ppo_overrides(["gamma=0.5", "n_epochs=4"]) == {"gamma": 0.5, "n_epochs": 4}
    for bad, named in [("gama=0.5", "gama"), ("n_epochs=x", "integer"), ("n_envs=4", "n_envs"), ("gamma", "gamma")]:
        with pytest.raises(ValueError, match=named):
            popgym.parse_ppo_overrides([bad])


def test_minatar_report_judges_by_success_rate_where_reported_else_by_return():
    def run(agent, game, seed, final, success=None):
        evaluation = [50, final, 0.0, 0.0, 0.0] + ([success] if success is not None else [])
        return dict(agent=agent, game=game, seed=seed, steps=50, final=final, final_success=success,
                    evaluations=[evaluation], env_steps=50, train_seconds=1.0, peak_rss_mb=1.0)
    # MiniGrid: R2D2's return is lower (a longer path) but its success rate equals the peer's: a win
    grid = [run("r2d2", "minigrid_memory", 0, 0.95, 1.0), run("recurrent-ppo", "minigrid_memory", 0, 0.98, 1.0)]
    # Breakout: return decides (mean 5 against 6: a loss); Asterix: 3 against 2, a win
    games = [run("r2d2", "breakout", 0, 4.0), run("r2d2", "breakout", 1, 6.0), run("dqn", "breakout", 0, 6.0),
             run("r2d2", "asterix", 0, 3.0), run("dqn", "asterix", 0, 2.0)]
    report = minatar.report(grid + games, ["minigrid_memory", "breakout", "asterix"], markdown=True)
    assert report.endswith("on 2 of 3 games with both agents")
    # per-seed curves: success where reported, else return
    assert "| r2d2kit R2D2 | minigrid_memory | 0 | 1.00 |" in report
    assert "| r2d2kit R2D2 | breakout | 0 | 4.0 |" in report
