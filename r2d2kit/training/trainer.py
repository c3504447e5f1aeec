"""The learner side of a training run: replay, updates, evaluation, logging, checkpoints, Ctrl-C.

:class:`Trainer` drives an actor pool (in this process with ``actors.runner: local``, spawned
processes on shared memory with ``processes``) through one loop::

    collect experience -> add windows to replay -> train at updates_per_env_step -> publish weights
    -> every logging.log_every env steps: TensorBoard scalars
    -> every run.eval_every: greedy evaluation -> metrics.csv
    -> every checkpoints.every_env_steps: checkpoint

It is the only training loop: where acting happens is the actor pool's business
(:mod:`r2d2kit.runners.pool`), and this loop alone turns env steps into update credit.

The run ends at ``run.total_env_steps``, or earlier when a callback hook returns ``False``,
:meth:`Trainer.stop` is called, or on the first Ctrl-C (SIGINT) or SIGTERM (``kill``, ``timeout``, a
batch scheduler's preemption): it then writes a final checkpoint,
closes the actors (every shared-memory segment is unlinked) and returns normally, with
``summary["stopped_by"]`` saying which. The weights of the best greedy evaluation so far are kept
in ``best.weights.h5`` (``python -m r2d2kit.evaluate RUN --best``).
A second signal aborts at once. A failure the run cannot train through (the actors' restart policy
stops them, an update or the replay raises, the disk is full) is a clean stop as well: actors
closed, a final checkpoint when the state is sound, ``summary.json`` with ``stopped_by: "failure:
<kind>"``, then :class:`~r2d2kit.training.failures.TrainingFailed` with a one-line message and an
exit status (:mod:`r2d2kit.training.failures`). ``Trainer(..., resume=True)`` continues from the run directory's
newest checkpoint: counters, networks, optimizer (so a learning-rate schedule goes on where it was)
and, if it was saved, the replay buffer; without a saved replay the buffer warms up again.
"""

from __future__ import annotations

import json
import math
import signal
import sys
import threading
import time
from collections import defaultdict, deque
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import numpy as np

from r2d2kit.runners.callbacks import Callback, CallbackList
from r2d2kit.runners.evaluation import MAX_EVAL_ENVS
from r2d2kit.runners.restarts import ActorsFailed
from r2d2kit.training.checkpoint import (
    CheckpointError,
    latest_checkpoint,
    save_checkpoint,
)
from r2d2kit.training.config import ConfigError, TrainConfig, save_config
from r2d2kit.training.failures import TrainingFailed, is_disk_error
from r2d2kit.training.run_directory import check_run_directory, existing_run_message, holds_run, run_path

# evaluations reset their envs with seed run.seed + EVAL_SEED_OFFSET + env steps: episodes no training
# env plays, the same for every run of a seed (benchmarks evaluate peers on these episodes too)
if TYPE_CHECKING:
    from r2d2kit.agent.seam import Policy
    from r2d2kit.runners.pool import ActorPool

EVAL_SEED_OFFSET = 7919
COUNTERS = ("env_steps", "updates", "episodes", "next_eval", "next_checkpoint", "next_log", "update_credit",
            "train_seconds", "actor_restarts", "next_source", "best_eval", "best_eval_env_steps")
STOP_SIGNALS = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}  # stop cleanly; stopped_by names the signal
# during a run of updates, the actor pool is supervised this often (seconds): a dead actor is noticed and restarted
# on time however many updates the learner owes (hundreds after a burst of windows: tens of seconds on busy cores)
SUPERVISE_EVERY_S = 0.5
BEST_WEIGHTS = "best.weights.h5"  # the online weights of the best greedy evaluation (highest eval_mean)


class Trainer:
    """Train the config's agent (``agent:``; R2D2 by default) as the config describes, writing everything into
    ``run_dir``. The agent is seen through its seam only (:class:`~r2d2kit.agent.seam.Agent`).

    Args:
        config: the validated configuration.
        run_dir: the run directory (created if missing).
        callbacks: hooks (see :mod:`r2d2kit.runners.callbacks` for which process runs which hook).
        resume: continue from the newest checkpoint in ``run_dir`` (a :class:`CheckpointError`
            if there is none or it is corrupted). Without it, a ``run_dir`` that already holds a
            run is refused (:class:`~r2d2kit.training.config.ConfigError`) rather than mixed into.
    """

    def __init__(self, config: TrainConfig, run_dir: str | Path, callbacks: Sequence[Callback] = (),
                 resume: bool = False) -> None:
        from r2d2kit.models.process_setup import setup_process
        from r2d2kit.training.builders import build_run
        from r2d2kit.training.run_log import RunLog
        from r2d2kit.training.update_statistics import UpdateStatistics

        setup_process()
        self.config = config
        self.run_dir = Path(run_dir)
        if not resume and holds_run(self.run_dir):
            raise ConfigError(existing_run_message(self.run_dir))
        self.run_dir.mkdir(parents=True, exist_ok=True)
        check_run_directory(self.run_dir)
        self.callbacks = CallbackList(callbacks)
        checkpoint = None
        if resume:
            checkpoint = latest_checkpoint(self.run_dir)
            if checkpoint is None:
                raise CheckpointError(f"--resume {self.run_dir}: no checkpoint under {self.run_dir / 'checkpoints'}; "
                                      "start the run without --resume")
        # the one build pass: spaces (one probe env), the agent (networks, learner restored), replay (new or saved)
        self.parts = build_run(config, checkpoint)
        self.agent, self.replay = self.parts.agent, self.parts.replay
        self.learner = self.agent.learner
        self.goal = self.parts.goal  # hindsight relabelling: the env's compute_reward (achieved goals ride each row)
        self.make_env = self.parts.make_env
        # ints, but the update credit and the seconds (floats) and the best evaluation (None until one)
        self.counters: dict[str, Any] = {name: 0 for name in COUNTERS}
        self.counters.update(next_eval=config.run.eval_every, next_checkpoint=config.checkpoints.every_env_steps,
                             next_log=config.logging.log_every, update_credit=0.0, train_seconds=0.0,
                             best_eval=None, best_eval_env_steps=None)
        self.resumed_from: Path | None = checkpoint
        if checkpoint is not None:
            state = self.parts.state
            if state.get("env_id") != config.env.id:
                self.parts.close()  # the goal env, if any
                raise CheckpointError(f"--resume {self.run_dir}: its checkpoint {checkpoint.name} was trained on "
                                      f"{state.get('env_id')!r}, not {config.env.id!r}; a resumed run continues its "
                                      "own env: drop --set env.id, or start a new run from this config")
            if state.get("agent", config.agent) != config.agent:
                self.parts.close()
                raise CheckpointError(f"--resume {self.run_dir}: its checkpoint {checkpoint.name} holds agent "
                                      f"{state.get('agent')!r}, not {config.agent!r}; drop --set agent, or start a new "
                                      "run from this config")
            self.counters.update({name: state[name] for name in COUNTERS if name in state})
        save_config(config, run_path(self.run_dir, "config.yaml"))
        self.log = RunLog(self.run_dir, tensorboard=config.logging.tensorboard)
        if checkpoint is not None:
            self.log.forget_after(self.counters["env_steps"])  # rows of training this run will redo
        self.eval_policy = self._make_eval_policy() if config.run.eval_every else None
        self.stopped_by: str | None = None
        self.actors: ActorPool | None = None
        self._window = _Window()
        self._recent_returns: deque[float] = deque(maxlen=100)
        self.update_statistics = UpdateStatistics(config.learner.max_gradient_norm)
        self.health = self.agent.diagnostics(config.run.seed) if config.logging.diagnostics else None
        self._rows_at_log = self.replay.rows_written
        self._trained_rows_at_log = 0.0
        self._phase = "starting"  # what the loop was doing, named in a failure's message

    # ------------------------------------------------------------------ pieces
    def start_actors(self) -> ActorPool:
        """The actor pool this config describes (local, processes or Ray), started and ready to
        ``collect()``; the caller closes it. :meth:`fit` uses it; so do benchmarks of the runners."""
        from r2d2kit.runners.pool import Incarnations

        seed = self.config.run.seed + self.counters["env_steps"]  # a resumed run does not replay the same episodes
        incarnations = Incarnations(first_source=self.counters["next_source"], seed=seed)
        return self.parts.start_actors(incarnations, self.callbacks, env_steps=self.counters["env_steps"])

    def stop(self, reason: str) -> None:
        """End the run after the current step (final checkpoint, summary with ``stopped_by: reason``)."""
        self.stopped_by = self.stopped_by or reason

    def request_stop(self, signum: int = signal.SIGINT, _frame: FrameType | None = None) -> None:
        """The SIGINT and SIGTERM handler: stop after the current step; a second signal aborts."""
        if self.stopped_by in STOP_SIGNALS.values():
            raise KeyboardInterrupt
        self.stop(STOP_SIGNALS.get(signal.Signals(signum), "Ctrl-C"))
        print(f"\nstopping on {self.stopped_by}: finishing the current step and writing a final checkpoint "
              "(a second signal aborts)", file=sys.stderr, flush=True)

    def evaluate(self) -> dict[str, float]:
        """Greedy (deterministic) evaluation now; appends a row to ``metrics.csv`` and returns it (with
        ``eval_success``, the fraction of episodes ending with ``info["is_success"]``, for envs that report it)."""
        from r2d2kit.runners.evaluation import evaluate

        c = self.counters
        if self.eval_policy is None:  # run.eval_every: 0 and a direct call: the policy is made on demand
            self.eval_policy = self._make_eval_policy()
        evaluation = evaluate(self.eval_policy, self.make_env, self.config.run.eval_episodes,
                              seed=self.config.run.seed + EVAL_SEED_OFFSET + c["env_steps"])
        returns = evaluation.returns
        row = {"env_steps": c["env_steps"], "updates": c["updates"], "seconds": round(c["train_seconds"], 2),
               "eval_mean": float(returns.mean()), "eval_std": float(returns.std()),
               "eval_min": float(returns.min()), "eval_max": float(returns.max()),
               "train_return": float(np.mean(self._recent_returns)) if self._recent_returns else float("nan"),
               "loss": self._window.last_loss}
        scalars = {"eval/return_mean": row["eval_mean"], "eval/return_std": row["eval_std"]}
        if evaluation.success_rate is not None:
            row["eval_success"] = scalars["eval/success_rate"] = evaluation.success_rate
        self.log.evaluation(row)
        self.log.scalars(c["env_steps"], scalars)
        if c["best_eval"] is None or row["eval_mean"] > c["best_eval"]:
            c["best_eval"], c["best_eval_env_steps"] = row["eval_mean"], c["env_steps"]
            self.learner.save_policy_weights(run_path(self.run_dir, BEST_WEIGHTS))
        if self.callbacks.on_evaluation(self, row) is False:
            self.stop(f"callback {self.callbacks.stopped_by}")
        return row

    def _make_eval_policy(self) -> Policy:
        return self.agent.evaluation_policy(min(self.config.run.eval_episodes, MAX_EVAL_ENVS))

    def checkpoint(self) -> Path:
        """Write a checkpoint of the current state now."""
        save_replay = self.replay if self.config.checkpoints.save_replay else None
        # a resume onto another env or agent is refused
        state = dict(self.counters, env_id=self.config.env.id, agent=self.config.agent)
        return save_checkpoint(self.run_dir, self.learner, state, replay=save_replay, keep=self.config.checkpoints.keep)

    def _log_scalars(self) -> None:
        c, w = self.counters, self._window
        actors = self.actors
        if actors is None:
            raise RuntimeError("_log_scalars runs inside fit(), once the actors have started")
        elapsed = max(time.perf_counter() - w.start, 1e-9)
        values = {
            "actors/env_steps_per_s": w.env_steps / elapsed, "learner/updates_per_s": w.updates / elapsed,
            **{f"learner/{name}": w.mean(name) for name in self.learner.logged_metrics},
            "train/episode_return": w.mean("return"),
            "train/episode_length": w.mean("length"), "replay/sequences": len(self.replay),
            "replay/steps": self.replay.steps_stored, "actors/restarts": c["actor_restarts"],
            "actors/weights_version": actors.weights_version, "actors/weight_lag": actors.weight_lag,
        }
        values.update(self.update_statistics.summary())
        inserted = self.replay.rows_written - self._rows_at_log
        trained = self.update_statistics.trained_rows - self._trained_rows_at_log
        values["replay/replay_ratio"] = trained / inserted if inserted else math.nan
        self._rows_at_log, self._trained_rows_at_log = self.replay.rows_written, self.update_statistics.trained_rows
        if self.health is not None and len(self.replay) and c["updates"]:
            started = time.perf_counter()
            values.update(self.health.measure(self.replay))
            w.health_seconds += time.perf_counter() - started
            values["health/cost_share"] = w.health_seconds / elapsed
        self.log.scalars(c["env_steps"], values)
        self.log.health({"env_steps": c["env_steps"], "updates": c["updates"], **values})
        self._window = _Window(last_loss=w.mean("loss") if w.values["loss"] else w.last_loss)

    # ------------------------------------------------------------------ the loop
    def fit(self) -> dict[str, Any]:
        """Train until ``run.total_env_steps`` (or Ctrl-C, SIGTERM); write the run's outputs; return the summary."""
        from tqdm.auto import tqdm

        cfg, c = self.config, self.counters
        handler_installed = threading.current_thread() is threading.main_thread()
        previous_handlers = {number: signal.signal(number, self.request_stop)
                             for number in (STOP_SIGNALS if handler_installed else ())}
        if self.callbacks.on_train_begin(self) is False:
            self.stop(f"callback {self.callbacks.stopped_by}")
        bar = tqdm(total=cfg.run.total_env_steps, initial=c["env_steps"], disable=not cfg.logging.progress,
                   unit="step", dynamic_ncols=True)
        learner_started = False
        last = time.perf_counter()
        restarts_before = c["actor_restarts"]  # a resumed run counts on from its checkpoint's
        failure: tuple[str, Exception] | None = None
        try:
            self.actors = self.start_actors()
            if self.config.actors.runner != "local":
                self.learner.prepare(self.replay)  # traced while the actors start, not in the first update
            last = time.perf_counter()  # actor start-up (spawn, TF import) is not training time
            while c["env_steps"] < cfg.run.total_env_steps and self.stopped_by is None:
                self._phase = "collecting from the actors"
                experience = self.actors.collect()
                self._phase = "adding windows to replay"
                for windows, source in experience.windows:
                    self.replay.add_sequences(windows, source=source)
                c["env_steps"] += experience.env_steps
                self._window.env_steps += experience.env_steps
                bar.update(experience.env_steps)
                for episode_return, length in experience.episodes:
                    self._recent_returns.append(episode_return)
                    self._window.add(**{"return": episode_return, "length": length})
                c["episodes"] += len(experience.episodes)
                if self.replay.steps_stored >= cfg.run.warmup_steps:
                    c["update_credit"] += cfg.run.updates_per_env_step * experience.env_steps
                trained = 0
                self._phase = "an update"
                supervise_at = time.monotonic() + SUPERVISE_EVERY_S
                while c["update_credit"] >= 1.0 and len(self.replay) and self.stopped_by is None:
                    if not learner_started:
                        learner_started = True
                        if self.callbacks.on_learner_begin(self.learner) is False:
                            self.stop(f"callback {self.callbacks.stopped_by}")
                    out = self.learner.train_from(self.replay)
                    c["update_credit"] -= 1.0
                    c["updates"] = self.learner.updates
                    trained += 1
                    metrics = {name: float(out[name]) for name in self.learner.logged_metrics}
                    self._window.add(**metrics)
                    self.update_statistics.add(out)
                    self._window.updates += 1
                    metrics["updates"] = self.learner.updates
                    if self.callbacks.on_learner_step(self.learner, metrics) is False:
                        self.stop(f"callback {self.callbacks.stopped_by}")
                    self.actors.publish(self.learner.actor_variables(), self.learner.updates)
                    if time.monotonic() >= supervise_at:
                        self._phase = "supervising the actors"
                        self.actors.supervise()
                        supervise_at = time.monotonic() + SUPERVISE_EVERY_S
                        self._phase = "an update"
                c["actor_restarts"] = restarts_before + self.actors.restarts
                c["next_source"] = self.actors.incarnations.next_source
                now = time.perf_counter()
                c["train_seconds"] += now - last
                last = now
                self._phase = "logging"
                if c["env_steps"] >= c["next_log"]:
                    self._log_scalars()
                    c["next_log"] = _next_multiple(c["env_steps"], cfg.logging.log_every)
                self._phase = "an evaluation"
                if self.eval_policy is not None and c["env_steps"] >= c["next_eval"]:
                    row = self.evaluate()
                    bar.set_postfix(eval=f"{row['eval_mean']:.1f}", updates=c["updates"])
                    c["next_eval"] = _next_multiple(c["env_steps"], cfg.run.eval_every)
                    last = time.perf_counter()  # evaluation time is not training time
                if cfg.checkpoints.every_env_steps and c["env_steps"] >= c["next_checkpoint"]:
                    c["next_checkpoint"] = _next_multiple(c["env_steps"], cfg.checkpoints.every_env_steps)
                    self._phase = "a checkpoint"
                    self.checkpoint()
                    last = time.perf_counter()
                self._phase = "a callback's on_step"
                if self.callbacks.on_step(self) is False:
                    self.stop(f"callback {self.callbacks.stopped_by}")
                if not experience.windows and not trained and not experience.env_steps:
                    time.sleep(0.002)  # actors are busy: do not spin
        except ActorsFailed as error:
            failure = ("actors", error)
        except Exception as error:  # noqa: BLE001  (every failure ends as a clean stop: _stop_on_failure)
            if self.actors is None:
                raise  # the actors never started: a setup error, not a failure of a running run
            failure = ("disk" if is_disk_error(error) else "learner", error)
        finally:
            bar.close()
            if self.actors is not None:
                # restarts granted since the last step count too (a crash loop stops inside collect())
                c["actor_restarts"] = restarts_before + self.actors.restarts
                c["next_source"] = self.actors.incarnations.next_source
                self.actors.close()  # every actor process reaped, every segment unlinked, on every path
            if self.goal is not None:
                self.goal.close()
            for number, previous in previous_handlers.items():
                signal.signal(number, previous)
        if failure is not None:
            self._stop_on_failure(*failure)
        if learner_started:
            self.callbacks.on_learner_end(self.learner)
        try:
            return self._finish()
        except Exception as error:
            if not is_disk_error(error):
                raise
            self._stop_on_failure("disk", error)
            raise  # never reached: _stop_on_failure raises

    def _stop_on_failure(self, kind: str, error: Exception) -> None:
        """End a failed run cleanly: a final checkpoint when the state is sound, ``summary.json``, and
        :class:`TrainingFailed` with one line saying what failed, what was saved and how to resume."""
        c = self.counters
        what = " ".join(str(error).split()) if isinstance(error, ActorsFailed) or kind == "disk" else (
            f"{type(error).__name__} in {self._phase}: {' '.join(str(error).split())}")
        what = what if len(what) <= 600 else what[:597] + "..."
        checkpoint: Path | None = None
        if kind == "disk":
            saved = "no final checkpoint (the disk refused a write)"
        elif kind == "learner" and not self.learner.is_finite():
            saved = "no final checkpoint (the learner's weights are not finite: the state is not sound)"
        else:
            try:
                checkpoint = self.checkpoint()
                saved = f"final checkpoint {checkpoint.name} written at {c['env_steps']:,} env steps"
            except Exception as save_error:  # noqa: BLE001  (the failure is reported; this is why nothing was saved)
                saved = f"no final checkpoint ({' '.join(str(save_error).split())[:300]})"
        newest = latest_checkpoint(self.run_dir)
        if newest is None:
            resume = "no checkpoint to resume from: start the run again"
        else:
            resume = f"resume from {newest.name} with: python -m r2d2kit.train --resume {self.run_dir}"
        message = f"training stopped, {kind} failure: {what}; {saved}; {resume}"
        self.stopped_by = f"failure: {kind}"
        try:
            summary = {"env_steps": c["env_steps"], "updates": c["updates"], "episodes": c["episodes"],
                       "actor_restarts": c["actor_restarts"], "stopped_by": self.stopped_by, "error": message,
                       "checkpoint": str(newest.relative_to(self.run_dir)) if newest is not None else None,
                       "runner": self.config.actors.runner}
            run_path(self.run_dir, "summary.json").write_text(json.dumps(summary, indent=2))
        except OSError:
            pass  # the disk is full: the message says the rest
        self.log.close()
        raise TrainingFailed(message, kind, checkpoint) from error

    def _finish(self) -> dict[str, Any]:
        c = self.counters
        checkpoint = self.checkpoint()
        self.learner.save_policy_weights(run_path(self.run_dir, "weights.weights.h5"))
        self.log.plot(self.config.env.id)
        if self.log.health_path.is_file():
            from r2d2kit.training.health_plot import plot_health

            plot_health([self.run_dir], run_path(self.run_dir, "health.png"))
        rows = self.log.rows()
        summary = {"env_steps": c["env_steps"], "updates": c["updates"], "episodes": c["episodes"],
                   "train_seconds": round(c["train_seconds"], 1),
                   "final_eval": rows[-1]["eval_mean"] if rows else None,
                   "best_eval": max(row["eval_mean"] for row in rows) if rows else None,
                   "final_success": rows[-1].get("eval_success") if rows else None,
                   "best_success": max((row["eval_success"] for row in rows if "eval_success" in row), default=None),
                   "best_eval_env_steps": c["best_eval_env_steps"],
                   "best_weights": BEST_WEIGHTS if (self.run_dir / BEST_WEIGHTS).is_file() else None,
                   "actor_restarts": c["actor_restarts"],
                   "stopped_by": self.stopped_by or "run.total_env_steps",
                   "checkpoint": str(checkpoint.relative_to(self.run_dir)),
                   "resumed_from": str(self.resumed_from.relative_to(self.run_dir)) if self.resumed_from else None,
                   "runner": self.config.actors.runner}
        run_path(self.run_dir, "summary.json").write_text(json.dumps(summary, indent=2))
        self.log.close()
        self.callbacks.on_train_end(self, summary)
        return summary


def _next_multiple(value: int, every: int) -> int:
    """The first multiple of ``every`` above ``value``."""
    return (value // every + 1) * every


class _Window:
    """Means of the values seen since the last TensorBoard write."""

    def __init__(self, last_loss: float = float("nan")) -> None:
        self.start = time.perf_counter()
        self.env_steps = 0
        self.updates = 0
        self.health_seconds = 0.0
        self.last_loss = last_loss
        self.values: defaultdict[str, list[float]] = defaultdict(list)  # the learner's metrics, returns, lengths

    def add(self, **values: float) -> None:
        for name, value in values.items():
            self.values[name].append(value)
        if "loss" in values:
            self.last_loss = values["loss"]

    def mean(self, name: str) -> float:
        return float(np.mean(self.values[name])) if self.values[name] else math.nan
