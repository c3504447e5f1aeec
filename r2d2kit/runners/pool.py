"""The interface every actor pool has, so that :class:`~r2d2kit.training.trainer.Trainer` runs one
loop wherever acting happens (this process, spawned processes, Ray actors).

Every pool takes ``make_env``, ``make_policy`` (a :class:`~r2d2kit.agent.seam.PolicyFactory`: each actor
builds its agent's :class:`~r2d2kit.agent.seam.Policy`; picklable for the processes and Ray pools), the
:class:`~r2d2kit.agent.seam.WindowLayout` and ``incarnations, callbacks, extras``, then its runner's own
keywords; a run's pool is started by :meth:`r2d2kit.training.builders.RunParts.start_actors` and driven by
the trainer::

    experience = pool.collect()          # windows, env steps and finished episodes since the last call
    replay.add_sequences(windows, source=source) for windows, source in experience.windows
    pool.publish(learner.actor_variables(), updates)   # after updates: the actors act with the newest weights
    pool.supervise()                     # every SUPERVISE_EVERY_S of updates: failed actors restarted on time
    pool.close()                         # on every exit path

A pool never knows the agent: it steps envs with the policy, ships windows and weight vectors.

**Sources.** Replay joins a window to the earlier rows of its episode by ``(source, env, episode
id)``, and episode ids restart in every new :class:`~r2d2kit.replay.SequenceBuilder`. So every
actor *incarnation* (a first start, a restart after a crash, the actors of a resumed run) writes
under a source id no other incarnation had: :class:`Incarnations` hands them out, counting on from
``first_source``, and the trainer checkpoints :attr:`Incarnations.next_source`. Without it a
restarted actor's first windows would be stitched onto the rows its dead predecessor left.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    import keras



SEED_STRIDE = 1000  # actor i's first incarnation acts with seed + 1000 * i (restarts add the restart count)


@dataclass
class Experience:
    """Data gathered since the previous ``collect()``."""

    windows: list[tuple[dict[str, np.ndarray], int]] = field(default_factory=list)  # (windows, source id)
    env_steps: int = 0
    episodes: list[tuple[float, int]] = field(default_factory=list)  # (return, length)


@runtime_checkable
class ActorPool(Protocol):
    """What the trainer needs from a pool of actors (local, processes or Ray)."""

    incarnations: Incarnations  # source ids and seeds of every actor start

    @property
    def restarts(self) -> int:
        """Actor crashes recovered from so far (restarts granted by the pool's restart policy)."""

    def collect(self) -> Experience:
        """New windows (each batch with its incarnation's source id), env steps and finished episodes."""

    def supervise(self) -> None:
        """Between updates: notice failed actors and restart them, or raise ``ActorsFailed``; no new data is
        taken in (the next ``collect`` returns what this saw), so actors stay held back while the learner trains."""

    def publish(self, variables: Sequence[keras.Variable], updates: int) -> None:
        """The learner's weights changed (``updates`` so far): make ``variables`` (the learner's
        :meth:`~r2d2kit.agent.seam.Learner.actor_variables`) available to the actors."""

    @property
    def weights_version(self) -> int:
        """How many times weights were published to the actors."""

    @property
    def weight_lag(self) -> float:
        """Updates the most out-of-date actor's weights are behind the learner's newest published ones."""

    def actor_pids(self) -> dict[int, int]:
        """Process id of every actor (for fault drills and monitoring)."""

    def close(self) -> None:
        """Stop acting and release everything (envs, processes, shared memory); safe to call twice."""


class Incarnations:
    """Source ids and seeds of actor incarnations: a fresh pair for every start of an actor.

    Args:
        first_source: the first source id to hand out (a resumed run continues after its replay's).
        seed: the run's acting seed; actor ``i``'s incarnation after ``r`` restarts of the pool acts
            with ``seed + 1000 * i + r``, so a restarted actor does not replay its predecessor's episodes.
    """

    def __init__(self, first_source: int = 0, seed: int = 0) -> None:
        self.next_source = int(first_source)
        self.seed = int(seed)
        self.restarts = 0
        self.source_of: dict[int, int] = {}  # actor id -> source id of its live incarnation

    def start(self, actor_id: int, restart: bool = False) -> tuple[int, int]:
        """A new incarnation of ``actor_id``: ``(source id, seed)``; ``restart`` counts a crash first."""
        if restart:
            self.restarts += 1
        source = self.next_source
        self.next_source += 1
        self.source_of[actor_id] = source
        return source, self.seed + SEED_STRIDE * actor_id + self.restarts
