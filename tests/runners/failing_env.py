"""An env that fails on its first step in actor 1 alone: an actor in a crash loop beside a healthy one.

Importing this module registers ``FailsInActorOne-v0`` (configs name it
``tests.runners.failing_env:FailsInActorOne-v0``, so actor processes import it too). It is
CueMemory, except that an env reset with a seed of actor 1's first or later incarnations (seeds from
``SEED_STRIDE`` on, with ``run.seed: 0``) raises on its first step, as an env with a bug in one
configuration would. Actor 0 (seeds below ``SEED_STRIDE``) trains normally.
"""

from __future__ import annotations

import gymnasium as gym

from r2d2kit.envs.memory import CueMemoryEnv
from r2d2kit.runners.pool import SEED_STRIDE

ENV_ID = "FailsInActorOne-v0"


class FailsInActorOne(CueMemoryEnv):
    doomed = False

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.doomed = SEED_STRIDE <= seed < 2 * SEED_STRIDE
        return super().reset(seed=seed, options=options)

    def step(self, action):
        if self.doomed:
            raise RuntimeError("FailsInActorOne: actor 1's env fails on its first step")
        return super().step(action)


if ENV_ID not in gym.envs.registry:
    gym.register(ENV_ID, entry_point=FailsInActorOne)
