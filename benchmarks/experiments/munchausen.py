"""Issue-5 experiment: Munchausen targets (Vieillard et al. 2020, "Munchausen Reinforcement Learning").

    python benchmarks/experiments/munchausen.py --without recurrent-ppo --seed 0 --stop-on-miss \
        --set learner.priority_exponent=0.0 --set learner.learning_rate_decay_updates=9750

Two changes to each n-step target, both on the raw (not rescaled) value scale and from the
target network's softmax policy ``pi = softmax(Q / tau)``:

- the bootstrap is the soft value ``sum_a pi(a|s) (Q(s, a) - tau log pi(a|s))`` instead of the
  double-Q value, and
- ``alpha * clip(tau log pi(a_t|s_t), l0, 0)`` is added: a bonus of 0 for the greedy action and
  a penalty of at most ``alpha * |l0|`` for the others, which widens small action gaps (a clipped
  advantage learning) and implicitly regularises each update toward the previous policy (KL).

The greedy evaluation failures of sessions 3-7 are slow drifts of the cart, decided in states
where the two actions' values are close; the experiment asks whether such a regularised target
keeps the greedy policy from flipping there. Paper defaults: ``MDQN_TAU=0.03``,
``MDQN_ALPHA=0.9``, ``MDQN_L0=-1``.

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

TAU = float(os.environ.get("MDQN_TAU", "0.03"))
ALPHA = float(os.environ.get("MDQN_ALPHA", "0.9"))
L0 = float(os.environ.get("MDQN_L0", "-1.0"))


class MunchausenLearner(R2D2Learner):
    """``R2D2Learner`` with a soft bootstrap and the clipped Munchausen log-policy term."""

    def _targets(self, batch, rest, q_online, q_target):
        cfg = self.config
        unscale = (lambda x: tf_inverse_value_rescale(x, cfg.rescale_eps)) if cfg.value_rescaling else (lambda x: x)
        rescale = (lambda x: tf_value_rescale(x, cfg.rescale_eps)) if cfg.value_rescaling else (lambda x: x)
        q_raw = unscale(q_target)  # [B, L, A]
        log_pi = tf.nn.log_softmax(q_raw / TAU, axis=-1)
        soft_value = tf.reduce_sum(tf.exp(log_pi) * (q_raw - TAU * log_pi), axis=-1)  # [B, L]
        # Every action of the broadcast tensor holds the soft value, so the library's double-Q
        # gather at the online argmax reads it: targets h(G + gamma^k V_soft(s_{t+k})).
        soft_q = tf.broadcast_to(rescale(soft_value)[..., tf.newaxis], tf.shape(q_target))
        targets = super()._targets(batch, rest, q_online, soft_q)
        rows = slice(0, cfg.trace_length)
        actions = tf.cast(batch["action"][:, rest][:, rows], tf.int32)
        log_pi_taken = tf.gather(log_pi[:, rows], actions, axis=2, batch_dims=2)  # [B, T]
        bonus = ALPHA * tf.clip_by_value(TAU * log_pi_taken, L0, 0.0)
        mask = tf.cast(batch["mask"][:, rest][:, rows], targets.dtype)
        return rescale(unscale(targets) + bonus) * mask


local.R2D2Learner = MunchausenLearner
if __name__ == "__main__":
    bench.main(sys.argv[1:])
