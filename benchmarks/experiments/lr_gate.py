"""Issue-5 experiment: gate the learning rate by the near-greedy actors' recent failures.

    GATE_MODE=frac GATE_WINDOW=6 python benchmarks/experiments/lr_gate.py --without recurrent-ppo \
        --seed 0 --stop-on-miss --set learner.priority_exponent=0.0 ...

Runs ``bench_r2d2_cartpole.py`` unchanged except that the learner's rate (its schedule, if any) is
multiplied by a gate in [0, 1] computed from the training episodes of the actors whose Ape-X
epsilon is below ``GATE_MAX_EPS``: the idea is to stop learning while those near-greedy episodes
all reach 500 (a frozen good policy cannot oscillate) and to learn again when they fail.

* ``GATE_MODE=frac``: gate = GATE_GAIN x (failed fraction of the last GATE_WINDOW such episodes).
* ``GATE_MODE=any``: gate = 1 if any of them failed, else 0.
* ``GATE_MODE=freeze``: gate = 1 until the last GATE_WINDOW such episodes all reached 500, then 0
  for good (early stopping on the agent's own training episodes).
* ``GATE_FLOOR``: the gate never goes below this (not in ``freeze`` mode).

A prototype, not a library feature: it patches ``r2d2kit.runners.local``. Results in
docs/performance.md (session 7).
"""

import collections
import os
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(BENCH_DIR), str(BENCH_DIR.parent)]  # the benchmark and the checkout it measures

import bench_r2d2_cartpole as bench
import keras
import tensorflow as tf

from r2d2kit.learner import R2D2Learner
from r2d2kit.runners import local

MAX_EPS = float(os.environ.get("GATE_MAX_EPS", "0.05"))
WINDOW = int(os.environ.get("GATE_WINDOW", "6"))
MODE = os.environ.get("GATE_MODE", "frac")
GAIN = float(os.environ.get("GATE_GAIN", "1.0"))
FLOOR = float(os.environ.get("GATE_FLOOR", "0.0"))
SUCCESS = 500.0  # CartPole-v1's time limit: an episode that ends earlier failed

GATE = tf.Variable(1.0, trainable=False, dtype=tf.float32)
RECENT_FAILURES: collections.deque = collections.deque(maxlen=WINDOW)
PERIOD = {"updates": 0, "gate_sum": 0.0}  # for the mean gate printed at each evaluation


class GatedSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """The configured rate (a constant or a schedule) times the gate variable, read at each step."""

    def __init__(self, base):
        self.base = base

    def __call__(self, step):
        base = self.base(step) if callable(self.base) else tf.constant(self.base, tf.float32)
        return tf.cast(base, tf.float32) * GATE

    def get_config(self):
        return {}


class GatedLearner(R2D2Learner):
    @staticmethod
    def learning_rate_schedule(config):
        return GatedSchedule(R2D2Learner.learning_rate_schedule(config))

    def train_from(self, buffer):
        PERIOD["updates"] += 1
        PERIOD["gate_sum"] += float(GATE.numpy())
        return super().train_from(buffer)


def update_gate(near_greedy_returns) -> None:
    """Account the episodes that just ended in near-greedy envs and set the gate from the recent ones."""
    if not len(near_greedy_returns):
        return
    RECENT_FAILURES.extend(near_greedy_returns < SUCCESS)
    if MODE == "freeze":
        if len(RECENT_FAILURES) == WINDOW and not any(RECENT_FAILURES):
            GATE.assign(0.0)
        return
    failed = sum(RECENT_FAILURES) / len(RECENT_FAILURES) if MODE == "frac" else float(any(RECENT_FAILURES))
    if len(RECENT_FAILURES) < WINDOW:
        failed = 1.0
    GATE.assign(max(FLOOR, min(1.0, GAIN * failed)))


class GatedActingLoop(local.ActingLoop):
    """``ActingLoop`` whose episode tracker also feeds :func:`update_gate` (acting is unchanged)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        record = self.tracker.record

        def record_and_gate(*step):
            ended, returns, lengths, restart = record(*step)
            update_gate(returns[self.epsilons[ended] < MAX_EPS])
            return ended, returns, lengths, restart

        self.tracker.record = record_and_gate


def evaluate_and_show_gate(*args, **kwargs):
    returns = _evaluate(*args, **kwargs)
    mean_gate = PERIOD["gate_sum"] / max(PERIOD["updates"], 1)
    print(f"    gate: now {float(GATE.numpy()):.2f}, mean over the last period {mean_gate:.2f}, "
          f"recent failures {list(map(int, RECENT_FAILURES))}", flush=True)
    PERIOD.update(updates=0, gate_sum=0.0)
    return returns


_evaluate = local.evaluate
local.R2D2Learner, local.ActingLoop, local.evaluate = GatedLearner, GatedActingLoop, evaluate_and_show_gate

if __name__ == "__main__":
    print(f"gate: max epsilon {MAX_EPS}, window {WINDOW}, mode {MODE}, gain {GAIN}, floor {FLOOR}", flush=True)
    bench.main(sys.argv[1:])
