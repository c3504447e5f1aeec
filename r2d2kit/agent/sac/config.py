"""Recurrent SAC hyper-parameters, in a module of their own so that reading a config starts no TensorFlow.

The defaults are Stable-Baselines3's SAC (Haarnoja et al. 2018: Adam 3e-4 for actor, critic and the
temperature, gamma 0.99, Polyak tau 0.005, target entropy ``-|A|`` on actions in [-1, 1], log-std clipped to
[-20, 2]) with pomdp-baselines' batch of 64 windows, and two differences: gradients are clipped to a global
norm of 40 (R2D2's; SB3 clips none), and the warm-up steps act with the untrained policy (whose squashed
samples spread over the bounds) where SB3 samples uniformly. The window geometry (burn-in, trace, n-step, period) is the
replay's :class:`~r2d2kit.agent.seam.WindowLayout`, not a field here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["SACConfig"]

_FLOAT_FIELDS = ("gamma", "tau", "actor_learning_rate", "critic_learning_rate", "alpha_learning_rate", "init_alpha",
                 "max_gradient_norm", "eta", "importance_exponent", "priority_exponent", "log_std_min", "log_std_max")


@dataclass
class SACConfig:
    """SAC's hyper-parameters; every error names ``learner.<field>``, the value and the fix."""

    gamma: float = 0.99  # discount
    tau: float = 0.005  # Polyak step of the target critic after every update: target += tau (online - target)
    actor_learning_rate: float = 3e-4  # Adam's rate for the actor
    critic_learning_rate: float = 3e-4  # Adam's rate for the twin critics (and a shared core)
    alpha_learning_rate: float = 3e-4  # Adam's rate for log(alpha), the entropy temperature
    batch_size: int = 64  # windows per update
    init_alpha: float = 1.0  # the temperature at the start (SB3's "auto" starts at 1.0)
    target_entropy: float | str = "auto"  # "auto": SB3's -(action entries) on actions in [-1, 1]; or nats (env units)
    max_gradient_norm: float = 40.0  # actor and critic gradients are clipped to this global norm
    eta: float = 0.9  # window priority: eta * max |TD| + (1 - eta) * mean |TD| over its trained rows
    importance_exponent: float = 0.6  # beta of the importance-sampling weights of a prioritized replay
    priority_exponent: float = 0.9  # alpha of the prioritized replay (the replay builder reads it)
    shared_core: bool = False  # one encoder + core for actor and critics (the actor's loss does not train it)
    hidden_units: list = field(default_factory=lambda: [256, 256])  # each head's hidden layers (policy, twin Q)
    log_std_min: float = -20.0  # the actor's log standard deviation is clipped to [log_std_min, log_std_max]
    log_std_max: float = 2.0  # the upper end of that range

    def __post_init__(self) -> None:
        for name in _FLOAT_FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"learner.{name} must be a finite number, got {value!r}; fix: give a number "
                                 f"(default {getattr(SACConfig, name)!r})")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ValueError(f"learner.batch_size must be an integer >= 1, got {self.batch_size!r}; fix: e.g. 64")
        for name in ("gamma", "eta", "importance_exponent", "priority_exponent"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"learner.{name} must be in [0, 1], got {getattr(self, name)!r}; fix: default "
                                 f"{getattr(SACConfig, name)!r}")
        if not 0.0 < self.tau <= 1.0:
            raise ValueError(f"learner.tau must be in (0, 1] (1 copies the critic into its target every update), "
                             f"got {self.tau!r}; fix: e.g. 0.005")
        for name in ("actor_learning_rate", "critic_learning_rate", "alpha_learning_rate", "init_alpha",
                     "max_gradient_norm"):
            if getattr(self, name) <= 0.0:
                raise ValueError(f"learner.{name} must be > 0, got {getattr(self, name)!r}; fix: default "
                                 f"{getattr(SACConfig, name)!r}")
        if self.log_std_min >= self.log_std_max:
            raise ValueError(f"learner.log_std_min ({self.log_std_min!r}) must be < learner.log_std_max "
                             f"({self.log_std_max!r}); fix: e.g. -20 and 2 (SB3's)")
        if not isinstance(self.hidden_units, list) or any(
                isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in self.hidden_units):
            raise ValueError(f"learner.hidden_units must be a list of integers >= 1 (the heads' hidden layers), got "
                             f"{self.hidden_units!r}; fix: e.g. [256, 256]")
        if not isinstance(self.shared_core, bool):
            raise ValueError(f"learner.shared_core must be true or false, got {self.shared_core!r}")
        entropy = self.target_entropy
        if isinstance(entropy, str):
            if entropy != "auto":
                raise ValueError(f"learner.target_entropy must be 'auto' (-(action entries)) or a number, got "
                                 f"{entropy!r}; fix: 'auto'")
        elif isinstance(entropy, bool) or not isinstance(entropy, (int, float)) or not math.isfinite(entropy):
            raise ValueError(f"learner.target_entropy must be 'auto' (-(action entries)) or a finite number, got "
                             f"{entropy!r}; fix: 'auto'")

    def target_entropy_for(self, action_scale: Iterable[float]) -> float:
        """The entropy (nats, of the action in the env's units) the temperature steers the policy to.

        ``"auto"`` is SB3's target, ``-(action entries)`` for the action squashed into [-1, 1]; scaled to the
        env's bounds (half-widths ``action_scale``) an entropy grows by ``sum(log(scale))``, so the target in
        env units is ``-len(scale) + sum(log(scale))`` (Pendulum's torque in [-2, 2]: -1 + log 2). A number is
        taken as it is, in env units.
        """
        if self.target_entropy == "auto":
            scale = [float(s) for s in action_scale]
            return -float(len(scale)) + float(sum(math.log(s) for s in scale))
        return float(self.target_entropy)
