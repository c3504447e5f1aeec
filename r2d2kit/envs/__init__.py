"""Small environments to check learners by hand, registered with gymnasium on ``import r2d2kit.envs``.

``BitFlip-v0``: the HER paper's bit-flipping goal env (``gymnasium.make("BitFlip-v0", n_bits=15)``).
``CartPoleNoVel-v1``: CartPole-v1 observing cart position and pole angle only (500-step limit).
``CueMemory-v0``: remember a cue over ``delay`` blank steps, then act on it.
``ContinuousCue-v0``: remember a continuous cue and answer it with a continuous action every step.
``PendulumNoVel-v1``: Pendulum-v1 observing cos and sin of the angle only (continuous actions).
``HalfCheetah-P-v5``: HalfCheetah-v5 observing positions only (needs ``pip install 'r2d2kit[mujoco]'``).
``PointMassGoal-v0``: stop a point mass on a goal seeing its position only (a goal task needing memory and HER).
Registration is idempotent: importing (or reloading) this module again registers nothing twice.

Ids of optional packages are registered on demand by :func:`ensure_registered` (which the config
loader and the env factory call): ``ALE/...`` ids import ``ale_py`` (``pip install r2d2kit[atari]``),
``MiniGrid-...`` ids import ``minigrid`` (``pip install r2d2kit[minigrid]``), ``popgym-...`` ids
import ``popgym`` (``pip install r2d2kit[popgym]``), ``MinAtar/...`` ids import ``minatar.gym`` and call
its ``register_envs()`` (``pip install r2d2kit[minatar]``).
"""

from __future__ import annotations

import gymnasium

from r2d2kit.envs.bitflip import BitFlipEnv, make_bitflip
from r2d2kit.envs.memory import ContinuousCueEnv, CueMemoryEnv
from r2d2kit.envs.point_goal import PointMassGoalEnv, make_point_mass_goal
from r2d2kit.envs.pomdp import (
    MaskObservation,
    make_cartpole_no_velocity,
    make_half_cheetah_positions,
    make_pendulum_no_velocity,
)
from r2d2kit.envs.success import SuccessOnPositiveReward

__all__ = ["BitFlipEnv", "make_bitflip", "CueMemoryEnv", "ContinuousCueEnv", "MaskObservation",
           "make_cartpole_no_velocity", "make_pendulum_no_velocity", "make_half_cheetah_positions",
           "PointMassGoalEnv", "make_point_mass_goal", "SuccessOnPositiveReward", "ensure_registered"]

# id prefix -> (module that registers those ids, the extra that installs it)
OPTIONAL_PACKAGES = {"ALE/": ("ale_py", "atari"), "MiniGrid-": ("minigrid", "minigrid"),
                     "BabyAI-": ("minigrid", "minigrid"), "popgym-": ("popgym", "popgym"),
                     "MinAtar/": ("minatar.gym", "minatar")}


def ensure_registered(env_id: str) -> None:
    """Import the package that registers ``env_id``: ``module`` of a ``"module:EnvId"`` id, or the
    optional package of an ALE, MiniGrid, POPGym or MinAtar id.

    Raises:
        ImportError: the package is not installed; the message names the pip extra to install.
    """
    import importlib

    if ":" in env_id:  # gymnasium's "module:EnvId": importing the module registers the id
        module_name, _, env_id = env_id.partition(":")
        try:
            importlib.import_module(module_name)
        except ImportError as error:
            raise ImportError(f"env id module {module_name!r} cannot be imported: {error}") from None
    for prefix, (module_name, extra) in OPTIONAL_PACKAGES.items():
        if env_id.startswith(prefix) and env_id not in gymnasium.envs.registry:
            try:
                module = importlib.import_module(module_name)
            except ImportError as error:
                raise ImportError(f"env id {env_id!r} needs the {module_name!r} package: "
                                  f"pip install 'r2d2kit[{extra}]' ({error})") from None
            _register_package(module)


def _register_package(module) -> None:
    """Register the ids of a package that does not register them on import (minigrid and popgym do)."""
    if module.__name__ == "ale_py":
        gymnasium.register_envs(module)
    elif module.__name__ == "minatar.gym" and "MinAtar/Breakout-v1" not in gymnasium.envs.registry:
        module.register_envs()  # registers MinAtar/<Game>-v0 (all 6 actions) and -v1 (each game's minimal set)


def _register(env_id: str, entry_point: str, **kwargs) -> None:
    """Register ``env_id`` unless it already is (gymnasium warns on re-registration)."""
    if env_id not in gymnasium.envs.registry:
        gymnasium.register(id=env_id, entry_point=entry_point, **kwargs)


_register("BitFlip-v0", "r2d2kit.envs.bitflip:make_bitflip")
_register("CartPoleNoVel-v1", "r2d2kit.envs.pomdp:make_cartpole_no_velocity", max_episode_steps=500,
          reward_threshold=475.0)
_register("CueMemory-v0", "r2d2kit.envs.memory:CueMemoryEnv")
_register("ContinuousCue-v0", "r2d2kit.envs.memory:ContinuousCueEnv")
_register("PendulumNoVel-v1", "r2d2kit.envs.pomdp:make_pendulum_no_velocity", max_episode_steps=200)
_register("HalfCheetah-P-v5", "r2d2kit.envs.pomdp:make_half_cheetah_positions", max_episode_steps=1000)
_register("PointMassGoal-v0", "r2d2kit.envs.point_goal:make_point_mass_goal")
