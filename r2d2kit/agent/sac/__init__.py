"""Recurrent SAC for continuous (``Box``) actions, behind the agent seam (:mod:`r2d2kit.agent.seam`).

A squashed-Gaussian actor and twin critics, each recurrent (R2D2's stored state and burn-in, on the
same :class:`~r2d2kit.replay.SequenceReplayBuffer` windows), in the design of pomdp-baselines' recurrent
SAC (Ni et al. 2022): separate actor and critic cores by default, the critic's core reading the
observation, the previous action and reward, the current action joined after the core.

``agent: sac`` selects it (:class:`~r2d2kit.agent.sac.builder.SACBuilder`). The config (:class:`SACConfig`)
imports no TensorFlow; the networks, learner and policy (``r2d2kit.agent.sac.networks``, ``.learner``,
``.policy``) are loaded on first use.
"""

from r2d2kit._lazy import lazy_exports

_HOMES = {"SACConfig": "config", "SACNetworks": "networks", "make_sac_networks": "networks",
          "sac_networks_factory": "networks", "SACLearner": "learner", "SACPolicy": "policy",
          "SACPolicyFactory": "policy", "make_sac_policy": "policy", "SACAgent": "builder", "SACBuilder": "builder",
          "build_sac_networks": "builder"}
__all__ = list(_HOMES)
__getattr__ = lazy_exports("r2d2kit.agent.sac", _HOMES)
