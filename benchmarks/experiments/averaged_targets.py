"""Issue-5 experiment: Averaged-DQN targets (Anschel et al. 2017), the mean Q of the last K target networks.

    AVG_K=3 python benchmarks/experiments/averaged_targets.py --without recurrent-ppo --seed 0 \
        --stop-on-miss --set learner.priority_exponent=0.0 --set learner.learning_rate_decay_updates=9750

Each target network copy keeps the K - 1 copies before it; the n-step targets bootstrap from the
mean of their Q-values (each unrolled from the stored state with its own burn-in). Averaging K
snapshots divides the variance of the target's approximation error by up to K, which the paper
found to remove the sudden drops of DQN's learning curves, the drops that break the hold here.
``AVG_K=1`` is the library's learner. Costs K target passes per update.

A prototype, not a library feature: it patches ``r2d2kit.runners.local``. Results in
docs/performance.md (session 8).
"""

import os
import sys
from itertools import pairwise
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(BENCH_DIR), str(BENCH_DIR.parent)]  # the benchmark and the checkout it measures

import bench_r2d2_cartpole as bench

from r2d2kit.learner import R2D2Learner
from r2d2kit.runners import local

K = int(os.environ.get("AVG_K", "3"))


class AveragedTargetLearner(R2D2Learner):
    """``R2D2Learner`` bootstrapping from the mean Q of its target network and K - 1 older copies."""

    def __init__(self, network, config=None, optimizer=None):
        super().__init__(network, config, optimizer)
        self.snapshots = [network.clone(name=f"{network.name}_snapshot{i}") for i in range(K - 1)]
        for snapshot in self.snapshots:
            snapshot.copy_weights_from(self.target)

    def _target_q(self, batch, burn, rest, h, c):
        networks = [self.target, *self.snapshots]
        return sum(self._unroll_after_burn_in(n, batch, burn, rest, h, c) for n in networks) / float(K)

    def _update_target(self):
        chain = [self.target, *self.snapshots]
        for newer, older in reversed(list(pairwise(chain))):
            older.copy_weights_from(newer)  # oldest first, so each copy reads weights not yet moved
        super()._update_target()


local.R2D2Learner = AveragedTargetLearner
if __name__ == "__main__":
    print(f"averaged targets over {K} networks", flush=True)
    bench.main(sys.argv[1:])
