"""metrics.csv rows and the learning curve: the band is the observed lowest-to-highest episode return,
and a resumed run whose file predates a column keeps that file's columns aligned."""

import csv

import matplotlib
import numpy as np

from r2d2kit.training.run_log import EVAL_FIELDS, RunLog

matplotlib.use("Agg")


def row(step, returns):
    returns = np.asarray(returns, float)
    return {"env_steps": step, "updates": step // 4, "seconds": 1.0, "eval_mean": returns.mean(),
            "eval_std": returns.std(), "eval_min": returns.min(), "eval_max": returns.max(),
            "train_return": 0.0, "loss": 0.1}


def test_band_is_the_observed_range_never_past_the_maximum_return(tmp_path, monkeypatch):
    log = RunLog(tmp_path, tensorboard=False)
    episodes = [[500, 500, 500, 130], [500, 480, 500, 500]]  # mean + std of the first: 512 > 500
    for step, returns in zip((1000, 2000), episodes):
        log.evaluation(row(step, returns))
    assert row(1000, episodes[0])["eval_mean"] + row(1000, episodes[0])["eval_std"] > 500
    drawn = {}
    import matplotlib.axes

    original = matplotlib.axes.Axes.fill_between

    def spy(self, x, low, high, **kwargs):
        drawn.update(x=list(x), low=list(low), high=list(high))
        return original(self, x, low, high, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "fill_between", spy)
    assert log.plot("test").exists()
    assert drawn == {"x": [1000.0, 2000.0], "low": [130.0, 480.0], "high": [500.0, 500.0]}


def test_a_file_from_before_the_min_max_columns_stays_aligned(tmp_path):
    old_fields = [f for f in EVAL_FIELDS if f not in ("eval_min", "eval_max")]
    with open(tmp_path / "metrics.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=old_fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerow(row(1000, [1.0, 3.0]))
    log = RunLog(tmp_path, tensorboard=False)
    log.evaluation(row(2000, [2.0, 4.0]))  # a resumed run appends with the file's own columns
    rows = log.rows()
    assert [r["env_steps"] for r in rows] == [1000.0, 2000.0]
    assert [r["eval_mean"] for r in rows] == [2.0, 3.0]
    assert all("eval_min" not in r for r in rows)
    assert log.plot("old file").exists()  # no band to draw, the curve still is


def test_a_resume_drops_the_rows_past_its_checkpoint_so_the_curve_never_goes_back(tmp_path):
    """A learner killed at 3,000 env steps after its checkpoint at 2,000: the rows of 2,500 and 3,000 are
    redone by the resumed run, so they go; the ones before stay, in both files."""
    log = RunLog(tmp_path, tensorboard=False)
    for step in (1000, 2000, 2500, 3000):
        log.evaluation(row(step, [1.0, 0.0]))
        log.health({"env_steps": step, "updates": step // 4, "learner/loss": 0.5})
    assert RunLog(tmp_path, tensorboard=False).forget_after(2000) == 4
    resumed = RunLog(tmp_path, tensorboard=False)
    resumed.evaluation(row(2500, [1.0, 1.0]))
    assert [r["env_steps"] for r in resumed.rows()] == [1000, 2000, 2500]
    assert resumed.rows()[-1]["eval_mean"] == 1.0
    with open(tmp_path / "health.csv", newline="") as handle:
        assert [r["env_steps"] for r in csv.DictReader(handle)] == ["1000", "2000"]
    assert resumed.forget_after(10_000) == 0
