"""Issue-5 experiment: advantage-learning targets (Bellemare et al. 2016, "Increasing the action gap").

    AL_ALPHA=0.9 python benchmarks/experiments/advantage_learning.py --without recurrent-ppo --seed 0 \
        --stop-on-miss --set learner.priority_exponent=0.0 --set learner.learning_rate_decay_updates=9750

The evaluation failures of sessions 3-7 are slow drifts of the cart: the greedy policy balances
the pole but picks the wrong side in states where the two actions' values differ by little, so a
small change of the weights flips them. Advantage learning subtracts ``alpha * (V(s) - Q(s, a))``
(target network, raw value scale) from each target; the fixed point keeps the greedy action and
widens every action gap by ``1 / (1 - alpha)``, which makes the greedy policy less sensitive to
estimation noise. With ``AL_ALPHA=0`` it is the library's target, bit for bit.

A prototype, not a library feature: it patches ``r2d2kit.runners.local``. Results in
docs/performance.md (session 8).
"""

import os
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(BENCH_DIR), str(BENCH_DIR.parent)]  # the benchmark and the checkout it measures

import bench_r2d2_cartpole as bench
import tensorflow as tf

from r2d2kit.learner import R2D2Learner
from r2d2kit.rescale import tf_inverse_value_rescale, tf_value_rescale
from r2d2kit.runners import local

ALPHA = float(os.environ.get("AL_ALPHA", "0.9"))


class AdvantageLearner(R2D2Learner):
    """``R2D2Learner`` whose targets are lowered by ``ALPHA`` times the target network's action gap."""

    def _targets(self, batch, rest, q_online, q_target):
        targets = super()._targets(batch, rest, q_online, q_target)
        if ALPHA == 0.0:
            return targets
        cfg = self.config
        rows = slice(0, cfg.trace_length)
        q_rows = q_target[:, rows]
        actions = tf.cast(batch["action"][:, rest][:, rows], tf.int32)
        mask = tf.cast(batch["mask"][:, rest][:, rows], targets.dtype)
        unscale = (lambda x: tf_inverse_value_rescale(x, cfg.rescale_eps)) if cfg.value_rescaling else (lambda x: x)
        rescale = (lambda x: tf_value_rescale(x, cfg.rescale_eps)) if cfg.value_rescaling else (lambda x: x)
        gap = unscale(tf.reduce_max(q_rows, axis=-1)) - unscale(tf.gather(q_rows, actions, axis=2, batch_dims=2))
        return rescale(unscale(targets) - ALPHA * gap) * mask


local.R2D2Learner = AdvantageLearner
if __name__ == "__main__":
    bench.main(sys.argv[1:])
