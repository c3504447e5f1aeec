"""Keras 3 backends: a run trains on TensorFlow and on JAX, and a checkpoint written on one resumes on the other.

Keras picks its backend when it is imported, so every leg runs in its own process with ``KERAS_BACKEND`` set
(the test passes under either backend itself). Each leg dumps the learner's variables (weights and optimiser
slots) right after the checkpoint is restored and at the end of the run: a resumed leg must start from exactly
what the previous leg ended with, bit for bit.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jax")  # the optional extra `jax`, part of the test extras
pytestmark = pytest.mark.slow  # every leg trains in a fresh process

ROOT = Path(__file__).resolve().parents[1]

LEG = """
import sys
import numpy as np
import keras
from r2d2kit.runners.callbacks import Callback
from r2d2kit.training.config import load_config
from r2d2kit.training.trainer import Trainer

backend, run_dir, steps, resume = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "resume"
assert keras.backend.backend() == backend, keras.backend.backend()


def dump(learner, path):
    variables = [*learner.online.model.weights, *learner.target.model.weights, *learner.optimizer.variables]
    np.savez(path, *[np.asarray(v.numpy()) for v in variables])


class Dump(Callback):
    def on_train_begin(self, trainer):
        dump(trainer.learner, f"{run_dir}/begin-{backend}-{steps}.npz")

    def on_train_end(self, trainer, summary):
        dump(trainer.learner, f"{run_dir}/end-{backend}-{steps}.npz")


config = load_config("cue_memory", ["actors.runner=local", "logging.progress=false", f"run.total_env_steps={steps}",
                                    "run.eval_every=1000", "checkpoints.every_env_steps=0"])
Trainer(config, run_dir, callbacks=[Dump()], resume=resume).fit()
"""


def leg(backend: str, run_dir: Path, steps: int, resume: bool) -> dict:
    env = dict(os.environ, KERAS_BACKEND=backend, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([sys.executable, "-c", LEG, backend, str(run_dir), str(steps), "resume" if resume else "new"],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((run_dir / "summary.json").read_text())


def arrays(path: Path) -> list[np.ndarray]:
    with np.load(path, allow_pickle=False) as saved:
        return [saved[f"arr_{i}"] for i in range(len(saved.files))]


def test_a_checkpoint_written_on_tensorflow_resumes_on_jax_and_back(tmp_path):
    run_dir = tmp_path / "run"
    first = leg("tensorflow", run_dir, 1500, resume=False)
    second = leg("jax", run_dir, 2500, resume=True)
    third = leg("tensorflow", run_dir, 3500, resume=True)
    assert (first["env_steps"], second["env_steps"], third["env_steps"]) == (1500, 2500, 3500)
    assert first["updates"] < second["updates"] < third["updates"]  # each leg trained on
    assert second["resumed_from"] == "checkpoints/ckpt-000001500"
    assert third["resumed_from"] == "checkpoints/ckpt-000002500"
    for ended, began in (("end-tensorflow-1500", "begin-jax-2500"), ("end-jax-2500", "begin-tensorflow-3500")):
        before, after = arrays(run_dir / f"{ended}.npz"), arrays(run_dir / f"{began}.npz")
        assert len(before) == len(after) > 10
        for i, (a, b) in enumerate(zip(before, after, strict=True)):
            np.testing.assert_array_equal(a, b, err_msg=f"variable {i}: {ended} -> {began}")
    moved = [not np.array_equal(a, b) for a, b in zip(arrays(run_dir / "begin-jax-2500.npz"),
                                                      arrays(run_dir / "end-jax-2500.npz"), strict=True)]
    assert sum(moved) > len(moved) // 2  # the JAX leg updated the weights and the slots
    metrics = (run_dir / "metrics.csv").read_text().splitlines()
    assert [int(row.split(",")[0]) for row in metrics[1:]] == [1000, 2000, 3000]


def without_tensorflow(tmp_path: Path) -> dict[str, str]:
    """The environment of a JAX process (and its spawned children) where ``import tensorflow`` fails, as on a
    machine without it: a sitecustomize on the path blocks the import at start-up."""
    blocker = tmp_path / "no_tensorflow"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text("import sys\nsys.modules['tensorflow'] = None  # import fails\n")
    return dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", PYTHONPATH=f"{blocker}{os.pathsep}{ROOT}")


def test_a_run_on_jax_with_actor_processes_never_imports_tensorflow(tmp_path):
    """TensorFlow made unimportable (as on a machine without it) in the learner and in every spawned actor:
    a run with actor processes trains, checkpoints and evaluates on JAX."""
    env = without_tensorflow(tmp_path)
    run_dir = tmp_path / "run"
    train = [sys.executable, "-m", "r2d2kit.train", "cue_memory", "--run-dir", str(run_dir),
             "--set", "actors.runner=processes", "--set", "actors.num_actors=2", "--set", "run.total_env_steps=2000",
             "--set", "run.eval_every=1000", "--set", "logging.progress=false"]
    done = subprocess.run(train, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Keras on jax on cpu" in done.stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["runner"] == "processes" and summary["env_steps"] >= 2000 and summary["updates"] > 0
    assert any((run_dir / "tensorboard").iterdir())  # tensorboardX wrote the scalars
    evaluate = [sys.executable, "-m", "r2d2kit.evaluate", str(run_dir), "--episodes", "4"]
    done = subprocess.run(evaluate, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


def test_as_dataset_without_tensorflow_names_the_numpy_alternative_which_works(tmp_path):
    script = ("import numpy as np\n"
              "from r2d2kit.replay import ReplayBuffer\n"
              "buffer = ReplayBuffer(8, {'obs': ((2,), 'float32')})\n"
              "try:\n    buffer.as_dataset(4)\nexcept ImportError as error:\n    print(error)\n"
              "buffer.add_batch(obs=np.ones((3, 2), np.float32))\n"
              "with buffer.batches(4, prefetch=2) as batches:\n    print('batch', next(batches)['obs'].shape)\n")
    env = without_tensorflow(tmp_path)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "needs TensorFlow (pip install tensorflow)" in done.stdout
    assert "iterate buffer.batches(batch_size, beta)" in done.stdout
    assert "batch (4, 2)" in done.stdout  # the iterator works where TensorFlow cannot be imported
