"""Process set-up: the learner keeps the GPU (memory growth), actor processes hide it.

No GPU is needed: TensorFlow's device calls are recorded on a stand-in physical GPU, the calls a
real one would get.
"""

import inspect

import pytest
import tensorflow as tf

from r2d2kit.models import tf_setup
from r2d2kit.runners import processes, ray_actors


@pytest.fixture
def one_gpu(monkeypatch):
    """A fresh set-up state and one stand-in GPU; returns the list of recorded device calls."""
    calls, gpu = [], tf.config.PhysicalDevice(name="/physical_device:GPU:0", device_type="GPU")
    monkeypatch.setattr(tf_setup, "_DONE", False)
    monkeypatch.setattr(tf.config, "list_physical_devices",
                        lambda kind=None: [gpu] if kind == "GPU" else tf.config.get_visible_devices("CPU"))
    monkeypatch.setattr(tf.config, "set_visible_devices",
                        lambda devices, kind=None: calls.append(("visible", devices, kind)))
    monkeypatch.setattr(tf.config.experimental, "set_memory_growth",
                        lambda device, on: calls.append(("growth", device.name, on)))
    return calls


def test_the_learner_process_keeps_the_gpu_with_memory_growth(one_gpu):
    tf_setup.setup_tensorflow()
    assert one_gpu == [("growth", "/physical_device:GPU:0", True)]


def test_an_actor_process_hides_the_gpu(one_gpu):
    tf_setup.setup_tensorflow(gpu=False)
    assert one_gpu == [("visible", [], "GPU")]


def test_a_second_call_changes_nothing(one_gpu):
    tf_setup.setup_tensorflow(gpu=False)
    tf_setup.setup_tensorflow()
    assert one_gpu == [("visible", [], "GPU")]


@pytest.mark.parametrize("entry", [processes.actor_main, ray_actors.ActorBody.__init__])
def test_both_actor_runners_set_up_their_processes_without_the_gpu(entry):
    calls = [line.strip() for line in inspect.getsource(entry).splitlines() if "setup_tensorflow(" in line]
    assert calls and all("gpu=False" in line for line in calls), calls
