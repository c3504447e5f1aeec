"""Hooks into a training run. Subclass :class:`Callback` and override what you need.

Where each hook runs matters once actors are separate processes:

* ``on_train_*``, ``on_step``, ``on_learner_*`` and ``on_evaluation`` run in the **learner
  process** (the one that called :meth:`r2d2kit.training.trainer.Trainer.fit`), so they may touch
  the learner, the replay buffer and the run directory.
* ``on_actor_*`` run **where the actor runs**: in the learner process with ``runner: local``, in each
  actor process with ``runner: processes`` or ``ray``. There the callback object is a pickled copy
  (define the class at module level); state it gathers stays in that process — send results out
  through a file or your own queue. Only callbacks that override an ``on_actor_*`` hook are sent
  to actors, so a learner-side callback may hold anything (the trainer, open files, locks).

**Stopping early.** A learner-side hook that returns ``False`` ends the run after the current
step, as SB3's ``_on_step`` does; the run writes its final checkpoint and ``summary.json`` names the
hook in ``stopped_by``. :meth:`r2d2kit.training.trainer.Trainer.stop` does the same from anywhere.

A method named ``on_...`` that is not a hook is a ``TypeError`` when the class is defined: a
misspelled hook would otherwise never run. Hooks must be quick: they run inside the training loop.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from r2d2kit.agent.seam import Learner

# The trainer is typed Any: importing its class here, even for type checking only, would close an import cycle (the
# trainer imports this module), which tests/test_layout.py forbids; and a Protocol in its place would make every
# subclass that annotates its hooks with the real Trainer (r2d2kit.tuning.worker does) an override mypy refuses.

LEARNER_HOOKS = ("on_train_begin", "on_train_end", "on_step", "on_learner_begin", "on_learner_step",
                 "on_learner_end", "on_evaluation")
ACTOR_HOOKS = ("on_actor_begin", "on_actor_episode", "on_actor_end")
HOOKS = LEARNER_HOOKS + ACTOR_HOOKS


class Callback:
    """Base class: every hook does nothing. A learner-side hook returning ``False`` stops the run."""

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        for name in vars(cls):
            if name.startswith("on_") and name not in HOOKS:
                close = difflib.get_close_matches(name, HOOKS, n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                raise TypeError(f"{cls.__name__}.{name} is not a callback hook, so it would never run; {hint}"
                                f"the hooks are {list(HOOKS)}")

    # --- learner process
    def on_train_begin(self, trainer: Any) -> bool | None:
        """Before actors start (after a resume, counters already hold the restored values)."""

    def on_train_end(self, trainer: Any, summary: Mapping[str, object]) -> None:
        """After the final checkpoint, with the run summary (also after Ctrl-C or an early stop)."""

    def on_step(self, trainer: Any) -> bool | None:
        """After each round of the loop (collect, add to replay, train); ``trainer.counters`` is current."""

    def on_learner_begin(self, learner: Learner) -> bool | None:
        """Just before the first gradient update of this run (replay warm-up is over)."""

    def on_learner_step(self, learner: Learner, metrics: Mapping[str, float]) -> bool | None:
        """After every gradient update; ``metrics`` holds ``loss``, ``q_mean`` and ``updates``."""

    def on_learner_end(self, learner: Learner) -> None:
        """After the last gradient update of this run."""

    def on_evaluation(self, trainer: Any, row: Mapping[str, float]) -> bool | None:
        """After each greedy evaluation, with the row written to ``metrics.csv``."""

    # --- actor's process
    def on_actor_begin(self, actor_id: int) -> None:
        """When an actor starts (again after a restart)."""

    def on_actor_episode(self, actor_id: int, episode_return: float, length: int) -> None:
        """When one of the actor's envs finishes an episode."""

    def on_actor_end(self, actor_id: int) -> None:
        """When an actor stops normally."""


class CallbackList(Callback):
    """Calls each hook on every callback, in order. A learner hook returns ``False`` if any callback
    did, and :attr:`stopped_by` names the first one (``"EarlyStop.on_evaluation"``)."""

    def __init__(self, callbacks: Sequence[Callback] = ()) -> None:
        self.callbacks = list(callbacks)
        self.stopped_by: str | None = None
        for callback in self.callbacks:
            if not isinstance(callback, Callback):
                raise TypeError(f"callbacks must be r2d2kit.runners.callbacks.Callback instances, got {callback!r}")

    def for_actors(self) -> CallbackList:
        """The callbacks that override an actor hook (the ones worth pickling into actor processes)."""
        return CallbackList([c for c in self.callbacks
                             if any(getattr(type(c), h) is not getattr(Callback, h) for h in ACTOR_HOOKS)])

    def _call(self, hook: str, *args: object) -> bool | None:
        keep_going = True
        for callback in self.callbacks:
            if getattr(callback, hook)(*args) is False:
                keep_going = False
                self.stopped_by = self.stopped_by or f"{type(callback).__name__}.{hook}"
        return None if keep_going else False

    def on_train_begin(self, trainer: Any) -> bool | None:
        return self._call("on_train_begin", trainer)

    def on_train_end(self, trainer: Any, summary: Mapping[str, object]) -> None:
        self._call("on_train_end", trainer, summary)

    def on_step(self, trainer: Any) -> bool | None:
        return self._call("on_step", trainer)

    def on_learner_begin(self, learner: Learner) -> bool | None:
        return self._call("on_learner_begin", learner)

    def on_learner_step(self, learner: Learner, metrics: Mapping[str, float]) -> bool | None:
        return self._call("on_learner_step", learner, metrics)

    def on_learner_end(self, learner: Learner) -> None:
        self._call("on_learner_end", learner)

    def on_evaluation(self, trainer: Any, row: Mapping[str, float]) -> bool | None:
        return self._call("on_evaluation", trainer, row)

    def on_actor_begin(self, actor_id: int) -> None:
        self._call("on_actor_begin", actor_id)

    def on_actor_episode(self, actor_id: int, episode_return: float, length: int) -> None:
        self._call("on_actor_episode", actor_id, episode_return, length)

    def on_actor_end(self, actor_id: int) -> None:
        self._call("on_actor_end", actor_id)
