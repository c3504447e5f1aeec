"""Hooks into a training run. Subclass :class:`Callback` and override what you need.

Where each hook runs matters once actors are separate processes:

* ``on_train_*``, ``on_learner_*`` and ``on_evaluation`` run in the **learner process** (the one
  that called :func:`r2d2kit.training.trainer.Trainer.fit`), so they may touch the learner, the replay buffer
  and the run directory.
* ``on_actor_*`` run **where the actor runs**: in the learner process with ``runner: local``, in each
  actor process with ``runner: processes`` or ``ray``. There the callback object is a pickled copy
  (define the class at module level); state it gathers stays in that process — send results out
  through a file or your own queue. Only callbacks that override an ``on_actor_*`` hook are sent
  to actors, so a learner-side callback may hold anything (the trainer, open files, locks).

Hooks must be quick: they run inside the training loop.
"""

from __future__ import annotations

from typing import Any, Sequence


class Callback:
    """Base class: every hook does nothing."""

    # --- learner process
    def on_train_begin(self, trainer: Any) -> None:
        """Before actors start (after a resume, counters already hold the restored values)."""

    def on_train_end(self, trainer: Any, summary: dict) -> None:
        """After the final checkpoint, with the run summary (also after Ctrl-C)."""

    def on_learner_begin(self, learner: Any) -> None:
        """Just before the first gradient update of this run (replay warm-up is over)."""

    def on_learner_step(self, learner: Any, metrics: dict) -> None:
        """After every gradient update; ``metrics`` holds ``loss``, ``q_mean`` and ``updates``."""

    def on_learner_end(self, learner: Any) -> None:
        """After the last gradient update of this run."""

    def on_evaluation(self, trainer: Any, row: dict) -> None:
        """After each greedy evaluation, with the row written to ``metrics.csv``."""

    # --- actor's process
    def on_actor_begin(self, actor_id: int) -> None:
        """When an actor starts (again after a restart)."""

    def on_actor_episode(self, actor_id: int, episode_return: float, length: int) -> None:
        """When one of the actor's envs finishes an episode."""

    def on_actor_end(self, actor_id: int) -> None:
        """When an actor stops normally."""


class CallbackList(Callback):
    """Calls each hook on every callback, in order."""

    def __init__(self, callbacks: Sequence[Callback] = ()) -> None:
        self.callbacks = list(callbacks)
        for callback in self.callbacks:
            if not isinstance(callback, Callback):
                raise TypeError(f"callbacks must be r2d2kit.runners.callbacks.Callback instances, got {callback!r}")

    def for_actors(self) -> "CallbackList":
        """The callbacks that override an actor hook (the ones worth pickling into actor processes)."""
        hooks = ("on_actor_begin", "on_actor_episode", "on_actor_end")
        callbacks = object.__getattribute__(self, "callbacks")
        return CallbackList([c for c in callbacks if any(getattr(type(c), h) is not getattr(Callback, h) for h in hooks)])

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("on_"):
            callbacks = object.__getattribute__(self, "callbacks")
            return lambda *args: [getattr(callback, name)(*args) for callback in callbacks] and None
        return object.__getattribute__(self, name)
