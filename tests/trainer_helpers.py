"""Callbacks for the trainer tests, at module level so that actor processes can unpickle them."""

from __future__ import annotations

import json
import os

from r2d2kit.models import ImageModel
from r2d2kit.runners.callbacks import Callback


class Recorder(Callback):
    """Counts every hook call in this process; actor hooks also append to a per-actor file."""

    def __init__(self, directory: str | None = None) -> None:
        self.directory = directory
        self.calls: list[str] = []
        self.steps = 0
        self.episodes = 0
        self.summary = None

    def on_train_begin(self, trainer):
        self.calls.append("train_begin")

    def on_train_end(self, trainer, summary):
        self.calls.append("train_end")
        self.summary = summary

    def on_learner_begin(self, learner):
        self.calls.append(f"learner_begin@{learner.updates}")

    def on_learner_step(self, learner, metrics):
        self.steps += 1
        assert metrics["updates"] == learner.updates

    def on_learner_end(self, learner):
        self.calls.append("learner_end")

    def on_evaluation(self, trainer, row):
        self.calls.append(f"evaluation@{row['env_steps']}")

    def on_actor_begin(self, actor_id):
        self._write(actor_id, "begin")

    def on_actor_episode(self, actor_id, episode_return, length):
        self.episodes += 1
        self._write(actor_id, json.dumps([episode_return, length]))

    def on_actor_end(self, actor_id):
        self._write(actor_id, "end")

    def _write(self, actor_id: int, line: str) -> None:
        if self.directory is not None:
            with open(os.path.join(self.directory, f"actor-{actor_id}-{os.getpid()}.log"), "a") as handle:
                handle.write(line + "\n")


class EncoderNeedingArguments(ImageModel):
    """An encoder the config cannot build: its constructor has an argument without a default."""

    def __init__(self, width: int) -> None:
        self.width = width


class ConvolutionOnVectors(ImageModel):
    """A convolution, given CueMemory's vector observations."""

    def create_image_model(self, x):
        import keras

        return keras.layers.Flatten()(keras.layers.Conv2D(4, 3)(x))


def core_returning_a_dense_layer(units: int):
    """``model.core`` naming this gets a layer that is no RNN cell."""
    import keras

    return keras.layers.Dense(units)


def cell_with_a_wrong_state_size(units: int):
    """A cell whose declared state does not match what its ``call`` returns."""
    import keras

    class WrongState(keras.layers.Layer):
        state_size = [units, 3]

        def call(self, inputs, states):
            return inputs, [inputs]

    return WrongState()
