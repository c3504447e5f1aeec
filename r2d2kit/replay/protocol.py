"""The interface every r2d2kit buffer has, as a Protocol your own buffer can satisfy too (no TensorFlow).

:func:`~r2d2kit.replay.dataset.buffer_dataset`, :func:`~r2d2kit.replay.dataset.priority_updater` and
the learner take any object with these methods. The same verbs and defaults hold for every buffer:

* ``len(buffer)``: the samples ``sample`` can draw from now: stored items (``ReplayBuffer``),
  transitions whose episode is still whole in the ring (``HerReplayBuffer``), or windows whose rows
  are all stored (the sequence buffers).
* ``sampler``: every buffer takes ``"uniform"``, ``"proportional"`` or ``"rank"``.
* ``sample(batch_size, beta=DEFAULT_BETA)``: fresh arrays ``[batch_size, ...]`` per field plus
  ``indices`` and ``generations`` (int64: which slot, and how many times it had been written then)
  and ``weights`` (float32 importance weights, max 1; all 1 when sampling is uniform). ``beta``
  defaults to 0.4 everywhere, the PER paper's starting exponent; anneal it to 1 with
  :class:`~r2d2kit.replay.LinearSchedule` (R2D2 keeps 0.6: ``R2D2Config.importance_exponent``).
* ``update_priorities(indices, priorities, generations=None)``: new priorities for sampled
  ``indices`` (validated; a no-op for uniform sampling, so a loop can switch sampling unchanged);
  with the batch's ``generations``, slots written again since the draw are skipped.
* ``save(path)`` / ``Class.load(path, ...)``: one pickle-free ``.npz``; sampling after ``load`` continues
  exactly as without the round trip.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

__all__ = ["DEFAULT_BETA", "SAMPLERS", "SampledBuffer"]

DEFAULT_BETA = 0.4
SAMPLERS = ("uniform", "proportional", "rank")  # every buffer's ``sampler`` (see ``replay/samplers.py``)
# A GoalEnv's compute_reward (or compute_terminated), as the hindsight buffers call it: (achieved_goal [M, ...],
# desired_goal [M, ...], info) -> [M]; info is gymnasium's info dict (the buffers pass {})
RewardFn = Callable[[np.ndarray, np.ndarray, dict[str, Any]], npt.ArrayLike]


@runtime_checkable
class SampledBuffer(Protocol):
    """What the ``tf.data`` adapters and the learner need of a buffer (see the module docstring)."""

    def __len__(self) -> int: ...

    def batch_spec(self, batch_size: int) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """``{name: (shape, dtype)}`` of every array ``sample(batch_size)`` returns."""

    def sample(self, batch_size: int, beta: float = DEFAULT_BETA) -> dict[str, np.ndarray]:
        """A batch of fresh arrays with ``indices``, ``generations`` and ``weights`` (optionally ``out=`` arrays
        to fill)."""

    def update_priorities(self, indices: npt.ArrayLike, priorities: npt.ArrayLike,
                          generations: npt.ArrayLike | None = None) -> None:
        """New priorities for sampled ``indices`` (a validated no-op under uniform sampling); ``generations``:
        the batch's, so that slots written since the draw are skipped."""

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the buffer to one pickle-free ``.npz`` that the class's ``load`` reads back."""


class ReusableBuffer(SampledBuffer, Protocol):
    """A buffer that also samples into memory the caller owns (every r2d2kit buffer does): what
    ``buffer_dataset(..., reuse_memory=True)`` needs."""

    def sample_buffers(self, batch_size: int) -> dict[str, np.ndarray]:
        """Zeroed arrays for ``sample(batch_size, out=...)``, one per :meth:`batch_spec` field."""

    def sample(self, batch_size: int, beta: float = DEFAULT_BETA, *,
               out: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """A batch written into ``out`` when given (else fresh arrays)."""
