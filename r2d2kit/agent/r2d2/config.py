"""R2D2 hyper-parameters, in a module of their own so that reading a config starts no TensorFlow.

The window layout (burn-in, trace length, period, n-step rows) is the replay's
(:class:`~r2d2kit.agent.seam.WindowLayout`, the config's ``replay`` section), shared by every agent.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

LOSSES = ("squared", "huber")
OPTIMIZERS = ("adam", "rmsprop")


@dataclass
class R2D2Config:
    """Hyper-parameters, defaulting to the R2D2 paper's (Kapturowski et al. 2019, table 2); its window
    layout is a :class:`~r2d2kit.agent.seam.WindowLayout`."""

    # --- targets
    gamma: float = 0.997  # discount
    value_rescaling: bool = True  # targets h(r + gamma^n h^-1(Q)) with h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x
    rescale_eps: float = 1e-3  # the eps of h
    double_q: bool = True  # the target's action is the online network's argmax (double Q); false: the target's max
    target_update_period: int = 2500  # updates between copies of the online weights into the target network
    target_update_tau: float = 1.0  # each copy moves the target this far to the online weights (1: a hard
    # copy, as the paper; with period 1 and e.g. 0.005: Polyak averaging, a target that never jumps)
    # --- replay
    batch_size: int = 64  # windows per update
    priority_exponent: float = 0.9  # alpha: sampling probability proportional to priority ** alpha
    importance_exponent: float = 0.6  # beta of the importance-sampling weights
    eta: float = 0.9  # window priority: eta * max |TD| + (1 - eta) * mean |TD| over its trained rows
    loss: str = "squared"  # per-row loss of the TD error: squared (0.5 td^2, R2D2's) | huber (DQN's, delta 1)
    # --- optimiser
    optimizer: str = "adam"  # adam (R2D2's) | rmsprop (centered, rho 0.95: the MinAtar paper's DQN)
    learning_rate: float = 1e-4  # the optimiser's learning rate (the start of the decay when one is set)
    learning_rate_decay_updates: int = 0  # > 0: linear decay to final_learning_rate over N updates (not env steps)
    final_learning_rate: float = 0.0  # learning rate reached at the end of the decay
    adam_epsilon: float = 1e-3  # Adam epsilon
    rmsprop_epsilon: float = 1e-4  # inside the root, as Keras adds it: 1e-4 matches torch's 0.01 outside (MinAtar's)
    max_gradient_norm: float = 40.0  # gradients are clipped to this global norm

    def __post_init__(self) -> None:
        for name in ("target_update_period", "batch_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"R2D2Config.{name} must be an integer >= 1, got {value!r}")
        for name in FLOAT_FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"R2D2Config.{name} must be a finite number, got {value!r}")
        for name in ("gamma", "eta", "priority_exponent", "importance_exponent"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"R2D2Config.{name} must be in [0, 1], got {getattr(self, name)!r}")
        for name, options in (("loss", LOSSES), ("optimizer", OPTIMIZERS)):
            if getattr(self, name) not in options:
                raise ValueError(f"R2D2Config.{name} must be one of {list(options)}, got {getattr(self, name)!r}")
        if not isinstance(self.double_q, bool):
            raise ValueError(f"R2D2Config.double_q must be true or false, got {self.double_q!r}")
        for name in ("max_gradient_norm", "adam_epsilon", "rmsprop_epsilon"):
            if getattr(self, name) <= 0.0:
                raise ValueError(f"R2D2Config.{name} must be > 0, got {getattr(self, name)!r} (R2D2: "
                                 f"{getattr(R2D2Config, name)!r})")
        if self.rescale_eps < 0.0:
            raise ValueError(f"R2D2Config.rescale_eps must be >= 0, got {self.rescale_eps!r}")
        if not isinstance(self.learning_rate_decay_updates, int) or self.learning_rate_decay_updates < 0:
            raise ValueError("R2D2Config.learning_rate_decay_updates must be an integer >= 0, got "
                             f"{self.learning_rate_decay_updates!r}")
        if self.learning_rate <= 0.0:
            raise ValueError(f"R2D2Config.learning_rate must be > 0, got {self.learning_rate!r}")
        if self.final_learning_rate < 0.0:
            raise ValueError(f"R2D2Config.final_learning_rate must be >= 0, got {self.final_learning_rate!r}")
        if not 0.0 < self.target_update_tau <= 1.0:
            raise ValueError(f"R2D2Config.target_update_tau must be in (0, 1] (1 copies the online weights, "
                             f"smaller values average them in), got {self.target_update_tau!r}")


FLOAT_FIELDS = tuple(f.name for f in dataclasses.fields(R2D2Config) if f.type in ("float", float))
