"""Issue-5 experiment: n-step targets cut at the first non-greedy action (Watkins's Q(lambda=1), capped at n).

    python benchmarks/experiments/nstep_cut.py --without recurrent-ppo --seed 0 --stop-on-miss \
        --set learner.priority_exponent=0.0 --set learner.learning_rate_decay_updates=9750

R2D2's n-step return is uncorrected: the rewards after the first step come from whatever the
actor did, and the eps-0.4 actor acts at random 40% of the time, which biases the target down.
This learner stops summing rewards at the first later step whose stored action is not the
online network's argmax and bootstraps there, so a target only follows greedy actions. With
every action greedy it equals ``r2d2kit.targets.tf_nstep_targets`` (checked on random batches).

A prototype, not a library feature: it patches ``r2d2kit.runners.local``. Results in
docs/performance.md (session 7).
"""

import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(BENCH_DIR), str(BENCH_DIR.parent)]  # the benchmark and the checkout it measures

import bench_r2d2_cartpole as bench
import tensorflow as tf

from r2d2kit.learner import R2D2Learner
from r2d2kit.rescale import tf_inverse_value_rescale, tf_value_rescale
from r2d2kit.runners import local


def cut_targets(reward, mask, terminated, q_online, q_target, action, *, gamma, n_step, trace_length, eps, rescale):
    """``tf_nstep_targets`` over ``[B, T + n]`` rows (no burn-in rows) with the sum cut at non-greedy actions."""
    dtype = q_target.dtype
    reward = tf.cast(reward, dtype); mask = tf.cast(mask, dtype)
    not_terminated = 1.0 - tf.cast(terminated, dtype)
    best = tf.argmax(q_online, axis=-1, output_type=tf.int32)  # [B, L]
    is_greedy = tf.cast(tf.equal(best, tf.cast(action, tf.int32)), dtype)  # [B, L]
    window = slice(0, trace_length)
    total = tf.zeros_like(reward[:, window]); discount = tf.ones_like(total)
    alive = mask[:, window]; offset = tf.zeros_like(total)
    for k in range(n_step):
        rows = slice(k, k + trace_length)
        valid = alive * mask[:, rows]
        if k > 0:
            valid = valid * is_greedy[:, rows]
        total += valid * discount * reward[:, rows]
        discount = valid * discount * gamma * not_terminated[:, rows] + (1.0 - valid) * discount
        offset += valid
        alive = valid
    chosen = tf.gather(q_target, best, axis=2, batch_dims=2)
    bootstrap_row = tf.range(trace_length)[tf.newaxis, :] + tf.cast(offset, tf.int32)
    bootstrap = tf.gather(chosen, bootstrap_row, axis=1, batch_dims=1)
    if rescale:
        targets = tf_value_rescale(total + discount * tf_inverse_value_rescale(bootstrap, eps), eps)
    else:
        targets = total + discount * bootstrap
    return targets * mask[:, window]

class CutLearner(R2D2Learner):
    """``R2D2Learner`` with :func:`cut_targets` in place of the uncorrected n-step targets."""

    def _targets(self, batch, rest, q_online, q_target):
        cfg = self.config
        return cut_targets(batch["reward"][:, rest], batch["mask"][:, rest], batch["terminated"][:, rest], q_online,
                           q_target, batch["action"][:, rest], gamma=cfg.gamma, n_step=cfg.n_step,
                           trace_length=cfg.trace_length, eps=cfg.rescale_eps, rescale=cfg.value_rescaling)


local.R2D2Learner = CutLearner
if __name__ == "__main__":
    bench.main(sys.argv[1:])
