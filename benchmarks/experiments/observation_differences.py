"""Issue-5 experiment: the masked CartPole plus each observation's change since the previous step.

    python benchmarks/experiments/observation_differences.py --without recurrent-ppo --seed 0 \
        --stop-on-miss --set env.id=CartPoleNoVelDiff-v1 --set "model.input_scale=[2.0, 20.0, 1.0, 1.0]" ...

Runs ``bench_r2d2_cartpole.py`` unchanged except that the agent sees ``[x, theta, dx/dt, dtheta/dt]``
with ``dx = x_t - x_(t-1)`` from the masked observations (0 at an episode's first step, dt = 0.02 s,
CartPole's step). That is what Atari DQN's frame stack does: a velocity read from the last two
observations, made explicit. The information is the same as the masked env's (a function of the
observation history), but the LSTM no longer has to learn to subtract two nearly equal inputs: a
cart drifting at 0.1-0.5 m/s moves only 0.002-0.01 m a step.

A prototype: the wrapper and the id are defined here, not in ``r2d2kit.envs``.
"""

import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(BENCH_DIR), str(BENCH_DIR.parent)]  # the benchmark and the checkout it measures

import bench_r2d2_cartpole as bench
import gymnasium as gym
import numpy as np

import r2d2kit.envs  # noqa: F401  (registers CartPoleNoVel-v1)

STEP_SECONDS = 0.02  # CartPole's tau


class ObservationDifferences(gym.ObservationWrapper):
    """Append ``(o_t - o_(t-1)) / STEP_SECONDS`` to each observation (zeros at reset)."""

    def __init__(self, env):
        super().__init__(env)
        low, high = env.observation_space.low, env.observation_space.high
        span = (high - low) / STEP_SECONDS
        self.observation_space = gym.spaces.Box(np.concatenate([low, -span]), np.concatenate([high, span]),
                                                dtype=np.float32)
        self._previous = None

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self._previous = None
        return self.observation(obs), info

    def observation(self, obs):
        previous = obs if self._previous is None else self._previous
        self._previous = np.array(obs, np.float32)
        return np.concatenate([obs, (obs - previous) / STEP_SECONDS]).astype(np.float32)


gym.register("CartPoleNoVelDiff-v1", entry_point=lambda **kw: ObservationDifferences(gym.make("CartPoleNoVel-v1", **kw)),
             max_episode_steps=None)
bench.ENV_ID = "CartPoleNoVelDiff-v1"

if __name__ == "__main__":
    bench.main(sys.argv[1:])
