"""What every agent's update already computes (TD or critic errors, the gradient norm before clipping,
importance weights), summarised once per log interval: the agent-independent half of the training-health
values (``docs/training.md``, "Reading a run"); an agent's own diagnostics come from its builder.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

__all__ = ["UpdateStatistics", "effective_sample_share"]


def effective_sample_share(weights: np.ndarray) -> float:
    """Kish's effective sample size of importance weights over their count: 1 when all are equal."""
    weights = np.asarray(weights, dtype=np.float64)
    total = weights.sum()
    if weights.size == 0 or total <= 0.0:
        return math.nan
    return float(total * total / np.square(weights).sum() / weights.size)


class UpdateStatistics:
    """Per-update values, summarised once per log interval (means over the interval's updates).

    Args:
        max_gradient_norm: the learner's clipping norm (an update whose norm exceeds it is clipped).
    """

    def __init__(self, max_gradient_norm: float) -> None:
        self.max_gradient_norm = float(max_gradient_norm)
        self._values: dict[str, list[float]] = {}
        self.trained_rows = 0.0

    def add(self, out: Mapping[str, np.ndarray]) -> None:
        """Record one ``Learner.train_from`` output (:data:`~r2d2kit.agent.seam.UPDATE_OUTPUTS`)."""
        abs_td = np.asarray(out["abs_td"])[np.asarray(out["mask"]) > 0]
        weights = np.asarray(out["weights"])
        norm = float(out["gradient_norm"])
        values = {"gradient_norm": norm, "clipped": float(norm > self.max_gradient_norm),
                  "is_weight_min": float(weights.min()), "is_weight_mean": float(weights.mean()),
                  "effective_batch_share": effective_sample_share(weights)}
        if abs_td.size:
            p50, p90 = np.percentile(abs_td, (50, 90))
            values.update(td_p50=float(p50), td_p90=float(p90), td_max=float(abs_td.max()))
        for name, value in values.items():
            self._values.setdefault(name, []).append(value)
        self.trained_rows += float(out["trained_rows"])

    def summary(self) -> dict[str, float]:
        """Means since the last :meth:`summary` (``clipped``: the share of clipped updates); then resets."""
        means = {name: float(np.mean(values)) for name, values in self._values.items()}
        self._values = {}
        return {
            "learner/gradient_norm": means.get("gradient_norm", math.nan),
            "learner/clipped_share": means.get("clipped", math.nan),
            "learner/td_p50": means.get("td_p50", math.nan),
            "learner/td_p90": means.get("td_p90", math.nan),
            "learner/td_max": means.get("td_max", math.nan),
            "replay/is_weight_min": means.get("is_weight_min", math.nan),
            "replay/is_weight_mean": means.get("is_weight_mean", math.nan),
            "replay/effective_batch_share": means.get("effective_batch_share", math.nan),
        }
