"""Process set-up: the learner keeps the GPU (memory growth), actor processes hide it (TensorFlow) or stay on
the CPU platform (JAX).

No GPU is needed: TensorFlow's device calls are recorded on a stand-in physical GPU, the calls a
real one would get.
"""

import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tensorflow as tf

from r2d2kit.models import process_setup
from r2d2kit.runners import processes, ray_actors

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def one_gpu(monkeypatch):
    """A fresh set-up state and one stand-in GPU; returns the list of recorded device calls."""
    calls, gpu = [], tf.config.PhysicalDevice(name="/physical_device:GPU:0", device_type="GPU")
    monkeypatch.setattr(process_setup, "_DONE", False)
    monkeypatch.setattr(tf.config, "list_physical_devices",
                        lambda kind=None: [gpu] if kind == "GPU" else tf.config.get_visible_devices("CPU"))
    monkeypatch.setattr(tf.config, "set_visible_devices",
                        lambda devices, kind=None: calls.append(("visible", devices, kind)))
    monkeypatch.setattr(tf.config.experimental, "set_memory_growth",
                        lambda device, on: calls.append(("growth", device.name, on)))
    return calls


@pytest.mark.tensorflow
def test_the_learner_process_keeps_the_gpu_with_memory_growth(one_gpu):
    process_setup.setup_process()
    assert one_gpu == [("growth", "/physical_device:GPU:0", True)]


@pytest.mark.tensorflow
def test_an_actor_process_hides_the_gpu(one_gpu):
    process_setup.setup_process(gpu=False)
    assert one_gpu == [("visible", [], "GPU")]


@pytest.mark.tensorflow
def test_a_second_call_changes_nothing(one_gpu):
    process_setup.setup_process(gpu=False)
    process_setup.setup_process()
    assert one_gpu == [("visible", [], "GPU")]


@pytest.mark.parametrize("entry", [processes.actor_main, ray_actors.ActorBody.__init__])
def test_both_actor_runners_set_up_their_processes_without_the_gpu(entry):
    calls = [line.strip() for line in inspect.getsource(entry).splitlines() if "setup_process(" in line]
    assert calls and all("gpu=False" in line for line in calls), calls


def test_an_actor_process_on_jax_stays_on_the_cpu_platform():
    """On JAX the actor's set-up pins the CPU platform before any array exists (a fresh process: Keras reads
    KERAS_BACKEND when it is imported)."""
    pytest.importorskip("jax")
    script = ("import jax, keras\n"
              "from r2d2kit.models.process_setup import setup_process\n"
              "assert keras.backend.backend() == 'jax'\n"
              "setup_process(gpu=False)\n"
              "print(jax.config.jax_platforms, jax.devices()[0].platform)\n")
    env = dict(os.environ, KERAS_BACKEND="jax", PYTHONPATH=str(ROOT))
    env.pop("JAX_PLATFORMS", None)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["cpu", "cpu"]
