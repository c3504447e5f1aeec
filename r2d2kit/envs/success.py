"""SuccessOnPositiveReward: ``info["is_success"]`` for envs whose only positive reward is reaching the goal."""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium


class SuccessOnPositiveReward(gymnasium.Wrapper):
    """Report ``info["is_success"]``: the episode terminated with a positive reward.

    MiniGrid pays ``1 - 0.9 * steps / max_steps`` on reaching the goal and 0 otherwise, so its
    successes are exactly the terminations with a positive reward; with this wrapper the trainer's
    evaluations report a success rate beside the mean return (``eval_success``).
    """

    def step(self, action: object) -> tuple[object, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, {**info, "is_success": bool(terminated and float(reward) > 0)}
