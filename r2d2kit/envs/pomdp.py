"""Partially observable variants of classic control tasks, for recurrent agents.

``CartPoleNoVel-v1``: CartPole-v1 observing only cart position and pole angle. The velocities must
be inferred from successive observations, which a feed-forward policy cannot do reliably.
``PendulumNoVel-v1``: Pendulum-v1 (continuous torque) observing ``cos(theta), sin(theta)`` without the
angular velocity (the RL zoo's name).
``HalfCheetah-P-v5``: HalfCheetah-v5 observing the joint positions without any velocity (pomdp-baselines'
``-P`` variants, Ni et al. 2022); needs ``mujoco`` (``pip install 'r2d2kit[mujoco]'``).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Sequence

import gymnasium as gym
import numpy as np

# gymnasium's half_cheetah.xml sets the compiler attribute MuJoCo 3.3+ deprecates; the user cannot act on it
KNOWN_ASSET_WARNINGS = ("compiler attribute 'settotalmass' is deprecated",)


class MaskObservation(gym.ObservationWrapper):
    """Keep only the observation entries at ``keep`` (a flat Box observation)."""

    def __init__(self, env: gym.Env, keep: Sequence[int]) -> None:
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise ValueError(f"MaskObservation needs a flat Box observation space, got {space}")
        self.keep = np.asarray(keep, dtype=np.int64)
        if self.keep.size == 0 or self.keep.min() < 0 or self.keep.max() >= space.shape[0]:
            raise ValueError(f"keep must index 0 .. {space.shape[0] - 1}, got {list(keep)}")
        self.observation_space = gym.spaces.Box(space.low[self.keep], space.high[self.keep], dtype=space.dtype)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation[self.keep]


def make_cartpole_no_velocity(**kwargs) -> gym.Env:
    """CartPole-v1 dynamics observing (cart position, pole angle) only; time limit from registration."""
    from gymnasium.envs.classic_control.cartpole import CartPoleEnv

    return MaskObservation(CartPoleEnv(**kwargs), keep=(0, 2))


def make_pendulum_no_velocity(**kwargs) -> gym.Env:
    """Pendulum-v1 dynamics observing ``(cos theta, sin theta)`` only; time limit from registration."""
    from gymnasium.envs.classic_control.pendulum import PendulumEnv

    return MaskObservation(PendulumEnv(**kwargs), keep=(0, 1))


def mujoco_warning(message: str) -> None:
    """Hand a MuJoCo warning to Python's ``warnings`` (filterable, once per process by default), bar the known
    deprecations of gymnasium's own assets."""
    if not any(known in message for known in KNOWN_ASSET_WARNINGS):
        warnings.warn(f"MuJoCo: {message}", RuntimeWarning, stacklevel=2)


@contextlib.contextmanager
def mujoco_warnings_to_python() -> Iterator[None]:
    """Route MuJoCo's warnings through :func:`mujoco_warning` while building a model. Unrouted, MuJoCo prints
    each one and appends it to ``MUJOCO_LOG.TXT`` in the working directory: every env build of every actor
    process, a file the user never asked for."""
    import mujoco

    previous = mujoco.get_mju_user_warning()
    mujoco.set_mju_user_warning(mujoco_warning)
    try:
        yield
    finally:
        mujoco.set_mju_user_warning(previous)


def make_half_cheetah_positions(**kwargs) -> gym.Env:
    """HalfCheetah-v5 observing the positions only (``qpos``, without the x position unless
    ``exclude_current_positions_from_observation=False``), none of the velocities ``qvel``."""
    try:
        from gymnasium.envs.mujoco.half_cheetah_v5 import HalfCheetahEnv
    except ImportError as error:  # mujoco or imageio missing (gymnasium's MuJoCo envs import both)
        raise ImportError(f"HalfCheetah-P-v5 needs gymnasium's MuJoCo envs (the 'mujoco' and 'imageio' packages): "
                          f"pip install 'r2d2kit[mujoco]' ({error})") from None
    with mujoco_warnings_to_python():
        env = HalfCheetahEnv(**kwargs)
    positions = env.data.qpos.size - (1 if kwargs.get("exclude_current_positions_from_observation", True) else 0)
    return MaskObservation(env, keep=range(positions))  # the v5 observation is qpos (maybe less x), then qvel
