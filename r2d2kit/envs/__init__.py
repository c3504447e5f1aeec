"""Small environments to check learners by hand, registered with gymnasium on ``import r2d2kit.envs``.

``BitFlip-v0``: the HER paper's bit-flipping goal env (``gymnasium.make("BitFlip-v0", n_bits=15)``).
``CartPoleNoVel-v1``: CartPole-v1 observing cart position and pole angle only (500-step limit).
``CueMemory-v0``: remember a cue over ``delay`` blank steps, then act on it.
Registration is idempotent: importing (or reloading) this module again registers nothing twice.
"""

from __future__ import annotations

import gymnasium

from r2d2kit.envs.bitflip import BitFlipEnv, make_bitflip
from r2d2kit.envs.memory import CueMemoryEnv
from r2d2kit.envs.pomdp import MaskObservation, make_cartpole_no_velocity

__all__ = ["BitFlipEnv", "make_bitflip", "CueMemoryEnv", "MaskObservation", "make_cartpole_no_velocity"]


def _register(env_id: str, entry_point: str, **kwargs) -> None:
    """Register ``env_id`` unless it already is (gymnasium warns on re-registration)."""
    if env_id not in gymnasium.envs.registry:
        gymnasium.register(id=env_id, entry_point=entry_point, **kwargs)


_register("BitFlip-v0", "r2d2kit.envs.bitflip:make_bitflip")
_register("CartPoleNoVel-v1", "r2d2kit.envs.pomdp:make_cartpole_no_velocity", max_episode_steps=500,
          reward_threshold=475.0)
_register("CueMemory-v0", "r2d2kit.envs.memory:CueMemoryEnv")
