"""Recurrent SAC for continuous (``Box``) actions, behind the agent seam (:mod:`r2d2kit.agent.seam`).

A squashed-Gaussian actor and twin critics, each recurrent (R2D2's stored state and burn-in, on the
same :class:`~r2d2kit.replay.SequenceReplayBuffer` windows), in the design of pomdp-baselines' recurrent
SAC (Ni et al. 2022): separate actor and critic cores by default, the critic's core reading the
observation, the previous action and reward, the current action joined after the core.

The config (:class:`SACConfig`) imports no TensorFlow; the networks, learner and policy live in
``r2d2kit.agent.sac.networks``, ``.learner`` and ``.policy``.
"""

from r2d2kit.agent.sac.config import SACConfig

__all__ = ["SACConfig"]
