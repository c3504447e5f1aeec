"""Issue-5 experiment: K independently initialised R2D2 learners on one replay, acting on their mean Q.

    ENS_K=2 python benchmarks/experiments/ensemble.py --without recurrent-ppo --seed 0 --stop-on-miss \
        --set learner.priority_exponent=0.0 --set learner.learning_rate_decay_updates=9750

Each member is the configured network with its own initial weights, its own target network and
optimiser, and its own sampled batches (meant for uniform replay: every member writes its priorities back); the replay stores every member's LSTM state
(concatenated), and each member reads its own slice. Actors and evaluation act greedily on the
members' mean Q, so a member's idiosyncratic error has to be shared by the others to change an
action. Member 0 starts from the weights the benchmark would build alone. Costs K x the learner time.

A prototype, not a library feature: it patches ``r2d2kit.builders`` and ``r2d2kit.runners.local``.
Results in docs/performance.md (session 7).
"""
import os
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(BENCH_DIR), str(BENCH_DIR.parent)]  # the benchmark and the checkout it measures
import bench_r2d2_cartpole as bench
import numpy as np

from r2d2kit import builders
from r2d2kit.learner import R2D2Learner
from r2d2kit.runners import local

K = int(os.environ.get("ENS_K", "2"))
_build_one = builders.build_network


class EnsembleActor:
    """The members' stateful actors stepped together; Q is their mean, the state their concatenation."""

    def __init__(self, actors):
        self.actors = actors
        self.num_envs = actors[0].num_envs

    def q_values(self, obs, prev_action, prev_reward):
        return np.mean([actor.q_values(obs, prev_action, prev_reward) for actor in self.actors], axis=0)

    def get_state(self):
        states = [actor.get_state() for actor in self.actors]
        return tuple(np.concatenate([state[i] for state in states], axis=1) for i in range(2))  # (h, c)

    def reset(self, mask=None):
        for actor in self.actors:
            actor.reset(mask)


class EnsembleNetwork:
    """What ``train_local`` reads from a network: actors, and the replay's field shapes (K states)."""

    def __init__(self, members):
        self.members = members
        first = members[0]
        self.lstm_units = first.lstm_units * len(members)
        self.obs_shape, self.obs_dtype, self.config, self.name = first.obs_shape, first.obs_dtype, first.config, "ensemble"

    def actor(self, num_envs):
        return EnsembleActor([member.actor(num_envs) for member in self.members])


def build_network(settings):
    return EnsembleNetwork([_build_one(settings) for _ in range(K)])


class MemberLearner(R2D2Learner):
    """An ``R2D2Learner`` that reads member ``k``'s slice of the stored LSTM states."""

    def __init__(self, network, config, k):
        self.k = k
        super().__init__(network, config)

    def _step(self, batch):
        own = slice(self.k * self.online.lstm_units, (self.k + 1) * self.online.lstm_units)
        return super()._step(dict(batch, state_h=batch["state_h"][:, own], state_c=batch["state_c"][:, own]))


class EnsembleLearner:
    """One update = one update of every member, each on its own sampled batch."""

    def __init__(self, network, config):
        self.learners = [MemberLearner(member, config, k) for k, member in enumerate(network.members)]

    @property
    def updates(self):
        return self.learners[0].updates

    def train_from(self, buffer):
        outputs = [learner.train_from(buffer) for learner in self.learners]  # every member trains
        return outputs[0]  # member 0's loss is the one logged


builders.build_network = build_network
local.R2D2Learner = EnsembleLearner

if __name__ == "__main__":
    print(f"ensemble of {K}", flush=True)
    bench.main(sys.argv[1:])
