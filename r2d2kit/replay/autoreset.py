"""gymnasium's vector autoreset modes, and the one rule every loop and buffer here follows.

* ``"next_step"`` (gymnasium >= 1.0's default): after an env's episode ends, that env's *next*
  step only resets it. It returns the new episode's first observation, its action is ignored and
  its reward is 0: it is not a transition, and its observation is the next episode's start.
* ``"same_step"``: the step that ends an episode already returns the next episode's first
  observation; the episode's final observation is in ``infos["final_obs"]``.
* ``"disabled"``: the caller resets ended envs itself; the step that ends an episode returns its
  final observation.

Only ``"next_step"`` has steps that are not transitions; :class:`ResetSteps` tells which.
"""

from __future__ import annotations

from enum import Enum
from typing import TypeAlias

import numpy as np

__all__ = ["ResetSteps", "check_autoreset_mode"]

AutoresetMode: TypeAlias = str | Enum  # a mode's name, or gymnasium's AutoresetMode member

AUTORESET_MODES = ("next_step", "same_step", "disabled")
_SPELLINGS = {mode.replace("_", ""): mode for mode in AUTORESET_MODES}  # gymnasium's enum values: "NextStep", ...


def check_autoreset_mode(mode: AutoresetMode) -> str:
    """The canonical name of a vector env's autoreset mode (a string or gymnasium's ``AutoresetMode``).

    Raises:
        ValueError: naming the modes accepted.
    """
    raw = getattr(mode, "value", mode)
    key = str(raw).lower().replace("_", "").replace("-", "")
    if key not in _SPELLINGS:
        raise ValueError(f"autoreset_mode must be one of {list(AUTORESET_MODES)} (or gymnasium's AutoresetMode), "
                         f"got {mode!r}")
    return _SPELLINGS[key]


class ResetSteps:
    """Per env, whether its coming step is a reset-only step (``"next_step"`` mode only).

    Args:
        num_envs: envs in the vector env.
        mode: the vector env's autoreset mode (see the module docstring).
    """

    def __init__(self, num_envs: int, mode: AutoresetMode = "next_step") -> None:
        self.mode = check_autoreset_mode(mode)
        self.pending = np.zeros(num_envs, dtype=bool)  # the coming step only resets this env

    def advance(self, done: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Account one vector step whose episode-end flags (terminated or truncated) are ``done``.

        Returns:
            ``(real, ended)``: which envs' step was a transition, and which of those ended an
            episode (in ``"next_step"`` mode their next step is reset-only).
        """
        real = ~self.pending
        ended = real & done
        self.pending = ended.copy() if self.mode == "next_step" else np.zeros_like(ended)
        return real, ended

    def clear(self) -> None:
        """Forget pending resets (the envs were reset by hand)."""
        self.pending[:] = False
