"""``python -m r2d2kit.tune``: the search space is checked before any trial, workers share one study, a resumed
study grows, the median pruner stops a bad trial early, Ctrl-C ends cleanly, and the outputs match the study.

The end-to-end tests train CueMemory for 600 env steps per trial (evaluations at 200, 400 and 600):
with the shipped learning rate (1e-3) its greedy return is about 1.0 from 400 steps on, with 1e-7 it
stays where the untrained network is. Trials the test wants to be good or bad are enqueued with those
values (``study.enqueue_trial``, which a worker's ``ask`` serves first), so the pruning is no accident
of the sampler.
"""

from __future__ import annotations

import csv
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from r2d2kit.training.agents import agent_builder
from r2d2kit.training.config import load_config
from r2d2kit.tune import main
from r2d2kit.tuning.space import Dimension, default_space, load_space

ROOT = Path(__file__).resolve().parents[1]
CONFIG = str(ROOT / "configs" / "cue_memory.yaml")
BUDGET = ["--set", "run.total_env_steps=600", "--set", "run.warmup_steps=200", "--set", "run.eval_every=200",
          "--set", "run.eval_episodes=16", "--set", "logging.progress=false", "--set", "logging.tensorboard=false",
          "--set", "checkpoints.every_env_steps=0", "--last", "2"]
SPACE = ("learner.learning_rate: {low: 1.0e-7, high: 3.0e-3, log: true}\n"
         "learner.target_update_period: {choices: [50, 100]}\n")
GOOD = {"learner.learning_rate": 1e-3, "learner.target_update_period": 100}
BAD = {"learner.learning_rate": 1e-7, "learner.target_update_period": 100}


def tune_args(tmp_path: Path, *extra: str) -> list[str]:
    space = tmp_path / "space.yaml"
    if not space.exists():
        space.write_text(SPACE)
    return [CONFIG, "--space", str(space), "--out", str(tmp_path / "out"), *BUDGET, *extra]


def load_study(tmp_path: Path) -> optuna.Study:
    return optuna.load_study(study_name="cue_memory", storage=f"sqlite:///{tmp_path / 'out' / 'study.db'}")


def worker(tmp_path: Path, *extra: str, **popen) -> subprocess.Popen:
    """``python -m r2d2kit.tune`` in its own process (a worker, as on another machine)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               TF_CPP_MIN_LOG_LEVEL="3", MPLBACKEND="Agg")
    return subprocess.Popen([sys.executable, "-m", "r2d2kit.tune", *tune_args(tmp_path, *extra)], cwd=tmp_path,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen)


# --------------------------------------------------------------------------- the search space
@pytest.mark.parametrize("space, message", [
    ("learner.learnig_rate: {low: 1.0e-4, high: 1.0e-3}\n",
     r"space\.yaml: unknown key learner\.learnig_rate; did you mean 'learning_rate'\?"),
    ("learner.learning_rate: {low: 1.0e-3, high: 1.0e-4}\n",
     r"space\.yaml: learner\.learning_rate: low \(0\.001\) must be below high \(0\.0001\); swap them"),
    ("replay.n_step: {choices: []}\n",
     r"space\.yaml: replay\.n_step: choices must be a non-empty list, e\.g\. choices: \[100, 200, 500\]"),
    ("- learner.learning_rate\n- replay.n_step\n",
     r"space\.yaml: a search space is a mapping of section\.key names to ranges or choices.*holds list"),
    ("", r"space\.yaml: a search space is a mapping .*holds nothing \(an empty file\)"),
    ("learner.learning_rate: 0.001\n",
     r"learner\.learning_rate: give a range .*got 0\.001; a value every trial shares belongs in --set "
     r"learner\.learning_rate=0\.001"),
    ("learner.learning_rate: {lo: 1.0e-4, high: 1.0e-3}\n", r"unknown field 'lo'; did you mean 'low'\?"),
    ("learner.learning_rate: {low: 0, high: 1.0e-3, log: true}\n", r"a log range needs low > 0, got low 0"),
    ("learner.learning_rate: {low: 0.0, high: 1.0e-3}\n",
     r"space\.yaml \(learner\.learning_rate: 0\): section 'learner': R2D2Config\.learning_rate must be > 0.*"
     r"change the range or choices of learner\.learning_rate"),
    ("replay.n_step: {low: 1.0, high: 5.0}\n", r"replay\.n_step must be int, got 1\.0"),
    ("learner: {low: 1, high: 2}\n", r"'learner' is not a section\.key name; write e\.g\. learner\.batch_size"),
    ("run.total_env_steps: {choices: [1000, 2000]}\n", r"sets how every trial is run or measured.*--set"),
    ("replay.sampler: {choices: [uniform, uniform]}\n", r"choices lists uniform more than once"),
], ids=["unknown key", "low above high", "empty choices", "not a mapping", "empty file", "a fixed value",
        "unknown field", "log from zero", "invalid bound", "float bounds on an int key", "a section",
        "a schedule key", "repeated choice"])
def test_a_bad_space_file_exits_2_naming_file_key_and_fix(tmp_path, capsys, space, message):
    (tmp_path / "space.yaml").write_text(space)
    status = main([CONFIG, "--space", str(tmp_path / "space.yaml"), "--out", str(tmp_path / "out"), "--trials", "0"])
    error = capsys.readouterr().err
    assert status == 2
    assert error.startswith("search space error: ") and "Traceback" not in error
    assert re.search(message, error), error
    assert not (tmp_path / "out" / "study.db").exists()  # refused before the study was made


def test_the_default_space_centres_on_the_config():
    config = load_config(CONFIG)  # learning rate 1e-3, target update period 100, 0.25 updates per env step
    space = default_space(config, agent_builder(config.agent).search_dimensions(config))
    entries = space.to_dict()
    assert entries == {
        "learner.learning_rate": {"low": 0.0003, "high": 0.003, "log": True},
        "learner.adam_epsilon": {"low": 1e-8, "high": 1e-3, "log": True},
        "learner.target_update_period": {"choices": [25, 50, 100, 200, 400]},
        "replay.n_step": {"choices": [1, 3, 5]},
        "run.updates_per_env_step": {"low": 0.125, "high": 0.5, "log": True},
        "replay.sampler": {"choices": ["uniform", "proportional"]},
    }
    described = space.describe(config.to_dict())
    assert "learner.learning_rate" in described and "log range [0.0003, 0.003]" in described
    assert "config: 0.001" in described


def test_the_default_space_of_recurrent_sac_is_its_own():
    config = load_config("sac/pendulum_novel")  # rates 1e-3, tau 0.005, one update per env step
    space = default_space(config, agent_builder(config.agent).search_dimensions(config))
    assert space.to_dict() == {
        "learner.actor_learning_rate": {"low": 0.0003, "high": 0.003, "log": True},
        "learner.critic_learning_rate": {"low": 0.0003, "high": 0.003, "log": True},
        "learner.tau": {"low": 0.001, "high": 0.025, "log": True},
        "replay.n_step": {"choices": [1, 3, 5]},
        "run.updates_per_env_step": {"low": 0.5, "high": 2.0, "log": True},
        "replay.sampler": {"choices": ["uniform", "proportional"]},
    }


def test_ranges_sample_ints_or_floats_as_the_key_holds_and_choices_may_be_lists(tmp_path):
    (tmp_path / "space.yaml").write_text("replay.burn_in: {low: 0, high: 10, step: 2}\n"
                                         "run.updates_per_env_step: {low: 1, high: 2}\n"
                                         "model.hidden: {choices: [[32], [16, 16]]}\n"
                                         "learner.adam_epsilon: {low: 1e-8, high: 1e-3, log: true}\n")
    space = load_space(tmp_path / "space.yaml", load_config(CONFIG).to_dict())
    assert [d.integer for d in space.dimensions] == [True, False, False, False]  # updates_per_env_step is a float
    assert space.dimensions[3] == Dimension("learner.adam_epsilon", low=1e-8, high=1e-3, log=True)  # '1e-8': YAML 1.1
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(8):
        trial = study.ask()
        values = space.suggest(trial)
        assert isinstance(values["replay.burn_in"], int) and values["replay.burn_in"] % 2 == 0
        assert isinstance(values["run.updates_per_env_step"], float) and 1 <= values["run.updates_per_env_step"] <= 2
        assert values["model.hidden"] in ([32], [16, 16])  # Optuna stores the YAML text; the value comes back
        assert space.values(trial.params) == values
        study.tell(trial, 0.0)


def test_the_shipped_space_file_is_the_one_the_docs_show_and_it_fits_its_config():
    path = ROOT / "configs" / "tune" / "cue_memory_space.yaml"
    assert path.read_text() in (ROOT / "docs" / "training.md").read_text()
    space = load_space(path, load_config(CONFIG).to_dict())
    assert [d.key for d in space.dimensions] == ["learner.learning_rate", "learner.target_update_period",
                                                 "run.updates_per_env_step"]


@pytest.mark.parametrize("argument", ["tune/cue_memory_space", "cue_memory_space",
                                      "configs/tune/cue_memory_space.yaml"])
def test_the_shipped_space_is_found_by_name_or_documented_path_from_any_directory(argument, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no configs/ here, as after pip install r2d2kit
    space = load_space(argument, load_config("cue_memory").to_dict())
    assert space.source == str(ROOT / "configs" / "tune" / "cue_memory_space.yaml") or "r2d2kit" in space.source
    assert [d.key for d in space.dimensions][0] == "learner.learning_rate"


def test_an_unknown_space_name_gets_the_nearest_shipped_one(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["cue_memory", "--space", "tune/cue_memory_spce", "--trials", "0"]) == 2
    error = capsys.readouterr().err
    assert ("--space tune/cue_memory_spce: no such file, and no shipped search space of that name (did you mean "
            "'tune/cue_memory_space'?); the shipped ones are ['tune/cue_memory_space']") in error
    assert not (tmp_path / "tune").exists()  # refused before the output folder was made


# --------------------------------------------------------------------------- the study
def test_an_existing_study_needs_resume_and_the_same_settings(tmp_path, capsys):
    assert main(tune_args(tmp_path, "--trials", "0")) == 0  # creates the study, runs nothing
    capsys.readouterr()
    assert main(tune_args(tmp_path, "--trials", "0")) == 2
    assert "study 'cue_memory' already exists in sqlite:///" in capsys.readouterr().err
    assert main(tune_args(tmp_path, "--trials", "0", "--resume")) == 0
    capsys.readouterr()
    assert main(tune_args(tmp_path, "--trials", "0", "--resume", "--set", "run.eval_episodes=8")) == 2
    error = capsys.readouterr().err
    assert "was created with other settings (base.run.eval_episodes: 16 in the study, 8 here)" in error, error
    assert main(tune_args(tmp_path, "--trials", "0", "--resume", "--last", "3")) == 2


def test_a_bad_storage_url_exits_2_and_leaves_no_folder(tmp_path, capsys):
    assert main(tune_args(tmp_path, "--trials", "0", "--storage", "nosuch://host/db")) == 2
    assert "--storage 'nosuch://host/db' is not a database URL" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_too_few_evaluations_for_the_objective_exits_2(tmp_path, capsys):
    assert main(tune_args(tmp_path, "--trials", "0", "--last", "4")) == 2
    error = capsys.readouterr().err
    assert "last --last 4 greedy evaluations, but run.total_env_steps=600 with run.eval_every=200 gives 3" in error


def test_clashing_values_fail_their_trial_by_name(tmp_path, capsys):
    """Each value alone is valid (checked at start); period 9 with trace_length 4 is not: that trial fails,
    with the config's message, before any process starts."""
    (tmp_path / "space.yaml").write_text("replay.trace_length: {choices: [4, 9]}\nreplay.period: {choices: [4, 9]}\n")
    args = tune_args(tmp_path, "--set", "replay.period=4")
    assert main([*args, "--trials", "0"]) == 0
    load_study(tmp_path).enqueue_trial({"replay.trace_length": 4, "replay.period": 9})
    capsys.readouterr()
    assert main([*args, "--trials", "1", "--resume"]) == 1  # every trial of this worker failed
    (trial,) = load_study(tmp_path).trials
    assert trial.state == TrialState.FAIL
    assert "period (9) must be <= trace_length (4)" in trial.user_attrs["error"]
    rows = list(csv.DictReader(open(tmp_path / "out" / "trials.csv")))
    assert rows[0]["state"] == "fail" and "trace_length (4)" in rows[0]["error"]


def test_the_tuner_process_never_imports_tensorflow(tmp_path):
    """Trials import TensorFlow in their own processes; the tuner itself stays light (and its state clean)."""
    code = ("import sys\n"
            "from r2d2kit.tune import main\n"
            f"assert main([{CONFIG!r}, '--trials', '0', '--out', {str(tmp_path / 'out')!r}]) == 0\n"
            "assert 'tensorflow' not in sys.modules and 'keras' not in sys.modules\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "search space (default space):" in result.stdout


# --------------------------------------------------------------------------- end to end
QUEUE_POPPER = """
import sys, time
import optuna
from r2d2kit.tuning.study import ask
optuna.logging.set_verbosity(optuna.logging.WARNING)
url, start = sys.argv[1], float(sys.argv[2])
study = optuna.load_study(study_name="queue", storage=url)
while time.time() < start:
    pass
print(" ".join(str(ask(study, url).number) for _ in range(10)))
"""


def test_workers_on_one_sqlite_file_never_take_the_same_queued_trial(tmp_path):
    # without the lock, two processes released at one instant were both handed trial 0
    url = f"sqlite:///{tmp_path / 'study.db'}"
    study = optuna.create_study(study_name="queue", storage=url)
    for x in range(20):
        study.enqueue_trial({"x": x})
    start = time.time() + 5.0  # both processes are loaded by then, and ask at the same moment
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    poppers = [subprocess.Popen([sys.executable, "-c", QUEUE_POPPER, url, str(start)], env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    outputs = [process.communicate(timeout=120) for process in poppers]
    assert [process.returncode for process in poppers] == [0, 0], [err[-2000:] for _, err in outputs]
    taken = [int(number) for out, _ in outputs for number in out.split()]
    assert sorted(taken) == list(range(20)), taken
    queued = {t.number: t.system_attrs["fixed_params"]["x"] for t in optuna.load_study(study_name="queue",
                                                                                          storage=url).trials}
    assert queued == {x: x for x in range(20)}  # no trial was added beyond the queue


@pytest.mark.slow
def test_workers_share_a_study_resume_adds_trials_and_a_bad_trial_is_pruned(tmp_path, capsys):
    assert main(tune_args(tmp_path, "--trials", "0")) == 0
    study = load_study(tmp_path)
    study.enqueue_trial(GOOD)
    study.enqueue_trial(GOOD)

    # two workers at once on one SQLite study: 2 + 1 trials (two enqueued, one sampled), never pruned (default:
    # pruning starts after 5 finished trials)
    workers = [worker(tmp_path, "--resume", "--trials", "2", "--seed", "1"),
               worker(tmp_path, "--resume", "--trials", "1", "--seed", "2")]
    outputs = [process.communicate(timeout=600)[0] for process in workers]
    assert [process.returncode for process in workers] == [0, 0], outputs
    trials = load_study(tmp_path).trials
    assert sorted(t.number for t in trials) == [0, 1, 2]
    assert all(t.state == TrialState.COMPLETE for t in trials), [(t.number, t.state) for t in trials]
    assert sum(output.count(" complete: value ") for output in outputs) == 3, outputs

    # resumed with an eager pruner: the bad trial is stopped at 400 env steps, below the median of the good ones
    study.enqueue_trial(BAD)
    capsys.readouterr()
    assert main(tune_args(tmp_path, "--resume", "--trials", "1", "--prune-after-trials", "1",
                          "--prune-after-steps", "0")) == 0
    printed = capsys.readouterr().out
    study = load_study(tmp_path)
    trials = sorted(study.trials, key=lambda t: t.number)
    assert [t.number for t in trials] == [0, 1, 2, 3]
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 3 + [TrialState.PRUNED], [t.state for t in trials]
    pruned = trials[3]
    assert pruned.params["learner.learning_rate"] == 1e-7
    assert sorted(pruned.intermediate_values) == [200, 400]  # stopped before its third evaluation
    good = [t for t in trials if t.params["learner.learning_rate"] == 1e-3]
    assert all(t.intermediate_values[400] > pruned.intermediate_values[400] for t in good), [
        (t.number, t.intermediate_values) for t in trials]
    assert "trial 3 pruned at 400 env steps" in printed

    # each trial kept its run; the pruned one ended early
    out = tmp_path / "out"
    for trial in trials:
        rows = list(csv.DictReader(open(out / "trials" / f"{trial.number:04d}" / "metrics.csv")))
        assert [int(row["env_steps"]) for row in rows] == ([200, 400] if trial.number == 3 else [200, 400, 600])
        if trial.state == TrialState.COMPLETE:  # the objective: the mean of the last 2 evaluations
            assert trial.value == pytest.approx((float(rows[-2]["eval_mean"]) + float(rows[-1]["eval_mean"])) / 2)

    # trials.csv rows are the study's trials; the table was printed
    rows = list(csv.DictReader(open(out / "trials.csv")))
    assert [(int(r["number"]), r["state"]) for r in rows] == [(t.number, t.state.name.lower()) for t in trials]
    for row, trial in zip(rows, trials):
        assert float(row["value"]) == trial.value
        assert float(row["learner.learning_rate"]) == trial.params["learner.learning_rate"]
        assert int(row["learner.target_update_period"]) == trial.params["learner.target_update_period"]
    assert "trial  state" in printed and "   3  pruned" in printed

    # best.yaml is a train config holding the best trial's values; trials.png is drawn
    best = study.best_trial
    assert best.value == max(t.value for t in trials if t.state == TrialState.COMPLETE)
    config = load_config(out / "best.yaml")
    assert config.learner.learning_rate == best.params["learner.learning_rate"]
    assert config.learner.target_update_period == best.params["learner.target_update_period"]
    assert config.run.total_env_steps == 600 and config.env.id == "CueMemory-v0"
    assert (out / "trials.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_ctrl_c_ends_the_running_trial_marks_it_failed_and_writes_the_outputs(tmp_path):
    """SIGINT to the whole process group, as a terminal sends it: the trial stops after its current step."""
    process = worker(tmp_path, "--trials", "3", start_new_session=True)
    metrics = tmp_path / "out" / "trials" / "0000" / "metrics.csv"
    deadline = time.monotonic() + 300
    while not metrics.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert metrics.exists(), process.communicate(timeout=60)[0]
    os.killpg(process.pid, signal.SIGINT)
    output = process.communicate(timeout=300)[0]
    assert process.returncode == 0, output
    assert "stopped on Ctrl-C after 1 trial of this worker" in output
    (trial,) = load_study(tmp_path).trials  # no second trial was started
    assert trial.state == TrialState.FAIL and "interrupted by Ctrl-C" in trial.user_attrs["error"], trial.user_attrs
    rows = list(csv.DictReader(open(tmp_path / "out" / "trials.csv")))
    assert [(r["number"], r["state"]) for r in rows] == [("0", "fail")]
    assert (tmp_path / "out" / "trials.png").is_file()
    assert not (tmp_path / "out" / "best.yaml").exists()  # no trial completed
    assert (tmp_path / "out" / "trials" / "0000" / "summary.json").is_file()  # the run itself ended cleanly
